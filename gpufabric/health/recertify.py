"""Re-certify quarantined nodes: node checks first, then the bad-node sweep with
proven-good partners, judged by the sweep's own confidence rule.

A node passes only when the sweep calls it GOOD (it passed with C distinct partners that
are GOOD themselves; a FLAKY node never is) and its bus bandwidth is at least a fraction of
the median of the GOOD nodes in the same sweep; the jobs themselves are judged at the
acceptance threshold. Anything else (BAD, FLAKY, not localized, too slow, a check that
could not run) keeps the node quarantined with the failing check named.
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from gpufabric.health.decide import DRIVER_LABEL, NodeState
from gpufabric.verify.nodes.checks import FLEET_DRIVER_CHECK
from gpufabric.verify.results import Check, error, failed, passed
from gpufabric.verify.sweep import run as sweep
from gpufabric.verify.sweep.judge import NodeVerdict
from gpufabric.verify.sweep.run import RunPair, SweepReport


@dataclass(frozen=True)
class Recertification:
    """A quarantined node's re-certification."""

    node: str
    passed: bool
    words: str
    """The evidence when it passed; the failing check when it did not."""


def node_checks(state: NodeState, gpus_per_node: int) -> str:
    """The first failing node check in words, or "" when they pass."""
    if not state.ready:
        return "node checks: the node is not Ready"
    if state.gpus < gpus_per_node:
        return f"node checks: {state.gpus} of {gpus_per_node} GPUs allocatable"
    return ""


@dataclass(frozen=True)
class FleetDriver:
    """The driver version of the GPU nodes outside quarantine, which a re-certified node
    must run (``verify nodes``' one-driver-version rule, applied to the fleet)."""

    version: str
    """"" when it could not be established."""
    basis: str
    """Where the version comes from; why there is none."""


def fleet_driver(states: Sequence[NodeState]) -> FleetDriver:
    """The one driver version GPU Feature Discovery's labels give the GPU nodes that do not
    carry the quarantine taint; none when they carry no label or disagree."""
    fleet = [s for s in states if not s.tainted]
    versions: dict[str, list[str]] = {}
    for s in fleet:
        if s.driver:
            versions.setdefault(s.driver, []).append(s.name)
    if not versions:
        return FleetDriver(
            "",
            f"none of the {len(fleet)} GPU nodes outside quarantine carries GPU Feature "
            f"Discovery's label {DRIVER_LABEL}",
        )
    if len(versions) > 1:
        spread = "; ".join(
            f"{v} on {len(n)} ({', '.join(sorted(n)[:3])}{', ...' if len(n) > 3 else ''})"
            for v, n in sorted(versions.items())
        )
        return FleetDriver("", f"the GPU nodes outside quarantine run {len(versions)} driver versions: {spread}")  # fmt: skip
    ((version, names),) = versions.items()
    unlabelled = len(fleet) - len(names)
    more = f"; {unlabelled} carry no label" if unlabelled else ""
    return FleetDriver(version, f"the {len(names)} GPU nodes outside quarantine{more}")


def driver_check(node: str, version: str, fleet: FleetDriver, read: str) -> Check:
    """``node``'s driver (``version``, as ``read`` says where from) against the fleet's: a
    check that could not compare is an ERROR, never a PASS."""
    if not fleet.version:
        return error(FLEET_DRIVER_CHECK, node, f"the fleet's driver version is not known: {fleet.basis}")  # fmt: skip
    if not version:
        return error(FLEET_DRIVER_CHECK, node, f"the node's driver version is not known ({read})")
    if version != fleet.version:
        return failed(
            FLEET_DRIVER_CHECK,
            node,
            f"driver {version} ({read}), the fleet runs {fleet.version} ({fleet.basis})",
            "NCCL needs one driver version across a job: install the fleet's driver on the "
            "node (the GPU Operator's driver), reboot it, and let gpufabric health retry",
            version=version,
        )
    return passed(FLEET_DRIVER_CHECK, node, f"driver {version}, as the fleet", version=version)


def partners(states: Sequence[NodeState], wanted: int) -> list[str]:
    """Proven-good partners: Ready, schedulable, untainted, without any fault, in name
    order (the same on every run)."""
    healthy = [
        s.name for s in states if s.ready and not s.unschedulable and not s.tainted and not s.faults
    ]
    return sorted(healthy)[:wanted]


def judge(report: SweepReport, candidates: Sequence[str], median_fraction: float) -> dict[str, Recertification]:  # fmt: skip
    """Each candidate's outcome from the sweep it ran in."""
    good_bw = [r.busbw for r in report.nodes.values() if r.verdict == NodeVerdict.GOOD and r.busbw]
    median = statistics.median(good_bw) if good_bw else None
    out: dict[str, Recertification] = {}
    for node in candidates:
        r = report.nodes.get(node)
        if r is None or r.verdict != NodeVerdict.GOOD:
            verdict = r.verdict if r is not None else "not run"
            note = f" ({r.note})" if r is not None and r.note else ""
            stopped = f"; sweep stopped: {report.stopped}" if report.stopped else ""
            out[node] = Recertification(node, False, f"sweep: {verdict}{note}{stopped}")
            continue
        if r.busbw is None or median is None:
            out[node] = Recertification(node, False, "sweep: GOOD but no bus bandwidth to compare")
        elif r.busbw < median_fraction * median:
            out[node] = Recertification(
                node,
                False,
                f"sweep: busbw {r.busbw:g} GB/s below {median_fraction:g} x the median "
                f"{median:g} GB/s of the GOOD nodes",
            )
        else:
            partners_ = sorted({p for _, p, v in r.pairs if v == "PASS"})
            out[node] = Recertification(
                node,
                True,
                f"sweep: GOOD with {', '.join(partners_)}; busbw {r.busbw:g} GB/s "
                f"(median {median:g})",
            )
    return out


def run_sweep(
    candidates: Sequence[str],
    partner_nodes: Sequence[str],
    run_pair: RunPair,
    concurrency: int,
    confirm: int,
    median_fraction: float,
    stop: threading.Event | None = None,
    into: SweepReport | None = None,
) -> dict[str, Recertification]:
    """Sweep the candidates with the partners (no topology: the partners are chosen for
    being healthy, not for their place); each candidate's outcome. An interruption
    propagates; what it proved until then stays in ``into``."""
    report = into if into is not None else SweepReport(nodes={}, rounds=0)
    sweep.sweep([*candidates, *partner_nodes], run_pair, concurrency, stop=stop, into=report, confirm=confirm)  # fmt: skip
    return judge(report, candidates, median_fraction)


__all__ = ["FleetDriver", "Recertification", "driver_check", "fleet_driver", "judge", "node_checks", "partners", "run_sweep"]  # fmt: skip
