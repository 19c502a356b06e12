"""Find the bad nodes: rounds of disjoint two-node NCCL acceptance jobs.

Round 1 pairs every GPU node with another and runs the pairs side by side (as many at once
as the tenant's GPU quota admits). A pair that passes proves both nodes good; the members of
a pair that fails or cannot be judged become suspects. Each later round pairs every suspect
with a node already proven good: the suspect is good when that pair passes and bad when it
fails. A pair is judged as ``nccl-report`` judges a run.

Rounds for k bad nodes out of N (at most 2k suspects after round 1, each needing a good
partner): 2 rounds when N >= 4k; otherwise 1 + ceil(2k / (N - 2k)) rounds, the proven-good
nodes partnering suspects in turns. With no pair passing in round 1 nothing can be localized
(every node is reported unknown).
"""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpufabric.nccl_report import Report

Pair = tuple[str, str]
RunPair = Callable[[Pair, int, int], Report]
"""Run one two-node acceptance job (pair, round, index) and return its report."""


@dataclass
class NodeResult:
    node: str
    verdict: str = "UNKNOWN"  # GOOD | BAD | UNKNOWN
    busbw: float | None = None
    """Best bus bandwidth of the node's pairs (GB/s)."""
    network: str | None = None
    pairs: list[tuple[int, str, str]] = field(default_factory=list)
    """(round, partner, pair verdict)."""


@dataclass
class SweepReport:
    nodes: dict[str, NodeResult]
    rounds: int

    @property
    def bad(self) -> list[str]:
        return sorted(n for n, r in self.nodes.items() if r.verdict == "BAD")

    @property
    def unknown(self) -> list[str]:
        return sorted(n for n, r in self.nodes.items() if r.verdict == "UNKNOWN")


def rounds_needed(nodes: int, bad: int) -> int:
    """Rounds the sweep takes for ``bad`` bad nodes out of ``nodes`` (worst case)."""
    if bad == 0:
        return 1
    good = nodes - 2 * bad
    if good <= 0:
        return 0  # cannot localize
    return 1 + -(-2 * bad // good)


def _record(result: NodeResult, round_: int, partner: str, report: Report) -> None:
    result.pairs.append((round_, partner, report.verdict))
    for run in report.runs:
        if run.busbw_max_gbps is not None:
            result.busbw = max(result.busbw or 0.0, run.busbw_max_gbps)
        if run.transport.network:
            result.network = run.transport.network


def sweep(
    nodes: Sequence[str],
    run_pair: RunPair,
    concurrency: int,
    max_rounds: int = 16,
) -> SweepReport:
    """Localize the nodes that fail the acceptance test; ``concurrency`` jobs at a time."""
    results = {n: NodeResult(n) for n in nodes}
    good: list[str] = []
    suspects: list[str] = []

    def run_round(pairs: list[Pair], round_: int) -> list[tuple[Pair, Report]]:
        with cf.ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
            futures = [pool.submit(run_pair, pair, round_, i) for i, pair in enumerate(pairs)]
            return [(pair, f.result()) for pair, f in zip(pairs, futures, strict=True)]

    ordered = list(nodes)
    first = [(ordered[i], ordered[i + 1]) for i in range(0, len(ordered) - 1, 2)]
    leftover = ordered[-1:] if len(ordered) % 2 else []
    for (a, b), report in run_round(first, 1):
        _record(results[a], 1, b, report)
        _record(results[b], 1, a, report)
        if report.verdict == "PASS":
            results[a].verdict = results[b].verdict = "GOOD"
            good += [a, b]
        else:
            suspects += [a, b]
    suspects += leftover
    round_ = 1
    while suspects and good and round_ < max_rounds:
        round_ += 1
        batch = suspects[: len(good)]
        suspects = suspects[len(good) :]
        pairs = list(zip(batch, good, strict=False))
        for (suspect, partner), report in run_round(pairs, round_):
            _record(results[suspect], round_, partner, report)
            if report.verdict == "PASS":
                results[suspect].verdict = "GOOD"
                good.append(suspect)
            elif report.verdict == "FAIL":
                results[suspect].verdict = "BAD"
            # INCONCLUSIVE: stays UNKNOWN (the job could not be judged)
    return SweepReport(results, round_)


def format_table(report: SweepReport) -> str:
    lines = [f"NCCL sweep: {len(report.nodes)} nodes in {report.rounds} rounds"]
    lines.append(f"  {'node':<24} {'verdict':<8} {'busbw GB/s':>10}  transport  pairs")
    for name in sorted(report.nodes):
        r = report.nodes[name]
        bw = f"{r.busbw:g}" if r.busbw is not None else "-"
        pairs = "; ".join(f"r{rd} {p} {v}" for rd, p, v in r.pairs)
        lines.append(f"  {name:<24} {r.verdict:<8} {bw:>10}  {r.network or '?':<9}  {pairs}")
    if report.bad:
        lines.append(f"drain: {', '.join(report.bad)}")
    if report.unknown:
        lines.append(f"not localized: {', '.join(report.unknown)}")
    return "\n".join(lines) + "\n"


__all__ = ["NodeResult", "SweepReport", "format_table", "rounds_needed", "sweep"]
