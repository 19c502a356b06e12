"""One ``gpufabric health`` pass at a time per cluster: a ``coordination.k8s.io`` Lease.

The rendered loop (a CronJob or a ``--watch`` Deployment) and an operator's run from a
laptop act on the same nodes: two passes at once would each count the quarantined nodes
before the other acted (the circuit breaker could be passed) and would delete each other's
node-check probe. So a pass that changes anything first holds the Lease
``gpufabric-health`` in the monitoring namespace, renews it while it runs and gives it up
when it ends, the way Kubernetes' own leader election does (holderIdentity, renewTime,
leaseDurationSeconds). A Lease whose holder stopped renewing (a killed run) is taken over
once it has expired. ``--dry-run`` changes nothing and takes no Lease.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import secrets
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

from gpufabric.plan.health import NAME
from gpufabric.verify.kube import Kube, KubeError, mapping, object_path, text

API_VERSION = "coordination.k8s.io/v1"
DURATION_S = 120
"""How long a holder that stopped renewing keeps the Lease (a killed run's is taken over after it)."""
RENEW_S = 30.0
ATTEMPTS = 3

Clock = Callable[[], dt.datetime]


class Busy(Exception):
    """Another pass holds the Lease; the message names it."""


def identity() -> str:
    """This run: host, process and a random part (two runs on one host differ)."""
    return f"{socket.gethostname()[:40]}-{os.getpid()}-{secrets.token_hex(4)}"


def _micro(at: dt.datetime) -> str:
    return at.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(value: str) -> dt.datetime | None:
    for form in ("%Y-%m-%dT%H:%M:%S.%fZ", "%Y-%m-%dT%H:%M:%SZ"):
        try:
            return dt.datetime.strptime(value, form).replace(tzinfo=dt.UTC)
        except ValueError:
            continue
    return None


def _holder(live: dict[str, Any], me: str, now: dt.datetime) -> str | None:
    """Words naming another live holder of ``live``, or None when it may be taken."""
    spec = mapping(live, "spec")
    holder = text(live, "spec", "holderIdentity") if spec.get("holderIdentity") else ""
    if not holder or holder == me:
        return None
    renewed = _parse(str(spec.get("renewTime") or spec.get("acquireTime") or ""))
    duration = spec.get("leaseDurationSeconds")
    seconds = duration if isinstance(duration, int) and duration > 0 else DURATION_S
    if renewed is None or renewed + dt.timedelta(seconds=seconds) <= now:
        return None  # expired: its holder stopped renewing
    return f"{holder} (renewed {_micro(renewed)[:19]}Z, held for {seconds} s after each renewal)"


def _body(namespace: str, me: str, now: dt.datetime, live: dict[str, Any] | None) -> dict[str, Any]:  # fmt: skip
    spec = dict(mapping(live, "spec")) if live is not None else {}
    if spec.get("holderIdentity") != me:
        spec["acquireTime"] = _micro(now)
        transitions = spec.get("leaseTransitions")
        spec["leaseTransitions"] = (transitions if isinstance(transitions, int) else 0) + (live is not None)  # fmt: skip
    spec.update(holderIdentity=me, leaseDurationSeconds=DURATION_S, renewTime=_micro(now))
    metadata = dict(mapping(live, "metadata")) if live is not None else {}
    metadata.update(name=NAME, namespace=namespace)
    metadata.setdefault("labels", {})["app.kubernetes.io/managed-by"] = "gpufabric-health"
    return {"apiVersion": API_VERSION, "kind": "Lease", "metadata": metadata, "spec": spec}


def claim(kube: Kube, namespace: str, me: str, now: dt.datetime) -> None:
    """Take or renew the Lease for ``me``; Busy when another live holder has it, KubeError
    when the API refuses (the command then changes nothing)."""
    path = object_path(API_VERSION, "Lease", NAME, namespace)
    for _ in range(ATTEMPTS):
        live = kube.get(path)
        if live is not None and (other := _holder(live, me, now)) is not None:
            raise Busy(other)
        if live is None:
            try:
                kube.create(_body(namespace, me, now, None))
                return
            except KubeError:
                if kube.get(path) is None:
                    raise  # not a race with another run's create: the API refused
                continue
        if kube.replace(_body(namespace, me, now, live)) is not None:
            return
    raise Busy("another run (the Lease kept changing while this one tried to take it)")


def give_up(kube: Kube, namespace: str, me: str) -> None:
    """Clear the holder when it is still ``me`` (best effort: an expired Lease is taken
    over anyway)."""
    path = object_path(API_VERSION, "Lease", NAME, namespace)
    with contextlib.suppress(KubeError), kube.grace():
        live = kube.get(path)
        if live is None or mapping(live, "spec").get("holderIdentity") != me:
            return
        live["spec"]["holderIdentity"] = ""
        kube.replace(live)


@contextlib.contextmanager
def holding(kube: Kube, namespace: str, me: str, clock: Clock) -> Iterator[threading.Event]:
    """Hold the Lease while the block runs, renewing it every RENEW_S seconds in the
    background; the Event yielded is set when a renewal found another holder (said on
    the caller's terms). Busy when another pass holds it."""
    claim(kube, namespace, me, clock())
    lost, done = threading.Event(), threading.Event()

    def renew() -> None:
        while not done.wait(RENEW_S):
            try:
                claim(kube, namespace, me, clock())
            except Busy:
                lost.set()
                return
            except KubeError:
                continue  # the API is away: the next renewal tries again

    thread = threading.Thread(target=renew, name="gpufabric-health-lease", daemon=True)
    thread.start()
    try:
        yield lost
    finally:
        done.set()
        thread.join(timeout=5)
        give_up(kube, namespace, me)


__all__ = ["DURATION_S", "NAME", "Busy", "claim", "give_up", "holding", "identity"]
