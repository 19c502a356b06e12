"""The sweep's judge: every node's verdict from the whole record, and the rounds that adapt
to what is still open once the screening rounds are done.

Judging (recomputed from the whole record after every job):

- Path faults first (:mod:`~gpufabric.verify.sweep.faults`): the jobs across a faulted uplink
  prove nothing about their nodes, and no node is drained for it.
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
and was never caught failing is reported GOOD with probability at most (1 - f) ** C. A group
job counts once toward C (a node is GOOD after C passing *jobs*, so the flaky bound stays per
job) and its g - 1 partners toward ``expose``
(:func:`~gpufabric.verify.sweep.rounds.partners_needed` with group jobs).

Adaptive rounds (:func:`adaptive_pairs`): every node not yet judged runs with a node already
proven GOOD that it has not met (under its own leaf first, where the path is the node's own),
and a node that failed with some partners and passed with others re-runs with the partners it
failed with.
"""

from __future__ import annotations

import functools
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from gpufabric.verify.sweep.domains import DomainFault, domain_faults
from gpufabric.verify.sweep.faults import PathFault, blocked, path_faults
from gpufabric.verify.sweep.job import Job, Pair, Topology
from gpufabric.verify.sweep.ledger import Ledger, PartnerCounts, ledger_of
from gpufabric.verify.sweep.rounds import CONFIRM, EXPOSE, REPEAT, pair_up, shuffle_key


class NodeVerdict(StrEnum):
    """What the sweep says of a node; prints (and serializes) as its word."""

    GOOD = "GOOD"
    """Passed with C distinct partners that are GOOD themselves (and ``expose`` distinct
    partners), every failure it had with a faulty node or across a faulted path."""
    BAD = "BAD"
    """Faulty and never passed, or failed every time (``repeat`` runs) with at least two
    proven partners (slow with some partners): drained."""
    FLAKY = "FLAKY"
    """Faulty, but its result changed with the same partner or its failing pairs were not
    yet re-run: reported with its record, never a reference partner, never drained."""
    UNKNOWN = "UNKNOWN"
    """Neither proven GOOD nor faulty (yet)."""


@dataclass(kw_only=True)
class Judgement:
    """What :func:`judge` read from the record: each node's verdict and words, the path
    faults, and what the next rounds should look at."""

    verdicts: dict[str, NodeVerdict]
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
    domains: list[DomainFault] = field(default_factory=list)
    """NVL72 racks whose NVLink domain failed as a whole
    (:func:`~gpufabric.verify.sweep.domains.domain_faults`)."""


def _record(jobs: Ledger, excused: set[int]) -> PartnerCounts:
    """The :class:`~gpufabric.verify.sweep.ledger.PartnerCounts` of the judged pairs less the
    ``excused`` ones (the ledger's own when nothing is excused)."""
    return PartnerCounts.of(jobs.pairs(), excused) if excused else jobs.record()


def _faulty(nodes: Sequence[str], rec: PartnerCounts, confirm: int) -> set[str]:
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


def _witnessed(
    x: str, rec: PartnerCounts, faulty: set[str], confirm: int, without: str = ""
) -> bool:
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
    jobs: Sequence[Job], rec: PartnerCounts, faulty: set[str], confirm: int, repeat: int
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
    rec: PartnerCounts,
    faulty: set[str],
    confirm: int,
    reachable: Mapping[str, int],
    expose: int,
) -> set[str]:
    """The ``confirm``-core of the passing pairs among nodes whose failures are all with
    faulty nodes and that passed with ``expose`` distinct partners (or every partner they can
    reach, ``reachable``): each passed with ``confirm`` distinct partners that are GOOD
    themselves."""
    good = {
        x
        for x in nodes
        if x not in faulty
        and all(y in faulty for y in rec.fails[x])
        and len(rec.passes[x]) >= min(expose, reachable[x])
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


def _uncorroborated(partners: Iterable[str], rec: PartnerCounts, good: set[str], confirm: int) -> list[str]:  # fmt: skip
    """The partners a faulty node failed with that have not yet passed with C + 2 distinct
    GOOD nodes: a node slow with some partners fails with them too, so they run more before
    their failures with it are blamed on it alone."""
    return sorted(p for p in partners if sum(1 for y in rec.passes[p] if y in good) < confirm + 2)


def _faulty_verdict(
    x: str, rec: PartnerCounts, good: set[str], repeat: int, confirm: int
) -> tuple[NodeVerdict, str, list[str]]:
    """BAD, or FLAKY, with the words and the failing partners to re-run."""
    fails, passes = rec.fails[x], rec.passes[x]
    failed = ", ".join(sorted(fails))
    if not passes:
        return NodeVerdict.BAD, f"fails with every partner ({failed})", []
    total = sum(fails.values()) + sum(passes.values())
    record = f"failed {sum(fails.values())} of {total} jobs"
    changed = sorted(p for p in fails if passes[p])
    if changed:
        return NodeVerdict.FLAKY, f"{record}; both passed and failed with {', '.join(changed)}", []
    steady = sorted(p for p in fails if p in good and fails[p] >= repeat)
    if len(steady) >= 2 and not _uncorroborated(steady, rec, good, confirm):
        return (
            NodeVerdict.BAD,
            f"slow with some partners: failed every time with {', '.join(steady)} "
            f"({repeat} runs each), passed with {', '.join(sorted(passes))}",
            [],
        )
    rerun = sorted(p for p in fails if p in good and fails[p] < repeat)
    return NodeVerdict.FLAKY, f"{record}: failed with {failed}, passed with others", rerun[:2]


def _unexplained(
    jobs: Sequence[Job], faulty: set[str], racks: Sequence[DomainFault] = ()
) -> dict[str, tuple[str, ...]]:
    """Node -> a failing group job it was in that no faulty member (nor a faulted NVLink
    domain holding the whole job) explains yet."""
    tainted: dict[str, tuple[str, ...]] = {}
    inside = [set(r.trays) for r in racks]
    for job in jobs:
        if job.members and any(set(job.members) <= trays for trays in inside):
            continue
        if job.members and job.verdict == "FAIL" and not faulty & set(job.members):
            for node in job.members:
                tainted.setdefault(node, job.members)
    return tainted


def _reach(
    nodes: Sequence[str], topo: Topology, paths: Sequence[PathFault], faulty: int,
    racks: Sequence[DomainFault] = (),
) -> dict[str, int]:  # fmt: skip
    """Partners each node can pass with: the others, less the faulty ones; only those under
    its own switch when a path fault cuts that switch off; only those outside its rack when
    its NVLink domain is faulted."""
    cut = {f.key for f in paths}
    if racks:
        by_rack = _reach(nodes, topo, paths, faulty)
        for rack in racks:
            for tray in rack.trays:
                by_rack[tray] = max(0, min(by_rack[tray], len(nodes) - len(rack.trays) - faulty))
        return by_rack
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


def _held(
    jobs: Sequence[Job], rec: PartnerCounts, faulty: set[str], confirm: int
) -> dict[str, str]:
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
    rec: PartnerCounts,
    in_failing_group: Mapping[str, tuple[str, ...]],
    not_shown_apart: Mapping[str, str],
    failed_with_flaky: Mapping[str, str],
    confirm: int,
) -> str:
    """Why an UNKNOWN node is not GOOD yet, in words (the strongest reason last wins)."""
    note = ""
    if rec.fails[x]:
        note = f"failed with {', '.join(sorted(rec.fails[x]))}, not yet explained"
    elif x in in_failing_group:
        note = f"in a failing group job ({', '.join(in_failing_group[x])}) not yet explained"
    if x in not_shown_apart:
        note = (
            f"failed with {not_shown_apart[x]}, whose fault is not shown apart from this "
            "node (fewer than two other witnesses): not GOOD until it is"
        )
    if x in failed_with_flaky:
        note = (
            f"failed with {failed_with_flaky[x]}, whose result changed with the same partner: "
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
    (group jobs as :func:`~gpufabric.verify.sweep.ledger.expand` reads them; the indices in
    ``excused`` are of that list). ``expose``: distinct partners a node passes with before it
    is GOOD (default C; a sweep with group jobs asks
    :func:`~gpufabric.verify.sweep.rounds.partners_needed` of the fleet, which its groups give
    at no extra job)."""
    ledger = ledger_of(jobs)
    indexed = functools.partial(ledger.exits, topo)
    paths, excused = path_faults(ledger.pairs(), topo, levels, indexed) if levels else ([], set())
    racks, inside = domain_faults(nodes, topo, levels, ledger.pairs(), ledger, excused)
    rec = _record(ledger, excused := excused | inside)
    faulty = _faulty(nodes, rec, confirm)
    in_failing_group = _unexplained(ledger, faulty, racks)
    reachable = _reach(nodes, topo, paths, len(faulty), racks)
    passes_by_node = ledger.passing()
    failed_with_flaky = _held(ledger, rec, faulty, confirm)
    not_shown_apart = _uncleared(ledger, rec, faulty, confirm, repeat)
    withheld = in_failing_group.keys() | failed_with_flaky.keys() | not_shown_apart.keys()
    eligible = [n for n in nodes if n not in withheld and passes_by_node[n] >= confirm]
    good = _good(eligible, rec, faulty, confirm, reachable, expose or confirm)
    mixed = [x for x in faulty if rec.passes[x]]
    failed_with = {p for x in mixed for p in rec.fails[x] if p in good}
    judgement = Judgement(
        verdicts={},
        notes={},
        paths=paths,
        good=good,
        faulty=faulty,
        excused=excused,
        corroborate=_uncorroborated(failed_with, rec, good, confirm),
        unshown=sorted(set(not_shown_apart.values())),
        domains=racks,
    )
    verdicts, notes = judgement.verdicts, judgement.notes
    for x in nodes:
        if x in good:
            verdicts[x] = NodeVerdict.GOOD
        elif x in faulty:
            verdicts[x], notes[x], rerun = _faulty_verdict(
                x, rec, good | {p for p, y in not_shown_apart.items() if y == x}, repeat, confirm
            )
            if rerun:
                judgement.retests[x] = rerun
        else:
            verdicts[x] = NodeVerdict.UNKNOWN
            note = _open_note(x, rec, in_failing_group, not_shown_apart, failed_with_flaky, confirm)
            if note:
                notes[x] = note
            if any(y not in faulty for y in rec.fails[x]):
                judgement.suspects.add(x)
    return judgement


def _wants_partner(
    x: str,
    rec: PartnerCounts,
    good: set[str],
    met: Mapping[str, set[str]],
    confirm: int,
    expose: int,
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
    faulted, racks = {f.key for f in verdict.paths}, {d.key for d in verdict.domains}
    passes_by_node = ledger.passing()
    short = {x for x in nodes if passes_by_node[x] < confirm}
    taken = set(busy)
    pairs: list[Pair] = []
    for x in sorted(verdict.retests):
        partner = next((p for p in verdict.retests[x] if p not in taken), None)
        if partner is not None and x not in taken:
            pairs.append((x, partner))
            taken |= {x, partner}
    refs = sorted(verdict.good, key=lambda n: shuffle_key(f"ref{round_}", n))
    by_leaf: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for r in refs:
        by_leaf[topo[r]].append(r)
    open_ = [x for x in nodes if verdict.verdicts[x] == NodeVerdict.UNKNOWN]
    waiting: list[str] = []
    ranked = sorted(open_, key=lambda n: shuffle_key(f"open{round_}", n))
    queue = list(dict.fromkeys(ranked + verdict.corroborate + verdict.unshown))
    free_refs = _Free(refs, taken)
    free_leaf = {leaf: _Free(members, taken) for leaf, members in by_leaf.items()}
    for x in queue:
        if x in taken or not _wants_partner(
            x, rec, verdict.good, in_pairs, confirm, expose or confirm
        ):
            continue
        cut_off = any(topo[x][: i + 1] in faulted for i in range(len(topo[x])))
        own = [] if topo[x] in racks else [free_leaf.get(topo[x], _Free([], taken))]
        lists = own + ([] if cut_off else [free_refs])
        # a node short of passing jobs may meet a partner again (a job is what it lacks)
        partner = _reference(x, lists, (topo, levels, faulted, racks), met[x], x in short)
        if partner is None:
            waiting.append(x)
        else:
            pairs.append((x, partner))
            taken |= {x, partner}
    return pairs + _open_pairs(waiting, topo, levels, met, (faulted, racks), round_, short)


def _reference(
    x: str, lists: Sequence[_Free],
    paths: tuple[Topology, Sequence[str], set[tuple[str, ...]], set[tuple[str, ...]]],
    seen: set[str], again: bool,
) -> str | None:  # fmt: skip
    """The first free candidate of ``lists``, in order, that ``x`` may run with (not itself,
    not across a faulted path of ``paths``: topology, levels, faulted switches, faulted
    NVLink domains) and has not met (``seen``); with ``again``, else the first it may run
    with."""
    topo, levels, faulted, racks = paths
    usable = (
        r for free in lists for r in free
        if r != x and not _blocked(x, r, topo, levels, (faulted, racks))
    )  # fmt: skip
    partner = next((r for r in usable if r not in seen), None)
    if partner is None and again:
        partner = next(
            (r for free in lists for r in free if r != x and not _blocked(x, r, topo, levels, (faulted, racks))),
            None,
        )  # fmt: skip
    return partner


Faulted = tuple[set[tuple[str, ...]], set[tuple[str, ...]]]
"""The faulted switches (their uplinks) and the faulted NVLink domains (a rack's key)."""


def _blocked(a: str, b: str, topo: Topology, levels: Sequence[str], faulted: Faulted) -> bool:
    """Whether the pair's path leaves a faulted switch, or stays inside a faulted NVLink
    domain."""
    switches, racks = faulted
    if racks and topo[a] == topo[b] and topo[a] in racks:
        return True
    return blocked(a, b, topo, levels, switches)


def _open_pairs(
    waiting: Sequence[str],
    topo: Topology,
    levels: Sequence[str],
    met: Mapping[str, set[str]],
    faulted: Faulted,
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
