"""A large render creates its files in two processes (a forked helper formats and creates
the first share), or where it cannot fork in a writer thread while it formats the next
ones: the tree is the same bytes, a failure in the helper is recovered and a failure in the
thread is the render's failure, and an interrupt or a SIGKILL at any moment leaves the
previous output whole, the helper or thread stopped before the staged tree is removed, and
nothing beside the output once the next render has run."""

from __future__ import annotations

import errno
import os
import signal
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from builders import example_config, plan_of

from gpufabric.outputs import render as render_module
from gpufabric.outputs.render import MARKER, render_files, write_tree
from gpufabric.support import background


def writers_alive() -> list[threading.Thread]:
    """The render's writer threads still running (other tests' threads are not ours)."""
    return [t for t in threading.enumerate() if t.name == "gpufabric-writer" and t.is_alive()]


@pytest.fixture(scope="module")
def files() -> dict[str, str]:
    return dict(render_files(plan_of(example_config("prod-ib"), "prod-ib")))


@pytest.fixture(autouse=True)
def writer_for_small_trees(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(render_module, "WRITER_MIN_FILES", 2)


def use(way: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stage through a forked helper, or through the writer thread (no fork)."""
    if way == "thread":
        monkeypatch.setattr(render_module, "can_fork", lambda: False)
        return
    if not background.fork_supported():
        pytest.skip("this system does not fork a helper (not Linux, or one CPU)")
    # whatever other tests left running, fork here as a render (a single thread) would
    monkeypatch.setattr(render_module, "can_fork", lambda: True)
    monkeypatch.setattr(background, "can_fork", lambda: True)


@pytest.fixture(params=["fork", "thread"])
def way(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    use(request.param, monkeypatch)
    return str(request.param)


def content(out: Path) -> dict[str, bytes]:
    return {
        p.relative_to(out).as_posix(): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.name != MARKER
    }


def tree_of(files: Mapping[str, str]) -> dict[str, bytes]:
    return {k: v.encode() for k, v in files.items()}


def variant(files: Mapping[str, str], tag: str) -> dict[str, str]:
    return {k: f"{v}# {tag}\n" for k, v in files.items()}


def beside(out: Path) -> list[str]:
    return sorted(p.name for p in out.parent.iterdir() if p.name != out.name)


def creators(monkeypatch: pytest.MonkeyPatch, fail: Any = None) -> list[str]:
    """The thread that creates each file, in order; ``fail(n)`` may raise instead of
    creating the n-th."""
    names: list[str] = []
    real = render_module._create

    def create(path: str, data: bytes) -> None:
        if fail is not None:
            fail(len(names) + 1)
        real(path, data)
        names.append(threading.current_thread().name)

    monkeypatch.setattr(render_module, "_create", create)
    return names


def test_the_writer_thread_writes_the_same_tree(
    tmp_path: Path, files: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    use("thread", monkeypatch)
    names = creators(monkeypatch)
    interval = sys.getswitchinterval()
    out = tmp_path / "out"
    assert write_tree(render_files(plan_of(example_config("prod-ib"), "prod-ib")), out)
    assert content(out) == tree_of(files)
    assert set(names) == {"gpufabric-writer"}
    assert len(names) == len(files)
    assert not writers_alive()
    assert sys.getswitchinterval() == interval


def test_a_failure_in_the_writer_is_the_renders_and_keeps_the_previous_tree(
    tmp_path: Path, files: dict[str, str], monkeypatch: pytest.MonkeyPatch, way: str
) -> None:
    out = tmp_path / "out"
    write_tree(variant(files, "old"), out)

    def full(n: int) -> None:
        if n == 5:
            raise OSError(errno.ENOSPC, "No space left on device")

    creators(monkeypatch, full)
    with pytest.raises(OSError, match="No space left"):
        write_tree(files, out)
    assert content(out) == tree_of(variant(files, "old"))
    assert beside(out) == []
    assert not writers_alive()


class Interrupted(Mapping[str, str]):
    """Files whose formatting is interrupted (Ctrl-C) at the n-th file."""

    def __init__(self, files: Mapping[str, str], at: int) -> None:
        self.files, self.at, self.read = files, at, 0

    def __getitem__(self, rel: str) -> str:
        self.read += 1
        if self.read == self.at:
            raise KeyboardInterrupt
        return self.files[rel]

    def __iter__(self) -> Iterator[str]:
        return iter(self.files)

    def __len__(self) -> int:
        return len(self.files)


@pytest.mark.parametrize("at", [1, 7, 30])
def test_an_interrupt_while_formatting_stops_the_writer_before_the_tree_is_removed(
    tmp_path: Path, files: dict[str, str], monkeypatch: pytest.MonkeyPatch, at: int, way: str
) -> None:
    out = tmp_path / "out"
    write_tree(variant(files, "old"), out)
    creators(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        write_tree(Interrupted(files, at), out)
    assert not writers_alive()
    assert content(out) == tree_of(variant(files, "old"))
    assert beside(out) == []  # removed, and nothing created in it afterwards


@pytest.mark.parametrize("at", [1, 10, 40])
def test_a_render_killed_while_its_writer_writes_is_recovered_by_the_next(
    tmp_path: Path, files: dict[str, str], monkeypatch: pytest.MonkeyPatch, at: int, way: str
) -> None:
    out = tmp_path / "out"
    old, new = variant(files, "old"), variant(files, "new")
    write_tree(old, out)
    pid = os.fork()
    if pid == 0:  # the render to kill: never returns into pytest
        try:

            def kill(n: int) -> None:
                if n == at:
                    os.kill(os.getpid(), signal.SIGKILL)

            creators(monkeypatch, kill)
            write_tree(new, out)
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == -signal.SIGKILL
    assert content(out) == tree_of(old)
    assert write_tree(new, out)
    assert content(out) == tree_of(new)
    assert beside(out) == []


def pids_creating(
    monkeypatch: pytest.MonkeyPatch, record: Path, fail_in_helper_at: int = 0
) -> None:
    """Each created file's creator process, appended to ``record`` (a helper's memory is
    its own); the helper (any process but this one) may fail at its n-th file."""
    real, me = render_module._create, os.getpid()
    count = [0]

    def create(path: str, data: bytes) -> None:
        count[0] += 1
        if os.getpid() != me and count[0] == fail_in_helper_at:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, data)
        with open(record, "a") as f:
            f.write(f"{os.getpid()}\n")

    monkeypatch.setattr(render_module, "_create", create)


def test_two_processes_write_the_same_tree(
    tmp_path: Path, files: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    use("fork", monkeypatch)
    record = tmp_path.parent / f"{tmp_path.name}-creators"
    pids_creating(monkeypatch, record)
    out = tmp_path / "out"
    assert write_tree(render_files(plan_of(example_config("prod-ib"), "prod-ib")), out)
    assert content(out) == tree_of(files)
    pids = record.read_text().split()
    assert len(pids) == len(files)
    assert len(set(pids)) == 2
    assert not writers_alive()
    assert beside(out) == []


@pytest.mark.parametrize("at", [1, 5])
def test_a_helper_that_fails_leaves_its_files_to_the_render(
    tmp_path: Path, files: dict[str, str], monkeypatch: pytest.MonkeyPatch, at: int
) -> None:
    """A helper that fails part way (a full disk it alone saw, a bug) costs time, not the
    tree: the render writes the helper's share itself, over what the helper left."""
    use("fork", monkeypatch)
    out = tmp_path / "out"
    write_tree(variant(files, "old"), out)
    pids_creating(monkeypatch, tmp_path.parent / f"{tmp_path.name}-creators", fail_in_helper_at=at)
    assert write_tree(files, out)
    assert content(out) == tree_of(files)
    assert beside(out) == []
