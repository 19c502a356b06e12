"""The import map of a discovered stack: the live objects its first ``pulumi up`` would
otherwise create again, in Pulumi's bulk-import file format (``pulumi import --file``).

``gpufabric discover`` writes it beside the stack file (``Pulumi.<name>.import.json``); the
runbook reads it back into the phase that adopts them. Each entry names a Plan object as the
Pulumi program registers it (components/): its pulumi-kubernetes type token, the resource
name :func:`gpufabric.plan.ids.child_name` gives it, its layer component as the parent and
the stack's explicit provider, so the URN the import writes is the URN ``pulumi up`` finds.
The id is pulumi-kubernetes' ``<namespace>/<name>`` (``<name>`` cluster-scoped).

Objects of Helm charts and kustomize overlays are not in it: a ``helm.v4.Chart`` or
``kustomize.v2.Directory`` resource registers them as its own children
(docs/decisions/discover.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpufabric.model.problems import Problem, StackError
from gpufabric.plan import ids
from gpufabric.plan.build import Plan
from gpufabric.plan.items import LAYER_ORDER, Item, K8sObject

SUFFIX = ".import.json"


def path_beside(stack_file: Path | str) -> Path:
    """``stacks/Pulumi.<name>.yaml`` -> ``stacks/Pulumi.<name>.import.json``."""
    path = Path(stack_file)
    stem = path.name.removesuffix(".yaml").removesuffix(".yml")
    return path.with_name(stem + SUFFIX)


def root_urn(stack: str, cluster: str) -> str:
    return ids.urn(stack, ids.ROOT_TYPE, cluster)


def provider_urn(stack: str, cluster: str) -> str:
    chain = f"{ids.ROOT_TYPE}${ids.PROVIDER_TYPE}"
    return ids.urn(stack, chain, ids.provider_name(cluster))


def layer_urn(stack: str, cluster: str, layer: str) -> str:
    chain = f"{ids.ROOT_TYPE}${ids.layer_type(layer)}"
    return ids.urn(stack, chain, ids.layer_component_name(cluster, layer))


def object_urn(stack: str, entry: Entry) -> str:
    """The URN the program registers the entry's object under (and the import writes)."""
    chain = f"{ids.ROOT_TYPE}${ids.layer_type(entry.layer)}${entry.type}"
    return ids.urn(stack, chain, entry.name)


@dataclass(frozen=True)
class Entry:
    """One object to import: Pulumi's ``type``, ``name`` and ``id``, with the layer whose
    component parents it (``parent`` in the file is that component's name)."""

    type: str
    name: str
    id: str
    layer: str


def _key(api_version: str, kind: str, namespace: str | None, name: str) -> tuple[str, ...]:
    group = api_version.rsplit("/", 1)[0] if "/" in api_version else ""
    return (group, kind, namespace or "", name)


def _live_key(obj: Mapping[str, Any]) -> tuple[str, ...]:
    meta = obj.get("metadata") or {}
    return _key(
        str(obj.get("apiVersion") or ""),
        str(obj.get("kind") or ""),
        meta.get("namespace"),
        str(meta.get("name") or ""),
    )


def _entry(cluster: str, item: Item) -> Entry | None:
    p = item.payload
    if not isinstance(p, K8sObject):
        return None
    layer = item.layer.value
    return Entry(
        type=ids.k8s_type(p.api_version, p.kind),
        name=ids.child_name(cluster, layer, item.id),
        id=f"{p.namespace}/{p.name}" if p.namespace else p.name,
        layer=layer,
    )


def entries(plan: Plan, live: Iterable[Mapping[str, Any]]) -> list[Entry]:
    """The Plan's objects that are live, by layer (apply order), then resource name."""
    seen = {_live_key(obj) for obj in live}
    cluster = plan.facts.cluster
    out = []
    for item in plan.items:
        p = item.payload
        if isinstance(p, K8sObject) and _key(p.api_version, p.kind, p.namespace, p.name) in seen:
            entry = _entry(cluster, item)
            assert entry is not None
            out.append(entry)
    return sorted(out, key=_order)


def _order(entry: Entry) -> tuple[int, str]:
    return (_layer_index(entry.layer), entry.name)


def document(stack: str, cluster: str, found: list[Entry]) -> dict[str, Any]:
    """Pulumi's import file: the parents and the provider by name in ``nameTable``."""
    layers = sorted({e.layer for e in found}, key=_layer_index)
    table = {ids.provider_name(cluster): provider_urn(stack, cluster)}
    for layer in layers:
        table[ids.layer_component_name(cluster, layer)] = layer_urn(stack, cluster, layer)
    return {
        "nameTable": table,
        "resources": [
            {
                "type": e.type,
                "name": e.name,
                "id": e.id,
                "parent": ids.layer_component_name(cluster, e.layer),
                "provider": ids.provider_name(cluster),
            }
            for e in found
        ],
    }


def text(stack: str, plan: Plan, found: list[Entry]) -> str:
    """The import file of ``stack`` (the Pulumi stack: the stack file's name), stable."""
    doc = document(stack, plan.facts.cluster, found)
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def _layer_index(layer: str) -> int:
    return [lay.value for lay in LAYER_ORDER].index(layer)


# ------------------------------------------------------------------------------ reading


@dataclass(frozen=True)
class ImportMap:
    """An import map read back for the runbook, checked against the stack's Plan."""

    path: str
    stack: str
    cluster: str
    entries: tuple[Entry, ...]

    @property
    def layers(self) -> list[str]:
        return sorted({e.layer for e in self.entries}, key=_layer_index)


def read(path: Path, shown: str, plan: Plan) -> ImportMap:
    """The import map at ``path`` (``shown``: as the runbook prints it) for the Plan's stack.
    A file that is not one, or was written for another stack or an older version of the
    stack (an entry the Plan no longer renders), is refused: its commands would import
    objects under names the program does not register."""
    source = "gpufabric runbook"
    stack, cluster = plan.stack, plan.facts.cluster

    def refuse(why: str) -> StackError:
        return StackError(source, [Problem(shown, why)])

    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeError, json.JSONDecodeError) as err:
        raise refuse(f"not readable as an import map ({err})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("resources"), list):
        raise refuse("not a Pulumi import file (expected nameTable and resources)")
    expected = {e.name: e for e in (_entry(cluster, it) for it in plan.items) if e is not None}
    want = document(stack, cluster, [])["nameTable"]
    again = f"run `gpufabric discover --out {shown.removesuffix(SUFFIX)}.yaml` again"
    table = doc.get("nameTable")
    if not isinstance(table, dict) or table.get(ids.provider_name(cluster)) != want.get(
        ids.provider_name(cluster)
    ):
        raise refuse(
            f"written for another stack or cluster (its provider is not "
            f"{provider_urn(stack, cluster)}); {again}"
        )
    found: list[Entry] = []
    for i, res in enumerate(doc["resources"]):
        name = res.get("name") if isinstance(res, dict) else None
        entry = expected.get(name) if isinstance(name, str) else None
        if entry is None or not isinstance(res, dict):
            raise refuse(f"resources[{i}]: {name!r} is no object of stack {stack}'s Plan; {again}")
        parent = ids.layer_component_name(cluster, entry.layer)
        got = (res.get("type"), res.get("id"), res.get("parent"), res.get("provider"))
        if got != (entry.type, entry.id, parent, ids.provider_name(cluster)) or table.get(
            parent
        ) != layer_urn(stack, cluster, entry.layer):
            raise refuse(f"resources[{i}] ({name}): not as the Plan registers it; {again}")
        found.append(entry)
    return ImportMap(shown, stack, cluster, tuple(sorted(found, key=_order)))


def adopted_by_charts(plan: Plan) -> list[Item]:
    """The Plan's charts and overlays: their objects are their resource's children."""
    return [it for it in plan.items if not isinstance(it.payload, K8sObject)]


def created(plan: Plan, imported: ImportMap) -> int:
    """Plan objects not in the map: discovery did not see them live."""
    names = {e.name for e in imported.entries}
    cluster = plan.facts.cluster
    return sum(
        1
        for it in plan.items
        if isinstance(it.payload, K8sObject)
        and ids.child_name(cluster, it.layer.value, it.id) not in names
    )


__all__ = [
    "Entry",
    "ImportMap",
    "adopted_by_charts",
    "created",
    "entries",
    "path_beside",
    "read",
    "text",
]
