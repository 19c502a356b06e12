"""A sweep's two time limits as the user sets them: --timeout (each job) refused when it would
cut off every job, and --sweep-timeout (the whole sweep) named when it stops one."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fake_kube import FakeKube
from test_hostile_api import _sweep_cluster, sweep_argv
from test_sweep_cluster_groups import config
from test_sweep_cluster_groups import sweep_argv as group_argv

from gpufabric.cli import main
from gpufabric.verify.sweep import cost as sweep_cost


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    with FakeKube() as f:
        yield f


def test_a_timeout_shorter_than_a_sweep_job_is_refused_before_the_cluster(
    fake: FakeKube, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every job would end at --timeout, unjudged, after hours: exit 2 naming --timeout,
    what a job is expected to take and the value that would do."""
    _sweep_cluster(fake, 4, quick=set())
    pair = sweep_cost.Cost().seconds(2)
    assert main(sweep_argv(fake, tmp_path, "--timeout", "60", "--sweep-group", "2")) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpufabric verify nccl: 1 problem\n"), err
    assert (
        f"--timeout: 60 s bounds each job of a sweep, but a two-node job is expected to take "
        f"about {pair:g} s" in err
    )
    assert f"pass --timeout {int(pair)} or more" in err
    assert "sweep over" not in err  # no estimate printed for a sweep that cannot judge
    assert not fake.requests


def test_group_jobs_ask_for_their_own_length_or_pairs_only(
    fake: FakeKube,
    tmp_path: Path,
    write_stack: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A stack whose quota runs 8 nodes at once sweeps with group jobs of 8, each running the
    tests once per rank order: its --timeout must fit such a job, or --sweep-group 2."""
    stack = write_stack(config(8), "groups")
    group = sweep_cost.Cost().seconds(8)
    assert group > sweep_cost.Cost().seconds(2)
    assert main(group_argv(fake, tmp_path, stack, "--timeout", "100")) == 2
    err = capsys.readouterr().err
    assert f"a group job of 8 nodes about {group:g} s (or --sweep-group 2" in err
    assert f"pass --timeout {int(group)} or more" in err
    assert not fake.requests


def test_a_timeout_the_jobs_fit_in_is_accepted(
    fake: FakeKube, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refusal is no blanket bound: where jobs are expected to fit, the sweep runs."""
    monkeypatch.setattr(sweep_cost, "TYPICAL_JOB_S", 1.0)
    monkeypatch.setattr(sweep_cost, "RUN_S", 0.1)
    _sweep_cluster(fake, 4, quick={f"gpu-node-{i}" for i in range(4)})
    assert main(sweep_argv(fake, tmp_path, "--timeout", "20", "--sweep-group", "2")) in (0, 5)
    assert fake.requests


@pytest.mark.usefixtures("quick_jobs")
def test_the_stop_reason_names_sweep_timeout_not_timeout(
    fake: FakeKube, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _sweep_cluster(fake, 4, quick={f"gpu-node-{i}" for i in range(4)}, last_round=1)
    code = main(sweep_argv(fake, tmp_path, "--timeout", "60", "--sweep-timeout", "2"))
    out = capsys.readouterr().out
    assert code == 5
    stopped = next(line for line in out.splitlines() if "stopped early" in line)
    assert "--sweep-timeout" in stopped
    assert "(--timeout)" not in stopped, stopped
