"""The sweep's record of jobs, as the planner and the judge read it: a pair job as it ran; a
passing group job as a pass for every pair of it (:func:`expand`); a failing one as no pair
(its nodes are not GOOD until a faulty member explains it, and it splits:
:func:`~gpufabric.verify.sweep.rounds.split_jobs`). The :class:`Ledger` keeps those pairs,
who met whom and each node's passing jobs up to date as the rounds append to it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, SupportsIndex, overload

from gpufabric.verify.sweep.faults import Exits
from gpufabric.verify.sweep.job import Job, Topology


@dataclass
class PartnerCounts:
    """Judged jobs on clean paths, per node: partner -> count."""

    fails: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    passes: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))

    @classmethod
    def of(cls, jobs: Sequence[Job], excused: set[int]) -> PartnerCounts:
        record = cls()
        for i, job in enumerate(jobs):
            if i in excused or job.verdict not in ("PASS", "FAIL"):
                continue
            side = record.passes if job.verdict == "PASS" else record.fails
            a, b = job.pair
            side[a][b] += 1
            side[b][a] += 1
        return record


def expand(jobs: Sequence[Job]) -> Sequence[Job]:
    """The record as pairs: a pair job as it ran; a passing group job as a passing job for
    every pair of its nodes (its rings carried traffic between each pair, see
    :func:`~gpufabric.verify.sweep.rounds.ring_orders`); a failing group job as no pair (it
    says some pair or node in it is slow, not which: its split says that, and it taints its
    nodes until explained)."""
    return ledger_of(jobs).pairs()


def ledger_of(jobs: Iterable[Job]) -> Ledger:
    """``jobs`` as a :class:`Ledger`: the sweep's own record is one (kept up to date round
    by round); any other list of jobs is read into a new one."""
    return jobs if isinstance(jobs, Ledger) else Ledger(jobs)


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
    whom, the passing pairs, each node's passing jobs, the :class:`PartnerCounts`) up to date
    with the jobs appended since, instead of computing them from the whole record each
    time: what the planner's and the judge's functions return for a ledger is what they
    return for a list of the same jobs. A record changed otherwise than by appending (``append``, ``extend``,
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
        self._rec = PartnerCounts()
        self._passed: set[frozenset[str]] = set()
        self._ran: set[frozenset[str]] = set()
        self._passing: Counter[str] = Counter()
        self._topo: Topology | None = None
        self._levels: dict[int, Exits] = {}

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

    def record(self) -> PartnerCounts:
        """The :class:`PartnerCounts` of every judged pair (nothing excused)."""
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

    def exits(self, topo: Topology, level: int) -> Exits:
        """What :func:`~gpufabric.verify.sweep.faults.path_faults` counts of the pairs at
        ``level`` (nothing excused), for ``topo`` (the sweep's: another one is counted
        again)."""
        self._sync()
        if topo is not self._topo:
            self._topo, self._levels = topo, {}
        if level not in self._levels:
            index = Exits(level)
            for i, pair in enumerate(self._pairs):
                index.add(i, _pair_job(pair), topo)
            self._levels[level] = index
        return self._levels[level]


def passing_jobs(jobs: Iterable[Job]) -> Counter[str]:
    """Node -> the jobs it passed (a group job is one: its runs share one time window, and
    a node that fails one job in three passes any one job with probability 2/3)."""
    return ledger_of(jobs).passing()
