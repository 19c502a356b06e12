"""Find the bad nodes and the bad paths, then the bad nodes' rails: rounds of disjoint
two-node NCCL jobs, planned by :mod:`~gpufabric.verify.sweep.rounds` and
:mod:`~gpufabric.verify.sweep.cost`, judged by :mod:`~gpufabric.verify.sweep.judge`.

Screening rounds pair every node with partners it has not met, under its own leaf switch
(with ``run_group``: group jobs under each leaf, split on failure, when the planner's estimate
of the wall time for the quota says they pay) and across each switch level the stack knows;
then the rounds adapt: a node not yet judged runs with a node already proven GOOD, a node that
failed with some partners and passed with others re-runs with the partners it failed with.
Each round's jobs are admitted by the quota's nodes (two per two-node job it admits), largest
first (a node is in one job at a time). After every round the whole record is judged
again (the judge's rules: path faults, witnesses, the C-core of passing pairs).

Then each BAD node runs one job per rail with a proven-good partner, its pods attached to
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
from gpufabric.support.counts import counted
from gpufabric.verify.interrupts import shielded
from gpufabric.verify.nccl.report import NcclReport
from gpufabric.verify.sweep.cost import Cost, Mode, admission_order, choose_mode
from gpufabric.verify.sweep.domains import (
    CLIQUE_LABEL,
    DomainFault,
    domain_words,
    inside_pairs,
    suspected,
)
from gpufabric.verify.sweep.faults import PathFault
from gpufabric.verify.sweep.job import Job, Pair, Topology
from gpufabric.verify.sweep.judge import Judgement, NodeVerdict, adaptive_pairs, judge
from gpufabric.verify.sweep.ledger import ledger_of
from gpufabric.verify.sweep.rounds import (
    CONFIRM,
    exhausted,
    scoped_pairs,
    screening_groups,
    split_jobs,
)

RunPair = Callable[[Pair, int, int], NcclReport]
"""Run one two-node acceptance job (pair, round, index) and return its report."""
RunGroup = Callable[[tuple[str, ...], int, int], NcclReport]
"""Run one group acceptance job (nodes in rank order, round, index) whose rings carry
traffic between every pair of its nodes (:func:`gpufabric.verify.sweep.rounds.ring_orders`)."""
RunRailPair = Callable[[Pair, str, int, int], NcclReport]
"""Run one two-node job on one rail ((node, good partner), rail, round, index)."""


@dataclass
class RailResult:
    """One rail of a bad node, run alone with a proven-good partner."""

    verdict: Verdict
    busbw: float | None
    network: str | None
    partner: str


@dataclass(kw_only=True)
class NodeResult:
    node: str
    verdict: NodeVerdict = NodeVerdict.UNKNOWN
    busbw: float | None = None
    """Best bus bandwidth of the node's pairs (GB/s)."""
    network: str | None = None
    pairs: list[tuple[int, str, str]] = field(default_factory=list)
    """(round, partner, pair verdict)."""
    rails: dict[str, RailResult] = field(default_factory=dict)
    """Per rail, for a bad node once :func:`localize_rails` ran."""
    note: str = ""
    """Why a node is BAD, FLAKY or UNKNOWN, in words (its record)."""

    @property
    def failing_rails(self) -> list[str]:
        return [r for r, res in self.rails.items() if res.verdict == "FAIL"]


NODE_VERDICT: dict[NodeVerdict, Verdict] = {
    NodeVerdict.GOOD: Verdict.PASS,
    NodeVerdict.BAD: Verdict.FAIL,
    NodeVerdict.FLAKY: Verdict.FAIL,
    NodeVerdict.UNKNOWN: Verdict.INCONCLUSIVE,
}
"""What a node's own word (GOOD, BAD, FLAKY, UNKNOWN) counts as in the sweep's verdict."""


@dataclass(kw_only=True)
class SweepReport:
    nodes: dict[str, NodeResult]
    rounds: int
    rail_rounds: int = 0
    rail_threshold_gbps: float | None = None
    stopped: str | None = None
    """Why the sweep ended early (interrupted, its time limit): the report holds what it
    proved until then."""
    paths: list[PathFault] = field(default_factory=list)
    """Uplinks whose every job across them failed while their nodes pass inside."""
    jobs: list[Job] = field(default_factory=list)
    levels: tuple[str, ...] = ()
    """The topology levels the rounds paired across (widest first; empty: none known)."""
    confirm: int = CONFIRM
    partners: int = 0
    """Distinct GOOD partners a node passed with before it was GOOD (C with pairs; with group
    jobs :func:`~gpufabric.verify.sweep.rounds.partners_needed`); 0 until a sweep ran."""
    domains: list[DomainFault] = field(default_factory=list)
    """NVL72 racks whose every job inside their NVLink domain failed while their trays pass
    across racks (:mod:`~gpufabric.verify.sweep.domains`)."""
    cliques: dict[str, str] = field(default_factory=dict)
    """Each tray's NVLink clique when the sweep's unit is a tray inside its domain (empty
    otherwise)."""

    @property
    def bad(self) -> list[str]:
        return sorted(n for n, r in self.nodes.items() if r.verdict == NodeVerdict.BAD)

    @property
    def flaky(self) -> list[str]:
        return sorted(n for n, r in self.nodes.items() if r.verdict == NodeVerdict.FLAKY)

    @property
    def unknown(self) -> list[str]:
        return sorted(n for n, r in self.nodes.items() if r.verdict == NodeVerdict.UNKNOWN)

    @property
    def verdict(self) -> Verdict:
        """FAIL when a node is bad or flaky or a path (or an NVLink domain) is faulted, else INCONCLUSIVE when a
        node is not localized, else PASS."""
        paths = [Verdict.FAIL] if self.paths or self.domains else []
        return worst([*paths, *(NODE_VERDICT[r.verdict] for r in self.nodes.values())])


def rail_rounds_needed(rails: int, bad: int, concurrency: int, good: int) -> int:
    """Rounds of one-rail jobs for ``bad`` nodes: each node runs one rail at a time."""
    at_once = min(concurrency, good)
    if bad == 0 or rails == 0:
        return 0
    if at_once <= 0:
        return 0  # no proven-good partner
    return rails * -(-bad // at_once)


def _busbw(report: NcclReport) -> tuple[float | None, str | None]:
    busbw: float | None = None
    network: str | None = None
    for run in report.runs:
        if run.busbw_max_gbps is not None:
            busbw = max(busbw or 0.0, run.busbw_max_gbps)
        if run.transport.network:
            network = run.transport.network
    return busbw, network


def _record(
    result: NodeResult, round_: int, partners: Sequence[str], report: NcclReport, said: str | None = None,
    measured: tuple[float | None, str | None] | None = None,
) -> None:  # fmt: skip
    """A job's ``report`` in a node's record: one entry per partner, its best bandwidth
    (``measured``: :func:`_busbw` of the report, when already read)."""
    result.pairs += [(round_, partner, said or report.verdict) for partner in partners]
    busbw, network = measured or _busbw(report)
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
    jobs: Sequence[Callable[[], NcclReport]],
    concurrency: int,
    stop: threading.Event | None,
    finished: dict[int, NcclReport] | None = None,
) -> list[NcclReport]:
    """Every job's report, in order. ``finished`` receives, by index, the reports of the
    jobs that ended, also when the round is cut short (what it proved until then)."""
    futures: list[cf.Future[NcclReport]] = []
    try:
        with cf.ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
            try:
                # A Ctrl-C inside submit() can land in Thread.start() before the pool records
                # the thread, which would then not be waited for: hold it until all are in.
                with shielded():
                    futures += [pool.submit(job) for job in jobs]
                return _results(futures)
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


def _results(futures: Sequence[cf.Future[NcclReport]]) -> list[NcclReport]:
    """The futures' results once all are done. A signal never lands inside the futures' own
    locks (a Ctrl-C raised inside ``Future.result()`` could leave its condition held, and
    the cancel that follows would then wait on it for ever): the waits run shielded, a
    quarter second at a time, and a held signal is raised between them."""
    while True:
        with shielded():
            _done, running = cf.wait(futures, timeout=0.25)
        if not running:
            break
    with shielded():
        return [f.result() for f in futures]


def _apply(report: SweepReport, names: Sequence[str], topo: Topology, expose: int) -> Judgement:
    """Judge the whole record again and write each node's verdict and words; the
    judgement (the next round is planned from it)."""
    verdict = judge(names, topo, report.levels, report.jobs, report.confirm, expose=expose)
    for name in names:
        result = report.nodes[name]
        result.verdict = verdict.verdicts[name]
        result.note = verdict.notes.get(name, "")
    report.paths = verdict.paths
    report.domains = verdict.domains
    return verdict


def sweep(
    nodes: Sequence[str],
    run_pair: RunPair,
    concurrency: int,
    max_rounds: int = 100,
    stop: threading.Event | None = None,
    into: SweepReport | None = None,
    topology: Topology | None = None,
    levels: Sequence[str] = (),
    confirm: int = CONFIRM,
    run_group: RunGroup | None = None,
    group: int = 2,
    cost: Cost | None = None,
    serial: bool = False,
) -> SweepReport:
    """Localize the nodes (and uplinks) that fail the acceptance test; ``concurrency`` jobs
    at a time. ``topology`` gives each node's switches at ``levels`` (widest first). With
    ``run_group`` and ``group`` > 2, the screening may start with group jobs of up to ``group``
    nodes under each leaf (failing groups split until their pairs are known): the planner
    picks pairs or the group size by its own estimate of the wall time for the quota
    (:func:`~gpufabric.verify.sweep.cost.choose_mode`, jobs costed by ``cost``). ``stop`` is set
    when the sweep is interrupted (the jobs' waits should watch it). The report is judged
    round by round and also when cut short (``into`` when given: what an interrupted sweep
    proved stays readable there); a node listed twice is swept once. It ends when a round
    judged no job (the jobs cannot run: more rounds would not judge any either), or when the
    next round would only re-run pairs that failed every time (:func:`~gpufabric.verify.sweep.rounds.exhausted`).
    ``serial``: each round's jobs run one at a time in the calling thread, in the order the
    quota admits them (for jobs that answer at once, as the forecast's simulated ones do:
    the same rounds and records, without a thread per job)."""
    ordered = list(dict.fromkeys(nodes))
    topo = {n: tuple((topology or {}).get(n, ())) for n in ordered}
    if any(len(t) != len(levels) for t in topo.values()):
        topo, levels = dict.fromkeys(ordered, ()), ()
    report = into if into is not None else SweepReport(nodes={}, rounds=0)
    report.levels, report.confirm = tuple(levels), confirm
    report.jobs = ledger_of(report.jobs)  # read round by round, kept up to date
    report.nodes.update({n: NodeResult(node=n) for n in ordered if n not in report.nodes})
    mode = choose_mode(topo, concurrency, confirm, group if run_group is not None else 2, cost)
    planner = _Planner(nodes=ordered, topo=topo, levels=tuple(levels), confirm=confirm, mode=mode)
    report.partners = max(confirm, mode.expose)
    verdict: Judgement | None = None
    for round_ in range(1, max_rounds + 1):
        parts = planner.next(round_, report.jobs, verdict)
        if not parts or exhausted(parts, report.jobs):
            break
        try:
            _run_jobs(report, parts, round_, (run_pair, run_group), concurrency, stop, serial)
        finally:
            verdict = _apply(report, ordered, topo, mode.expose)
        if all(job.verdict not in ("PASS", "FAIL") for job in report.jobs[-len(parts) :]):
            break  # no job of the round could be judged: more rounds would not be either
    return report


@dataclass(kw_only=True)
class _Planner:
    """Which jobs each round runs: the screening rounds of the chosen mode (group rounds, then
    pair rounds across the switch levels), then the splits of failing groups still
    unexplained (and re-runs of explained ones) with adaptive pairs for the nodes they leave
    free, in one round."""

    nodes: list[str]
    topo: Topology
    levels: tuple[str, ...]
    confirm: int
    mode: Mode

    @property
    def expose(self) -> int:
        return self.mode.expose

    def next(
        self, round_: int, jobs: Sequence[Job], judged: Judgement | None = None
    ) -> Sequence[tuple[str, ...]]:
        """Round ``round_``'s jobs; ``judged``: the judgement of ``jobs`` when the sweep
        already has it (the same :func:`~gpufabric.verify.sweep.judge.judge` call, made once)."""
        mode = self.mode
        if round_ <= mode.group_rounds:
            return screening_groups(self.nodes, self.topo, round_, mode.size)
        if round_ <= mode.rounds:
            scope = mode.pair_scopes[round_ - mode.group_rounds - 1]
            return scoped_pairs(self.nodes, self.topo, scope, jobs, str(round_))
        verdict = judged or judge(
            self.nodes, self.topo, self.levels, jobs, self.confirm, expose=self.expose
        )
        parts = split_jobs(jobs, verdict.faulty, verdict.suspects)
        if self.levels and self.levels[-1] == CLIQUE_LABEL:
            parts = self._in_racks(parts, jobs, verdict)
        busy = {n for part in parts for n in part}
        return parts + list(
            adaptive_pairs(
                self.nodes, self.topo, self.levels, jobs, verdict, round_, self.confirm,
                self.expose, busy=busy,
            )
        )  # fmt: skip

    def _in_racks(
        self, parts: list[tuple[str, ...]], jobs: Sequence[Job], verdict: Judgement
    ) -> list[tuple[str, ...]]:
        """NVL72 racks: no job inside a faulted NVLink domain (it proves nothing); in a rack
        whose jobs inside all failed so far, its trays not yet in a failing pair inside it
        meet each other first (so that a rack fault is told from a few bad trays)."""
        racks = {d.key for d in verdict.domains}
        parts = [p for p in parts if not (racks and _inside(self.topo, p, racks))]
        ledger = ledger_of(jobs)
        pending = suspected(self.nodes, self.topo, self.levels, ledger.pairs(), ledger, racks)
        taken: set[str] = set()
        first: list[tuple[str, ...]] = []
        for key, waiting in pending.items():
            trays = [n for n in self.nodes if self.topo[n] == key]
            first += inside_pairs(waiting, trays, taken)
        return first + [p for p in parts if not taken & set(p)]


def _inside(topo: Topology, part: Sequence[str], racks: set[tuple[str, ...]]) -> bool:
    """Whether every node of ``part`` is a tray of one of ``racks``."""
    return topo[part[0]] in racks and all(topo[n] == topo[part[0]] for n in part)


def _run_jobs(
    report: SweepReport,
    parts: Sequence[tuple[str, ...]],
    round_: int,
    runners: tuple[RunPair, RunGroup | None],
    concurrency: int,
    stop: threading.Event | None,
    serial: bool = False,
) -> None:
    """Run one round (pairs through ``run_pair``, groups through ``run_group``); record
    every job that ended, in order, also when cut short. ``serial``: one job at a time in
    this thread, in admission order (jobs that answer at once: a simulated sweep)."""
    run_pair, run_group = runners
    order = admission_order([len(p) for p in parts])
    inner = [
        functools.partial(run_pair, (parts[i][0], parts[i][1]), round_, i)
        if len(parts[i]) == 2 or run_group is None
        else functools.partial(run_group, parts[i], round_, i)
        for i in order
    ]
    finished: dict[int, NcclReport] = {}
    try:
        if serial:
            for ticket, job in enumerate(inner):
                finished[ticket] = job()
        else:
            halt = stop if stop is not None else threading.Event()
            quota = _Quota(2 * max(1, concurrency), halt)
            jobs = [
                functools.partial(quota.run, ticket, len(parts[i]), inner[ticket])
                for ticket, i in enumerate(order)
            ]
            _run_round(jobs, max(1, concurrency), halt, finished)
    finally:
        ticket_of = {i: t for t, i in enumerate(order)}
        for i in sorted(order[t] for t in finished):
            part, outcome = parts[i], finished[ticket_of[i]]
            members = part if len(part) > 2 else ()
            report.jobs.append(Job(round_, (part[0], part[1]), outcome.verdict, members))
            said = str(outcome.verdict)
            if members and said != "PASS":
                said = f"{said} in a group of {len(members)}"
            measured = _busbw(outcome)
            for node in part:
                partners = [partner for partner in part if partner != node]
                _record(report.nodes[node], round_, partners, outcome, said, measured)
        report.rounds = round_


class _Quota:
    """The nodes the quota runs at once (two per two-node job it admits), taken by a round's
    jobs in admission order: a job starts when the nodes it needs are free and every job
    before it has started (a group job waits for its nodes rather than being overtaken by
    pairs forever); an interrupted sweep's waiting jobs give up."""

    def __init__(self, nodes: int, stop: threading.Event) -> None:
        self._capacity = self._free = nodes
        self._turn = 0
        self._cond = threading.Condition()
        self._stop = stop

    def run(self, ticket: int, size: int, job: Callable[[], NcclReport]) -> NcclReport:
        need = min(size, self._capacity)
        with self._cond:
            while self._turn != ticket or self._free < need:
                if self._stop.is_set():
                    raise Stopped("the sweep was interrupted")
                self._cond.wait(0.2)
            self._turn += 1
            self._free -= need
            self._cond.notify_all()
        try:
            return job()
        finally:
            with self._cond:
                self._free += need
                self._cond.notify_all()


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
    good = sorted(n for n, r in report.nodes.items() if r.verdict == NodeVerdict.GOOD)
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
        passed = sorted({p for _, p, v in result.pairs if v == "PASS"})
        failed = sorted({p for _, p, v in result.pairs if v.startswith("FAIL")})
        if passed:  # a node bad with every partner never passes a job
            shown = ", ".join(failed[:4]) + (f" and {len(failed) - 4} more" if len(failed) > 4 else "")  # fmt: skip
            return (
                f"every rail passes alone and it passed with {len(passed)} partners, but failed "
                f"with {shown}: it fails only with some partners (the paths to them: their "
                "ports and the switches between, or all rails together with them), not on "
                "one link of its own"
            )
        return (
            "every rail passes alone: it fails only with all rails together (PCIe, NUMA, "
            "GPU-NIC placement), not on a link"
        )
    return "some rails could not be judged alone"


def format_table(report: SweepReport) -> str:
    rounds = counted(report.rounds, "round")
    if report.rail_rounds:
        rounds += f" and {counted(report.rail_rounds, 'round')} of one-rail jobs"
    nodes, jobs = counted(len(report.nodes), "node"), counted(len(report.jobs), "job")
    lines = [f"NCCL sweep: {nodes} in {rounds}, {jobs}"]
    partners = report.partners or report.confirm
    lines[0] += f"; GOOD after passing with {partners} distinct GOOD partners" + (
        f"; paired within and across {', '.join(report.levels)}" if report.levels else ""
    )
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
    lines += _closing_lines(report)
    return "\n".join(lines) + "\n"


def path_words(fault: PathFault) -> str:
    """A faulted uplink in words: which switch, what failed, and that no node is drained."""
    return (
        f"uplink of {fault.level}={fault.switch}: all {fault.jobs} jobs leaving it failed "
        f"while its nodes ({', '.join(fault.nodes)}) pass inside it; check that switch's "
        "uplinks (no node drained for it)"
    )


def _closing_lines(report: SweepReport) -> list[str]:
    lines = [f"path fault: {path_words(f)}" for f in report.paths]
    lines += [f"rack fault: {domain_words(d)}" for d in report.domains]
    for name in [*report.bad, *report.flaky, *report.unknown]:
        if report.nodes[name].note:
            lines.append(f"  {name} {report.nodes[name].verdict}: {report.nodes[name].note}")
    if report.bad:
        lines.append(f"drain: {', '.join(report.bad)}")
    if report.flaky:
        lines.append(
            f"flaky (failed and passed; not drained on this record, re-run them): "
            f"{', '.join(report.flaky)}"
        )
    if report.unknown:
        lines.append(f"not localized: {', '.join(report.unknown)}")
    return lines


__all__ = [
    "NODE_VERDICT",
    "NodeResult",
    "RailResult",
    "RunGroup",
    "Stopped",
    "SweepReport",
    "diagnosis",
    "domain_words",
    "format_table",
    "localize_rails",
    "path_words",
    "rail_rounds_needed",
    "sweep",
    "waiting",
]
