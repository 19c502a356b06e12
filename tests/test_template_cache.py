"""Compiled templates kept between runs never change what is rendered, and a cache that
is damaged, shared or unwritable is ignored, never an error."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import jinja2.bccache
import pytest
from builders import example_config, plan_of

from gpufabric import templates
from gpufabric.render import render_files


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    templates.environment.cache_clear()
    templates._bytecode_cache.cache_clear()
    yield tmp_path / "cache" / "gpufabric" / "templates"
    templates.environment.cache_clear()
    templates._bytecode_cache.cache_clear()


def fresh_render() -> dict[str, str]:
    templates.environment.cache_clear()
    return render_files(plan_of(example_config("prod-ib"), "prod-ib"))


def test_compiled_templates_are_kept_and_change_nothing(cache_home: Path) -> None:
    first = fresh_render()
    entries = sorted(cache_home.iterdir())
    assert entries, "no compiled template was kept"
    assert oct(cache_home.stat().st_mode & 0o777) == "0o700"
    assert fresh_render() == first  # from the cache
    for entry in entries:  # cut inside the checksum that follows Jinja's header
        entry.write_bytes(entry.read_bytes()[: len(jinja2.bccache.bc_magic) + 3])
    assert fresh_render() == first
    for entry in entries:
        entry.write_bytes(b"garbage")
    assert fresh_render() == first


def test_a_cache_others_could_write_is_not_used(cache_home: Path) -> None:
    cache_home.mkdir(parents=True)
    cache_home.chmod(0o777)
    assert templates.cache_dir() is None
    fresh_render()
    assert not any(cache_home.iterdir())


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_an_unwritable_cache_is_skipped(cache_home: Path) -> None:
    cache_home.mkdir(parents=True, mode=0o700)
    cache_home.chmod(0o500)
    try:
        assert fresh_render()
    finally:
        cache_home.chmod(0o700)


def test_no_cache_place_at_all(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # not a directory
    templates._bytecode_cache.cache_clear()
    templates.environment.cache_clear()
    try:
        assert templates.cache_dir() is None
        assert fresh_render()
    finally:
        templates._bytecode_cache.cache_clear()
        templates.environment.cache_clear()
