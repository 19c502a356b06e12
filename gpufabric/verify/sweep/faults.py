"""Path faults, judged before any node: a switch (a leaf, then a spine) whose every job
leaving it failed (at least two, with at least two of its nodes), while those nodes pass
inside it, is a path fault: its uplink is named, the jobs across it prove nothing about their
nodes, no node is drained. Later rounds pair no node across a faulted uplink
(:func:`blocked`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpufabric.verify.sweep.job import Job, Pair, Topology


@dataclass(frozen=True, kw_only=True)
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
class Exits:
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
    index: Exits | None = None,
) -> list[PathFault]:  # fmt: skip
    """The faulted switches at one level; their jobs join ``excused``. Only failing jobs
    are set aside, so what passed (and where) is computed once (``index``: already counted,
    when nothing is excused yet)."""
    if index is None:
        index = Exits(level)
        for i, job in enumerate(jobs):
            if i not in excused:
                index.add(i, job, topo)
    passed, inside, exits = index.passed, index.inside, index.exits
    faults: list[PathFault] = []
    for switch, _ in sorted(exits.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        out = [i for i in exits[switch] if i not in excused] if excused else list(exits[switch])
        nodes = _faulted_switch(switch, out, jobs, passed, inside, topo)
        if nodes is not None:
            faults.append(
                PathFault(
                    level=levels[level],
                    switch=switch[-1],
                    failed=len(out),
                    jobs=len(out),
                    nodes=nodes,
                    key=switch,
                )
            )
            excused |= set(out)
    return faults


def path_faults(
    jobs: Sequence[Job], topo: Topology, levels: Sequence[str],
    indexed: Callable[[int], Exits],
) -> tuple[list[PathFault], set[int]]:  # fmt: skip
    """The switches whose uplink explains their failing jobs, narrowest level first (a
    switch's jobs are set aside before the next is looked at), and the indices of the jobs
    they explain. ``indexed``: a level's :class:`Exits` of all of ``jobs`` (a ledger's)."""
    faults: list[PathFault] = []
    excused: set[int] = set()
    for level in reversed(range(len(levels))):
        index = None if excused else indexed(level)
        faults += _level_faults(jobs, topo, levels, level, excused, index)
    return faults, excused


def blocked(
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
