"""Find the bad nodes, then their bad rails: rounds of disjoint two-node NCCL jobs.

Round 1 pairs every GPU node with another and runs the pairs side by side (as many at once
as the tenant's GPU quota admits). A pair that passes proves both nodes good; the members of
a pair that fails or cannot be judged become suspects. Each later round pairs every suspect
with a node already proven good: the suspect is good when that pair passes and bad when it
fails. A pair is judged as ``nccl-report`` judges a run.

Rounds for k bad nodes out of N (at most 2k suspects after round 1, each needing a good
partner): 2 rounds when N >= 4k; otherwise 1 + ceil(2k / (N - 2k)) rounds, the proven-good
nodes partnering suspects in turns. With no pair passing in round 1 nothing can be localized
(every node is reported unknown).

Then each bad node runs one job per rail with a proven-good partner, its pods attached to
that rail alone, judged against one rail's share of the line rate: a rail that fails alone
is the link to look at (cable, transceiver, switch port); a node whose every rail passes
alone fails only when they all run together (PCIe, NUMA, GPU placement). A node is in one
job at a time, so these take R x ceil(k / m) more rounds for R rails, m being the smaller of
the jobs the quota admits at once and the good nodes.
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpufabric.exitcodes import Verdict, worst
from gpufabric.verify.interrupts import shielded
from gpufabric.verify.nccl_report import Report

Pair = tuple[str, str]
RunPair = Callable[[Pair, int, int], Report]
"""Run one two-node acceptance job (pair, round, index) and return its report."""
RunRailPair = Callable[[Pair, str, int, int], Report]
"""Run one two-node job on one rail ((node, good partner), rail, round, index)."""


@dataclass
class RailResult:
    """One rail of a bad node, run alone with a proven-good partner."""

    verdict: Verdict
    busbw: float | None
    network: str | None
    partner: str


@dataclass
class NodeResult:
    node: str
    verdict: str = "UNKNOWN"  # GOOD | BAD | UNKNOWN
    busbw: float | None = None
    """Best bus bandwidth of the node's pairs (GB/s)."""
    network: str | None = None
    pairs: list[tuple[int, str, str]] = field(default_factory=list)
    """(round, partner, pair verdict)."""
    rails: dict[str, RailResult] = field(default_factory=dict)
    """Per rail, for a bad node once :func:`localize_rails` ran."""

    @property
    def failing_rails(self) -> list[str]:
        return [r for r, res in self.rails.items() if res.verdict == "FAIL"]


NODE_VERDICT: dict[str, Verdict] = {
    "GOOD": Verdict.PASS,
    "BAD": Verdict.FAIL,
    "UNKNOWN": Verdict.INCONCLUSIVE,
}
"""What a node's own word (GOOD, BAD, UNKNOWN) counts as in the sweep's verdict."""


@dataclass
class SweepReport:
    nodes: dict[str, NodeResult]
    rounds: int
    rail_rounds: int = 0
    rail_threshold_gbps: float | None = None
    stopped: str | None = None
    """Why the sweep ended early (interrupted, its time limit): the report holds what it
    proved until then."""

    @property
    def bad(self) -> list[str]:
        return sorted(n for n, r in self.nodes.items() if r.verdict == "BAD")

    @property
    def unknown(self) -> list[str]:
        return sorted(n for n, r in self.nodes.items() if r.verdict == "UNKNOWN")

    @property
    def verdict(self) -> Verdict:
        """FAIL when a node is bad, else INCONCLUSIVE when one is not localized, else PASS."""
        return worst(NODE_VERDICT[r.verdict] for r in self.nodes.values())


def rounds_needed(nodes: int, bad: int) -> int:
    """Rounds the sweep takes for ``bad`` bad nodes out of ``nodes`` (worst case)."""
    if bad == 0:
        return 1
    good = nodes - 2 * bad
    if good <= 0:
        return 0  # cannot localize
    return 1 + -(-2 * bad // good)


def rail_rounds_needed(rails: int, bad: int, concurrency: int, good: int) -> int:
    """Rounds of one-rail jobs for ``bad`` nodes: each node runs one rail at a time."""
    at_once = min(concurrency, good)
    if bad == 0 or rails == 0:
        return 0
    if at_once <= 0:
        return 0  # no proven-good partner
    return rails * -(-bad // at_once)


def _busbw(report: Report) -> tuple[float | None, str | None]:
    busbw: float | None = None
    network: str | None = None
    for run in report.runs:
        if run.busbw_max_gbps is not None:
            busbw = max(busbw or 0.0, run.busbw_max_gbps)
        if run.transport.network:
            network = run.transport.network
    return busbw, network


def _record(result: NodeResult, round_: int, partner: str, report: Report) -> None:
    result.pairs.append((round_, partner, report.verdict))
    busbw, network = _busbw(report)
    if busbw is not None:
        result.busbw = max(result.busbw or 0.0, busbw)
    if network:
        result.network = network


class Stopped(Exception):
    """A job's wait was cut short because the sweep is being interrupted."""


def waiting(stop: threading.Event) -> Callable[[float], None]:
    """A ``sleep`` for the jobs' polling loops that ends, raising :class:`Stopped`, as soon
    as ``stop`` is set: an interrupted sweep does not wait for running jobs to finish (each
    job still deletes what it created)."""

    def sleep(seconds: float) -> None:
        if stop.wait(seconds):
            raise Stopped("the sweep was interrupted")

    return sleep


def _run_round(
    jobs: Sequence[Callable[[], Report]],
    concurrency: int,
    stop: threading.Event | None,
    finished: dict[int, Report] | None = None,
) -> list[Report]:
    """Every job's report, in order. ``finished`` receives, by index, the reports of the
    jobs that ended, also when the round is cut short (what it proved until then)."""
    futures: list[cf.Future[Report]] = []
    try:
        with cf.ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
            try:
                # A Ctrl-C inside submit() can land in Thread.start() before the pool records
                # the thread, which would then not be waited for: hold it until all are in.
                with shielded():
                    futures += [pool.submit(job) for job in jobs]
                return [f.result() for f in futures]
            except BaseException:
                # Ctrl-C, SIGTERM or a failing job: tell the running jobs to stop waiting,
                # drop the ones not started; leaving the block waits for the running ones'
                # cleanup.
                if stop is not None:
                    stop.set()
                for f in futures:
                    f.cancel()
                raise
    finally:
        if finished is not None:
            for i, f in enumerate(futures):
                if f.done() and not f.cancelled() and f.exception() is None:
                    finished[i] = f.result()


def sweep(
    nodes: Sequence[str],
    run_pair: RunPair,
    concurrency: int,
    max_rounds: int = 16,
    stop: threading.Event | None = None,
    into: SweepReport | None = None,
) -> SweepReport:
    """Localize the nodes that fail the acceptance test; ``concurrency`` jobs at a time.
    ``stop`` is set when the sweep is interrupted (the jobs' waits should watch it). The
    report is filled job by job (``into`` when given: what an interrupted sweep proved
    stays readable there); a node listed twice is swept once."""
    ordered = list(dict.fromkeys(nodes))
    report = into if into is not None else SweepReport({}, 0)
    report.nodes.update({n: NodeResult(n) for n in ordered if n not in report.nodes})
    results = report.nodes
    good: list[str] = []
    suspects: list[str] = []

    def judge(pair: Pair, round_: int, outcome: Report) -> None:
        a, b = pair
        _record(results[a], round_, b, outcome)
        if round_ == 1:  # both are unknown: a pass proves both, anything else suspects both
            _record(results[b], 1, a, outcome)
            if outcome.verdict == "PASS":
                results[a].verdict = results[b].verdict = "GOOD"
                good.extend(pair)
            else:
                suspects.extend(pair)
        elif outcome.verdict == "PASS":  # a suspect with a proven-good partner
            results[a].verdict = "GOOD"
            good.append(a)
        elif outcome.verdict == "FAIL":
            results[a].verdict = "BAD"
        # INCONCLUSIVE: stays UNKNOWN (the job could not be judged)

    def run_round(pairs: list[Pair], round_: int) -> None:
        jobs = [functools.partial(run_pair, pair, round_, i) for i, pair in enumerate(pairs)]
        finished: dict[int, Report] = {}
        try:
            outcomes = _run_round(jobs, concurrency, stop, finished)
        finally:  # judged as they came in, in pair order, even when cut short
            for i in sorted(finished):
                judge(pairs[i], round_, finished[i])
        assert len(outcomes) == len(pairs)
        report.rounds = round_

    first = [(ordered[i], ordered[i + 1]) for i in range(0, len(ordered) - 1, 2)]
    leftover = ordered[-1:] if len(ordered) % 2 else []
    run_round(first, 1)
    suspects += leftover
    round_ = 1
    while suspects and good and round_ < max_rounds:
        round_ += 1
        batch = suspects[: len(good)]
        del suspects[: len(good)]
        run_round(list(zip(batch, good, strict=False)), round_)
    return report


def localize_rails(
    report: SweepReport,
    rails: Sequence[str],
    run_rail_pair: RunRailPair,
    concurrency: int,
    threshold_gbps: float | None = None,
    stop: threading.Event | None = None,
) -> None:
    """Run every rail of every bad node alone with a proven-good partner; fills each bad
    node's ``rails`` and the report's ``rail_rounds``. A node is in one job at a time."""
    good = sorted(n for n, r in report.nodes.items() if r.verdict == "GOOD")
    pending = {node: list(rails) for node in report.bad}
    report.rail_threshold_gbps = threshold_gbps
    if not good or not rails:
        return
    at_once = max(1, min(concurrency, len(good)))
    round_ = report.rounds
    while any(pending.values()):
        round_ += 1
        ready = [node for node, todo in pending.items() if todo][:at_once]
        batch = [(node, pending[node].pop(0)) for node in ready]
        jobs = [
            functools.partial(run_rail_pair, (node, good[i]), rail, round_, i)
            for i, (node, rail) in enumerate(batch)
        ]
        for i, ((node, rail), result) in enumerate(
            zip(batch, _run_round(jobs, concurrency, stop), strict=True)
        ):
            busbw, network = _busbw(result)
            report.nodes[node].rails[rail] = RailResult(result.verdict, busbw, network, good[i])
        report.rail_rounds += 1


def diagnosis(result: NodeResult) -> str:
    """What a bad node's rails say about where to look."""
    if not result.rails:
        return ""
    failing = result.failing_rails
    if failing:
        return (
            f"{', '.join(failing)} {'fails' if len(failing) == 1 else 'fail'} alone: check "
            "the cable, transceiver and switch port"
        )
    if all(r.verdict == "PASS" for r in result.rails.values()):
        return (
            "every rail passes alone: it fails only with all rails together (PCIe, NUMA, "
            "GPU-NIC placement), not on a link"
        )
    return "some rails could not be judged alone"


def format_table(report: SweepReport) -> str:
    rounds = f"{report.rounds} rounds"
    if report.rail_rounds:
        rounds += f" and {report.rail_rounds} rounds of one-rail jobs"
    lines = [f"NCCL sweep: {len(report.nodes)} nodes in {rounds}"]
    if report.stopped:
        lines[0] += f" (stopped early: {report.stopped}; what it proved until then)"
    lines.append(f"  {'node':<24} {'verdict':<8} {'busbw GB/s':>10}  transport  pairs")
    for name in sorted(report.nodes):
        r = report.nodes[name]
        bw = f"{r.busbw:g}" if r.busbw is not None else "-"
        pairs = "; ".join(f"r{rd} {p} {v}" for rd, p, v in r.pairs)
        lines.append(f"  {name:<24} {r.verdict:<8} {bw:>10}  {r.network or '?':<9}  {pairs}")
    railed = [n for n in report.bad if report.nodes[n].rails]
    if railed:
        limit = (
            f"; threshold {report.rail_threshold_gbps:g} GB/s"
            if report.rail_threshold_gbps is not None
            else ""
        )
        lines.append("")
        lines.append(
            f"rails of the nodes to drain (each alone, with a proven-good partner{limit}):"
        )
        lines.append(
            f"  {'node':<24} {'rail':<10} {'verdict':<12} {'busbw GB/s':>10}  transport  partner"
        )
        for name in railed:
            for rail, res in report.nodes[name].rails.items():
                bw = f"{res.busbw:g}" if res.busbw is not None else "-"
                lines.append(
                    f"  {name:<24} {rail:<10} {res.verdict:<12} {bw:>10}  "
                    f"{res.network or '?':<9}  {res.partner}"
                )
            lines.append(f"  {name}: {diagnosis(report.nodes[name])}")
    if report.bad:
        lines.append(f"drain: {', '.join(report.bad)}")
    if report.unknown:
        lines.append(f"not localized: {', '.join(report.unknown)}")
    return "\n".join(lines) + "\n"


__all__ = [
    "NODE_VERDICT",
    "NodeResult",
    "RailResult",
    "Stopped",
    "SweepReport",
    "diagnosis",
    "format_table",
    "localize_rails",
    "rail_rounds_needed",
    "rounds_needed",
    "sweep",
    "waiting",
]
