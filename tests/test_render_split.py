"""A large render is written by two processes at once (each its own directories): the tree
is the same bytes as one process writes, a helper that fails is made up for, and an
interrupt or a SIGKILL at any moment leaves the previous output whole, nothing beside it
once the next render has run, and no process behind."""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from builders import example_config, plan_of

from gpufabric.outputs import render as render_module
from gpufabric.outputs.render import MARKER, render_files, write_tree
from gpufabric.support.background import can_fork

pytestmark = pytest.mark.skipif(not can_fork(), reason="needs Linux fork and two CPUs")


@pytest.fixture(scope="module")
def files() -> dict[str, str]:
    return dict(render_files(plan_of(example_config("prod-ib"), "prod-ib")))


@pytest.fixture(autouse=True)
def split_small_trees(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(render_module, "SPLIT_MIN_FILES", 2)


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


def no_child_left() -> bool:
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def writers(monkeypatch: pytest.MonkeyPatch, log: Path, fail: Any = None) -> None:
    """Record which process creates each file (one line per file in ``log``); ``fail(pid,
    n)`` may raise instead of the n-th file a process creates."""
    real = render_module._create
    counts: dict[int, int] = {}

    def create(path: str, data: bytes) -> None:
        pid = os.getpid()
        counts[pid] = counts.get(pid, 0) + 1
        if fail is not None:
            fail(pid, counts[pid])
        real(path, data)
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.write(fd, f"{pid}\n".encode())
        os.close(fd)

    monkeypatch.setattr(render_module, "_create", create)


def test_two_processes_write_the_same_tree_as_one(
    tmp_path: Path, files: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "log"
    writers(monkeypatch, log)
    out = tmp_path / "out"
    assert write_tree(files, out, "prod-ib")
    assert content(out) == tree_of(files)
    pids = log.read_text().split()
    assert len(pids) == len(files)
    assert len(set(pids)) == 2, "the tree was written by one process"
    assert beside(out) == ["log"]
    assert no_child_left()


def test_the_parts_are_whole_directories_of_about_equal_size(files: dict[str, str]) -> None:
    directories = {rel: rel.rpartition("/")[0] or "." for rel in files}
    mine, theirs = render_module._parts(directories, 2)
    assert sorted(mine + theirs) == sorted(files)
    assert not {directories[r] for r in mine} & {directories[r] for r in theirs}
    biggest = max(sum(1 for d in directories.values() if d == x) for x in directories.values())
    assert abs(len(mine) - len(theirs)) <= biggest


def test_a_failing_helper_is_made_up_for_by_the_render(
    tmp_path: Path, files: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    parent = os.getpid()

    def fail(pid: int, n: int) -> None:
        if pid != parent and n == 3:
            raise OSError(28, "No space left on device")

    writers(monkeypatch, tmp_path / "log", fail)
    out = tmp_path / "out"
    write_tree(variant(files, "old"), out)
    assert write_tree(files, out)
    assert content(out) == tree_of(files)
    assert no_child_left()


def test_an_interrupt_while_both_write_keeps_the_previous_tree(
    tmp_path: Path, files: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    write_tree(variant(files, "old"), out)
    parent = os.getpid()

    def fail(pid: int, n: int) -> None:
        if pid == parent and n == 5:
            raise KeyboardInterrupt

    writers(monkeypatch, tmp_path / "log", fail)
    with pytest.raises(KeyboardInterrupt):
        write_tree(files, out)
    assert content(out) == tree_of(variant(files, "old"))
    assert beside(out) == ["log"]
    assert no_child_left()


@pytest.mark.parametrize("at", [1, 10, 40])
def test_a_render_killed_while_its_helper_writes_is_recovered_by_the_next(
    tmp_path: Path, files: dict[str, str], monkeypatch: pytest.MonkeyPatch, at: int
) -> None:
    """SIGKILL of the render leaves its helper writing into the staging directory: the
    next render waits for it (the helper holds the render's lock) before it removes it."""
    out = tmp_path / "out"
    old, new = variant(files, "old"), variant(files, "new")
    write_tree(old, out)
    pid = os.fork()
    if pid == 0:  # the render to kill: never returns into pytest
        try:
            me = os.getpid()

            def fail(p: int, n: int) -> None:
                if p == me and n == at:
                    os.kill(me, signal.SIGKILL)

            writers(monkeypatch, tmp_path / "log", fail)
            write_tree(new, out)
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == -signal.SIGKILL
    monkeypatch.undo()
    assert content(out) == tree_of(old)
    assert write_tree(new, out)
    assert content(out) == tree_of(new)
    assert beside(out) == ["log"]
    shutil.rmtree(out)


def test_the_helper_formats_what_it_writes(tmp_path: Path, files: dict[str, str]) -> None:
    """render_files formats a file when it is read: the files the helper writes are
    formatted in the helper, and the tree is the same bytes as the formatted dict."""
    rendered = render_files(plan_of(example_config("prod-ib"), "prod-ib"))
    out = tmp_path / "out"
    assert write_tree(rendered, out, "prod-ib")
    assert content(out) == tree_of(files)
    formatted_here = set(rendered._texts)
    assert 0 < len(formatted_here) < len(files)
    assert dict(rendered) == files  # reading the rest formats it here, the same
