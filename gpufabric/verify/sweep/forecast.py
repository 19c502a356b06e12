"""What a sweep will take, said before it starts, failures included: the planner's own sweep
(:func:`gpufabric.verify.sweep.run.sweep`, then :func:`~gpufabric.verify.sweep.run.localize_rails`)
run against simulated fleets, never a second formula of its rounds that could drift from it.

No cluster, no clock: each simulated job answers at once, FAIL when it holds a bad node of the
fleet (a node every job with it fails: a dead NIC, a slow GPU), else PASS; the rounds it ran
are then costed as the planner costs them (:func:`~gpufabric.verify.sweep.cost.round_seconds`
with the quota's nodes, :class:`~gpufabric.verify.sweep.cost.Cost`). Three fleets of the sweep's own nodes and topology:

- every node healthy: the screening rounds when every job passes;
- one bad node: what a bad node adds (the splits of its failing group down to the node, the
  re-runs with proven partners, its rails alone when the stack has several);
- 1% bad nodes (at least one): the sweep in all with a typical share of failures.

The bad nodes are the first by a SHA-256 of their names, so the same nodes and topology give
the same words. Where the bad node sits changes what it adds (a pair sweep re-runs every node
whose C-core it breaks; a group sweep splits one group), so it is one deterministic sample:
``benchmarks/sweep_sim.py`` prints it beside what sweeps of seeded fleets ran.
"""

from __future__ import annotations

import functools
import hashlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from gpufabric.exitcodes import Verdict
from gpufabric.support.counts import counted
from gpufabric.verify.nccl.report import NcclReport
from gpufabric.verify.sweep import run as sweep
from gpufabric.verify.sweep.cost import Cost, Mode, choose_mode, estimate, round_seconds
from gpufabric.verify.sweep.job import Topology
from gpufabric.verify.sweep.rounds import confidence_words

SHARE = 0.01
"""The share of bad nodes the estimate's total assumes (1%, at least one node)."""
SAID_FROM = 2048
"""Fleets from this many nodes are told the estimate is being made before it starts: it
takes seconds there (CPU seconds, issue 25's fleet: about 1.5 at 2,048 nodes, 7 at 10,000;
more wall time on a loaded machine), and nobody should wait silently."""


def fleets(nodes: int) -> int:
    """How many fleets :func:`forecast` simulates for ``nodes`` nodes (1% bad is one bad
    node below 150 nodes: that fleet is the one-bad-node fleet)."""
    return 2 if max(1, round(nodes * SHARE)) == 1 else 3


def hours(seconds: float) -> str:
    """A duration as the estimate says it: minutes below an hour, else hours."""
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def bad_nodes(names: Sequence[str], count: int) -> frozenset[str]:
    """The ``count`` nodes a simulated fleet makes bad: the first by a SHA-256 of the name."""
    ranked = sorted(names, key=lambda n: hashlib.sha256(f"forecast\0{n}".encode()).digest())
    return frozenset(ranked[:count])


@dataclass(frozen=True)
class Outcome:
    """What one simulated sweep ran: the sizes of each round's jobs, its rounds of one-rail
    jobs (two nodes each) last."""

    rounds: tuple[tuple[int, ...], ...]
    drained: int
    """The nodes it found BAD."""
    rail_jobs: int = 0
    """Of the jobs, the one-rail jobs of the nodes it found BAD."""

    @property
    def jobs(self) -> int:
        return sum(len(r) for r in self.rounds)

    @property
    def group_jobs(self) -> int:
        return sum(1 for r in self.rounds for size in r if size > 2)

    def seconds(self, at_once: int, cost: Cost) -> float:
        """Wall time with ``at_once`` two-node jobs' worth of quota, jobs costed by ``cost``
        and admitted as the sweep's runner admits them."""
        seconds = functools.cache(cost.seconds)  # one size's cost, once
        return sum(round_seconds(r, 2 * at_once, seconds) for r in self.rounds)


def _report(nodes: Sequence[str], bad: frozenset[str]) -> NcclReport:
    verdict = Verdict.FAIL if bad.intersection(nodes) else Verdict.PASS
    return NcclReport(
        verdict=verdict, reasons=(), threshold_gbps=None, threshold_source="none", runs=()
    )


def simulate(
    names: Sequence[str], topo: Topology, levels: Sequence[str], at_once: int, confirm: int,
    group: int, bad: frozenset[str], rails: int = 0, cost: Cost | None = None,
) -> Outcome:  # fmt: skip
    """The rounds the sweep runs (as ``verify nccl --sweep`` calls it: group jobs when
    ``group`` > 2, each bad node's ``rails`` alone when there are several) on a fleet whose
    ``bad`` nodes fail every job they are in."""
    report = sweep.SweepReport(nodes={}, rounds=0)

    def run(nodes: Sequence[str], *_: object) -> NcclReport:
        return _report(nodes, bad)

    sweep.sweep(
        names, run, at_once, into=report, topology=topo, levels=levels, confirm=confirm,
        run_group=run if group > 2 else None, group=group, cost=cost, serial=True,
    )  # fmt: skip
    rounds: dict[int, list[int]] = {}
    for job in report.jobs:
        rounds.setdefault(job.round, []).append(len(job.nodes))
    if report.bad and rails > 1:
        lock = threading.Lock()

        def run_rail(pair: tuple[str, str], _rail: str, round_: int, _index: int) -> NcclReport:
            with lock:  # the rail jobs of a round run on the sweep's threads
                rounds.setdefault(round_, []).append(2)
            return _report(pair, bad)

        names_ = [f"rail{i}" for i in range(rails)]
        sweep.localize_rails(report, names_, run_rail, at_once)
    rail_jobs = sum(len(report.nodes[n].rails) for n in report.bad)
    return Outcome(tuple(tuple(rounds[r]) for r in sorted(rounds)), len(report.bad), rail_jobs)


@dataclass(frozen=True, kw_only=True)
class Forecast:
    """The three simulated sweeps of one fleet (see the module) and what they cost."""

    nodes: int
    at_once: int
    cost: Cost
    mode: Mode
    rails: int
    passing: Outcome
    one: Outcome
    share: Outcome
    share_bad: int
    """The bad nodes of the ``share`` fleet (1% of the nodes, at least one)."""

    def seconds(self, outcome: Outcome) -> float:
        return outcome.seconds(self.at_once, self.cost)

    @property
    def failing_seconds(self) -> float:
        """The wall time the estimate gives a sweep with failures (the longer of one bad node
        and 1% bad nodes)."""
        return max(self.seconds(self.one), self.seconds(self.share))

    def failure_words(self) -> str:
        """What failures add, in words: one bad node, and the sweep with 1% bad nodes."""
        jobs = self.one.jobs - self.passing.jobs
        added = self.seconds(self.one) - self.seconds(self.passing)
        what = (
            "the splits of its failing group, re-runs with proven partners"
            if self.mode.group_rounds
            else "rounds with proven partners"
        )
        if self.rails > 1:
            what += f", its {self.rails} rails alone"
        head = f"one bad node adds about {counted(jobs, 'job')} ({hours(added)}: {what})"
        if not self.one.drained:
            head += " and is not localized (too few nodes to witness it: it stays UNKNOWN)"
        if self.share_bad <= 1:
            return f"{head}, about {hours(self.seconds(self.one))} in all"
        return (
            f"{head}; with 1% bad nodes ({self.share_bad}) about "
            f"{hours(self.seconds(self.share))} in all ({counted(self.share.jobs, 'job')})"
        )

    def warning(self, limit_s: float | None) -> str | None:
        """A line for a ``--sweep-timeout`` shorter than the sweep is expected to take (not a
        refusal: which nodes fail is not known before it runs); None when it fits."""
        if limit_s is None or limit_s >= self.failing_seconds:
            return None
        passing = self.seconds(self.passing)
        if limit_s < passing:
            return (
                f"warning: --sweep-timeout {limit_s:g} s is shorter than the sweep is expected "
                f"to take even when every job passes (about {hours(passing)}): it will stop "
                "before its screening rounds end and report the nodes judged until then"
            )
        return (
            f"warning: --sweep-timeout {limit_s:g} s is shorter than the sweep is expected to "
            f"take with failures (about {hours(self.failing_seconds)}; "
            f"{hours(passing)} when every job passes): if nodes fail, it may stop before "
            "judging them and report the nodes judged until then"
        )


def forecast(
    names: Sequence[str], topo: Topology, levels: Sequence[str], at_once: int, confirm: int,
    group: int, rails: int = 0, cost: Cost | None = None,
) -> Forecast:  # fmt: skip
    """The sweep of ``names`` simulated healthy, with one bad node and with 1% bad nodes, in
    the mode the planner picks for ``at_once`` two-node jobs' worth of quota and groups of at
    most ``group`` nodes (2: pairs only)."""
    cost = cost or Cost()
    mode = choose_mode(topo, at_once, confirm, group, cost)
    share_bad = max(1, round(len(names) * SHARE))

    def run(bad: frozenset[str]) -> Outcome:
        return simulate(names, topo, levels, at_once, confirm, group, bad, rails, cost)

    one = run(bad_nodes(names, 1))
    share = one if share_bad == 1 else run(bad_nodes(names, share_bad))
    return Forecast(
        nodes=len(names),
        at_once=at_once,
        cost=cost,
        mode=mode,
        rails=rails,
        passing=run(frozenset()),
        one=one,
        share=share,
        share_bad=share_bad,
    )


def words(
    fc: Forecast, names: Sequence[str], topo: Topology, timeout_s: float | None, confirm: int,
    group: int,
) -> str:  # fmt: skip
    """What the sweep will take, in words: the screening of the mode it runs in (group jobs
    when a group holds more than two nodes, else two-node jobs), then what failures add."""
    if fc.mode.group_rounds:
        return f"{_group_words(fc, len(names), timeout_s)}; {fc.failure_words()}"
    est = estimate(topo, fc.at_once, timeout_s, confirm, group, fc.cost)
    return est.words(failures=fc.failure_words())


def _group_words(fc: Forecast, nodes: int, timeout_s: float | None) -> str:
    """Rounds, jobs and wall time of a sweep with group jobs when every job passes (the
    simulated healthy fleet's rounds)."""
    passing, cost = fc.passing, fc.cost
    bound = passing.seconds(fc.at_once, Cost(timeout_s, 0.0)) if timeout_s else 0.0
    limit = f", at most {hours(bound)}" if timeout_s else ""
    largest = max((s for r in passing.rounds for s in r), default=2)
    groups = passing.group_jobs
    return (
        f"sweep over {nodes} GPU nodes with group jobs of up to {largest} nodes, each running "
        f"the tests once per rank order: {len(passing.rounds)} rounds, {groups} group jobs and "
        f"{passing.jobs - groups} two-node jobs when all pass, {2 * fc.at_once} nodes at a "
        f"time as the quota admits (about {hours(fc.seconds(passing))} at {cost.job_s:g} s a "
        f"job plus {2 * cost.run_s:g} s per rank order past the first{limit}); "
        f"{confidence_words(nodes, fc.mode.expose)}"
    )
