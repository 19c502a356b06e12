"""Work kept between runs (compiled templates, converted CRD schemas) never changes a
result, and a cache that is damaged, shared or unwritable is ignored, never an error."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import jinja2.bccache
import pytest
from builders import example_config, plan_of

from gpufabric.outputs.render import render_files
from gpufabric.support import templates
from gpufabric.support.cache import cache_dir


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
    assert cache_dir("templates") is None
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
        assert cache_dir("templates") is None
        assert fresh_render()
    finally:
        templates._bytecode_cache.cache_clear()
        templates.environment.cache_clear()


CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, plural: widgets}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                size: {type: integer}
                port: {x-kubernetes-int-or-string: true}
    - name: v1alpha1
      served: false
      storage: false
"""


def widget(size: object) -> dict[str, object]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": "n"},
        "spec": {"size": size},
    }


def test_converted_crds_are_kept_and_give_the_same_verdicts(
    cache_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpufabric.outputs import schema
    from gpufabric.support import yamlcodec

    crds = tmp_path / "crds"
    crds.mkdir()
    (crds / "widget.yaml").write_text(CRD)
    schema.load_crds.cache_clear()
    first = schema.load_crds(crds)
    assert list(first.schemas) == [("example.com/v1", "Widget")]
    assert len(list((cache_home.parent / "crd-schemas").iterdir())) == 1

    def no_parse(text: str) -> list[object]:
        raise AssertionError("parsed again although cached")

    monkeypatch.setattr(yamlcodec, "load_all_simple", no_parse)
    schema.load_crds.cache_clear()
    second = schema.load_crds(crds)
    assert second.schemas == first.schemas
    bad = schema.validate_objects([widget("big")], "1.33", crds)
    assert [e.path for e in bad.errors] == ["spec.size"]
    assert schema.validate_objects([widget(3)], "1.33", crds).ok
    monkeypatch.undo()

    for entry in (cache_home.parent / "crd-schemas").iterdir():
        entry.write_text("[[1, 2")  # damaged: recomputed
    schema.load_crds.cache_clear()
    assert schema.load_crds(crds).schemas == first.schemas

    (crds / "widget.yaml").write_text(CRD.replace("size: {type: integer}", "size: {type: string}"))
    schema.load_crds.cache_clear()
    assert schema.validate_objects([widget("big")], "1.33", crds).ok  # new bytes, new entry
    schema.load_crds.cache_clear()
