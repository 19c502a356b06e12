"""The sweep planner's choices a user relies on: it picks pairs or the group size by its own
estimate of the wall time for the quota, prints that mode's jobs, rounds and time before it
starts, runs each round's jobs as the quota's nodes allow, and never calls GOOD a node whose
failure another node's testimony alone explains."""

from __future__ import annotations

import contextlib
import sys
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sweepfleet

from gpufabric.verify.sweep import cost as sweep_cost
from gpufabric.verify.sweep import judge as sweep_judge
from gpufabric.verify.sweep import ledger as sweep_ledger
from gpufabric.verify.sweep import rounds as sweep_rounds
from gpufabric.verify.sweep.cost import Cost
from gpufabric.verify.sweep.job import Job
from gpufabric.verify.sweep.run import sweep


def fleet_topology(n: int, per_leaf: int = 16, per_spine: int = 4) -> dict[str, tuple[str, ...]]:
    return {f"n{i:05d}": (f"s{i // per_leaf // per_spine}", f"l{i // per_leaf}") for i in range(n)}


# ------------------------------------------------------------------ the mode and its estimate


def test_the_planner_picks_the_mode_of_least_estimated_wall_time() -> None:
    """1,024 nodes, 16 to a leaf, 16 nodes of quota at once, 15 partners asked
    (ceil(log2 1,024) + 5): groups of 16 (one round of the whole leaf at 300 s a job, then a
    pair round across each switch level) give every node C jobs and 17 partners in 8.5 h;
    groups of 8 need 6 more pair rounds (or a second group round), pairs 15 rounds."""
    topo = fleet_topology(1024)
    mode = sweep_cost.choose_mode(topo, 8, 3, 16)
    assert (mode.size, mode.group_rounds, mode.pair_scopes) == (16, 1, (1, 0))
    assert mode.seconds == pytest.approx(8.5 * 3600, rel=0.01)
    assert mode.jobs == 64 + 2 * 512
    assert mode.expose == sweep_rounds.partners_needed(1024) == 15
    # every job the same 90 s: the whole leaf in one job is cheapest
    flat = sweep_cost.choose_mode(topo, 8, 3, 16, Cost(90.0, 0.0))
    assert flat.size == 16
    # each rank order as long as a job: pairs (15 rounds for 15 partners) win
    dear = sweep_cost.choose_mode(topo, 8, 3, 16, Cost(90.0, 200.0))
    assert (dear.size, dear.group_rounds, len(dear.pair_scopes)) == (2, 0, 15)


@pytest.mark.parametrize(("at_once", "size"), [(1, 2), (2, 4), (4, 8), (8, 16), (16, 16)])
def test_the_group_size_follows_the_quota(at_once: int, size: int) -> None:
    """A group never needs more nodes than the quota runs at once, and a larger quota does
    not make groups larger than the estimate finds worth it (each rank order costs time)."""
    mode = sweep_cost.choose_mode(fleet_topology(256), at_once, 3, 16)
    assert mode.size == size
    assert mode.size <= 2 * at_once


def test_without_group_jobs_the_pair_sweep_is_unchanged() -> None:
    topo = fleet_topology(1024)
    mode = sweep_cost.choose_mode(topo, 8, 3, 2)
    assert (mode.size, mode.group_rounds, mode.pair_scopes, mode.expose) == (2, 0, (None, 1, 0), 3)
    assert sweep_cost.estimate(topo, 8, None, 3).words() == sweep_cost.estimate(topo, 8, None, 3, group=2).words()  # fmt: skip


def test_the_estimate_prints_the_mode_actually_used() -> None:
    topo = fleet_topology(1024)
    est = sweep_cost.estimate(topo, 8, 600.0, 3, group=16)
    words = est.words()
    assert est.mode == sweep_cost.choose_mode(topo, 8, 3, 16)
    assert "3 screening rounds (1 of group jobs of up to 16 nodes" in words
    assert f"{64 + 1024} jobs" in words
    assert "16 nodes at a time" in words
    assert "about 8.5 h at 90 s a job and 30 s per rank order past the first" in words
    assert "at most 32.0 h" in words  # 64 waves of groups, 2 x 64 of pairs, 600 s each
    assert "GOOD after 15 distinct partners" in words


@pytest.mark.parametrize(("n", "partners"), [(16, 9), (64, 11), (256, 13), (1024, 15), (4096, 17)])
def test_the_partner_requirement_grows_with_the_fleet(n: int, partners: int) -> None:
    """A node slow with half of its partners passes p of them with probability 2^-p: with 8
    partners for every fleet, one of 4,096 nodes (128 such) is GOOD in a quarter of fleets.
    The partners asked grow as ceil(log2 N) + 5, so the fleet's N nodes together escape with
    probability N x 2^-p <= 1/32; the estimate prints that, and the planner asks it."""
    assert sweep_rounds.partners_needed(n) == partners
    assert n * 2.0**-partners <= 1 / 32
    topo = fleet_topology(n)
    mode = sweep_cost.choose_mode(topo, 8, 3, 16)
    assert mode.expose == partners
    assert mode.partners >= partners  # the screening rounds give them
    words = sweep_cost.estimate(topo, 8, None, 3, group=16).words()
    assert f"GOOD after {partners} distinct partners" in words
    assert f"<= 2^-{partners}, the fleet's {n:,} nodes together <= " in words
    # pairs only (and health re-certification) keep C partners
    assert sweep_cost.choose_mode(topo, 8, 3, 2).expose == 3


def test_the_partners_for_any_fleet_keep_the_fleet_bound() -> None:
    needed = [sweep_rounds.partners_needed(n) for n in range(1, 20_000)]
    assert needed == sorted(needed)  # never fewer for a larger fleet
    assert all(p >= sweep_rounds.EXPOSE for p in needed)
    assert all(n * 2.0**-p <= 1 / 32 for n, p in enumerate(needed, 1))
    assert sweep_rounds.partners_needed(2, confirm=12) == 12


def test_judge_demands_the_fleets_partners() -> None:
    """64 nodes ask 11 partners: a node that passed C jobs with 10 distinct GOOD partners is
    not GOOD yet (with 8 it was), with 11 it is."""
    nodes = [f"n{i:02d}" for i in range(64)]
    flat: dict[str, tuple[str, ...]] = dict.fromkeys(nodes, ())
    x, rest = nodes[0], tuple(nodes[1:])
    need = sweep_cost.choose_mode(fleet_topology(64), 8, 3, 16).expose
    assert need == 11
    jobs = [Job(r, rest[:2], "PASS", rest) for r in (1, 2, 3)]
    jobs += [Job(4 + i, (x, p), "PASS") for i, p in enumerate(rest[: need - 1])]
    verdict = sweep_judge.judge(nodes, flat, (), jobs, expose=need)
    assert verdict.verdicts[x] == "UNKNOWN"
    assert set(rest) <= verdict.good
    # it still wants a partner, and gets a proven one it has not met
    pairs = sweep_judge.adaptive_pairs(nodes, flat, (), jobs, verdict, 20, 3, need)
    partner = next(b if a == x else a for a, b in pairs if x in (a, b))
    assert partner in verdict.good
    assert partner not in rest[: need - 1]
    jobs.append(Job(20, (x, partner), "PASS"))
    assert sweep_judge.judge(nodes, flat, (), jobs, expose=need).verdicts[x] == "GOOD"


def test_a_swept_node_is_good_only_with_the_fleets_partners() -> None:
    """End to end with group jobs on a healthy fleet of 64: every node is GOOD, each with at
    least partners_needed(64) distinct passing partners."""
    fleet = sweepfleet.build(64, "bad", 0, 3)
    report = sweep(
        fleet.nodes, fleet.run_pair, 8, topology=fleet.topology, levels=fleet.levels,
        run_group=fleet.run_group, group=16,
    )  # fmt: skip
    partners: dict[str, set[str]] = {n: set() for n in fleet.nodes}
    for job in sweep_ledger.expand(report.jobs):
        if job.verdict == "PASS":
            a, b = job.pair
            partners[a].add(b)
            partners[b].add(a)
    assert {r.verdict for r in report.nodes.values()} == {"GOOD"}
    assert min(len(p) for p in partners.values()) >= sweep_rounds.partners_needed(64)


def test_the_sweep_runs_the_mode_it_estimated() -> None:
    fleet = sweepfleet.build(256, "bad", 0, 1)
    mode = sweep_cost.choose_mode(fleet.topology, 8, 3, 16)
    report = sweep(
        fleet.nodes, fleet.run_pair, 8, topology=fleet.topology, levels=fleet.levels,
        run_group=fleet.run_group, group=16,
    )  # fmt: skip
    assert report.rounds == mode.rounds  # a healthy fleet: the screening rounds and no more
    assert len(report.jobs) == mode.jobs
    assert set(report.nodes) == {n for n, r in report.nodes.items() if r.verdict == "GOOD"}


def test_round_seconds_admits_jobs_as_the_quota_has_nodes() -> None:
    seconds = Cost().seconds  # 2 nodes 90 s, 8 nodes 180 s
    # two groups of 8 fill 16 nodes; the pairs start when they end
    assert sweep_cost.round_seconds([2, 8, 2, 8], 16, seconds) == 180 + 90
    # a group of 8 and four pairs at once
    assert sweep_cost.round_seconds([2, 2, 8, 2, 2], 16, seconds) == 180
    assert sweep_cost.round_seconds([2] * 16, 16, seconds) == 2 * 90
    assert sweep_cost.round_seconds([], 16, seconds) == 0


def test_a_round_never_runs_more_nodes_than_the_quota_and_fills_it() -> None:
    """Two groups of 8 share the 16 nodes of 8 two-node jobs' worth of quota: both run at
    once (each waits for the other), never more than 16 nodes."""
    lock = threading.Lock()
    state = {"now": 0, "most": 0}
    gate = threading.Barrier(2, timeout=5)

    def job(nodes: tuple[str, ...]) -> Any:
        with lock:
            state["now"] += len(nodes)
            state["most"] = max(state["most"], state["now"])
        if len(nodes) > 2:
            with contextlib.suppress(threading.BrokenBarrierError):
                gate.wait()  # both groups of round 1 run at once
        with lock:
            state["now"] -= len(nodes)
        return SimpleNamespace(verdict="PASS", runs=[])

    nodes = [f"n{i:02d}" for i in range(16)]
    topo = dict.fromkeys(nodes, ("leaf",))
    report = sweep(
        nodes, lambda p, r, i: job(p), 8, topology=topo, levels=("leaf",),
        run_group=lambda g, r, i: job(g), group=8, max_rounds=1,
    )  # fmt: skip
    assert [len(j.nodes) for j in report.jobs] == [8, 8]
    assert state["most"] == 16
    assert not gate.broken


# ------------------------------------------------------------------ whose failure it was


NODES = [f"n{i:02d}" for i in range(16)]
FLAT: dict[str, tuple[str, ...]] = dict.fromkeys(NODES, ())


def test_a_flaky_node_that_made_a_healthy_one_look_faulty_is_never_good() -> None:
    """Found at N = 1,024 in the mixed simulation (seed 1002): flaky f failed with healthy h
    in a group of three and in a pair, another flaky node f2 failed once with h, so h had two
    witnesses (f and f2) and, passing with f later, was FLAKY; f then passed six more jobs and
    was GOOD (the hold counted only pair failures and let it go after C passes). h's fault
    rests on f's own testimony: f is not GOOD, whatever it passes, until h fails with two
    other proven partners."""
    h, f, f2, g = "n00", "n05", "n09", "n03"
    jobs = [
        *sweepfleet.screened(NODES),
        Job(6, (h, f), "FAIL", (h, f, g)),
        Job(7, (h, f2), "FAIL"),
        Job(8, (h, f), "FAIL"),
        Job(9, (h, f), "PASS"),
        *[
            Job(10 + i, (f, p), "PASS")
            for i, p in enumerate(("n12", "n14", "n07", "n10", "n11", "n15"))
        ],
    ]
    verdict = sweep_judge.judge(NODES, FLAT, (), jobs)
    assert verdict.verdicts[h] == "FLAKY"
    assert verdict.verdicts[f] == "UNKNOWN"
    assert "whose fault is not shown apart from this node" in verdict.notes[f]
    assert h in verdict.unshown  # h meets more proven partners
    # h fails with two proven partners besides f: its fault stands apart from f
    shown = [Job(16, (h, "n12"), "FAIL"), Job(17, (h, "n14"), "FAIL")]
    assert sweep_judge.judge(NODES, FLAT, (), jobs + shown).verdicts[f] == "GOOD"


def test_a_group_a_faulty_node_explains_clears_its_other_members() -> None:
    """A node never passing, failing with two proven partners, explains the failing group it
    was in: the others are GOOD on their passing jobs (no hold for a deterministic fault)."""
    b, x = "n00", "n05"
    jobs = [j for j in sweepfleet.screened(NODES) if b not in j.pair]
    jobs += [Job(6, (b, x), "FAIL", (b, x, "n03")), Job(7, (b, "n12"), "FAIL"), Job(8, (b, "n14"), "FAIL")]  # fmt: skip
    verdict = sweep_judge.judge(NODES, FLAT, (), jobs)
    assert verdict.verdicts[b] == "BAD"
    assert verdict.verdicts[x] == verdict.verdicts["n03"] == "GOOD"


def test_a_cut_off_leaf_whose_groups_all_failed_is_a_path_fault_not_drained() -> None:
    """Found at N = 256 in the mixed simulation (seed 1000): leaf-003's uplink is degraded
    and both its groups held a faulty node, so every member also failed its pairs across
    leaves; re-running each group without those 'suspects' left nothing inside the leaf to
    pass, and its 12 healthy nodes were drained. Many suspects in one group split it
    instead, its nodes pass inside the leaf and the uplink is named."""
    fleet = sweepfleet.build(256, "mixed", 8, 1000)
    report = sweep(
        fleet.nodes, fleet.run_pair, 8, topology=fleet.topology, levels=fleet.levels,
        run_group=fleet.run_group, group=16,
    )  # fmt: skip
    got = sweepfleet.score(fleet, report)
    assert "leaf-003" in fleet.uplinks
    assert "leaf-003" in {p.switch for p in report.paths}
    assert (got.false_drains, got.false_paths, got.flaky_good_after_failure) == (0, 0, 0)
    # no healthy node drained; a flaky node that failed every job it ran (with 15 partners
    # asked of 256 nodes, gpu-00254 failed 4 pairs with 4 healthy partners) is drained as BAD
    assert set(report.bad) <= fleet.faulty | fleet.flaky


def test_a_node_failing_once_keeps_meeting_proven_partners_past_twelve() -> None:
    """Found at N = 4,096 (partner-dependent, seed 1002, main): a node slow with half of its
    partners failed once, then passed with 11 proven partners in a row; having met 12 in pair
    jobs it got no more, and its slowness stayed UNKNOWN (not found). It meets partners until
    max(4C, 2 (EXPOSE + C)): each new one is another even chance of its second witness."""
    nodes = [f"n{i:02d}" for i in range(32)]
    flat: dict[str, tuple[str, ...]] = dict.fromkeys(nodes, ())
    halves = (tuple(nodes[:16]), tuple(nodes[16:]))
    jobs = [Job(r, h[:2], "PASS", h) for r in (1, 2, 3) for h in halves]
    x, y = "n00", "n01"
    jobs.append(Job(4, (x, y), "FAIL"))
    jobs += [Job(5 + i, (x, p), "PASS") for i, p in enumerate(nodes[2:13])]
    verdict = sweep_judge.judge(nodes, flat, (), jobs, expose=sweep_rounds.EXPOSE)
    assert verdict.verdicts[x] == "UNKNOWN"
    pairs = sweep_judge.adaptive_pairs(nodes, flat, (), jobs, verdict, 16, 3, sweep_rounds.EXPOSE)
    partner = next((b if a == x else a for a, b in pairs if x in (a, b)), None)
    assert partner is not None
    assert verdict.verdicts[partner] == "GOOD"


def test_the_table_and_document_name_the_partners_the_sweep_demanded() -> None:
    """With group jobs the table's header and the JSON say the fleet's partner count
    (the one the estimate printed), not --sweep-confirm's C."""
    from gpufabric.verify.sweep.run import SweepReport, format_table
    from gpufabric.verify.sweep.session import sweep_document

    report = SweepReport(nodes={}, rounds=0)
    report.partners, report.confirm = 11, 3
    assert "GOOD after passing with 11 distinct GOOD partners" in format_table(report)
    assert sweep_document(report, {})["partners"] == 11
