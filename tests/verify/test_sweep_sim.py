"""The sweep over simulated fleets (tests/sweepfleet.py): what a user relies on when they drain
what it names. Deterministic, partner-dependent and cross-leaf faults: no healthy node drained,
no faulty node or uplink missed, a degraded uplink named as a path fault. Flaky nodes: reported
FLAKY, never GOOD after failing with a healthy partner, never drained on one result."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sweepfleet

from gpufabric.verify.sweep import cost as sweep_cost
from gpufabric.verify.sweep import faults as sweep_faults
from gpufabric.verify.sweep import job as sweep_job
from gpufabric.verify.sweep import ledger as sweep_ledger
from gpufabric.verify.sweep import rounds as sweep_rounds
from gpufabric.verify.sweep import session
from gpufabric.verify.sweep.run import format_table, localize_rails, sweep

SIZES = (16, 64, 256)


def swept(n: int, kind: str, seed: int, k: int | None = None, confirm: int = 3) -> Any:
    fleet = sweepfleet.build(n, kind, k if k is not None else max(1, n // 32), seed)
    report = sweep(
        fleet.nodes, fleet.run_pair, 8, topology=fleet.topology, levels=fleet.levels,
        confirm=confirm,
    )  # fmt: skip
    return fleet, report


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("seed", [1, 2])
def test_deterministic_bad_nodes_exactly(n: int, seed: int) -> None:
    fleet, report = swept(n, "bad", seed)
    assert set(report.bad) == fleet.bad
    assert report.paths == []
    assert report.flaky == []
    assert report.unknown == []


@pytest.mark.parametrize("n", SIZES)
def test_bad_rails_are_drained_and_their_rail_named(n: int) -> None:
    fleet, report = swept(n, "rail", 3)
    assert set(report.bad) == set(fleet.rail)
    localize_rails(report, sweepfleet.RAILS, fleet.run_rail_pair, 8)
    for node, rail in fleet.rail.items():
        assert report.nodes[node].failing_rails == [rail]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("seed", [1, 2])
def test_a_degraded_leaf_uplink_is_a_path_fault_and_drains_nothing(n: int, seed: int) -> None:
    fleet, report = swept(n, "uplink", seed)
    assert report.bad == []
    assert {p.switch for p in report.paths} == fleet.uplinks
    assert all(p.level == sweepfleet.LEAF_LABEL for p in report.paths)
    for fault in report.paths:  # the nodes named are under that leaf
        assert {fleet.leaf(node) for node in fault.nodes} == {fault.switch}
    table = format_table(report)
    for leaf in fleet.uplinks:
        assert f"uplink of {sweepfleet.LEAF_LABEL}={leaf}" in table
    assert "drain:" not in table


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("seed", [1, 2])
def test_a_node_slow_with_half_its_partners_is_drained_and_told_apart(n: int, seed: int) -> None:
    """Every such node caught failing with a healthy partner is drained, as a node slow with
    some partners (not a path fault), and no healthy node is. One that passed with all of its
    first C partners cannot be told: the stated rule bounds that at 2^-C (here C = 5)."""
    fleet, report = swept(n, "partner", seed, confirm=5)
    caught = {
        node
        for job in report.jobs
        if job.verdict == "FAIL"
        for node in job.pair
        if node in fleet.partner
    }
    assert caught <= set(report.bad) <= fleet.partner
    assert report.paths == []  # not mistaken for a path fault
    for node in fleet.partner - caught:  # never failed: its record is all passes
        assert report.nodes[node].verdict == "GOOD"
    for node in caught:
        assert report.nodes[node].note.startswith(("slow with some partners", "fails with every"))


def test_partner_dependent_escapes_stay_within_the_stated_rule() -> None:
    """Over 40 such nodes at C = 3 (each escapes with probability at most 2^-3 when its
    screening partners are drawn independently), escapes stay far below half."""
    escaped = total = 0
    for seed in range(4):
        fleet, report = swept(256, "partner", seed, k=10)
        escaped += len(fleet.partner - set(report.bad))
        total += len(fleet.partner)
    assert total == 40
    assert escaped <= total // 4


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_flaky_nodes_are_flaky_never_good_after_a_failure(n: int, seed: int) -> None:
    fleet, report = swept(n, "flaky", seed)
    score = sweepfleet.score(fleet, report)
    assert score.false_drains == 0
    assert score.flaky_good_after_failure == 0
    healthy = set(fleet.nodes) - fleet.flaky
    assert not (set(report.flaky) & healthy)  # no healthy node called flaky
    for node in report.flaky:
        assert report.nodes[node].note  # its record, in words
    # never a reference: no job pairs a node once it is FLAKY (only its own re-runs)
    assert set(report.flaky) <= fleet.flaky


def test_flaky_across_sizes_is_reported() -> None:
    reported = sum(sweepfleet.score(*swept(n, "flaky", 5)).flaky_reported for n in SIZES)
    total = sum(max(1, n // 32) for n in SIZES)
    assert reported >= total // 2  # a flaky node that never failed cannot be told


@pytest.mark.parametrize("n", [64, 256])
def test_mixed_faults_drain_no_healthy_node(n: int) -> None:
    fleet, report = swept(n, "mixed", 4)
    score = sweepfleet.score(fleet, report)
    assert score.false_drains == 0
    assert score.flaky_good_after_failure == 0
    assert score.false_paths == 0
    assert {p.switch for p in report.paths} == fleet.uplinks


def test_the_same_fleet_sweeps_the_same_way() -> None:
    first = swept(64, "mixed", 9)[1]
    again = swept(64, "mixed", 9)[1]
    assert first.jobs == again.jobs
    assert all(a != b for a, b in (job.pair for job in first.jobs))  # never with itself
    assert format_table(first) == format_table(again)


# ------------------------------------------------------------------ the defects, in small


def scripted(fails: Any) -> Any:
    def run(pair: tuple[str, str], round_: int, index: int) -> Any:
        return SimpleNamespace(verdict="FAIL" if fails(pair) else "PASS", runs=[])

    return run


def test_a_node_that_failed_is_not_good_after_one_passing_retest() -> None:
    """Before: one failing pair, then one pass with a proven node made it GOOD (and a
    reference for others). Now it fails every third job and is FLAKY, not drained."""
    count = {"f": 0}

    def fails(pair: tuple[str, str]) -> bool:
        if "f" not in pair:
            return False
        count["f"] += 1
        return count["f"] % 3 == 1

    nodes = ["f", *(f"h{i}" for i in range(11))]
    report = sweep(nodes, scripted(fails), 4)
    assert report.nodes["f"].verdict == "FLAKY"
    assert report.bad == []
    assert all(report.nodes[n].verdict == "GOOD" for n in nodes[1:])
    assert "flaky (failed and passed" in format_table(report)


def test_a_node_slow_with_some_partners_drains_only_itself() -> None:
    """Before: it passed its first pair, was GOOD, and its slow partners were drained."""
    slow_with = {"h1", "h3", "h5", "h7", "h9"}
    nodes = ["p", *(f"h{i}" for i in range(11))]
    report = sweep(nodes, scripted(lambda pair: "p" in pair and bool(set(pair) & slow_with)), 4)
    assert report.bad == ["p"]
    assert "slow with some partners" in report.nodes["p"].note or not report.nodes["p"].note
    assert all(report.nodes[n].verdict == "GOOD" for n in nodes[1:])


def test_a_degraded_uplink_named_by_leaf_when_names_sort_across_leaves() -> None:
    """Before: names sorted across leaves, healthy nodes of the leaf were drained."""
    topo = {f"n{i:02d}": (f"leaf-{i % 4}",) for i in range(16)}  # n00 leaf-0, n01 leaf-1 ...
    bad_leaf = "leaf-2"

    def fails(pair: tuple[str, str]) -> bool:
        a, b = (topo[n][0] for n in pair)
        return a != b and bad_leaf in (a, b)

    report = sweep(sorted(topo), scripted(fails), 4, topology=topo, levels=["leaf"])
    assert report.bad == []
    assert [(p.level, p.switch) for p in report.paths] == [("leaf", bad_leaf)]
    assert report.verdict.name == "FAIL"  # a path fault fails the sweep: something to fix


# --------------------------------------------------------------------------- the planner


def test_screening_pairs_within_then_across_each_level() -> None:
    fleet = sweepfleet.build(256, "bad", 0, 1)  # no fault: just the topology
    topo, nodes = fleet.topology, fleet.nodes
    done: list[sweep_job.Job] = []
    scopes = []
    for round_ in range(1, sweep_rounds.screening_rounds(topo) + 1):
        pairs = sweep_rounds.screening_pairs(nodes, topo, round_, done)
        assert len({n for p in pairs for n in p}) == 2 * len(pairs) == len(nodes)
        scopes.append({sweep_faults._first_difference(topo, p) for p in pairs})
        done += [sweep_job.Job(round_, p, "PASS") for p in pairs]
    # round 1 under one leaf (2 = no difference), round 2 across leaves under one spine,
    # round 3 across spines
    assert scopes == [{2}, {1}, {0}]
    met = sweep_ledger.ledger_of(done).met()
    assert all(len(met[n]) == 3 for n in nodes)  # three distinct partners each


def test_topology_of_needs_every_level_on_every_node() -> None:
    levels = ["spine", "leaf"]
    labels = {"a": {"spine": "s1", "leaf": "l1"}, "b": {"spine": "s1", "leaf": "l2"}}
    assert sweep_job.topology_of(["a", "b"], labels, levels) == {
        "a": ("s1", "l1"),
        "b": ("s1", "l2"),
    }
    labels["b"] = {"spine": "s1"}
    assert sweep_job.topology_of(["a", "b"], labels, levels) == {"a": (), "b": ()}


def test_sweep_topology_prefers_node_labels_over_the_stack_table() -> None:
    gang = SimpleNamespace(
        switch_levels=("leaf",), node_topology={"a": {"leaf": "from-stack"}, "b": {"leaf": "x"}}
    )
    plan: Any = SimpleNamespace(facts=SimpleNamespace(gang=gang))
    topo = session.sweep_topology(plan, ["a", "b"], {"a": {"leaf": "from-label"}})
    assert topo == {"a": ("from-label",), "b": ("x",)}


def test_the_estimate_printed_before_it_starts() -> None:
    topo = {f"n{i}": ("s", f"l{i % 4}") for i in range(1024)}
    est = sweep_cost.estimate(topo, 8, 1800.0, 3)
    assert (est.rounds, est.jobs, est.waves) == (3, 3 * 512, 3 * 64)
    words = est.words()
    assert "1536 two-node jobs, 8 at a time" in words
    assert "192 waves" in words
    assert "about 4.8 h at 90 s a job" in words
    assert "at most 96.0 h" in words


# --------------------------------------------------------------------------- the option


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--sweep", "--sweep-confirm", "1"], "expected a whole number 2 to 16"),
        (["--sweep", "--sweep-confirm", "three"], "expected a whole number 2 to 16"),
        (["--sweep-confirm", "4"], "applies only with --sweep"),
    ],
)
def test_sweep_confirm_is_refused_with_its_name_and_what_is_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], words: str
) -> None:
    from gpufabric.cli import main

    argv = ["verify", "nccl", "--stack", "lab-roce", "--tenant", "team-vision",
            "--kubeconfig", str(tmp_path / "absent"), *extra]  # fmt: skip
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse refuses the value itself
        code = int(exc.code or 0)
    err = capsys.readouterr().err
    assert code == 2
    assert "--sweep-confirm" in err
    assert words in err
    assert "Traceback" not in err
