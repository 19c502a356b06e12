"""The sweep's planner and judge: which pairs run in each round, and what the results say.

Pure: no cluster, no clock. The same nodes, topology and results give the same rounds and the
same verdicts (pairings are ordered by a SHA-256 of the round and the node name, never by
Python's per-process hash).

Rounds. ``confirm`` (C) screening rounds (at least one more than the switch levels) pair every
node with partners it has not met: the first under its own leaf switch, then one round across
each switch level (across leaves under one spine, then across spines), so every uplink carries
jobs, then again under its leaf. After that, rounds adapt to what
is still open: every node not yet judged runs with a node already proven GOOD that it has not
met (under its own leaf first, where the path is the node's own), and a node that failed with
some partners and passed with others re-runs with the partners it failed with.

Judging (recomputed from the whole record after every job):

- Path faults first: a switch (a leaf, then a spine) whose every job leaving it failed (at least
  two, with at least two of its nodes), while those nodes pass inside it, is a path fault:
  its uplink is named, the jobs across it prove nothing about their nodes, no node is drained.
- A node is FAULTY when it failed with at least two *witnesses*: partners whose only failures
  are with it (or with faulty nodes) and that passed with C others.
- A node is GOOD when every failure it had is with a faulty node, across a faulted path, and
  it passed with at least C distinct partners that are GOOD themselves (the C-core of the
  passing pairs). One passing job never proves a node.
- A faulty node that never passed is BAD. One that passed with some partners and failed every
  time (``repeat`` runs) with at least two others is BAD, slow with some partners. One whose
  result changed with the same partner, or whose failing pairs were not yet re-run, is FLAKY:
  reported with its record, never a reference partner, never drained. Anything else is UNKNOWN.

Confidence: a node that fails a fraction f of its jobs (or with a fraction f of its partners)
and was never caught failing is reported GOOD with probability at most (1 - f) ** C.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

CONFIRM = 3
"""Distinct proven partners a node must pass with to be GOOD (the default C)."""
REPEAT = 3
"""Runs with one partner, all failing, that make a failure partner-dependent, not flaky."""

Pair = tuple[str, str]
Topology = Mapping[str, tuple[str, ...]]
"""Node -> the switch it sits under at each level, widest first (empty: not known)."""


@dataclass(frozen=True)
class Job:
    round: int
    pair: Pair
    verdict: str
    """PASS, FAIL or INCONCLUSIVE (as nccl-report judges the pair's run)."""


@dataclass(frozen=True)
class PathFault:
    """An uplink whose every job across it failed while its nodes pass inside it."""

    level: str
    """The topology label (e.g. topology.gpufabric.io/leaf)."""
    switch: str
    failed: int
    jobs: int
    nodes: tuple[str, ...]
    """The nodes under it whose jobs across it failed."""
    key: tuple[str, ...] = ()
    """The switch with the ones above it (widest first): names repeat under other spines."""


@dataclass
class Judgement:
    verdicts: dict[str, str]
    notes: dict[str, str]
    paths: list[PathFault]
    good: set[str]
    faulty: set[str]
    retests: dict[str, list[str]] = field(default_factory=dict)
    """Faulty node -> the proven partners whose failing pair should run again."""
    excused: set[int] = field(default_factory=set)
    """Indices of the jobs a path fault explains."""
    corroborate: list[str] = field(default_factory=list)
    """GOOD nodes a faulty node that also passed failed with: they meet more proven partners."""


def _rank(salt: str, name: str) -> bytes:
    return hashlib.sha256(f"{salt}\0{name}".encode()).digest()


def _met(jobs: Iterable[Job]) -> dict[str, set[str]]:
    met: dict[str, set[str]] = defaultdict(set)
    for job in jobs:
        a, b = job.pair
        met[a].add(b)
        met[b].add(a)
    return met


def pair_up(
    nodes: Sequence[str],
    differ: int | None,
    topo: Topology,
    met: Mapping[str, set[str]],
    salt: str,
    fresh_only: bool = False,
) -> tuple[list[Pair], list[str]]:
    """Disjoint pairs of ``nodes`` (a node with one it has not met where it can; only such
    pairs with ``fresh_only``), each pair differing at topology level ``differ`` when given;
    and the nodes left over."""
    pool = sorted(nodes, key=lambda n: _rank(salt, n))
    pairs: list[Pair] = []
    left: list[str] = []
    window = 96
    while pool:
        a = pool.pop(0)
        seen = met.get(a, set())
        fits = [
            i
            for i, b in enumerate(pool[:window])
            if differ is None or topo[a][differ] != topo[b][differ]
        ]
        fresh = [i for i in fits if pool[i] not in seen]
        choices = fresh or ([] if fresh_only else fits)
        if choices:
            pairs.append((a, pool.pop(choices[0])))
        else:
            left.append(a)
    return pairs, left


def screening_rounds(topo: Topology, confirm: int = CONFIRM) -> int:
    """Rounds every node takes part in before the rounds adapt: C, of which one pairs across
    each switch level (at least one round within a leaf besides)."""
    depth = max((len(t) for t in topo.values()), default=0)
    return max(confirm, depth + 1)


def _round_scope(round_: int, depth: int) -> int | None:
    """The topology level screening round ``round_`` pairs across (None: within a leaf):
    round 1 within, rounds 2 to depth + 1 across the leaf level, then each wider one."""
    if 2 <= round_ <= depth + 1:
        return depth - (round_ - 1)
    return None


def screening_pairs(
    nodes: Sequence[str], topo: Topology, round_: int, done: Sequence[Job], confirm: int = CONFIRM
) -> list[Pair]:
    """The pairs of screening round ``round_`` (1-based), each node with a partner it has
    not met where it can; nodes left over (an odd leaf, a level with one switch) pair with
    each other."""
    met = _met(done)
    depth = max((len(t) for t in topo.values()), default=0)
    differ = _round_scope(round_, depth)
    prefix = depth if differ is None else differ
    groups: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for node in nodes:
        groups[topo[node][:prefix]].append(node)
    pairs: list[Pair] = []
    left: list[str] = []
    for key in sorted(groups):
        salt = f"{round_}:{'/'.join(key)}"
        got, rest = pair_up(groups[key], differ, topo, met, salt, fresh_only=True)
        pairs += got
        left += rest
    pairs += pair_up(left, None, topo, met, f"{round_}:left")[0]
    return pairs


def topology_of(nodes: Sequence[str], labels: Mapping[str, Mapping[str, str]], levels: Sequence[str]) -> dict[str, tuple[str, ...]]:  # fmt: skip
    """Each node's switches at ``levels`` (widest first); empty for every node when some node
    lacks a level (the sweep then pairs without topology and says so)."""
    topo: dict[str, tuple[str, ...]] = {}
    for node in nodes:
        values = tuple(labels.get(node, {}).get(level, "") for level in levels)
        if not levels or "" in values:
            return dict.fromkeys(nodes, ())
        topo[node] = values
    return topo


def _switch(topo: Topology, node: str, level: int) -> tuple[str, ...]:
    return topo[node][: level + 1]


def _crosses(topo: Topology, pair: Pair, level: int) -> bool:
    a, b = pair
    return len(topo[a]) > level and _switch(topo, a, level) != _switch(topo, b, level)


def _first_difference(topo: Topology, pair: Pair) -> int:
    """The widest level at which the pair's switches differ (their depth when none)."""
    a, b = pair
    for level, (x, y) in enumerate(zip(topo[a], topo[b], strict=False)):
        if x != y:
            return level
    return len(topo[a])


def _faulted_switch(
    switch: tuple[str, ...], out: list[int], jobs: Sequence[Job], passed: set[str], inside_pass: set[str], topo: Topology
) -> tuple[str, ...] | None:  # fmt: skip
    """The nodes under ``switch`` whose jobs leaving it failed, when that is a path fault:
    every job leaving it failed, at least two of them with a partner that passed a job
    elsewhere, and at least two of those nodes pass inside the switch. None otherwise."""
    if any(jobs[i].verdict == "PASS" for i in out):
        return None
    level = len(switch) - 1
    local = {n for i in out for n in jobs[i].pair if _switch(topo, n, level) == switch}
    evidence = [
        i
        for i in out
        if all(n in passed for n in jobs[i].pair if _switch(topo, n, level) != switch)
    ]
    if len(evidence) < 2 or len(local & inside_pass) < 2:
        return None
    return tuple(sorted(local))


def _level_faults(
    jobs: Sequence[Job], topo: Topology, levels: Sequence[str], level: int, excused: set[int]
) -> list[PathFault]:
    """The faulted switches at one level; their jobs join ``excused``. Only failing jobs
    are set aside, so what passed (and where) is computed once."""
    judged = [i for i, j in enumerate(jobs) if i not in excused and j.verdict in ("PASS", "FAIL")]
    diff = {i: _first_difference(topo, jobs[i].pair) for i in judged}
    passed = {n for i in judged if jobs[i].verdict == "PASS" for n in jobs[i].pair}
    inside = {
        n for i in judged if jobs[i].verdict == "PASS" and diff[i] > level for n in jobs[i].pair
    }
    exits: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for i in judged:
        if diff[i] <= level:
            for node in jobs[i].pair:
                exits[_switch(topo, node, level)].append(i)
    faults: list[PathFault] = []
    for switch, _ in sorted(exits.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        out = [i for i in exits[switch] if i not in excused]
        nodes = _faulted_switch(switch, out, jobs, passed, inside, topo)
        if nodes is not None:
            faults.append(PathFault(levels[level], switch[-1], len(out), len(out), nodes, switch))
            excused |= set(out)
    return faults


def path_faults(
    jobs: Sequence[Job], topo: Topology, levels: Sequence[str]
) -> tuple[list[PathFault], set[int]]:
    """The switches whose uplink explains their failing jobs, narrowest level first (a
    switch's jobs are set aside before the next is looked at), and the indices of the jobs
    they explain."""
    faults: list[PathFault] = []
    excused: set[int] = set()
    for level in reversed(range(len(levels))):
        faults += _level_faults(jobs, topo, levels, level, excused)
    return faults, excused


@dataclass
class _Record:
    """Judged jobs on clean paths, per node: partner -> count."""

    fails: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    passes: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))

    @classmethod
    def of(cls, jobs: Sequence[Job], excused: set[int]) -> _Record:
        record = cls()
        for i, job in enumerate(jobs):
            if i in excused or job.verdict not in ("PASS", "FAIL"):
                continue
            side = record.passes if job.verdict == "PASS" else record.fails
            a, b = job.pair
            side[a][b] += 1
            side[b][a] += 1
        return record


def _faulty(nodes: Sequence[str], rec: _Record, confirm: int) -> set[str]:
    """Nodes that failed with two witnesses: partners whose every failure is with that node
    (or with one already found faulty) and that passed with ``confirm`` others. One at a
    time, the node failing with the most partners first: two faulty nodes that both failed
    with a healthy one are found before they could make it look faulty."""
    faulty: set[str] = set()
    failing = sorted((x for x in nodes if rec.fails[x]), key=lambda x: (-len(rec.fails[x]), x))
    while True:
        found = next((x for x in failing if x not in faulty and _witnessed(x, rec, faulty, confirm)), None)  # fmt: skip
        if found is None:
            return faulty
        faulty.add(found)


def _witnessed(x: str, rec: _Record, faulty: set[str], confirm: int) -> bool:
    witnesses = [
        y
        for y in rec.fails[x]
        if y not in faulty
        and all(z == x or z in faulty for z in rec.fails[y])
        and len(set(rec.passes[y]) - faulty - {x}) >= confirm
    ]
    return len(witnesses) >= 2


def _good(nodes: Sequence[str], rec: _Record, faulty: set[str], confirm: int) -> set[str]:
    """The ``confirm``-core of the passing pairs among nodes whose failures are all with
    faulty nodes: each passed with ``confirm`` distinct partners that are GOOD themselves."""
    good = {x for x in nodes if x not in faulty and all(y in faulty for y in rec.fails[x])}
    changed = True
    while changed:
        drop = {x for x in good if sum(1 for y in rec.passes[x] if y in good) < confirm}
        good -= drop
        changed = bool(drop)
    return good


def _uncorroborated(partners: Iterable[str], rec: _Record, good: set[str], confirm: int) -> list[str]:  # fmt: skip
    """The partners a faulty node failed with that have not yet passed with C + 2 distinct
    GOOD nodes: a node slow with some partners fails with them too, so they run more before
    their failures with it are blamed on it alone."""
    return sorted(p for p in partners if sum(1 for y in rec.passes[p] if y in good) < confirm + 2)


def _faulty_verdict(
    x: str, rec: _Record, good: set[str], repeat: int, confirm: int
) -> tuple[str, str, list[str]]:
    """BAD, or FLAKY, with the words and the failing partners to re-run."""
    fails, passes = rec.fails[x], rec.passes[x]
    failed = ", ".join(sorted(fails))
    if not passes:
        return "BAD", f"fails with every partner ({failed})", []
    total = sum(fails.values()) + sum(passes.values())
    record = f"failed {sum(fails.values())} of {total} jobs"
    changed = sorted(p for p in fails if passes[p])
    if changed:
        return "FLAKY", f"{record}; both passed and failed with {', '.join(changed)}", []
    steady = sorted(p for p in fails if p in good and fails[p] >= repeat)
    if len(steady) >= 2 and not _uncorroborated(steady, rec, good, confirm):
        return (
            "BAD",
            f"slow with some partners: failed every time with {', '.join(steady)} "
            f"({repeat} runs each), passed with {', '.join(sorted(passes))}",
            [],
        )
    rerun = sorted(p for p in fails if p in good and fails[p] < repeat)
    return "FLAKY", f"{record}: failed with {failed}, passed with others", rerun[:2]


def judge(
    nodes: Sequence[str],
    topo: Topology,
    levels: Sequence[str],
    jobs: Sequence[Job],
    confirm: int = CONFIRM,
    repeat: int = REPEAT,
) -> Judgement:
    """Every node's verdict (GOOD, BAD, FLAKY, UNKNOWN) and the path faults, from the jobs."""
    paths, excused = path_faults(jobs, topo, levels) if levels else ([], set())
    rec = _Record.of(jobs, excused)
    faulty = _faulty(nodes, rec, confirm)
    good = _good(nodes, rec, faulty, confirm)
    verdicts: dict[str, str] = {}
    notes: dict[str, str] = {}
    retests: dict[str, list[str]] = {}
    for x in nodes:
        if x in good:
            verdicts[x] = "GOOD"
        elif x in faulty:
            verdicts[x], notes[x], rerun = _faulty_verdict(x, rec, good, repeat, confirm)
            if rerun:
                retests[x] = rerun
        else:
            verdicts[x] = "UNKNOWN"
            if rec.fails[x]:
                notes[x] = f"failed with {', '.join(sorted(rec.fails[x]))}, not yet explained"
    mixed = [x for x in faulty if rec.passes[x]]
    failed_with = {p for x in mixed for p in rec.fails[x] if p in good}
    corroborate = _uncorroborated(failed_with, rec, good, confirm)
    return Judgement(verdicts, notes, paths, good, faulty, retests, excused, corroborate)


def _wants_partner(
    x: str, rec: _Record, good: set[str], met: Mapping[str, set[str]], confirm: int
) -> bool:
    """An open node runs again while it has met fewer than 4C partners and either passed
    with fewer than C + 2 proven ones or has a failure no verdict explains yet (a flaky
    partner shows itself by failing again)."""
    if len(met.get(x, ())) >= 4 * confirm:
        return False
    proven = sum(1 for y in rec.passes[x] if y in good)
    return proven < confirm + 2 or any(y not in good for y in rec.fails[x])


def adaptive_pairs(
    nodes: Sequence[str],
    topo: Topology,
    levels: Sequence[str],
    jobs: Sequence[Job],
    verdict: Judgement,
    round_: int,
    confirm: int = CONFIRM,
) -> list[Pair]:
    """The next round after screening: failing pairs of a FLAKY node re-run, and every
    UNKNOWN node with a proven partner it has not met, under its own leaf where there is one
    (a job across a faulted path proves nothing). Empty when nothing more can be learnt."""
    rec = _Record.of(jobs, verdict.excused)
    met = _met(jobs)
    faulted = {f.key for f in verdict.paths}
    busy: set[str] = set()
    pairs: list[Pair] = []
    for x in sorted(verdict.retests):
        partner = next((p for p in verdict.retests[x] if p not in busy), None)
        if partner is not None and x not in busy:
            pairs.append((x, partner))
            busy |= {x, partner}
    refs = sorted(verdict.good, key=lambda n: _rank(f"ref{round_}", n))
    by_leaf: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for r in refs:
        by_leaf[topo[r]].append(r)
    open_ = [x for x in nodes if verdict.verdicts[x] == "UNKNOWN"]
    waiting: list[str] = []
    ranked = sorted(open_, key=lambda n: _rank(f"open{round_}", n))
    queue = list(dict.fromkeys(ranked + verdict.corroborate))
    for x in queue:
        if x in busy or not _wants_partner(x, rec, verdict.good, met, confirm):
            continue
        cut_off = any(topo[x][: i + 1] in faulted for i in range(len(topo[x])))
        candidates = by_leaf[topo[x]] + ([] if cut_off else refs)
        partner = next(
            (
                r
                for r in candidates
                if r != x
                and r not in busy
                and r not in met[x]
                and not _blocked(x, r, topo, levels, faulted)
            ),
            None,
        )
        if partner is None:
            waiting.append(x)
        else:
            pairs.append((x, partner))
            busy |= {x, partner}
    return pairs + _open_pairs(waiting, topo, levels, met, faulted, round_)


def _open_pairs(
    waiting: Sequence[str],
    topo: Topology,
    levels: Sequence[str],
    met: Mapping[str, set[str]],
    faulted: set[tuple[str, ...]],
    round_: int,
) -> list[Pair]:
    """Open nodes without a free proven partner meet each other (new partners make
    witnesses): under one leaf first, then across paths not faulted."""
    by_leaf: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for x in waiting:
        by_leaf[topo[x]].append(x)
    pairs: list[Pair] = []
    left: list[str] = []
    for leaf in sorted(by_leaf):
        salt = f"{round_}:open:{'/'.join(leaf)}"
        got, rest = pair_up(by_leaf[leaf], None, topo, met, salt, fresh_only=True)
        pairs += got
        left += rest
    pairs += pair_up(left, None, topo, met, f"{round_}:open", fresh_only=True)[0]
    return [
        (a, b)
        for a, b in pairs
        if b not in met.get(a, ()) and not _blocked(a, b, topo, levels, faulted)
    ]


def _blocked(
    a: str, b: str, topo: Topology, levels: Sequence[str], faulted: set[tuple[str, ...]]
) -> bool:
    """Whether the pair's path leaves a switch whose uplink is faulted."""
    return any(
        _crosses(topo, (a, b), level)
        and (_switch(topo, a, level) in faulted or _switch(topo, b, level) in faulted)
        for level in range(len(levels))
    )


TYPICAL_JOB_S = 90.0
"""A two-node nccl-tests acceptance job from submission to its judged log (pods scheduled,
images cached, both tests over their sizes): what the printed estimate assumes."""


@dataclass(frozen=True)
class Estimate:
    nodes: int
    rounds: int
    jobs: int
    at_once: int
    waves: int
    timeout_s: float | None

    def words(self) -> str:
        def hours(seconds: float) -> str:
            return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"

        limit = f", at most {hours(self.waves * self.timeout_s)}" if self.timeout_s else ""
        return (
            f"sweep over {self.nodes} GPU nodes: {self.rounds} screening rounds, {self.jobs} "
            f"two-node jobs, {self.at_once} at a time as the quota admits ({self.waves} waves: "
            f"about {hours(self.waves * TYPICAL_JOB_S)} at {TYPICAL_JOB_S:g} s a job{limit}); "
            "failures add rounds with proven partners"
        )


def estimate(topo: Topology, at_once: int, timeout_s: float | None, confirm: int) -> Estimate:
    """Jobs and waves of the screening rounds (every node in each round, two to a job)."""
    rounds = screening_rounds(topo, confirm)
    per_round = len(topo) // 2
    waves = rounds * -(-per_round // max(1, at_once))
    return Estimate(len(topo), rounds, rounds * per_round, at_once, waves, timeout_s)
