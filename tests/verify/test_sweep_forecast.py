"""What ``verify nccl --sweep`` prints before it starts: the jobs and wall time of its screening
when every job passes, what one bad node adds (the splits of its failing group, re-runs with
proven partners, its rails alone) and the sweep in all with 1% bad nodes, all from the
planner's own sweep run against simulated fleets (gpufabric/verify/sweep/forecast.py); and a
warning, not a refusal, when --sweep-timeout is shorter than that."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from fake_kube import FakeKube
from test_sweep_cluster_groups import FAST, SLOW, config, gpu_node, sweep_argv

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sweepfleet

from gpufabric.cli import main
from gpufabric.exitcodes import Verdict
from gpufabric.verify.nccl import report as nccl_report
from gpufabric.verify.sweep import cost as sweep_cost
from gpufabric.verify.sweep import forecast as sweep_forecast
from gpufabric.verify.sweep import job as sweep_job
from gpufabric.verify.sweep import rounds as sweep_rounds
from gpufabric.verify.sweep import run as sweep


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    with FakeKube() as f:
        yield f


def _forecast(n: int, group: int, rails: int) -> tuple[sweep_forecast.Forecast, str]:
    fleet = sweepfleet.build(n, "bad", 0, 0)
    fc = sweep_forecast.forecast(fleet.nodes, fleet.topology, fleet.levels, 8, 3, group, rails)
    return fc, sweep_forecast.words(fc, fleet.nodes, fleet.topology, None, 3, group)


ADDS = re.compile(r"one bad node adds about (\d+) jobs? \((\d+) min: ([^)]*)\)")


# ------------------------------------------------------------------------ the words


@pytest.mark.parametrize(
    ("group", "screening", "what"),
    [
        (
            16,
            "with group jobs of up to 8 nodes",
            "the splits of its failing group, re-runs with proven partners",
        ),
        (2, "3 screening rounds, 96 two-node jobs", "rounds with proven partners"),
    ],
)
def test_the_estimate_says_what_one_bad_node_adds_and_its_rails(
    group: int, screening: str, what: str
) -> None:
    """64 nodes under 4 leaves, 8 two-node jobs' worth of quota: the screening as before,
    then what a bad node adds; with 8 rails each bad node's rails run alone too, one job per
    rail, each its own round (the node is in one job at a time): 8 more jobs, 12 more
    minutes at 90 s a job."""
    one_rail, words1 = _forecast(64, group, 1)
    eight, words8 = _forecast(64, group, 8)
    assert screening in words1
    assert screening in words8
    said1, said8 = ADDS.search(words1), ADDS.search(words8)
    assert said1 is not None, words1
    assert said8 is not None, words8
    assert said1[3] == what
    assert said8[3] == f"{what}, its 8 rails alone"
    assert int(said8[1]) == int(said1[1]) + 8
    assert int(said8[2]) == int(said1[2]) + 12
    # the figures are the simulated sweeps' own
    assert int(said1[1]) == one_rail.one.jobs - one_rail.passing.jobs > 0
    assert eight.one.drained == 1
    # 64 nodes: 1% is one node, said once
    assert "1% bad nodes" not in words8
    assert words8.endswith(f"about {sweep_forecast.hours(eight.seconds(eight.one))} in all")


@pytest.mark.parametrize("group", [16, 2])
def test_a_large_fleet_is_also_costed_with_one_percent_bad_nodes(group: int) -> None:
    """256 nodes: 1% is 3 bad nodes, whose sweep in all (screening, splits, re-runs, each
    bad node's rails) is said beside what one adds."""
    fc, words = _forecast(256, group, 8)
    assert fc.share_bad == 3
    assert fc.share.drained == 3
    total = sweep_forecast.hours(fc.seconds(fc.share))
    assert f"; with 1% bad nodes (3) about {total} in all ({fc.share.jobs} jobs)" in words
    assert fc.seconds(fc.passing) < fc.seconds(fc.one) <= fc.seconds(fc.share)


def test_the_same_nodes_give_the_same_words() -> None:
    assert _forecast(64, 16, 8)[1] == _forecast(64, 16, 8)[1]


# ------------------------------------------------- what the printed estimate says is run


def _run(
    fake: FakeKube, tmp_path: Path, write_stack: Callable[..., Path],
    capsys: pytest.CaptureFixture[str], fleet: sweepfleet.Fleet, *extra: str,
    rails: int = 2,
) -> tuple[int, str, str]:  # fmt: skip
    cfg = config(len(fleet.nodes))
    network = cfg["gpufabric:fabric"]
    network["rails"] = network["rails"][:rails]
    stack = write_stack(cfg, "forecast")
    for node in fleet.nodes:
        fake.add(gpu_node(node, fleet.leaf(node)))
    link = lambda a, b: SLOW if fleet.slow_link(a, b) else FAST  # noqa: E731
    sweepfleet.MPIOperator(tmp_path / "op", link).install(fake)
    code = main(sweep_argv(fake, tmp_path, stack, "--json", *extra))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(("extra", "rails"), [((), 2), ((), 1), (("--sweep-group", "2"), 2)])
def test_the_jobs_said_for_one_bad_node_are_the_jobs_the_sweep_runs(
    fake: FakeKube,
    tmp_path: Path,
    write_stack: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
    extra: tuple[str, ...],
    rails: int,
) -> None:
    """12 nodes under 3 leaves on the fake cluster (each job's launcher run, its log judged),
    the node the estimate makes bad bad in the fleet too: the jobs printed for a healthy fleet
    plus those one bad node adds are the jobs the sweep ran, its one-rail jobs included."""
    fleet = sweepfleet.build(12, "bad", 0, 1)
    fleet.bad = set(sweep_forecast.bad_nodes(fleet.nodes, 1))
    code, out, err = _run(fake, tmp_path, write_stack, capsys, fleet, *extra, rails=rails)
    doc = json.loads(out)
    assert code == 4, err
    assert doc["drain"] == sorted(fleet.bad)
    said = ADDS.search(err)
    assert said is not None, err
    healthy = re.search(r"(\d+) group jobs and (\d+) two-node jobs when all pass", err)
    if healthy is not None:
        passing = int(healthy[1]) + int(healthy[2])
    else:
        pairs = re.search(r"(\d+) two-node jobs, ", err)
        assert pairs is not None, err
        passing = int(pairs[1])
    rail_jobs = sum(len(doc["nodes"][n].get("rails", {})) for n in doc["drain"])
    assert rail_jobs == (rails if rails > 1 else 0)
    assert passing + int(said[1]) == doc["jobs"] + rail_jobs
    assert (f"its {rails} rails alone" in said[3]) == (rails > 1)


def test_allowed_groups_the_planner_declines_are_said_as_the_pair_rounds_it_runs(
    fake: FakeKube,
    tmp_path: Path,
    write_stack: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """5 nodes under one leaf, a quota of 4 nodes: groups of 3 or 4 are allowed but the
    planner runs pairs, 8 rounds of them for the partners a fleet with groups asks; the
    estimate said the 3 rounds of a pairs-only sweep."""
    fleet = sweepfleet.build(5, "bad", 0, 1)
    topo = dict.fromkeys(fleet.nodes, ("leaf-000",))
    mode = sweep_cost.choose_mode(topo, 2, 3, 4)
    assert (mode.group_rounds, mode.rounds) == (0, 8)
    cfg = config(5, quota=32)
    stack = write_stack(cfg, "five")
    for node in fleet.nodes:
        fake.add(gpu_node(node, "leaf-000"))
    sweepfleet.MPIOperator(tmp_path / "op", lambda a, b: FAST).install(fake)
    assert main(sweep_argv(fake, tmp_path, stack, "--json")) == 0
    out, err = capsys.readouterr()
    assert "sweep over 5 GPU nodes: 8 screening rounds, 16 two-node jobs" in err, err
    assert json.loads(out)["rounds"] >= 8


# ----------------------------------------------------------------- --sweep-timeout


def test_a_sweep_timeout_shorter_than_the_estimate_is_said_not_refused(
    fake: FakeKube,
    tmp_path: Path,
    write_stack: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Which nodes fail is not known before the sweep runs: a --sweep-timeout between the
    healthy fleet's estimate and the estimate with failures is a warning line, and the sweep
    runs (here every job passes in time); one below the healthy estimate says it stops before
    the screening ends; one the failures fit in says nothing."""
    fleet = sweepfleet.build(12, "bad", 0, 1)
    # as the command sizes it: 6 two-node jobs' worth of quota, groups of up to 12, 2 rails
    fc = sweep_forecast.forecast(fleet.nodes, fleet.topology, fleet.levels, 6, 3, 12, 2)
    passing, failing = fc.seconds(fc.passing), fc.failing_seconds
    assert passing < failing
    between = (passing + failing) / 2
    code, _, err = _run(fake, tmp_path, write_stack, capsys, fleet, "--sweep-timeout", f"{between:g}")  # fmt: skip
    assert code == 0, err
    assert f"{sweep_forecast.hours(fc.seconds(fc.one))} in all" in err  # the same forecast
    [line] = [x for x in err.splitlines() if x.startswith("verify: warning: --sweep-timeout")]
    assert f"--sweep-timeout {between:g} s is shorter than the sweep is expected to take with failures (about {sweep_forecast.hours(failing)};" in line  # fmt: skip
    assert "report the nodes judged until then" in line
    assert fc.warning(failing) is None
    short = fc.warning(passing / 2)
    assert short is not None
    assert "even when every job passes" in short


# ------------------------------------------------- a round that can teach nothing ends it


def _fail_with(bad: str) -> Callable[..., nccl_report.NcclReport]:
    def run(nodes: tuple[str, ...], *_: object) -> nccl_report.NcclReport:
        return nccl_report.NcclReport(
            verdict=Verdict.FAIL if bad in nodes else Verdict.PASS,
            reasons=(),
            threshold_gbps=None,
            threshold_source="none",
            runs=(),
        )

    return run


@pytest.mark.parametrize("n", [2, 4])
def test_a_fleet_too_small_to_localize_a_bad_node_ends_without_a_hundred_rounds(n: int) -> None:
    """Two nodes, or four in two-node jobs, one of them bad: no partner can witness it, so
    the planner met the failing pair again every round until its cap of 100 rounds (2.5 h of
    90 s jobs, and the estimate said so). Once the pair failed every time of 3 runs, nothing
    more can be learnt: the sweep ends, the nodes UNKNOWN, none drained, none GOOD."""
    names = [f"n{i}" for i in range(n)]
    topo = dict.fromkeys(names, ("leaf-a",))
    report = sweep.sweep(names, _fail_with("n0"), 8, topology=topo, levels=(sweepfleet.LEAF_LABEL,))  # fmt: skip
    assert report.rounds <= 6
    assert report.bad == []
    assert "n0" in report.unknown
    fc = sweep_forecast.forecast(names, topo, (sweepfleet.LEAF_LABEL,), 8, 3, 2)
    assert "and is not localized (too few nodes to witness it" in fc.failure_words()


def test_a_pair_that_changed_its_result_is_not_exhausted() -> None:
    """A pair that failed and passed may be flaky: re-running it can still teach something."""
    fail = [sweep_job.Job(r, ("a", "b"), "FAIL") for r in (1, 2, 3)]
    assert sweep_rounds.exhausted([("a", "b")], fail)
    assert not sweep_rounds.exhausted([("a", "b")], fail[:2])
    assert not sweep_rounds.exhausted([("a", "b")], [*fail, sweep_job.Job(4, ("b", "a"), "PASS")])
    assert not sweep_rounds.exhausted([("a", "b"), ("c", "d")], fail)
    group = sweep_job.Job(5, ("a", "b"), "PASS", ("a", "b", "c"))  # a passing group holds a-b
    assert not sweep_rounds.exhausted([("a", "b")], [*fail, group])


# --------------------------------------------------------- a large fleet's estimate


def test_a_large_fleet_is_told_the_estimate_is_being_made_before_it_starts(
    fake: FakeKube,
    tmp_path: Path,
    write_stack: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """From SAID_FROM nodes the estimate takes seconds: one line says it is being made, before
    the estimate itself; a smaller fleet gets the estimate alone."""
    fleet = sweepfleet.build(12, "bad", 0, 1)
    code, _, err = _run(fake, tmp_path, write_stack, capsys, fleet)
    assert code == 0, err
    assert "estimating the sweep" not in err
    monkeypatch.setattr(sweep_forecast, "SAID_FROM", 12)
    with FakeKube() as other:
        code, _, err = _run(other, tmp_path / "again", write_stack, capsys, fleet)
    assert code == 0, err
    lines = err.splitlines()
    said = lines.index("verify: estimating the sweep over 12 nodes (simulating 2 fleets)...")
    assert lines[said + 1].startswith("verify: sweep over 12 GPU nodes")


def test_ctrl_c_while_the_estimate_is_made_ends_the_command_cleanly(
    fake: FakeKube,
    tmp_path: Path,
    write_stack: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A SIGINT while the simulated sweeps run (inside a simulated job: they run one at a time
    in the command's thread) ends the command as a Ctrl-C does: exit 130, said in one line, no
    traceback, and no job submitted (the sweep had not started)."""
    fleet = sweepfleet.build(12, "bad", 0, 1)
    answer = sweep_forecast._report
    sent: list[tuple[str, ...]] = []

    def interrupted(nodes: Sequence[str], bad: frozenset[str]) -> nccl_report.NcclReport:
        if not sent:
            sent.append(tuple(nodes))
            os.kill(os.getpid(), signal.SIGINT)
        return answer(nodes, bad)

    monkeypatch.setattr(sweep_forecast, "_report", interrupted)
    code, out, err = _run(fake, tmp_path, write_stack, capsys, fleet)
    assert sent
    assert code == 130, err
    assert "Traceback" not in err
    assert "gpufabric verify nccl: interrupted" in err
    assert "sweep over 12 GPU nodes" not in err  # no estimate, no sweep
    assert not [p for p in fake.objects if "/mpijobs/" in p]
    assert out == ""
