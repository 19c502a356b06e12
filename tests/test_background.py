"""Work on a second core gives exactly what the same work in-process gives, and a child
that fails, or is left behind by an error, costs time only."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from msgspec.structs import replace

from gpufabric.cli import main
from gpufabric.support import background
from gpufabric.support.background import Background


@pytest.fixture
def forking(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fork even with the idle threads earlier tests may have left (their work is done;
    render itself never forks beside a running thread)."""
    if not background.fork_supported():
        pytest.skip("fork is not used on this machine (not Linux, or one CPU)")
    monkeypatch.setattr(background, "can_fork", background.fork_supported)


@pytest.mark.usefixtures("forking")
def test_the_result_comes_from_the_child() -> None:
    parent = os.getpid()
    with Background(lambda: {"pid": os.getpid(), "data": list(range(100_000))}) as job:
        assert job.forked
        result = job.result()
    assert result["pid"] != parent
    assert result["data"] == list(range(100_000))  # more than a pipe buffer holds


@pytest.mark.usefixtures("forking")
def test_a_failing_child_is_computed_again_here() -> None:
    parent = os.getpid()

    def work() -> str:
        if os.getpid() != parent:
            raise MemoryError("the child ran out")
        return "computed in the parent"

    with Background(work) as job:
        assert job.forked
        assert job.result() == "computed in the parent"


@pytest.mark.usefixtures("forking")
def test_an_error_in_the_parent_stops_and_reaps_the_child() -> None:
    marker: dict[str, Any] = {}

    def interrupted() -> None:
        with Background(lambda: time.sleep(60)) as job:
            marker["pid"] = job._pid
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        interrupted()
    with pytest.raises(ChildProcessError):
        os.waitpid(marker["pid"], os.WNOHANG)  # already reaped: no zombie left


def test_no_fork_with_other_threads_running() -> None:
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert not background.can_fork()
        with Background(lambda: os.getpid()) as job:
            assert not job.forked
            assert job.result() == os.getpid()
    finally:
        stop.set()
        thread.join()


def _tree(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*") if p.is_file()}


@pytest.mark.usefixtures("forking")
def test_render_is_the_same_with_and_without_a_second_core(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[int] = []
    real_start = Background._start

    def start(self: Background[Any]) -> None:
        real_start(self)
        started.append(1)

    monkeypatch.setattr(Background, "_start", start)
    assert main(["render", "--stack", "prod-ib", "--out", str(tmp_path / "a")]) == 0
    assert started == [1]
    monkeypatch.setattr(background, "can_fork", lambda: False)
    assert main(["render", "--stack", "prod-ib", "--out", str(tmp_path / "b")]) == 0
    assert _tree(tmp_path / "a") == _tree(tmp_path / "b")


@pytest.mark.parametrize("fork", [True, False])
def test_invalid_objects_write_nothing_either_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], fork: bool
) -> None:
    if fork and not background.fork_supported():
        pytest.skip("fork is not used on this machine")
    monkeypatch.setattr(background, "can_fork", lambda: fork)
    from gpufabric.plan.build import Plan, build_plan
    from gpufabric.plan.items import Item, K8sObject, Layer

    def broken(stack: str, model: Any) -> Plan:
        plan = build_plan(stack, model)
        bad = K8sObject(
            {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "x"}, "spec": 1}
        )
        return replace(
            plan, items=(*plan.items, Item(id="tenants/bad", layer=Layer.TENANTS, payload=bad))
        )

    out = tmp_path / "out"
    assert main(["render", "--stack", "prod-ib", "--out", str(out / "earlier")]) == 0
    earlier = _tree(out / "earlier")
    monkeypatch.setattr("gpufabric.model.stackfile.build_plan", broken)
    for target in (out / "new", out / "earlier"):
        capsys.readouterr()
        code = main(["render", "--stack", "prod-ib", "--out", str(target)])
        err = capsys.readouterr().err
        assert code == 6, err
        assert "ResourceQuota/x" in err
        assert "nothing was written" in err
    # the tree staged while validation ran is gone; an earlier render is as it was
    assert sorted(p.name for p in out.iterdir()) == ["earlier"]
    assert _tree(out / "earlier") == earlier


@pytest.mark.usefixtures("forking")
def test_a_refused_fork_computes_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_fork() -> int:
        raise BlockingIOError("Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", no_fork)
    with Background(lambda: os.getpid()) as job:
        assert not job.forked
        assert job.result() == os.getpid()
