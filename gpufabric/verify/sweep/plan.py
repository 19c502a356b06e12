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

Group jobs (when the quota runs more than two nodes at once): the first rounds run groups of
g nodes under each leaf (:func:`screening_groups`). NCCL's ring all_reduce/all_gather send
from each node to the next in rank order only, so a group job runs its tests once per rank
order of :func:`ring_orders`, whose rings together load every pair of the group; a passing
group is read as a pass for every pair of it (:func:`expand`), a failing one as no pair: its
nodes are not GOOD until a faulty member explains it, and it splits (:func:`split_jobs`):
halves, then groups joining a quarter of each half, down to pairs; once explained, the rest
run again without the faulty (and GOOD) members. The confidence rule counts a group job once
toward C (a node is GOOD after C passing *jobs*, so the flaky bound stays per job) and its
g - 1 partners toward ``expose``: with groups, :func:`partners_needed` distinct partners, which
grow with the fleet (ceil(log2 N) + 5, at least EXPOSE) so that a node slow with half its
partners escapes with probability 2^-p and the whole fleet's N nodes with at most N x 2^-p
<= 1/32 (pairs-only sweeps keep C: each partner costs a round there).
"""

from __future__ import annotations

import functools
import hashlib
import heapq
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, SupportsIndex, overload

CONFIRM = 3
"""Distinct proven partners a node must pass with to be GOOD (the default C)."""
REPEAT = 3
"""Runs with one partner, all failing, that make a failure partner-dependent, not flaky."""
EXPOSE = 8
"""The fewest distinct partners a node passes with before it is GOOD in a sweep with group
jobs (:func:`partners_needed` asks more of a larger fleet). A sweep of pairs asks C (each
partner costs a round)."""
FLEET_ESCAPE_LOG2 = 5
"""The fleet-wide bound, as a power of two: a sweep with group jobs asks each node for so many
distinct partners that the chance that ANY node of the fleet, slow with half of its partners,
passes with all of them stays at most 2^-5 (about 3%)."""


def partners_needed(nodes: int, confirm: int = CONFIRM) -> int:
    """Distinct partners a node passes with before it is GOOD in a sweep with group jobs of a
    fleet of ``nodes``: p(N) = max(EXPOSE, C, ceil(log2 N) + FLEET_ESCAPE_LOG2). A node slow
    with half of its partners passes p of them with probability 2^-p, so the fleet's N nodes
    together escape with probability at most N x 2^-p <= 2^-FLEET_ESCAPE_LOG2 (a node with
    fewer partners to meet must pass with every one)."""
    log2_ceil = max(0, nodes - 1).bit_length()
    return max(EXPOSE, confirm, log2_ceil + FLEET_ESCAPE_LOG2)


def confidence_words(nodes: int, partners: int) -> str:
    """The confidence a sweep of ``nodes`` that asks ``partners`` distinct partners states."""
    fleet = nodes * 2.0**-partners
    return (
        f"GOOD after {partners} distinct partners: a node slow with half of its partners "
        f"escapes with probability <= 2^-{partners}, the fleet's {nodes:,} nodes together "
        f"<= {100 * fleet:.2g}%"
    )


Pair = tuple[str, str]
Topology = Mapping[str, tuple[str, ...]]
"""Node -> the switch it sits under at each level, widest first (empty: not known)."""


@dataclass(frozen=True)
class Job:
    round: int
    pair: Pair
    verdict: str
    """PASS, FAIL or INCONCLUSIVE (as nccl-report judges the pair's run)."""
    members: tuple[str, ...] = ()
    """A group job's nodes in rank order (``pair`` is then its first two); empty for a pair."""

    @property
    def nodes(self) -> tuple[str, ...]:
        """The nodes the job ran on."""
        return self.members or self.pair


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
    suspects: set[str] = field(default_factory=set)
    """UNKNOWN nodes with a failing pair no verdict explains yet."""
    unshown: list[str] = field(default_factory=list)
    """Faulty nodes whose fault is not shown apart from a node that failed with them: they
    meet more proven partners (see :func:`_uncleared`)."""


def _rank(salt: str, name: str) -> bytes:
    return hashlib.sha256(f"{salt}\0{name}".encode()).digest()


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
        first_fit = pick = None  # the first that fits; the first that fits and is fresh
        for i in range(min(window, len(pool))):
            if differ is not None and topo[a][differ] == topo[pool[i]][differ]:
                continue
            first_fit = i if first_fit is None else first_fit
            if pool[i] not in seen:
                pick = i
                break
        pick = pick if pick is not None or fresh_only else first_fit
        if pick is not None:
            pairs.append((a, pool.pop(pick)))
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


def round_scope(round_: int, topo: Topology) -> int | None:
    """The topology level pair screening round ``round_`` pairs across (None: within a
    leaf)."""
    return _round_scope(round_, max((len(t) for t in topo.values()), default=0))


def screening_pairs(
    nodes: Sequence[str], topo: Topology, round_: int, done: Sequence[Job], confirm: int = CONFIRM
) -> list[Pair]:
    """The pairs of screening round ``round_`` (1-based), each node with a partner it has
    not met where it can; nodes left over (an odd leaf, a level with one switch) pair with
    each other."""
    depth = max((len(t) for t in topo.values()), default=0)
    return scoped_pairs(nodes, topo, _round_scope(round_, depth), done, str(round_))


def scoped_pairs(
    nodes: Sequence[str], topo: Topology, differ: int | None, done: Sequence[Job], salt: str
) -> list[Pair]:
    """One pair round: each node with a partner it has not met under the same switch one level
    wider than ``differ`` and a different switch at level ``differ`` (None: under its own
    leaf), where it can; nodes left over pair with each other."""
    met = ledger_of(done).met()
    depth = max((len(t) for t in topo.values()), default=0)
    prefix = depth if differ is None else differ
    groups: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for node in nodes:
        groups[topo[node][:prefix]].append(node)
    pairs: list[Pair] = []
    left: list[str] = []
    for key in sorted(groups):
        got, rest = pair_up(groups[key], differ, topo, met, f"{salt}:{'/'.join(key)}", True)
        pairs += got
        left += rest
    pairs += pair_up(left, None, topo, met, f"{salt}:left")[0]
    return pairs


def ring_orders(size: int) -> list[tuple[int, ...]]:
    """Rank orders for one group job of ``size`` nodes whose rings together carry traffic
    between every pair of its nodes: Walecki's zig-zag Hamiltonian paths of the complete
    graph on an even number of vertices (size, or size + 1 with the extra one left out),
    each closed into a ring: ceil(size / 2) orders. NCCL's ring all_reduce and all_gather
    send from each node only to the next one in rank order, so one order proves only two
    partners per node."""
    even = size + size % 2
    if size < 3:
        return [tuple(range(size))]
    zigzag = [0]
    for step in range(1, even):
        zigzag.append((zigzag[-1] + (step if step % 2 else -step)) % even)
    return [
        tuple(v for v in ((x + shift) % even for x in zigzag) if v < size)
        for shift in range(even // 2)
    ]


def group_size(topo: Topology, nodes_at_once: int) -> int:
    """Nodes per screening group job: as many as the quota runs at once, no more than the
    nodes under one leaf switch (a group stays under its leaf, so its result is about its
    nodes and their links, not an uplink); 2 (pairs) when fewer."""
    leaves = Counter(topo.values())
    largest = max(leaves.values(), default=0)
    return max(2, min(nodes_at_once, largest))


def group_rounds(topo: Topology, size: int, expose: int | None = None) -> int:
    """Group screening rounds: one when a group holds a whole leaf, else enough that each
    node meets ``expose`` partners (default :func:`partners_needed` of the fleet; a new
    partition of the leaf each round); none for pairs."""
    if size <= 2:
        return 0
    largest = max(Counter(topo.values()).values(), default=0)
    need = partners_needed(len(topo)) if expose is None else expose
    return 1 if largest <= size else -(-need // (size - 1))


def screening_groups(
    nodes: Sequence[str], topo: Topology, round_: int, size: int
) -> list[tuple[str, ...]]:
    """Group round ``round_``: each leaf's nodes in groups of at most ``size`` (sizes
    differ by one at most), in an order salted by the round; a leaf with one node left
    pairs with another such node. A group of two is a pair job."""
    by_leaf: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for node in nodes:
        by_leaf[topo[node]].append(node)
    groups: list[tuple[str, ...]] = []
    alone: list[str] = []
    for leaf in sorted(by_leaf):
        ranked = sorted(by_leaf[leaf], key=lambda n: _rank(f"group{round_}:{'/'.join(leaf)}", n))
        if len(ranked) < 2:
            alone += ranked
            continue
        parts = -(-len(ranked) // size)
        groups += [tuple(ranked[i::parts]) for i in range(parts)]
    groups += [tuple(alone[i : i + 2]) for i in range(0, len(alone) - 1, 2)]
    return groups


def _proven(members: Sequence[str], passed: set[frozenset[str]]) -> bool:
    """Whether every pair of ``members`` passed in some job (a group's pass holds each of
    its pairs)."""
    return all(frozenset((a, b)) in passed for i, a in enumerate(members) for b in members[i + 1 :])


def _split(group: tuple[str, ...], passed: set[frozenset[str]]) -> list[tuple[str, ...]]:
    """The jobs that narrow a failing group down: its halves, each unless a passing job
    already held it; when both are proven, the pairs across them (a half of one) or the
    groups that join a quarter of each half, whose own halves are then proven."""
    a, b = group[: len(group) // 2], group[len(group) // 2 :]
    halves = [h for h in (a, b) if not _proven(h, passed)]
    if halves:
        return halves
    if len(a) == 1 or len(b) == 1:
        return [(x, y) for x in a for y in b]
    a1, a2 = a[: len(a) // 2], a[len(a) // 2 :]
    b1, b2 = b[: len(b) // 2], b[len(b) // 2 :]
    return [a1 + b1, a2 + b2, a1 + b2, a2 + b1]


def split_jobs(
    jobs: Sequence[Job], faulty: set[str], suspects: Iterable[str] = ()
) -> list[tuple[str, ...]]:
    """The next round's jobs after failing group jobs: a group no faulty member explains
    runs again without its ``suspects`` (members that failed a pair job no verdict explains
    yet: they meet proven partners instead, which finds a faulty one in a round) when they
    are a quarter of it at most, else (many suspects look like a path, none like a pair
    inside) splits (:func:`_split`); one a faulty member explains runs again without its faulty
    members, GOOD ones included (one job gives the rest their partners back, and they may
    be the ones a member is slow with; if it fails again, it is split: a flaky member
    explains one failure, not every one); jobs that already ran are skipped,
    a node is in one job at a time. Empty when nothing is left to split or re-run."""
    ledger = ledger_of(jobs)
    ran, passed = ledger.ran(), ledger.passed()
    suspect = set(suspects)
    busy: set[str] = set()
    out: list[tuple[str, ...]] = []
    for job in jobs:
        if not job.members or job.verdict != "FAIL":
            continue
        rest = tuple(n for n in job.members if n not in faulty)
        clear = tuple(n for n in job.members if n not in suspect)
        if faulty & set(job.members):  # explained: the rest meet again without it
            parts = [rest] if len(rest) > 2 and not _proven(rest, passed) else []
        elif 0 < len(job.members) - len(clear) <= max(1, len(job.members) // 4) and frozenset(clear) not in ran:  # fmt: skip
            parts = [clear] if len(clear) >= 2 and not _proven(clear, passed) else []
        else:
            parts = _split(job.members, passed)
        for part in parts:
            if frozenset(part) in ran or busy & set(part):
                continue
            out.append(part)
            busy |= set(part)
    return out


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


@dataclass
class _Exits:
    """The judged pairs seen at one topology level: the nodes that passed a job, those that
    passed one under their own switch at ``level``, and each switch's jobs leaving it."""

    level: int
    passed: set[str] = field(default_factory=set)
    inside: set[str] = field(default_factory=set)
    exits: dict[tuple[str, ...], list[int]] = field(default_factory=lambda: defaultdict(list))

    def add(self, i: int, job: Job, topo: Topology) -> None:
        """Count pair ``i`` (a pair under one switch differs at no level)."""
        if job.verdict not in ("PASS", "FAIL"):
            return
        a, b = job.pair
        ta, tb = topo[a], topo[b]
        diff = len(ta) if ta == tb else _first_difference(topo, job.pair)
        if job.verdict == "PASS":
            self.passed.update(job.pair)
            if diff > self.level:
                self.inside.update(job.pair)
        if diff <= self.level:
            self.exits[ta[: self.level + 1]].append(i)
            self.exits[tb[: self.level + 1]].append(i)


def _level_faults(
    jobs: Sequence[Job], topo: Topology, levels: Sequence[str], level: int, excused: set[int],
    index: _Exits | None = None,
) -> list[PathFault]:  # fmt: skip
    """The faulted switches at one level; their jobs join ``excused``. Only failing jobs
    are set aside, so what passed (and where) is computed once (``index``: already counted,
    when nothing is excused yet)."""
    if index is None:
        index = _Exits(level)
        for i, job in enumerate(jobs):
            if i not in excused:
                index.add(i, job, topo)
    passed, inside, exits = index.passed, index.inside, index.exits
    faults: list[PathFault] = []
    for switch, _ in sorted(exits.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        out = [i for i in exits[switch] if i not in excused] if excused else list(exits[switch])
        nodes = _faulted_switch(switch, out, jobs, passed, inside, topo)
        if nodes is not None:
            faults.append(PathFault(levels[level], switch[-1], len(out), len(out), nodes, switch))
            excused |= set(out)
    return faults


def path_faults(
    jobs: Sequence[Job], topo: Topology, levels: Sequence[str],
    indexed: Callable[[int], _Exits],
) -> tuple[list[PathFault], set[int]]:  # fmt: skip
    """The switches whose uplink explains their failing jobs, narrowest level first (a
    switch's jobs are set aside before the next is looked at), and the indices of the jobs
    they explain. ``indexed``: a level's :class:`_Exits` of all of ``jobs`` (a ledger's)."""
    faults: list[PathFault] = []
    excused: set[int] = set()
    for level in reversed(range(len(levels))):
        index = None if excused else indexed(level)
        faults += _level_faults(jobs, topo, levels, level, excused, index)
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


def _witnessed(x: str, rec: _Record, faulty: set[str], confirm: int, without: str = "") -> bool:
    """Whether ``x`` failed with two witnesses (other than ``without``)."""
    witnesses = [
        y
        for y in rec.fails[x]
        if y not in faulty
        and y != without
        and all(z == x or z in faulty for z in rec.fails[y])
        and len(set(rec.passes[y]) - faulty - {x}) >= confirm
    ]
    return len(witnesses) >= 2


def _uncleared(
    jobs: Sequence[Job], rec: _Record, faulty: set[str], confirm: int, repeat: int
) -> dict[str, str]:
    """Nodes not faulty that failed a job (a pair, or a group job a faulty member explains)
    whose faulty member's fault is not shown apart from them: that member passed jobs too,
    its failures with the node are not steady (``repeat`` runs, all failing), and without
    the node's own failure with it, it has fewer than two witnesses. Which of the two failed
    is then not told (two flaky nodes failing with one healthy node make it look faulty), so
    neither is GOOD until the member fails with others or the pair fails steadily. Node ->
    that member."""
    shown: dict[tuple[str, str], bool] = {}

    def apart(x: str, p: str) -> bool:
        if (x, p) not in shown:
            steady = rec.fails[p][x] >= repeat and not rec.passes[p][x]
            shown[x, p] = (
                steady or not rec.passes[x] or _witnessed(x, rec, faulty - {x}, confirm, p)
            )
        return shown[x, p]

    out: dict[str, str] = {}
    for p in sorted(rec.fails):
        if p not in faulty and rec.fails[p]:
            blamed = sorted(x for x in rec.fails[p] if x in faulty and not apart(x, p))
            if blamed:
                out[p] = blamed[0]
    for job in jobs:
        culprits = sorted(faulty & set(job.members)) if job.verdict == "FAIL" else []
        for p in job.members if culprits else ():
            if p not in faulty and p not in out and not any(apart(x, p) for x in culprits):
                out[p] = culprits[0]
    return out


def _good(
    nodes: Sequence[str],
    rec: _Record,
    faulty: set[str],
    confirm: int,
    reach: Mapping[str, int],
    expose: int,
) -> set[str]:
    """The ``confirm``-core of the passing pairs among nodes whose failures are all with
    faulty nodes and that passed with ``expose`` distinct partners (or every partner they can
    reach, ``reach``): each passed with ``confirm`` distinct partners that are GOOD
    themselves."""
    good = {
        x
        for x in nodes
        if x not in faulty
        and all(y in faulty for y in rec.fails[x])
        and len(rec.passes[x]) >= min(expose, reach[x])
    }
    # the k-core is unique: peel the nodes short of GOOD partners one at a time, counting
    # down their partners' GOOD partners instead of recounting every node each pass
    count = {x: len(good.intersection(rec.passes[x])) for x in good}
    short = [x for x in good if count[x] < confirm]
    while short:
        x = short.pop()
        if x not in good:
            continue
        good.discard(x)
        for y in rec.passes[x]:
            if y in good:
                count[y] -= 1
                if count[y] == confirm - 1:
                    short.append(y)
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


def expand(jobs: Sequence[Job]) -> Sequence[Job]:
    """The record as pairs: a pair job as it ran; a passing group job as a passing job for
    every pair of its nodes (its rings carried traffic between each pair, see
    :func:`ring_orders`); a failing group job as no pair (it says some pair or node in it is
    slow, not which: its split says that, and it taints its nodes until explained)."""
    return ledger_of(jobs).pairs()


def ledger_of(jobs: Iterable[Job]) -> Ledger:
    """``jobs`` as a :class:`Ledger`: the sweep's own record is one (kept up to date round
    by round); any other list of jobs is read into a new one."""
    return jobs if isinstance(jobs, Ledger) else Ledger(jobs)


def _record(jobs: Ledger, excused: set[int]) -> _Record:
    """The :class:`_Record` of the judged pairs less the ``excused`` ones (the ledger's own
    when nothing is excused)."""
    return _Record.of(jobs.pairs(), excused) if excused else jobs.record()


def _pair_job(entry: Job | tuple[int, str, str]) -> Job:
    """A ledger's pair as :func:`expand` gives it: a job, or a passing group's (round, a, b)."""
    if isinstance(entry, Job):
        return entry
    return Job(entry[0], (entry[1], entry[2]), "PASS")


class _Pairs(Sequence[Job]):
    """The first ``size`` pairs of a ledger, each made a :class:`Job` when read."""

    def __init__(self, entries: list[Job | tuple[int, str, str]], size: int) -> None:
        self._entries, self._size = entries, size

    def __len__(self) -> int:
        return self._size

    @overload
    def __getitem__(self, i: int) -> Job: ...
    @overload
    def __getitem__(self, i: slice) -> list[Job]: ...
    def __getitem__(self, i: int | slice) -> Job | list[Job]:
        if isinstance(i, slice):
            return [_pair_job(e) for e in self._entries[: self._size][i]]
        if not -self._size <= i < self._size:
            raise IndexError(i)
        return _pair_job(self._entries[i % self._size])

    def __iter__(self) -> Iterator[Job]:
        for i in range(self._size):
            yield _pair_job(self._entries[i])


class Ledger(list[Job]):
    """The sweep's record of jobs (a list, appended to round by round) that keeps what the
    planner and the judge read of it after every round (:func:`expand`'s pairs, who met
    whom, the passing pairs, each node's passing jobs, the :class:`_Record`) up to date
    with the jobs appended since, instead of computing them from the whole record each
    time: what the functions here return for a ledger is what they return for a list of
    the same jobs. A record changed otherwise than by appending (``append``, ``extend``,
    ``+=``) is read again whole."""

    def __init__(self, jobs: Iterable[Job] = ()) -> None:
        super().__init__(jobs)
        self._reset()

    # every list method that rewrites the record (not append, extend, +=) reads it again
    def __setitem__(self, index: Any, value: Any) -> None:
        super().__setitem__(index, value)
        self._reset()

    def __delitem__(self, index: SupportsIndex | slice) -> None:
        super().__delitem__(index)
        self._reset()

    def __imul__(self, times: SupportsIndex) -> Ledger:
        super().__imul__(times)
        self._reset()
        return self

    def insert(self, index: SupportsIndex, job: Job) -> None:
        super().insert(index, job)
        self._reset()

    def pop(self, index: SupportsIndex = -1) -> Job:
        job = super().pop(index)
        self._reset()
        return job

    def remove(self, job: Job) -> None:
        super().remove(job)
        self._reset()

    def clear(self) -> None:
        super().clear()
        self._reset()

    def sort(self, *, key: Any = None, reverse: bool = False) -> None:
        super().sort(key=key, reverse=reverse)
        self._reset()

    def reverse(self) -> None:
        super().reverse()
        self._reset()

    def _reset(self) -> None:
        self._seen = 0
        self._last: Job | None = None
        self._pairs: list[Job | tuple[int, str, str]] = []
        self._met: dict[str, set[str]] = defaultdict(set)
        self._pair_met: dict[str, set[str]] = defaultdict(set)
        self._rec = _Record()
        self._passed: set[frozenset[str]] = set()
        self._ran: set[frozenset[str]] = set()
        self._passing: Counter[str] = Counter()
        self._topo: Topology | None = None
        self._levels: dict[int, _Exits] = {}

    def _sync(self) -> None:
        if len(self) < self._seen or (self._seen and self[self._seen - 1] is not self._last):
            self._reset()
        for job in self[self._seen :]:
            self._add(job)
        self._seen = len(self)
        self._last = self[-1] if self else None

    def _add(self, job: Job) -> None:
        self._ran.add(frozenset(job.nodes))
        if not job.members:
            self._pair_met[job.pair[0]].add(job.pair[1])
            self._pair_met[job.pair[1]].add(job.pair[0])
        if job.verdict == "PASS":
            self._passing.update(job.nodes)
        if job.members:  # a failing group is no pair (see expand)
            if job.verdict == "PASS":
                self._add_group(job)
            return
        for index in self._levels.values():
            index.add(len(self._pairs), job, self._topo or {})
        self._pairs.append(job)
        a, b = job.pair
        self._met[a].add(b)
        self._met[b].add(a)
        if job.verdict in ("PASS", "FAIL"):
            side = self._rec.passes if job.verdict == "PASS" else self._rec.fails
            side[a][b] += 1
            side[b][a] += 1
        if job.verdict == "PASS":
            self._passed.add(frozenset(job.pair))

    def _add_group(self, job: Job) -> None:
        """A passing group: each member passed with every other (its pairs are kept as
        (round, a, b) until read, see :class:`_Pairs`)."""
        members, start = job.members, len(self._pairs)
        pairs = [(a, b) for i, a in enumerate(members) for b in members[i + 1 :]]
        self._pairs += [(job.round, a, b) for a, b in pairs]
        self._passed.update(frozenset(pair) for pair in pairs)
        for m in members:
            others = [x for x in members if x != m]
            self._met[m].update(others)
            self._rec.passes[m].update(others)
        topo = self._topo or {}
        for index in self._levels.values():
            if len({topo[m] for m in members}) == 1:  # each passed under its own switches
                index.passed.update(members)
                index.inside.update(members)
                continue
            for k in range(start, len(self._pairs)):
                index.add(k, _pair_job(self._pairs[k]), topo)

    def pairs(self) -> Sequence[Job]:
        """:func:`expand` of the record (as it is now: later jobs are not in it)."""
        self._sync()
        return _Pairs(self._pairs, len(self._pairs))

    def met(self) -> dict[str, set[str]]:
        self._sync()
        return self._met

    def met_in_pairs(self) -> dict[str, set[str]]:
        """Who met whom in pair jobs."""
        self._sync()
        return self._pair_met

    def record(self) -> _Record:
        """The :class:`_Record` of every judged pair (nothing excused)."""
        self._sync()
        return self._rec

    def passed(self) -> set[frozenset[str]]:
        self._sync()
        return self._passed

    def ran(self) -> set[frozenset[str]]:
        self._sync()
        return self._ran

    def passing(self) -> Counter[str]:
        self._sync()
        return self._passing

    def exits(self, topo: Topology, level: int) -> _Exits:
        """What :func:`path_faults` counts of the pairs at ``level`` (nothing excused), for
        ``topo`` (the sweep's: another one is counted again)."""
        self._sync()
        if topo is not self._topo:
            self._topo, self._levels = topo, {}
        if level not in self._levels:
            index = _Exits(level)
            for i, pair in enumerate(self._pairs):
                index.add(i, _pair_job(pair), topo)
            self._levels[level] = index
        return self._levels[level]


def exhausted(parts: Sequence[tuple[str, ...]], jobs: Sequence[Job], repeat: int = REPEAT) -> bool:  # fmt: skip
    """Whether a round of ``parts`` can teach nothing: each is a pair that failed ``repeat``
    times or more and never passed (the judge reads that as steady; one more failure changes
    no verdict, and a node whose every partner fails with it stays so). Two nodes, or four
    without group jobs, one of them bad, met again and again until the round cap."""
    wanted = {frozenset(p) for p in parts}
    if not parts or any(len(p) != 2 for p in parts):
        return False
    failed = Counter(
        key
        for j in jobs
        if not j.members and j.verdict == "FAIL" and (key := frozenset(j.pair)) in wanted
    )
    if any(failed[p] < repeat for p in wanted):
        return False
    return not any(j.verdict == "PASS" and any(p <= set(j.nodes) for p in wanted) for j in jobs)


def passing_jobs(jobs: Iterable[Job]) -> Counter[str]:
    """Node -> the jobs it passed (a group job is one: its runs share one time window, and
    a node that fails one job in three passes any one job with probability 2/3)."""
    return ledger_of(jobs).passing()


def _unexplained(jobs: Sequence[Job], faulty: set[str]) -> dict[str, tuple[str, ...]]:
    """Node -> a failing group job it was in that no faulty member explains yet."""
    tainted: dict[str, tuple[str, ...]] = {}
    for job in jobs:
        if job.members and job.verdict == "FAIL" and not faulty & set(job.members):
            for node in job.members:
                tainted.setdefault(node, job.members)
    return tainted


def _reach(
    nodes: Sequence[str], topo: Topology, paths: Sequence[PathFault], faulty: int
) -> dict[str, int]:
    """Partners each node can pass with: the others, less the faulty ones; only those under
    its own switch when a path fault cuts that switch off."""
    cut = {f.key for f in paths}
    if not cut:  # no switch walled off: every node reaches every other
        return dict.fromkeys(nodes, max(0, len(nodes) - 1 - faulty))
    under: Counter[tuple[str, ...]] = Counter()
    for node in nodes:
        for level in range(len(topo[node])):
            under[topo[node][: level + 1]] += 1
    reach: dict[str, int] = {}
    for node in nodes:
        keys = [topo[node][: i + 1] for i in range(len(topo[node]))]
        walled = [under[k] for k in keys if k in cut]
        reach[node] = max(0, (min(walled) if walled else len(nodes)) - 1 - faulty)
    return reach


def _held(jobs: Sequence[Job], rec: _Record, faulty: set[str], confirm: int) -> dict[str, str]:
    """Partners of a faulty node whose result changed with the same partner, that failed
    with it and have not passed C jobs since for each time they failed with it: which of the
    two is flaky is not told by that pair (two flaky nodes failing with one healthy node make
    it look faulty, and its re-runs pair them again), so neither is GOOD until the partner
    has passed that many more jobs. Node -> that faulty node."""
    last: dict[tuple[str, str], int] = {}
    for job in jobs:
        if job.verdict == "FAIL" and not job.members:
            a, b = job.pair
            for key in ((a, b), (b, a)):
                last[key] = max(last.get(key, 0), job.round)
    held: dict[str, str] = {}
    for x in sorted(faulty):
        if not any(rec.passes[x][p] for p in rec.fails[x]):
            continue
        for p in sorted(rec.fails[x]):
            since = last.get((p, x), 0)
            after = sum(1 for j in jobs if j.verdict == "PASS" and p in j.nodes and j.round > since)
            if p not in faulty and after < confirm * rec.fails[p][x]:
                held.setdefault(p, x)
    return held


def _open_note(
    x: str,
    rec: _Record,
    tainted: Mapping[str, tuple[str, ...]],
    uncleared: Mapping[str, str],
    held: Mapping[str, str],
    confirm: int,
) -> str:
    """Why an UNKNOWN node is not GOOD yet, in words (the strongest reason last wins)."""
    note = ""
    if rec.fails[x]:
        note = f"failed with {', '.join(sorted(rec.fails[x]))}, not yet explained"
    elif x in tainted:
        note = f"in a failing group job ({', '.join(tainted[x])}) not yet explained"
    if x in uncleared:
        note = (
            f"failed with {uncleared[x]}, whose fault is not shown apart from this "
            "node (fewer than two other witnesses): not GOOD until it is"
        )
    if x in held:
        note = (
            f"failed with {held[x]}, whose result changed with the same partner: "
            f"GOOD after {confirm} more passing jobs for each such failure"
        )
    return note


def judge(
    nodes: Sequence[str],
    topo: Topology,
    levels: Sequence[str],
    jobs: Sequence[Job],
    confirm: int = CONFIRM,
    repeat: int = REPEAT,
    expose: int | None = None,
) -> Judgement:
    """Every node's verdict (GOOD, BAD, FLAKY, UNKNOWN) and the path faults, from the jobs
    (group jobs as :func:`expand` reads them; the indices in ``excused`` are of that list).
    ``expose``: distinct partners a node passes with before it is GOOD (default C; a sweep
    with group jobs asks :func:`partners_needed` of the fleet, which its groups give at no
    extra job)."""
    ledger = ledger_of(jobs)
    indexed = functools.partial(ledger.exits, topo)
    paths, excused = path_faults(ledger.pairs(), topo, levels, indexed) if levels else ([], set())
    rec = _record(ledger, excused)
    faulty = _faulty(nodes, rec, confirm)
    tainted = _unexplained(ledger, faulty)
    reach = _reach(nodes, topo, paths, len(faulty))
    ran = ledger.passing()
    held = _held(ledger, rec, faulty, confirm)
    uncleared = _uncleared(ledger, rec, faulty, confirm, repeat)
    eligible = [
        n
        for n in nodes
        if n not in tainted and n not in held and n not in uncleared and ran[n] >= confirm
    ]
    good = _good(eligible, rec, faulty, confirm, reach, expose or confirm)
    verdicts: dict[str, str] = {}
    notes: dict[str, str] = {}
    retests: dict[str, list[str]] = {}
    suspects: set[str] = set()
    for x in nodes:
        if x in good:
            verdicts[x] = "GOOD"
        elif x in faulty:
            verdicts[x], notes[x], rerun = _faulty_verdict(
                x, rec, good | {p for p, y in uncleared.items() if y == x}, repeat, confirm
            )
            if rerun:
                retests[x] = rerun
        else:
            verdicts[x] = "UNKNOWN"
            note = _open_note(x, rec, tainted, uncleared, held, confirm)
            if note:
                notes[x] = note
            if any(y not in faulty for y in rec.fails[x]):
                suspects.add(x)
    mixed = [x for x in faulty if rec.passes[x]]
    failed_with = {p for x in mixed for p in rec.fails[x] if p in good}
    corroborate = _uncorroborated(failed_with, rec, good, confirm)
    unshown = sorted(set(uncleared.values()))
    return Judgement(
        verdicts, notes, paths, good, faulty, retests, excused, corroborate, suspects, unshown
    )


def _wants_partner(
    x: str, rec: _Record, good: set[str], met: Mapping[str, set[str]], confirm: int, expose: int
) -> bool:
    """An open node runs again while it has met fewer than max(4C, 2 (``expose`` + C)) partners in pair jobs and
    either passed with fewer than max(C + 2, EXPOSE, ``expose``) proven ones, has a failure no verdict
    explains yet (a flaky partner shows itself by failing again) or is in a failing group job
    not yet explained (it is not GOOD before that)."""
    if len(met.get(x, ())) >= max(4 * confirm, 2 * (expose + confirm)):
        return False
    proven = sum(1 for y in rec.passes[x] if y in good)
    return (
        proven < max(confirm + 2, EXPOSE, expose)
        or any(y not in good for y in rec.fails[x])
        or (x not in good and not rec.fails[x])
    )


def adaptive_pairs(
    nodes: Sequence[str],
    topo: Topology,
    levels: Sequence[str],
    jobs: Sequence[Job],
    verdict: Judgement,
    round_: int,
    confirm: int = CONFIRM,
    expose: int | None = None,
    busy: Iterable[str] = (),
) -> list[Pair]:
    """The next round after screening: failing pairs of a FLAKY node re-run, and every
    UNKNOWN node with a proven partner it has not met, under its own leaf where there is one
    (a job across a faulted path proves nothing); none with a node ``busy`` in another job of
    the round. Empty when nothing more can be learnt."""
    ledger = ledger_of(jobs)
    rec = _record(ledger, verdict.excused)
    met, in_pairs = ledger.met(), ledger.met_in_pairs()
    faulted = {f.key for f in verdict.paths}
    ran = ledger.passing()
    short = {x for x in nodes if ran[x] < confirm}
    taken = set(busy)
    pairs: list[Pair] = []
    for x in sorted(verdict.retests):
        partner = next((p for p in verdict.retests[x] if p not in taken), None)
        if partner is not None and x not in taken:
            pairs.append((x, partner))
            taken |= {x, partner}
    refs = sorted(verdict.good, key=lambda n: _rank(f"ref{round_}", n))
    by_leaf: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for r in refs:
        by_leaf[topo[r]].append(r)
    open_ = [x for x in nodes if verdict.verdicts[x] == "UNKNOWN"]
    waiting: list[str] = []
    ranked = sorted(open_, key=lambda n: _rank(f"open{round_}", n))
    queue = list(dict.fromkeys(ranked + verdict.corroborate + verdict.unshown))
    free_refs = _Free(refs, taken)
    free_leaf = {leaf: _Free(members, taken) for leaf, members in by_leaf.items()}
    for x in queue:
        if x in taken or not _wants_partner(
            x, rec, verdict.good, in_pairs, confirm, expose or confirm
        ):
            continue
        cut_off = any(topo[x][: i + 1] in faulted for i in range(len(topo[x])))
        lists = [free_leaf.get(topo[x], _Free([], taken))] + ([] if cut_off else [free_refs])
        # a node short of passing jobs may meet a partner again (a job is what it lacks)
        partner = _reference(x, lists, (topo, levels, faulted), met[x], x in short)
        if partner is None:
            waiting.append(x)
        else:
            pairs.append((x, partner))
            taken |= {x, partner}
    return pairs + _open_pairs(waiting, topo, levels, met, faulted, round_, short)


def _reference(
    x: str, lists: Sequence[_Free], paths: tuple[Topology, Sequence[str], set[tuple[str, ...]]],
    seen: set[str], again: bool,
) -> str | None:  # fmt: skip
    """The first free candidate of ``lists``, in order, that ``x`` may run with (not itself,
    not across a faulted path of ``paths``: topology, levels, faulted switches) and has not
    met (``seen``); with ``again``, else the first it may run with."""
    topo, levels, faulted = paths
    usable = (
        r for free in lists for r in free if r != x and not _blocked(x, r, topo, levels, faulted)
    )
    partner = next((r for r in usable if r not in seen), None)
    if partner is None and again:
        partner = next(
            (r for free in lists for r in free if r != x and not _blocked(x, r, topo, levels, faulted)),
            None,
        )  # fmt: skip
    return partner


def _open_pairs(
    waiting: Sequence[str],
    topo: Topology,
    levels: Sequence[str],
    met: Mapping[str, set[str]],
    faulted: set[tuple[str, ...]],
    round_: int,
    short: set[str] = frozenset(),  # type: ignore[assignment]
) -> list[Pair]:
    """Open nodes without a free proven partner meet each other (new partners make
    witnesses): under one leaf first, then across paths not faulted; nodes ``short`` of
    passing jobs meet a partner again under their leaf when no new one is left."""
    by_leaf: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for x in waiting:
        by_leaf[topo[x]].append(x)
    pairs: list[Pair] = []
    left: list[str] = []
    for leaf in sorted(by_leaf):
        salt = f"{round_}:open:{'/'.join(leaf)}"
        got, rest = pair_up(by_leaf[leaf], None, topo, met, salt, fresh_only=True)
        again = [x for x in rest if x in short]
        got += pair_up(again, None, topo, met, salt)[0]
        pairs += got
        left += [x for x in rest if x not in short]
    pairs += pair_up(left, None, topo, met, f"{round_}:open", fresh_only=True)[0]
    return [
        (a, b)
        for a, b in pairs
        if (b not in met.get(a, ()) or {a, b} <= short)
        and not _blocked(a, b, topo, levels, faulted)
    ]


class _Free:
    """The candidates of a list not yet ``taken`` (a set the round grows), in the list's
    order: the taken ones at its front are stepped over once, not by every node that looks
    for a partner (a round takes its partners from the front)."""

    def __init__(self, items: Sequence[str], taken: set[str]) -> None:
        self._items, self._taken, self._lo = items, taken, 0

    def __iter__(self) -> Iterator[str]:
        items, taken = self._items, self._taken
        while self._lo < len(items) and items[self._lo] in taken:
            self._lo += 1
        for i in range(self._lo, len(items)):
            if items[i] not in taken:
                yield items[i]


def _blocked(
    a: str, b: str, topo: Topology, levels: Sequence[str], faulted: set[tuple[str, ...]]
) -> bool:
    """Whether the pair's path leaves a switch whose uplink is faulted."""
    if not faulted:
        return False
    return any(
        _crosses(topo, (a, b), level)
        and (_switch(topo, a, level) in faulted or _switch(topo, b, level) in faulted)
        for level in range(len(levels))
    )


TYPICAL_JOB_S = 90.0
"""A two-node nccl-tests acceptance job from submission to its judged log (pods scheduled,
images cached, both tests over their sizes): what the printed estimate assumes."""
RUN_S = 15.0
"""One more nccl-tests run inside a job (mpirun start, NCCL init, its sizes): a group job runs
both tests once more for each rank order of :func:`ring_orders` past the first."""


@dataclass(frozen=True)
class Cost:
    """What the planner assumes a job takes: ``job_s`` for a pair (a group's first rank order
    included), two runs of ``run_s`` for each rank order past the first."""

    job_s: float = field(default_factory=lambda: TYPICAL_JOB_S)
    run_s: float = field(default_factory=lambda: RUN_S)

    def seconds(self, size: int) -> float:
        return self.job_s + 2 * self.run_s * (len(ring_orders(size)) - 1)


def admission_order(sizes: Sequence[int]) -> list[int]:
    """The order a round's jobs are admitted in: largest first (stable), so the long group jobs
    start first and pairs fill the nodes they leave."""
    return sorted(range(len(sizes)), key=lambda i: -sizes[i])


def round_seconds(sizes: Sequence[int], nodes_at_once: int, seconds: Callable[[int], float]) -> float:  # fmt: skip
    """The wall time of one round: its jobs in :func:`admission_order`, each started as soon as
    the quota has nodes for it and the job before it started (as the sweep's runner admits
    them); a job of ``size`` nodes takes ``seconds(size)``."""
    capacity = max(2, nodes_at_once)
    running: list[tuple[float, int]] = []
    free, now, end = capacity, 0.0, 0.0
    for i in admission_order(sizes):
        need = min(sizes[i], capacity)
        while free < need:
            now, done = heapq.heappop(running)
            free += done
        took = now + seconds(sizes[i])
        heapq.heappush(running, (took, need))
        free -= need
        end = max(end, took)
    return end


@functools.lru_cache(maxsize=256)
def _screening_round_s(sizes: tuple[int, ...], nodes_at_once: int, cost: Cost) -> float:
    """:func:`round_seconds` of a screening round costed by ``cost``, once per round shape:
    every mode :func:`choose_mode` weighs has the same pair rounds, and the forecast's
    sweeps choose the mode again for the same fleet."""
    per_size = {size: cost.seconds(size) for size in set(sizes)}
    return round_seconds(sizes, nodes_at_once, per_size.__getitem__)


@dataclass(frozen=True)
class Mode:
    """How the screening rounds run: ``group_rounds`` rounds of group jobs of up to ``size``
    nodes under each leaf (none: pairs only), then one pair round across each level of
    ``pair_scopes`` (None: under a leaf). A node is GOOD after C passing jobs with
    ``expose`` distinct partners. ``seconds`` and ``jobs``: the planner's estimate of the
    screening rounds, which chose this mode."""

    size: int
    group_rounds: int
    pair_scopes: tuple[int | None, ...]
    expose: int
    seconds: float
    jobs: int
    partners: int = 0
    """Distinct partners the screening rounds give a node under a typical leaf."""

    @property
    def rounds(self) -> int:
        return self.group_rounds + len(self.pair_scopes)


def _leaf_sizes(topo: Topology) -> list[int]:
    return sorted(Counter(topo.values()).values())


def _group_sizes(topo: Topology, size: int) -> list[int]:
    """The job sizes of one round of :func:`screening_groups` (without running the hash)."""
    sizes: list[int] = []
    alone = 0
    for leaf in _leaf_sizes(topo):
        if leaf < 2:
            alone += leaf
            continue
        parts = -(-leaf // size)
        sizes += [leaf // parts + (1 if i < leaf % parts else 0) for i in range(parts)]
    return sizes + [2] * (alone // 2)


def _pair_mode(topo: Topology, at_once: int, rounds: int, expose: int, cost: Cost) -> Mode:
    """Pairs only: ``rounds`` screening rounds as :func:`round_scope` numbers them."""
    depth = max((len(t) for t in topo.values()), default=0)
    scopes = tuple(_round_scope(r, depth) for r in range(1, rounds + 1))
    per_round = len(topo) // 2
    took = rounds * _screening_round_s((2,) * per_round, 2 * at_once, cost)
    return Mode(2, 0, scopes, expose, took, rounds * per_round, rounds)


def _group_mode(
    topo: Topology, at_once: int, confirm: int, size: int, rounds: int, expose: int, cost: Cost
) -> Mode:
    """``rounds`` group rounds of up to ``size`` nodes, a pair round across each switch level,
    and as many more pair rounds across the levels (they give new partners and load the
    uplinks again) as C jobs and ``expose`` partners per node still need."""
    depth = max((len(t) for t in topo.values()), default=0)
    leaves = Counter(topo.values())
    typical = max(leaves.values(), key=lambda n: (n * Counter(leaves.values())[n], n), default=2)
    groups = _group_sizes(topo, size)
    per_group = typical // -(-typical // size) - 1 if typical >= 2 else 0
    partners = min(rounds * per_group, typical - 1) + depth
    extra = max(0, confirm - rounds - depth, expose - partners)
    cross: list[int | None] = [depth - 1 - i for i in range(depth)] or [None]
    scopes: tuple[int | None, ...] = tuple(cross[i % len(cross)] for i in range(depth + extra))
    pairs = len(topo) // 2
    took = rounds * _screening_round_s(tuple(groups), 2 * at_once, cost) + len(
        scopes
    ) * _screening_round_s((2,) * pairs, 2 * at_once, cost)
    jobs = rounds * len(groups) + len(scopes) * pairs
    return Mode(size, rounds, scopes, expose, took, jobs, partners + extra)


def choose_mode(
    topo: Topology, at_once: int, confirm: int = CONFIRM, group: int = 2, cost: Cost | None = None
) -> Mode:
    """The screening the sweep runs with ``at_once`` two-node jobs' worth of quota and group jobs
    of at most ``group`` nodes (2: pairs only, C partners as before): the one of least expected
    wall time among pairs and every group size the quota and the leaves allow (1 to 3 group
    rounds), each giving every node C jobs and :func:`partners_needed` distinct partners."""
    cost = cost or Cost()
    depth = max((len(t) for t in topo.values()), default=0)
    largest = group_size(topo, min(group, 2 * at_once))
    if largest <= 2:
        return _pair_mode(topo, at_once, screening_rounds(topo, confirm), confirm, cost)
    expose = partners_needed(len(topo), confirm)
    modes = [_pair_mode(topo, at_once, max(expose, depth + 1), expose, cost)] + [
        _group_mode(topo, at_once, confirm, size, rounds, expose, cost)
        for size in range(3, largest + 1)
        for rounds in (1, 2, 3)
    ]
    return min(modes, key=lambda m: (m.seconds, m.jobs, -m.partners, m.size))


@dataclass(frozen=True)
class Estimate:
    nodes: int
    rounds: int
    jobs: int
    at_once: int
    waves: int
    timeout_s: float | None
    mode: Mode | None = None
    """The screening chosen (None: an estimate made for pairs before modes were chosen)."""
    cost: Cost = field(default_factory=Cost)
    limit_s: float | None = None
    """The longest the screening can take when every job runs to its ``timeout_s``."""

    def words(self, failures: str = "") -> str:
        """The screening in words, then ``failures`` (what failures add; default: that they
        add rounds, unquantified)."""

        def hours(seconds: float) -> str:
            return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"

        if self.mode is None or self.mode.group_rounds == 0:
            limit = f", at most {hours(self.waves * self.timeout_s)}" if self.timeout_s else ""
            return (
                f"sweep over {self.nodes} GPU nodes: {self.rounds} screening rounds, {self.jobs} "
                f"two-node jobs, {self.at_once} at a time as the quota admits ({self.waves} waves: "
                f"about {hours(self.waves * self.cost.job_s)} at {self.cost.job_s:g} s a job{limit}); "
                f"{failures or 'failures add rounds with proven partners'}"
            )
        m = self.mode
        limit = f", at most {hours(self.limit_s)}" if self.limit_s else ""
        return (
            f"sweep over {self.nodes} GPU nodes: {m.rounds} screening rounds ({m.group_rounds} of "
            f"group jobs of up to {m.size} nodes under each leaf, {len(m.pair_scopes)} of two-node "
            f"jobs across the switch levels), {self.jobs} jobs, {2 * self.at_once} nodes at a time "
            f"as the quota admits: about {hours(m.seconds)} at {self.cost.job_s:g} s a job and "
            f"{2 * self.cost.run_s:g} s per rank order past the first{limit}; "
            f"{confidence_words(self.nodes, m.expose)}; "
            f"{failures or 'failures add rounds (splits, proven partners)'}"
        )


def estimate(
    topo: Topology,
    at_once: int,
    timeout_s: float | None,
    confirm: int,
    group: int = 2,
    cost: Cost | None = None,
) -> Estimate:
    """Jobs, rounds and wall time of the screening rounds the sweep will run (the mode
    :func:`choose_mode` picks for ``at_once`` two-node jobs' worth of quota and groups of at
    most ``group`` nodes; 2: pairs, every node in each round, two to a job)."""
    cost = cost or Cost()
    mode = choose_mode(topo, at_once, confirm, group, cost)
    per_round = len(topo) // 2
    waves = mode.rounds * -(-per_round // max(1, at_once)) if mode.group_rounds == 0 else 0
    limit = None
    if timeout_s and mode.group_rounds:
        groups = _group_sizes(topo, mode.size)
        flat = Cost(timeout_s, 0.0).seconds
        limit = mode.group_rounds * round_seconds(groups, 2 * at_once, flat) + len(
            mode.pair_scopes
        ) * round_seconds([2] * per_round, 2 * at_once, flat)
    return Estimate(len(topo), mode.rounds, mode.jobs, at_once, waves, timeout_s, mode, cost, limit)
