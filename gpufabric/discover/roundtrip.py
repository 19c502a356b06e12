"""The round-trip gate: the discovered stack rendered, then compared with the live objects
under one normalisation (server-set fields stripped on both sides), field by field.

Only the kinds discovery reads are compared (:data:`~.sources.SOURCES`): chart-made and
overlay-made objects (the ClusterPolicy a chart creates, the operators' Deployments) come
from Helm values and kustomize, which discovery does not read back.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpufabric.discover.sources import MANAGED_BY, SOURCES
from gpufabric.outputs.render import plain
from gpufabric.plan.build import Plan

SERVER_SET = (
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "managedFields",
    "generation",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "ownerReferences",
)
SERVER_LABELS = ("kubernetes.io/metadata.name",)
"""Labels the API server sets itself (a Namespace's own name): never a change to apply."""
COMPARED = frozenset(src.kind for src in SOURCES) - {
    "Node",
    "CustomResourceDefinition",
    "ClusterPolicy",
}
"""Kinds the gate compares object by object: what discovery reads, less nodes (which
gpufabric never writes), CRDs (installed by charts and overlays) and the GPU Operator's
ClusterPolicy (its chart makes it: compared at the values gpufabric sets, :mod:`.clusterpolicy`)."""


GENERIC = frozenset(
    {
        "ServiceAccount",
        "CronJob",
        "Deployment",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "PriorityClass",
    }
)
"""Kinds every cluster holds many of for its own purposes: only gpufabric's (and a live one
of a name gpufabric renders) are compared; the others are neither foreign nor listed."""


JSON_FIELDS = {
    "NetworkAttachmentDefinition": (("config",),),
    "NicClusterPolicy": (("rdmaSharedDevicePlugin", "config"), ("sriovDevicePlugin", "config")),
}
"""Spec fields that hold a JSON document (a CNI config, a device plugin's config): compared
as the document, so a difference names the key inside it (``spec.config.mtu``) and key order
or whitespace is none."""


def _json_fields(kind: str, body: dict[str, Any]) -> None:
    for path in JSON_FIELDS.get(kind, ()):
        parent = body.get("spec")
        for key in path[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        if isinstance(parent, dict) and isinstance(parent.get(path[-1]), str):
            with contextlib.suppress(ValueError):
                parent[path[-1]] = json.loads(parent[path[-1]])


def normalise(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object without what the API server sets: status and the server-set metadata;
    numbers as strings (a quota written 32 reads back as "32"); empty maps dropped; JSON
    documents in spec fields (:data:`JSON_FIELDS`) parsed."""
    body = plain(obj)
    _json_fields(str(body.get("kind")), body)
    if body.get("kind") == "Namespace" and body.get("spec") == {"finalizers": ["kubernetes"]}:
        del body["spec"]  # the API server's own finalizer on every namespace
    out = {k: _scalars(v) for k, v in body.items() if k != "status"}
    meta = dict(out.get("metadata") or {})
    for key in SERVER_SET:
        meta.pop(key, None)
    if isinstance(meta.get("labels"), dict):
        meta["labels"] = {k: v for k, v in meta["labels"].items() if k not in SERVER_LABELS}
    out["metadata"] = {k: v for k, v in meta.items() if v not in ({}, None)}
    return out


def _scalars(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _scalars(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_scalars(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return str(value)
    return value


def ident(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{obj.get('kind')} {ns + '/' if ns else ''}{meta.get('name')}"


@dataclass(frozen=True)
class Difference:
    """One field of one object that the stack would change: ``field`` dotted, ``live`` and
    ``rendered`` its two values (None: absent)."""

    object: str
    field: str
    live: Any
    rendered: Any

    def __str__(self) -> str:
        head = f"{self.object}: {self.field}: "
        live, rendered = self.live, self.rendered
        if live is None or rendered is None or max(map(_width, (live, rendered))) <= SHOWN:
            return f"{head}live {_show(live)}, rendered {_show(rendered)}"
        # both long: the same window of each, around where they part
        texts = (live, rendered) if isinstance(live, str) and isinstance(rendered, str) else None
        a, b = texts or (_json(live), _json(rendered))
        at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), len(a))
        at = min(at, len(a), len(b))
        where = f"character {at + 1}" + ("" if texts else " of their JSON")
        return (
            f"{head}live {_window(a, at, texts is not None)}, rendered "
            f"{_window(b, at, texts is not None)} (they differ from {where} on)"
        )


SHOWN = 160
"""Characters of a value a difference shows whole; longer ones are cut: one alone at its
end, two around where they first differ (the same window of each)."""
BEFORE = 40
"""Characters of a window before the first difference."""


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _width(value: Any) -> int:
    return len(_json(value))


def _show(value: Any) -> str:
    if value is None:
        return "(absent)"
    text = _json(value)
    return text if len(text) <= SHOWN else text[: SHOWN - 3] + "..."


def _window(text: str, at: int, quoted: bool) -> str:
    """``text`` from :data:`BEFORE` characters before ``at``, up to :data:`SHOWN` in all,
    ``...`` where it is cut (inside the quotes of a string)."""
    start = max(0, at - BEFORE)
    end = start + SHOWN
    cut = text[start:end]
    lead, tail = ("..." if start else ""), ("..." if end < len(text) else "")
    if not quoted:
        return f"{lead}{cut}{tail}"
    inner = json.dumps(cut)[1:-1]
    return f'"{lead}{inner}{tail}"'


def field_diff(live: Any, rendered: Any, path: str = "") -> Iterator[tuple[str, Any, Any]]:
    """(dotted field, live, rendered) of each leaf that differs."""
    if isinstance(live, dict) and isinstance(rendered, dict):
        for key in sorted(set(live) | set(rendered)):
            sub = f"{path}.{key}" if path else str(key)
            yield from field_diff(live.get(key), rendered.get(key), sub)
    elif isinstance(live, list) and isinstance(rendered, list) and len(live) == len(rendered):
        for i, (a, b) in enumerate(zip(live, rendered, strict=True)):
            yield from field_diff(a, b, f"{path}[{i}]")
    elif live != rendered:
        yield path, live, rendered


def managed(obj: Mapping[str, Any]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return bool(labels.get(MANAGED_BY[0]) == MANAGED_BY[1])


@dataclass
class Gate:
    """The outcome: differences per field, the live objects no render would touch
    (foreign), how many objects matched, and the objects gpufabric did not make that the
    render names too (adopted: compared field by field, e.g. the singleton NicClusterPolicy)."""

    differences: list[Difference]
    foreign: list[str]
    matched: int
    adopted: list[str] = field(default_factory=list)


def compare(plan: Plan, live: list[dict[str, Any]]) -> Gate:
    """The plan's objects of the compared kinds against the live ones."""
    rendered = {ident(o.body): normalise(o.body) for _, o in plan.objects() if o.kind in COMPARED}
    seen = {
        ident(o): normalise(o)
        for o in live
        if o.get("kind") in COMPARED
        and (o.get("kind") not in GENERIC or managed(o) or ident(o) in rendered)
    }
    diffs: list[Difference] = []
    foreign: list[str] = []
    matched = 0
    adopted = sorted(n for n in set(rendered) & set(seen) if not managed(seen[n]))
    for name in sorted(set(rendered) | set(seen)):
        if name not in rendered:
            if managed(seen[name]):
                diffs.append(Difference(name, "(object)", "present", None))
            else:
                foreign.append(name)
            continue
        if name not in seen:
            diffs.append(Difference(name, "(object)", None, "created"))
            continue
        found = [Difference(name, f, a, b) for f, a, b in field_diff(seen[name], rendered[name])]
        diffs += found
        matched += not found
    policy = _policy_differences(plan, live)
    if policy is not None:
        diffs += policy
        matched += not policy
    return Gate(diffs, foreign, matched, adopted)


def _policy_differences(plan: Plan, live: list[dict[str, Any]]) -> list[Difference] | None:
    """The live ClusterPolicy against the GPU Operator chart values the plan sets (None:
    either is missing; a missing policy with the chart in the plan is one difference)."""
    from gpufabric.discover import clusterpolicy

    values = clusterpolicy.chart_values(plan.items)
    policy = clusterpolicy.live_policy(live)
    if values is None:
        return None
    if policy is None:
        return [
            Difference(f"{clusterpolicy.KIND} (the GPU Operator's)", "(object)", None, "created")
        ]
    name = ident(policy)
    return [
        Difference(name, f, _scalars(a), _scalars(b))
        for f, a, b in clusterpolicy.compared(values, policy)
        if _scalars(a) != _scalars(b)
    ]
