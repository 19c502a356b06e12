"""What ``gpufabric health`` does on one pass, decided from what it read: pure functions of
the nodes, the firing alerts and the stack's health facts (no API calls, no clock).

- A node with a fatal condition (node-problem-detector) or a firing alert labelled
  ``quarantine="true"`` is quarantined, within the circuit breaker: at most
  ``min(count, floor(fraction x GPU nodes))`` nodes carry the quarantine taint at once,
  those already carrying it included; the rest are held and reported.
- An alert labelled ``quarantine="false"`` (a non-fatal Xid) leads to no action.
- A node gpufabric quarantined whose cause is cleared (no fatal condition, no fatal alert,
  the alerts actually read) and that is Ready is re-certified; a node that failed
  re-certification is tried again only after the retry interval.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpufabric.health import record
from gpufabric.health.record import Record
from gpufabric.plan.facts import HealthFacts
from gpufabric.verify.nodes.daemonset import HOSTNAME_LABEL

CONDITION = "condition"
ALERT = "alert"


@dataclass(frozen=True)
class Fault:
    source: str
    """condition | alert"""
    name: str
    """The condition type or the alert name."""
    detail: str = ""

    @property
    def words(self) -> str:
        return f"{self.source} {self.name}" + (f": {self.detail}" if self.detail else "")


@dataclass(frozen=True)
class NodeState:
    """One GPU node as read: what decides its fate."""

    name: str
    ready: bool
    unschedulable: bool
    tainted: bool
    """It carries the quarantine taint (whoever set it)."""
    record: Record | None
    faults: tuple[Fault, ...] = ()
    """Fatal: each one quarantines."""
    notices: tuple[Fault, ...] = ()
    """Non-quarantining faults (quarantine="false", e.g. a non-fatal Xid): no action."""
    gpus: int = 0
    """Allocatable GPUs."""
    hostname: str = ""
    """Its ``kubernetes.io/hostname`` label (the probe is pinned by it); its name without one."""
    driver: str = ""
    """The driver version GPU Feature Discovery labels it with; "" without the labels."""
    pool: str = ""
    """The node pool of a fleet it belongs to (its re-certification is that pool's); ""
    for a one-pool stack."""

    @property
    def ours(self) -> bool:
        """Quarantined by gpufabric and still so."""
        return self.tainted and self.record is not None and self.record.state == record.QUARANTINED


@dataclass(frozen=True)
class Alert:
    """A firing alert for one node, as Prometheus reports it in ALERTS."""

    name: str
    node: str
    quarantine: bool


@dataclass
class Decision:
    limit: int
    gpu_nodes: int
    quarantined: int
    """Nodes carrying the taint once this pass's quarantines are done."""
    quarantine: list[tuple[str, Fault]] = field(default_factory=list)
    held: list[tuple[str, Fault]] = field(default_factory=list)
    recertify: list[str] = field(default_factory=list)
    waiting: list[tuple[str, str]] = field(default_factory=list)
    ignored: list[tuple[str, str]] = field(default_factory=list)


def _status(node: Mapping[str, Any], ctype: str) -> tuple[str, str]:
    for cond in node.get("status", {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == ctype:
            return str(cond.get("status", "")), str(cond.get("message", ""))[:200]
    return "", ""


def observe(
    node: Mapping[str, Any],
    taint: str,
    conditions: Sequence[str],
    alerts: Sequence[Alert],
    gpu_resource: str,
) -> NodeState:
    """One node's state from its API object and the alerts firing for it."""
    meta, spec = node.get("metadata") or {}, node.get("spec") or {}
    name = str(meta.get("name", ""))
    faults = [
        Fault(CONDITION, ctype, message)
        for ctype in conditions
        for status, message in [_status(node, ctype)]
        if status == "True"
    ]
    faults += [Fault(ALERT, a.name) for a in alerts if a.node == name and a.quarantine]
    notices = [Fault(ALERT, a.name) for a in alerts if a.node == name and not a.quarantine]
    taints = spec.get("taints") or []
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    try:
        gpus = int(str(allocatable.get(gpu_resource, 0)))
    except ValueError:
        gpus = 0
    return NodeState(
        name=name,
        ready=_status(node, "Ready")[0] == "True",
        unschedulable=bool(spec.get("unschedulable")),
        tainted=any(isinstance(t, dict) and t.get("key") == taint for t in taints),
        record=record.read(meta.get("annotations")),
        faults=tuple(sorted(set(faults), key=lambda f: (f.source, f.name))),
        notices=tuple(sorted(set(notices), key=lambda f: (f.source, f.name))),
        gpus=gpus,
        hostname=_hostname(meta, name),
        driver=driver_label(meta.get("labels")),
    )


DRIVER_LABEL = "nvidia.com/cuda.driver-version.full"
"""The driver version (X.Y[.Z]) GPU Feature Discovery, which the GPU Operator runs, sets on
each GPU node (k8s-device-plugin internal/lm/nvml.go, newVersionLabeler)."""
DRIVER_PARTS = (
    "nvidia.com/cuda.driver.major",
    "nvidia.com/cuda.driver.minor",
    "nvidia.com/cuda.driver.rev",
)
"""The same version in its deprecated labels (older GFD releases set only these; rev may be
empty)."""


def driver_label(labels: Any) -> str:
    """The node's driver version from GFD's labels; "" when it carries none."""
    if not isinstance(labels, dict):
        return ""
    full = labels.get(DRIVER_LABEL)
    if isinstance(full, str) and full:
        return full
    parts = [labels.get(k) for k in DRIVER_PARTS]
    if not all(isinstance(p, str) for p in parts[:2]) or not parts[0] or not parts[1]:
        return ""
    return ".".join(p for p in parts if isinstance(p, str) and p)


def _hostname(meta: Mapping[str, Any], name: str) -> str:
    labels = meta.get("labels")
    value = labels.get(HOSTNAME_LABEL) if isinstance(labels, dict) else None
    return value if isinstance(value, str) and value else name


def breaker(facts: HealthFacts, gpu_nodes: int, count: int | None, fraction: float | None) -> int:
    """The most GPU nodes that may be quarantined at once: both limits hold."""
    count = facts.max_quarantined if count is None else count
    fraction = facts.max_quarantined_fraction if fraction is None else fraction
    return max(0, min(count, math.floor(fraction * gpu_nodes + 1e-9)))


def decide(
    states: Sequence[NodeState],
    limit: int,
    alerts_read: bool,
    due: Mapping[str, bool],
) -> Decision:
    """Every node's action on this pass. ``alerts_read``: the alerts were read (or none were
    asked for); without them no cause counts as cleared. ``due``: per kept node, whether its
    retry interval has passed."""
    tainted = sum(1 for s in states if s.tainted)
    out = Decision(limit=limit, gpu_nodes=len(states), quarantined=tainted)
    for s in sorted(states, key=lambda s: s.name):
        if s.faults and not s.tainted:
            if out.quarantined < limit:
                out.quarantine.append((s.name, s.faults[0]))
                out.quarantined += 1
            else:
                out.held.append((s.name, s.faults[0]))
        elif s.ours:
            why = _not_ready_to_recertify(s, alerts_read, due.get(s.name, True))
            if why:
                out.waiting.append((s.name, why))
            else:
                out.recertify.append(s.name)
        elif s.notices and not s.faults:
            out.ignored.append((s.name, ", ".join(f.words for f in s.notices)))
    return out


def _not_ready_to_recertify(s: NodeState, alerts_read: bool, due: bool) -> str:
    if s.faults:
        return "cause not cleared: " + "; ".join(f.words for f in s.faults)
    if not alerts_read:
        return "the alerts could not be read: the cause is not known to be cleared"
    if not s.ready:
        return "not Ready"
    if not due:
        return f"failed re-certification ({s.record.check if s.record else ''}); retried later"
    return ""


__all__ = ["ALERT", "CONDITION", "DRIVER_LABEL", "Alert", "Decision", "Fault", "NodeState", "breaker", "decide", "driver_label", "observe"]  # fmt: skip
