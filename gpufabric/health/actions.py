"""The changes ``gpufabric health`` makes to a node, each one update of the Node (taint,
cordon and the annotation together, under the object's resourceVersion) and one Event on
it. A change that finds the node changed under it reads it again (another run, a person);
one that finds its work already done does nothing, so a pass can be repeated or resumed."""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable
from typing import Any

from gpufabric.health import record
from gpufabric.health.decide import Fault
from gpufabric.health.record import Record
from gpufabric.verify.kube import Kube, KubeError, object_path

COMPONENT = "gpufabric-health"
EVENT_NAMESPACE = "default"
"""Where a Node's Events live (the kubelet's own go there too)."""
ATTEMPTS = 3
HELD = "QuarantineHeld"
"""The reason of the Event on a node the circuit breaker keeps from quarantine."""

Change = Callable[[dict[str, Any]], dict[str, Any] | None]
"""A node -> the node as it should be, or None when there is nothing to do."""


def _update(kube: Kube, name: str, change: Change) -> dict[str, Any] | None:
    """Apply ``change`` to the live node; the node as written, or None when nothing was to
    do. KubeError when the node is gone or keeps changing under it."""
    path = object_path("v1", "Node", name)
    for _ in range(ATTEMPTS):
        live = kube.get(path)
        if live is None:
            raise KubeError(f"node {name} no longer exists")
        wanted = change(copy.deepcopy(live))
        if wanted is None:
            return None
        written = kube.replace(wanted)
        if written is not None:
            return written
    raise KubeError(f"node {name} kept changing while gpufabric health updated it; run again")


def _annotate(node: dict[str, Any], rec: Record) -> None:
    node["metadata"].setdefault("annotations", {})[record.ANNOTATION] = rec.to_json()


def quarantine(kube: Kube, name: str, fault: Fault, taint: str, now: str) -> bool:
    """Cordon, taint and annotate the node; False when it already carries the taint."""

    def change(node: dict[str, Any]) -> dict[str, Any] | None:
        spec = node.setdefault("spec", {})
        taints = spec.get("taints") or []
        if any(isinstance(t, dict) and t.get("key") == taint for t in taints):
            return None
        rec = Record(
            state=record.QUARANTINED, reason=fault.words, source=fault.source, since=now,
            cordoned=not spec.get("unschedulable"),
        )  # fmt: skip
        spec["taints"] = [*taints, {"key": taint, "value": fault.name, "effect": "NoSchedule"}]
        spec["unschedulable"] = True
        _annotate(node, rec)
        return node

    done = _update(kube, name, change)
    if done is not None:
        event(kube, done, "Quarantined", f"quarantined: {fault.words}", now, warning=True)
    return done is not None


def keep(kube: Kube, name: str, check: str, now: str) -> None:
    """Record the failing re-certification check on a quarantined node."""

    def change(node: dict[str, Any]) -> dict[str, Any] | None:
        rec = record.read(node["metadata"].get("annotations"))
        if rec is None or rec.state != record.QUARANTINED:
            return None
        _annotate(node, rec.with_(check=check, checked=now))
        return node

    done = _update(kube, name, change)
    if done is not None:
        event(kube, done, "RecertificationFailed", f"kept quarantined: {check}", now, True)


def release(kube: Kube, name: str, evidence: str, taint: str, now: str) -> bool:
    """Untaint the node, uncordon it when gpufabric cordoned it, and record the return.
    Callers pass the evidence of a passing re-certification (recertify.Recertification.passed)."""

    def change(node: dict[str, Any]) -> dict[str, Any] | None:
        rec = record.read(node["metadata"].get("annotations"))
        if rec is None or rec.state != record.QUARANTINED:
            return None  # returned already, or a person took over
        spec = node.setdefault("spec", {})
        spec["taints"] = [t for t in spec.get("taints") or [] if t.get("key") != taint]
        if rec.cordoned:
            spec.pop("unschedulable", None)
        _annotate(node, rec.with_(state=record.RETURNED, check="", checked=now, returned=f"{now} {evidence}"))  # fmt: skip
        return node

    done = _update(kube, name, change)
    if done is not None:
        event(kube, done, "Returned", f"returned to service: {evidence}", now, warning=False)
    return done is not None


def held(kube: Kube, name: str, fault: Fault, message: str, now: str) -> None:
    """A QuarantineHeld Event on a node the circuit breaker keeps in service: one Event per
    node and fault, whose count and lastTimestamp a later pass raises (no new Event per pass
    under --watch)."""
    node = kube.get(object_path("v1", "Node", name))
    if node is not None:
        event(kube, node, HELD, message, now, warning=True, key=fault.words)


def event(
    kube: Kube, node: dict[str, Any], reason: str, message: str, now: str, warning: bool,
    key: str | None = None,
) -> None:  # fmt: skip
    """An Event on the node. Its name is derived from what it says (and when), so a
    repeated pass does not repeat it; with ``key`` from the node, reason and key alone, and
    a repeat raises the count of the Event already there."""
    name = str(node["metadata"]["name"])
    said = f"{name}\0{reason}\0" + (f"{key}\0" if key is not None else f"{message}\0{now}")
    digest = hashlib.sha256(said.encode()).hexdigest()[:16]
    body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.{digest}", "namespace": EVENT_NAMESPACE},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Node",
            "name": name,
            "uid": str(node["metadata"].get("uid", "")),
        },
        "reason": reason,
        "message": message[:1024],
        "type": "Warning" if warning else "Normal",
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    try:
        kube.create(body)
    except KubeError as exc:
        if "409" not in str(exc):  # the same Event from an earlier, interrupted pass
            raise
        if key is not None:
            _repeat(kube, body, now)


def _repeat(kube: Kube, body: dict[str, Any], now: str) -> None:
    """Raise the count of the Event already there (once per pass; a pass that finds it
    changed under it leaves it: another run counted this moment)."""
    live = kube.get(object_path("v1", "Event", body["metadata"]["name"], EVENT_NAMESPACE))
    if live is None or live.get("lastTimestamp") == now:
        return
    count = live.get("count")
    live["count"] = (count if isinstance(count, int) and count > 0 else 1) + 1
    live["lastTimestamp"] = now
    live["message"] = body["message"]
    kube.replace(live)


__all__ = ["COMPONENT", "EVENT_NAMESPACE", "HELD", "event", "held", "keep", "quarantine", "release"]
