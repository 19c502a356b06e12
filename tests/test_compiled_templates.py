"""Compiled templates are kept beside gpufabric's own compiled modules and never change a
render: a warm run compiles nothing and writes the same bytes; a stale, damaged, foreign or
half-written entry is compiled again; nothing is kept where bytecode may not be written."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jinja2
import pytest
from builders import example_config, plan_of

from gpufabric.outputs.render import render_files
from gpufabric.support import templates


@pytest.fixture
def compiled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    directory = tmp_path / "__pycache__"
    directory.mkdir(mode=0o755)
    directory.chmod(0o755)
    monkeypatch.setattr(templates, "COMPILED_DIR", directory)
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    templates.environment.cache_clear()
    yield directory
    templates.environment.cache_clear()


def compiles(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the templates Jinja compiles from now on."""
    names: list[str] = []
    real = jinja2.Environment.compile

    def counting(self: jinja2.Environment, source: str, name: Any = None, *a: Any) -> Any:
        names.append(str(name))
        return real(self, source, name, *a)

    monkeypatch.setattr(jinja2.Environment, "compile", counting)
    return names


def fresh_render() -> dict[str, str]:
    templates.environment.cache_clear()
    return dict(render_files(plan_of(example_config("prod-ib"), "prod-ib")))


def entries(directory: Path) -> list[Path]:
    return sorted(directory.glob("jinja-*.bin"))


def test_a_warm_run_compiles_nothing_and_renders_the_same_bytes(
    compiled: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = compiles(monkeypatch)
    first = fresh_render()
    assert len(names) > 10
    assert len(entries(compiled)) == len(names)
    names.clear()
    assert fresh_render() == first
    assert names == []


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[: len(data) // 2],  # half-written
        lambda data: data[:-1] + bytes([data[-1] ^ 1]),  # a flipped bit in the code
        lambda data: b"\n".join([b"gpufabric-template 0", *data.split(b"\n")[1:]]),  # format
        lambda data: b"",
        lambda data: os.urandom(64),
    ],
)
def test_a_damaged_entry_is_compiled_again(
    compiled: Path, monkeypatch: pytest.MonkeyPatch, damage: Any
) -> None:
    first = fresh_render()
    for entry in entries(compiled):
        entry.write_bytes(damage(entry.read_bytes()))
    names = compiles(monkeypatch)
    assert fresh_render() == first
    assert len(names) == len(entries(compiled))
    names.clear()
    assert fresh_render() == first  # rewritten whole
    assert names == []


def test_foreign_entries_are_not_read(
    compiled: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A link, a second name, an entry or a directory others could write: compiled again."""
    first = fresh_render()
    kept = entries(compiled)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    a, b, c = kept[:3]
    os.replace(a, elsewhere / a.name)
    a.symlink_to(elsewhere / a.name)
    os.link(b, elsewhere / b.name)
    c.chmod(0o666)
    names = compiles(monkeypatch)
    assert fresh_render() == first
    assert len(names) == 3
    compiled.chmod(0o777)
    names.clear()
    assert fresh_render() == first
    assert len(names) == len(kept)
    compiled.chmod(0o755)


def test_a_changed_template_is_compiled_again(
    compiled: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "t.j2").write_text("a: {{ x | json }}\n")
    assert templates.environment(source).get_template("t.j2").render(x=1) == "a: 1\n"
    (source / "t.j2").write_text("b: {{ x | json }}\n")
    templates.environment.cache_clear()
    assert templates.environment(source).get_template("t.j2").render(x=1) == "b: 1\n"


def test_nothing_is_kept_where_bytecode_may_not_be_written(
    compiled: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    fresh_render()
    assert entries(compiled) == []
    assert list(compiled.iterdir()) == []


def test_renders_compiling_at_once_leave_only_whole_entries(
    compiled: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = fresh_render()
    for entry in entries(compiled):
        entry.unlink()
    pids = []
    for _ in range(4):
        pid = os.fork()
        if pid == 0:  # never returns into pytest
            code = 1
            try:
                code = 0 if fresh_render() == first else 3
            finally:
                os._exit(code)
        pids.append(pid)
    assert [os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for p in pids] == [0] * 4
    assert not [p for p in compiled.iterdir() if p.name.startswith(".")]  # no temporaries
    names = compiles(monkeypatch)
    assert fresh_render() == first
    assert names == []
