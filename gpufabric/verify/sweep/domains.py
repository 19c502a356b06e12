"""NVLink domains in the sweep: on GB200/GB300 NVL72 racks the unit is a tray inside its
NVLink domain, read from GPU Feature Discovery's clique label (``nvidia.com/gpu.clique``,
``<ClusterUUID>.<CliqueId>``, one value per rack).

- Topology (:func:`nvlink_topology`): the clique is the sweep's innermost level, so the
  screening rounds pair and group trays inside their rack first (the NVLink path), a failing
  group splits within the rack, and the rounds across the clique level pair trays of
  different racks (the InfiniBand path). The InfiniBand switch levels are kept only as far
  as every rack sits under one switch at them (a rack whose trays hang off several leaves
  keeps the levels above the leaf): a level a rack spans would count NVLink jobs as jobs
  across that switch.
- Rack faults (:func:`domain_faults`): a clique none of whose jobs inside it passed, where
  every tray failed a two-node job inside it and at least two of its trays passed a job
  with a tray of another rack, is an NVLink fault of the rack: named once as the clique, not
  as its trays. Its jobs inside prove nothing about the trays (they are judged by their jobs
  across racks, over InfiniBand), none of its trays is drained for it, and later rounds pair
  no two of its trays. Half or more of a rack's trays failing every job inside it at once
  looks the same (every disjoint pair holds one of them): then too the rack is what to look
  at (its NVLink switch trays and spines are the common part).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpufabric.verify.sweep.job import Job, Pair, Topology

CLIQUE_LABEL = "nvidia.com/gpu.clique"
"""GPU Feature Discovery's label on NVL72 trays: ``<ClusterUUID>.<CliqueId>``."""


def cliques_of(
    names: Sequence[str], labels: Mapping[str, Mapping[str, str]]
) -> tuple[dict[str, str], list[str]]:
    """Each node's clique when every one of ``names`` carries the clique label (else none),
    and the nodes without it (none when no node has it: not an NVL72 fleet)."""
    cliques = {n: labels.get(n, {}).get(CLIQUE_LABEL, "") for n in names}
    lacking = [n for n in names if not cliques[n]]
    if not names or len(lacking) == len(names):
        return {}, []
    if lacking:
        return {}, lacking
    return cliques, []


def nvlink_topology(
    names: Sequence[str],
    topo: Mapping[str, tuple[str, ...]],
    levels: Sequence[str],
    cliques: Mapping[str, str],
) -> tuple[dict[str, tuple[str, ...]], tuple[str, ...], tuple[str, ...]]:
    """The sweep's topology with each node's clique as its innermost level: (topology,
    levels, the InfiniBand levels dropped because a rack spans switches at them). The
    switch levels are kept, widest first, as long as every rack sits under one switch at
    each (a tray of a rack may not be known at a level: ``topo`` empty keeps none)."""
    known = bool(levels) and all(len(topo.get(n, ())) == len(levels) for n in names)
    keep = len(levels) if known else 0
    for depth in range(keep):
        seen: dict[str, tuple[str, ...]] = {}
        if any(seen.setdefault(cliques[n], topo[n][: depth + 1]) != topo[n][: depth + 1] for n in names):  # fmt: skip
            keep = depth
            break
    out = {n: (*tuple(topo[n][:keep]), cliques[n]) for n in names}
    dropped = tuple(levels[keep:]) if known else ()
    return out, (*tuple(levels[:keep]), CLIQUE_LABEL), dropped


@dataclass(frozen=True, kw_only=True)
class DomainFault:
    """An NVL72 rack whose every job inside its NVLink domain failed while its trays pass
    with trays of other racks."""

    clique: str
    key: tuple[str, ...]
    """The clique with the switches above it (its trays' topology)."""
    trays: tuple[str, ...]
    """The rack's trays in the sweep."""
    failed: int
    """Jobs inside the domain, every one failed."""
    across: tuple[str, ...]
    """The trays that passed a job with a tray of another rack."""


def in_domain(topo: Topology, levels: Sequence[str], nodes: Sequence[str]) -> bool:
    """Whether ``nodes`` are all trays of one NVLink domain (the sweep's innermost level is
    the clique and they share it)."""
    if not levels or levels[-1] != CLIQUE_LABEL or not nodes:
        return False
    first = topo.get(nodes[0], ())
    return bool(first) and all(topo.get(n, ()) == first for n in nodes)


def domain_faults(
    nodes: Sequence[str],
    topo: Topology,
    levels: Sequence[str],
    pairs: Sequence[Job],
    jobs: Sequence[Job],
    excused: set[int],
) -> tuple[list[DomainFault], set[int]]:
    """The racks faulted as a whole (see the module), and the indices of ``pairs`` (the
    record as pairs, :func:`~gpufabric.verify.sweep.ledger.expand`) inside them, which
    prove nothing about their trays. ``jobs``: the record as it ran (failing group jobs
    count as jobs inside a rack); ``excused``: pairs a path fault already explains."""
    if not levels or levels[-1] != CLIQUE_LABEL:
        return [], set()
    trays: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for n in nodes:
        trays[topo[n]].append(n)
    inside: dict[tuple[str, ...], list[int]] = defaultdict(list)
    passed_in: set[tuple[str, ...]] = set()
    failed_pair: dict[tuple[str, ...], set[str]] = defaultdict(set)
    across: dict[tuple[str, ...], set[str]] = defaultdict(set)
    for i, job in enumerate(pairs):
        if i in excused or job.verdict not in ("PASS", "FAIL"):
            continue
        a, b = job.pair
        if topo[a] == topo[b]:
            inside[topo[a]].append(i)
            if job.verdict == "PASS":
                passed_in.add(topo[a])
            elif not job.members:
                failed_pair[topo[a]].update(job.pair)
        elif job.verdict == "PASS":
            across[topo[a]].add(a)
            across[topo[b]].add(b)
    groups: dict[tuple[str, ...], int] = defaultdict(int)
    for job in jobs:
        if job.members and job.verdict == "FAIL" and in_domain(topo, levels, job.members):
            groups[topo[job.members[0]]] += 1
    faults: list[DomainFault] = []
    out: set[int] = set()
    for key in sorted(trays):
        members = trays[key]
        failed = sum(1 for i in inside[key] if pairs[i].verdict == "FAIL") + groups[key]
        if (
            len(members) < 2
            or key in passed_in
            or failed < 2
            or failed_pair[key] != set(members)
            or len(across[key]) < 2
        ):
            continue
        faults.append(
            DomainFault(
                clique=key[-1], key=key, trays=tuple(sorted(members)), failed=failed,
                across=tuple(sorted(across[key])),
            )
        )  # fmt: skip
        out |= set(inside[key])
    return faults, out


def suspected(
    nodes: Sequence[str], topo: Topology, levels: Sequence[str], pairs: Sequence[Job], jobs: Sequence[Job],
    faulted: set[tuple[str, ...]],
) -> dict[tuple[str, ...], list[str]]:  # fmt: skip
    """Racks not yet faulted that may be (at least two jobs inside failed, none passed):
    rack -> its trays that have not yet failed a two-node job inside it (they meet each
    other, or a tray of the rack, so that the rule of :func:`domain_faults` can be read)."""
    if not levels or levels[-1] != CLIQUE_LABEL:
        return {}
    trays: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for n in nodes:
        trays[topo[n]].append(n)
    failed: dict[tuple[str, ...], int] = defaultdict(int)
    passed: set[tuple[str, ...]] = set()
    in_pair: set[str] = set()
    for job in [*pairs, *(j for j in jobs if j.members and j.verdict == "FAIL")]:
        if job.verdict not in ("PASS", "FAIL") or not in_domain(topo, levels, job.nodes):
            continue
        key = topo[job.nodes[0]]
        if job.verdict == "PASS":
            passed.add(key)
            continue
        failed[key] += 1
        if not job.members:
            in_pair.update(job.pair)
    return {
        key: [n for n in members if n not in in_pair]
        for key, members in sorted(trays.items())
        if key not in faulted and key not in passed and failed[key] >= 2 and len(members) >= 2
    }


def inside_pairs(waiting: Sequence[str], trays: Sequence[str], taken: set[str]) -> list[Pair]:
    """Pairs inside one suspected rack: each of ``waiting`` (its trays not yet in a failing
    pair inside it) with another of them, else with any free tray of the rack."""
    pairs: list[Pair] = []
    free = [n for n in waiting if n not in taken]
    while len(free) >= 2:
        a, b = free.pop(0), free.pop(0)
        pairs.append((a, b))
        taken |= {a, b}
    if free:
        a = free[0]
        partner = next((n for n in trays if n != a and n not in taken), None)
        if partner is not None:
            pairs.append((a, partner))
            taken |= {a, partner}
    return pairs


def domain_words(fault: DomainFault) -> str:
    """A faulted rack in words: its clique, what failed, and that no tray is drained."""
    return (
        f"NVLink domain {CLIQUE_LABEL}={fault.clique}: all {fault.failed} jobs inside it "
        f"failed while its trays pass with other racks ({', '.join(fault.across)}); every "
        f"tray ({len(fault.trays)}) failed inside it: check the rack's NVLink (switch trays, "
        "the IMEX domain, the GPUs' fabric state with `nvidia-smi -q`); no tray drained for it"
    )
