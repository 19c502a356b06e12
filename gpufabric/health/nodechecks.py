"""Re-certification's node checks: the ones ``gpufabric verify nodes --via-cluster`` runs.

The probe DaemonSet of :mod:`gpufabric.verify.nodes.daemonset` runs under its own name and
namespace (never ``verify nodes``' own, which a concurrent ``verify nodes`` deletes), pinned
to the candidates by a required node affinity on their ``kubernetes.io/hostname`` label and
tolerating the quarantine taint they carry (a DaemonSet's pods already tolerate the cordon).
Each candidate's facts are gathered and judged by :mod:`gpufabric.verify.nodes.fleet`, exactly as
``verify nodes`` judges them: a FAIL keeps the node with the check named, an ERROR (or no
probe pod on the node, or a probe that could not be started) keeps it as "could not run",
never a pass. The probe is deleted afterwards however the run ends.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from gpufabric.exitcodes import CheckStatus
from gpufabric.health.defaults import API, PROBE, PROBE_TIMEOUT
from gpufabric.health.recertify import FleetDriver, driver_check
from gpufabric.plan.build import Plan
from gpufabric.verify import expect
from gpufabric.verify.defaults import DEFAULT_HOST_TIMEOUT, DEFAULT_PARALLEL
from gpufabric.verify.interrupts import left_behind, shielded
from gpufabric.verify.kube import Kube, KubeError
from gpufabric.verify.nodes import daemonset as probe_daemonset
from gpufabric.verify.nodes import fleet
from gpufabric.verify.results import Check

NAME = "gpufabric-health-probe"


@dataclass(frozen=True)
class ProbeRun:
    """How to run the probe for one pass."""

    image: str
    timeout: float = PROBE_TIMEOUT
    """Seconds for the probe pods to be Running."""
    kubeconfig: str | None = None
    context: str | None = None
    transport: fleet.GatherTransport | None = None
    """How the gather script reaches a probe pod (default: ``kubectl exec`` through
    testinfra, as ``verify nodes --via-cluster``)."""
    poll: float = 5.0
    host_timeout: float = DEFAULT_HOST_TIMEOUT


def placement(hostnames: Sequence[str], taint: str) -> probe_daemonset.Placement:
    return probe_daemonset.Placement(NAME, NAME, tuple(sorted(hostnames)), (taint,))


def describe(run: ProbeRun, hostnames: Sequence[str], taint: str) -> str:
    """The probe a pass would start, in words (``--dry-run``)."""
    where = placement(hostnames, taint)
    return (
        f"probe DaemonSet {where.namespace}/{where.name} ({run.image}) pinned to "
        f"{', '.join(where.pin)}, tolerating {taint}"
    )


def verdict(checks: Sequence[Check]) -> str:
    """A node's node checks in words: "" when they pass, else the first failing check, else
    the first one that could not be decided."""
    for c in checks:
        if c.status == CheckStatus.FAIL:
            return f"node checks: {c.check}: {c.message}"
    for c in checks:
        if c.status == CheckStatus.ERROR:
            return f"node checks could not run: {c.check}: {c.message}"
    if not checks:
        return "node checks could not run: no check ran"
    return ""


def run(
    kube: Kube,
    plan: Plan,
    candidates: Mapping[str, str],
    taint: str,
    probe: ProbeRun,
    fleet: FleetDriver,
    progress: Callable[[str], None] = lambda _m: None,
) -> dict[str, str]:
    """Each candidate (node name -> its hostname label) with its node checks in words ("":
    they pass), the driver the probe read judged against the ``fleet``'s. The probe is
    deleted however this ends; what could not be deleted is recorded for the interrupted
    command's message."""
    where = placement(sorted(candidates.values()), taint)
    try:
        transport = probe.transport or _kubectl_transport()
    except KubeError as exc:
        return dict.fromkeys(candidates, f"node checks could not run: {exc}")
    try:
        pods = probe_daemonset.start(
            kube, plan.facts.nodes, probe.image, timeout=probe.timeout, poll=probe.poll,
            progress=progress, where=where, partial=True,
        )  # fmt: skip
        results = _judge(plan, probe, transport, pods, where, set(candidates))
    except KubeError as exc:
        return dict.fromkeys(candidates, f"node checks could not run: {exc}")
    finally:
        with shielded(), kube.grace():
            for command in probe_daemonset.stop(kube, progress, where):
                left_behind(command)
    missing = (
        f"node checks could not run: no probe pod Running on the node within "
        f"{probe.timeout:g}s (kubectl -n {where.namespace} describe pods)"
    )
    return {
        name: verdict(_with_driver(name, results[name], fleet)) if name in results else missing
        for name in candidates
    }


def _with_driver(node: str, checks: list[Check], fleet: FleetDriver) -> list[Check]:
    """The node's checks and, when any ran, its loaded driver (``verify nodes``' gpu.driver
    check reads /proc/driver/nvidia/version) against the fleet's."""
    if not checks:
        return checks
    loaded = next(
        (str(c.details["version"]) for c in checks if c.check == "gpu.driver" and "version" in c.details),
        "",
    )  # fmt: skip
    return [*checks, driver_check(node, loaded, fleet, "loaded, read by the probe")]


def _kubectl_transport() -> fleet.GatherTransport:
    probe_daemonset.require_kubectl()
    return fleet.testinfra_transport(probe_daemonset.HOST_ROOT)


def _judge(
    plan: Plan,
    probe: ProbeRun,
    transport: fleet.GatherTransport,
    pods: Mapping[str, str],
    where: probe_daemonset.Placement,
    nodes: set[str],
) -> dict[str, list[Check]]:
    """The checks of every candidate with a Running probe pod, by node name."""
    specs = {
        probe_daemonset.host_spec(pod, probe.kubeconfig, probe.context, where.namespace): node
        for pod, node in pods.items()
        if node in nodes
    }
    if not specs:
        return {}
    checks = fleet.run_fleet(
        list(specs), expect.from_facts(plan.facts), transport,
        parallel=DEFAULT_PARALLEL, host_timeout=probe.host_timeout,
    )  # fmt: skip
    out: dict[str, list[Check]] = {node: [] for node in specs.values()}
    for c in checks:
        if c.target in specs:
            out[specs[c.target]].append(c)
    return out


__all__ = ["API", "NAME", "PROBE", "ProbeRun", "describe", "placement", "run", "verdict"]
