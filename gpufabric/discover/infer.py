"""The snapshot read into a stack's ``config:`` mapping.

Each reader takes the live objects of one part of the stack and writes the keys they
determine, leaving out a value equal to the default; what it sees but cannot map is noted
by object and field (:class:`Notes`), never dropped in silence. NIC links and modes and the
queueing authority are recognised by asking the rooms' members (each link and mode's CNI,
each authority's component), never by comparing their names here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from gpufabric.discover.pools import CLIQUE, PRODUCT, Group
from gpufabric.discover.roundtrip import ident, managed
from gpufabric.discover.snapshot import Snapshot
from gpufabric.discover.sources import STACK_LABEL

NETWORKS = "gpufabric.io/networks"
RESOURCE = "k8s.v1.cni.cncf.io/resourceName"
QUOTA = "gpufabric.io/gpu-quota-"
BORROW_NONE = "0"
DEFAULT_NAD_NS = "gpufabric-networks"


@dataclass
class Notes:
    """What discovery could not map (object: field: why), objects gpufabric would not
    manage (foreign), secrets left as placeholders with the command that sets them, and
    hints."""

    unmapped: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    secrets: list[tuple[str, str]] = field(default_factory=list)
    hints: list[str] = field(default_factory=list)
    """Changes worth making that the cluster suggests (never written as values: each would
    change the render)."""

    def unmap(self, obj: dict[str, Any], where: str, why: str) -> None:
        self.unmapped.append(f"{ident(obj)}: {where}: {why}")


def meta(obj: dict[str, Any]) -> dict[str, Any]:
    return dict(obj.get("metadata") or {})


def labels(obj: dict[str, Any]) -> dict[str, str]:
    return dict(meta(obj).get("labels") or {})


def annots(obj: dict[str, Any]) -> dict[str, str]:
    return dict(meta(obj).get("annotations") or {})


def spec(obj: dict[str, Any]) -> dict[str, Any]:
    return dict(obj.get("spec") or {})


def cni_config(nad: dict[str, Any]) -> dict[str, Any]:
    """A NAD's CNI configuration, its first plugin's keys merged in (a chained list)."""
    try:
        cfg = json.loads(spec(nad).get("config") or "{}")
    except json.JSONDecodeError:
        return {}
    if not isinstance(cfg, dict):
        return {}
    plugins = cfg.get("plugins")
    if isinstance(plugins, list) and plugins and isinstance(plugins[0], dict):
        return {**plugins[0], **{k: v for k, v in cfg.items() if k != "plugins"}}
    return cfg


@dataclass
class Context:
    """The snapshot with its indexes, and the notes being written."""

    snap: Snapshot
    notes: Notes
    stack: str

    def managed(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.snap.of(kind) if managed(o)]

    def named(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        for obj in self.snap.of(kind):
            m = meta(obj)
            if m.get("name") == name and (namespace is None or m.get("namespace") == namespace):
                return obj
        return None


def alert_rules(ctx: Context) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(PrometheusRule, alert rule) of each rule gpufabric's PrometheusRules hold."""
    for obj in ctx.managed("PrometheusRule"):
        for group in spec(obj).get("groups") or []:
            for rule in (group.get("rules") or []) if isinstance(group, dict) else []:
                if isinstance(rule, dict):
                    yield obj, rule


def stack_name(snap: Snapshot, fallback: str) -> str:
    """The stack the cluster's gpufabric objects were applied from (their
    gpufabric.io/stack label), else ``fallback`` (the --out file's name)."""
    seen = sorted({labels(o)[STACK_LABEL] for o in snap.all() if STACK_LABEL in labels(o)})
    return seen[0] if len(seen) == 1 else fallback


__all__ = ["CLIQUE", "PRODUCT", "Group"]
