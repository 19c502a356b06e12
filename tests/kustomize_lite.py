"""Apply a rendered kustomize overlay to fixture copies of its upstream resources.

The Pulumi program hands overlays to kustomize itself; tests have no network to fetch the
pinned upstream manifests, so they apply the overlay's transformations (the subset gpufabric's
overlays use: JSON 6902 patches with a target, ``$patch: delete`` patches, image tags) to
fixtures written in the documented shape of those manifests, and check the result.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import jsonpatch
import yaml


def _group(api_version: str) -> str:
    return api_version.split("/")[0] if "/" in api_version else ""


def _matches(obj: Mapping[str, Any], target: Mapping[str, Any]) -> bool:
    checks = {
        "kind": obj.get("kind"),
        "name": obj["metadata"]["name"],
        "group": _group(obj["apiVersion"]),
        "version": obj["apiVersion"].split("/")[-1],
    }
    return all(checks[k] == v for k, v in target.items() if k in checks)


def build(kustomization: str, upstream: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The objects ``kustomize build`` would output for this overlay over ``upstream``."""
    k = yaml.safe_load(kustomization)
    objects = [copy.deepcopy(dict(o)) for o in upstream]
    for patch in k.get("patches", []):
        body = yaml.safe_load(patch["patch"])
        if "target" in patch:
            matched = [o for o in objects if _matches(o, patch["target"])]
            if not matched:
                raise AssertionError(f"patch target {patch['target']} matches nothing")
            for i, obj in enumerate(objects):
                if obj in matched:
                    objects[i] = jsonpatch.apply_patch(obj, body)
        elif body.get("$patch") == "delete":
            target = {"kind": body["kind"], "name": body["metadata"]["name"]}
            before = len(objects)
            objects = [o for o in objects if not _matches(o, target)]
            if len(objects) == before:
                raise AssertionError(f"delete patch for {target} matches nothing")
        else:
            raise AssertionError(f"unsupported patch {body}")
    for image in k.get("images", []):
        for obj in objects:
            spec = obj.get("spec", {}).get("template", {}).get("spec", {})
            for c in spec.get("initContainers", []) + spec.get("containers", []):
                name, _, tag = c["image"].rpartition(":")
                if name == image["name"]:
                    c["image"] = f"{image.get('newName', name)}:{image.get('newTag', tag)}"
    return objects
