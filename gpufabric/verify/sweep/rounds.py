"""Which nodes run together in the sweep's screening rounds, and what a failing group job
splits into.

Rounds. ``confirm`` (C) screening rounds (at least one more than the switch levels) pair every
node with partners it has not met: the first under its own leaf switch, then one round across
each switch level (across leaves under one spine, then across spines), so every uplink carries
jobs, then again under its leaf. After that, rounds adapt to what is still open
(:func:`~gpufabric.verify.sweep.judge.adaptive_pairs`).

Group jobs (when the quota runs more than two nodes at once): the first rounds run groups of
g nodes under each leaf (:func:`screening_groups`). NCCL's ring all_reduce/all_gather send
from each node to the next in rank order only, so a group job runs its tests once per rank
order of :func:`ring_orders`, whose rings together load every pair of the group; a passing
group is read as a pass for every pair of it (:func:`~gpufabric.verify.sweep.ledger.expand`),
a failing one as no pair: its nodes are not GOOD until a faulty member explains it, and it
splits (:func:`split_jobs`): halves, then groups joining a quarter of each half, down to
pairs; once explained, the rest run again without the faulty (and GOOD) members. The judge
counts a group job's g - 1 partners toward ``expose``: with groups, :func:`partners_needed`
distinct partners, which grow with the fleet (ceil(log2 N) + 5, at least EXPOSE) so that a
node slow with half its partners escapes with probability 2^-p and the whole fleet's N nodes
with at most N x 2^-p <= 1/32 (pairs-only sweeps keep C: each partner costs a round).
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence

from gpufabric.verify.sweep.job import Job, Pair, Topology
from gpufabric.verify.sweep.ledger import ledger_of

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


def shuffle_key(salt: str, name: str) -> bytes:
    """The sort key that orders ``name`` in a pairing salted by ``salt`` (a SHA-256, never
    Python's per-process hash: the same round gives the same pairs)."""
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
    pool = sorted(nodes, key=lambda n: shuffle_key(salt, n))
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


def round_scope_at(round_: int, depth: int) -> int | None:
    """The topology level screening round ``round_`` pairs across (None: within a leaf):
    round 1 within, rounds 2 to depth + 1 across the leaf level, then each wider one."""
    if 2 <= round_ <= depth + 1:
        return depth - (round_ - 1)
    return None


def round_scope(round_: int, topo: Topology) -> int | None:
    """The topology level pair screening round ``round_`` pairs across (None: within a
    leaf)."""
    return round_scope_at(round_, max((len(t) for t in topo.values()), default=0))


def screening_pairs(
    nodes: Sequence[str], topo: Topology, round_: int, done: Sequence[Job], confirm: int = CONFIRM
) -> list[Pair]:
    """The pairs of screening round ``round_`` (1-based), each node with a partner it has
    not met where it can; nodes left over (an odd leaf, a level with one switch) pair with
    each other."""
    depth = max((len(t) for t in topo.values()), default=0)
    return scoped_pairs(nodes, topo, round_scope_at(round_, depth), done, str(round_))


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
        ranked = sorted(
            by_leaf[leaf], key=lambda n: shuffle_key(f"group{round_}:{'/'.join(leaf)}", n)
        )
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
