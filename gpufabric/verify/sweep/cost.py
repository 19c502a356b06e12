"""What the sweep's screening rounds take, and the screening mode chosen by it: a job of g
nodes takes a pair's time plus two more runs per rank order past the first (:class:`Cost`); a
round's jobs start largest first as the quota frees their nodes (:func:`round_seconds`);
:func:`choose_mode` weighs pairs only against each group size the quota and the leaves allow
and picks the least expected wall time, and :func:`estimate` says it before the sweep starts.
"""

from __future__ import annotations

import functools
import heapq
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpufabric.verify.sweep.job import Topology
from gpufabric.verify.sweep.rounds import (
    CONFIRM,
    confidence_words,
    group_size,
    partners_needed,
    ring_orders,
    round_scope_at,
    screening_rounds,
)

TYPICAL_JOB_S = 90.0
"""A two-node nccl-tests acceptance job from submission to its judged log (pods scheduled,
images cached, both tests over their sizes): what the printed estimate assumes."""
RUN_S = 15.0
"""One more nccl-tests run inside a job (mpirun start, NCCL init, its sizes): a group job runs
both tests once more for each rank order of
:func:`~gpufabric.verify.sweep.rounds.ring_orders` past the first."""


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


@dataclass(frozen=True, kw_only=True)
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
    """The job sizes of one round of :func:`~gpufabric.verify.sweep.rounds.screening_groups`
    (without running the hash)."""
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
    """Pairs only: ``rounds`` screening rounds as
    :func:`~gpufabric.verify.sweep.rounds.round_scope` numbers them."""
    depth = max((len(t) for t in topo.values()), default=0)
    scopes = tuple(round_scope_at(r, depth) for r in range(1, rounds + 1))
    per_round = len(topo) // 2
    took = rounds * _screening_round_s((2,) * per_round, 2 * at_once, cost)
    return Mode(
        size=2,
        group_rounds=0,
        pair_scopes=scopes,
        expose=expose,
        seconds=took,
        jobs=rounds * per_round,
        partners=rounds,
    )


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
    return Mode(
        size=size,
        group_rounds=rounds,
        pair_scopes=scopes,
        expose=expose,
        seconds=took,
        jobs=jobs,
        partners=partners + extra,
    )


def choose_mode(
    topo: Topology, at_once: int, confirm: int = CONFIRM, group: int = 2, cost: Cost | None = None
) -> Mode:
    """The screening the sweep runs with ``at_once`` two-node jobs' worth of quota and group jobs
    of at most ``group`` nodes (2: pairs only, C partners as before): the one of least expected
    wall time among pairs and every group size the quota and the leaves allow (1 to 3 group
    rounds), each giving every node C jobs and
    :func:`~gpufabric.verify.sweep.rounds.partners_needed` distinct partners."""
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


@dataclass(frozen=True, kw_only=True)
class Estimate:
    """The screening rounds :func:`estimate` expects, and its words."""

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
    return Estimate(
        nodes=len(topo),
        rounds=mode.rounds,
        jobs=mode.jobs,
        at_once=at_once,
        waves=waves,
        timeout_s=timeout_s,
        mode=mode,
        cost=cost,
        limit_s=limit,
    )
