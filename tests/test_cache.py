"""Work kept between runs (compiled templates, converted CRD schemas) never changes a
result, and a cache that is damaged, shared or unwritable is ignored, never an error."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jinja2
import pytest
from builders import example_config, plan_of

from gpufabric.outputs.render import render_files
from gpufabric.support import templates
from gpufabric.support.cache import cache_dir


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    templates.environment.cache_clear()
    yield tmp_path / "cache" / "gpufabric" / "templates"
    templates.environment.cache_clear()


def fresh_render() -> dict[str, str]:
    templates.environment.cache_clear()
    return render_files(plan_of(example_config("prod-ib"), "prod-ib"))


def _plant_compiled_templates(directory: Path, flag: Path) -> int:
    """Entries in the form gpufabric kept compiled templates in (Jinja bytecode named by a
    fingerprint of Jinja's version and the options), each carrying code that leaves
    ``flag`` when it runs; the checksums match the real sources, as a forger's would."""
    fingerprint = hashlib.sha256(
        repr(
            (jinja2.__version__, sorted((k, repr(v)) for k, v in templates._OPTIONS.items()))
        ).encode()
    ).hexdigest()[:16]
    bcc = jinja2.FileSystemBytecodeCache(str(directory), pattern=f"{fingerprint}-%s.cache")
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates.TEMPLATES_DIR)))
    env.__dict__.update(templates.environment().__dict__)  # same options and filters
    planted = 0
    for name in env.list_templates():
        source, filename, _ = env.loader.get_source(env, name)  # type: ignore[union-attr]
        python = env.compile(source, name, filename, raw=True)
        bucket = bcc.get_bucket(env, name, filename, source)
        bucket.code = compile(
            f"open({str(flag)!r}, 'a').write({name!r} + '\\n')\n{python}", filename, "exec"
        )
        bcc.set_bucket(bucket)
        planted += 1
    return planted


def test_a_cache_holds_no_code_and_planted_entries_change_nothing(
    cache_home: Path, tmp_path: Path
) -> None:
    """A render reads no compiled code from the cache: entries planted where compiled
    templates were kept (valid checksums, code that leaves a flag) never run, and the
    output is byte for byte what an empty cache gives."""
    clean = fresh_render()
    assert not cache_home.exists() or not any(cache_home.iterdir())  # nothing compiled kept
    cache_home.mkdir(parents=True, exist_ok=True, mode=0o700)
    flag = tmp_path / "planted-code-ran"
    assert _plant_compiled_templates(cache_home, flag) > 10
    assert fresh_render() == clean
    assert not flag.exists(), f"planted template code ran: {flag.read_text()[:200]}"


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
    templates.environment.cache_clear()
    try:
        assert cache_dir("templates") is None
        assert fresh_render()
    finally:
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

    monkeypatch.setattr(yamlcodec, "load_all", no_parse)
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


def test_foreign_entries_are_ignored_one_by_one(cache_home: Path, tmp_path: Path) -> None:
    """Ownership is checked per entry, not only per directory: a link to a file elsewhere,
    a second name of one, an entry others could write or another user's is not read."""
    from gpufabric.support.cache import read_json, write_json

    write_json("crd-schemas", "good", {"v": 1})
    directory = cache_home.parent / "crd-schemas"
    assert read_json("crd-schemas", "good") == {"v": 1}
    forged = tmp_path / "forged.json"
    forged.write_text('{"v": "forged"}')
    (directory / "symlinked.json").symlink_to(forged)
    os.link(forged, directory / "hardlinked.json")
    (directory / "shared.json").write_text('{"v": "forged"}')
    (directory / "shared.json").chmod(0o666)
    (directory / "damaged.json").write_text('{"v": ')
    for key in ("symlinked", "hardlinked", "shared", "damaged"):
        assert read_json("crd-schemas", key) is None, key
    if os.geteuid() == 0:  # only root can give a file away
        (directory / "theirs.json").write_text('{"v": "forged"}')
        os.chown(directory / "theirs.json", 4242, 4242)
        assert read_json("crd-schemas", "theirs") is None


def test_a_planted_crd_schema_entry_changes_no_verdict(cache_home: Path, tmp_path: Path) -> None:
    """A converted-CRD entry that is not the cache's own (a link to a schema that accepts
    anything) is ignored: validation gives the verdict of an empty cache."""
    from gpufabric.outputs import schema

    crds = tmp_path / "crds"
    crds.mkdir()
    (crds / "widget.yaml").write_text(CRD)
    schema.load_crds.cache_clear()
    assert [e.path for e in schema.validate_objects([widget("big")], "1.33", crds).errors] == [
        "spec.size"
    ]
    directory = cache_home.parent / "crd-schemas"
    (entry,) = directory.iterdir()  # the file's converted schemas
    forged = tmp_path / "accepts-anything.json"
    forged.write_text('[["example.com/v1", "Widget", {"type": "object"}]]')
    entry.unlink()
    entry.symlink_to(forged)
    schema.load_crds.cache_clear()
    try:
        bad = schema.validate_objects([widget("big")], "1.33", crds)
        assert [e.path for e in bad.errors] == ["spec.size"]
    finally:
        schema.load_crds.cache_clear()


def test_a_warm_render_reads_only_the_crds_of_the_kinds_it_validates(
    cache_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A render reads the converted schemas of only the files that name a kind it
    validates, and a file later in order that defines the same kind still wins, as a full
    read gives."""
    from gpufabric.outputs import schema
    from gpufabric.support import cache, yamlcodec

    crds = tmp_path / "crds"
    crds.mkdir()
    (crds / "a-widget.yaml").write_text(CRD)
    gadget = CRD.replace("Widget", "Gadget").replace("widgets", "gadgets")
    (crds / "b-gadget.yaml").write_text(gadget)
    (crds / "c-widget-v2.yaml").write_text(
        CRD.replace("size: {type: integer}", "size: {type: string}")
    )
    schema.load_crds.cache_clear()
    assert schema.validate_objects([widget("big")], "1.33", crds).ok  # c- wins over a-
    full = schema.load_crds(crds.resolve())
    assert full.sources[("example.com/v1", "Widget")].endswith("c-widget-v2.yaml")

    read: list[str] = []
    real_read = cache.read_json

    def counting(name: str, key: str) -> object:
        read.append(key)
        return real_read(name, key)

    def no_parse(text: str) -> list[object]:
        raise AssertionError("parsed again although cached")

    monkeypatch.setattr(schema, "read_json", counting)
    monkeypatch.setattr(yamlcodec, "load_all", no_parse)
    schema.load_crds.cache_clear()
    try:
        assert schema.validate_objects([widget("big")], "1.33", crds).ok
        gadget_key = schema._file_key(gadget.encode())
        assert gadget_key not in read  # the Gadget file's schemas were never read
        assert len(read) == 2  # the two files that define a Widget
        wanted = frozenset({("example.com/v1", "Widget")})
        assert schema.load_crds(crds.resolve(), wanted).schemas == {
            k: v for k, v in full.schemas.items() if k in wanted
        }
    finally:
        schema.load_crds.cache_clear()


def test_the_files_that_name_a_kind_give_what_a_full_read_gives_for_the_upstream_crds(
    cache_home: Path, crd_dir: Path
) -> None:
    from gpufabric.outputs import schema

    schema.load_crds.cache_clear()
    try:
        full = schema.load_crds(crd_dir.resolve())
        for pair in sorted(full.schemas):
            wanted = frozenset({pair})
            for _ in range(2):  # converting the files that name the kind, then reading them
                schema.load_crds.cache_clear()
                part = schema.load_crds(crd_dir.resolve(), wanted)
                assert part.schemas == {pair: full.schemas[pair]}
                assert part.sources == {pair: full.sources[pair]}
    finally:
        schema.load_crds.cache_clear()


def test_a_cold_index_converts_only_the_files_defining_wanted_kinds(
    cache_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Building the directory index parses every file, but converts and stores the schemas
    of only the files that define a kind being validated (the rest cost a parse), each
    converted once, and gives what a full read gives; a later render wanting another kind
    converts its file then."""
    from gpufabric.outputs import schema

    crds = tmp_path / "crds"
    crds.mkdir()
    (crds / "a-widget.yaml").write_text(CRD)
    gadget = CRD.replace("Widget", "Gadget").replace("widgets", "gadgets")
    (crds / "b-gadget.yaml").write_text(gadget)
    schema.load_crds.cache_clear()
    full = schema.load_crds(crds.resolve())
    for entry in (cache_home.parent / "crd-schemas").iterdir():
        entry.unlink()
    conversions: list[str] = []
    real = schema.crd_to_jsonschema

    def counting(raw: Any, **kw: Any) -> Any:
        conversions.append(str(raw))
        return real(raw, **kw)

    monkeypatch.setattr(schema, "crd_to_jsonschema", counting)
    widget_only = frozenset({("example.com/v1", "Widget")})
    schema.load_crds.cache_clear()
    try:
        part = schema.load_crds(crds.resolve(), widget_only)
        assert part.schemas == {k: v for k, v in full.schemas.items() if k in widget_only}
        assert len(conversions) == 1  # the Widget's one served version, once
        stored = {p.stem for p in (cache_home.parent / "crd-schemas").iterdir()}
        assert schema._file_key(CRD.encode()) in stored
        assert schema._file_key(gadget.encode()) not in stored
        gadget_only = frozenset({("example.com/v1", "Gadget")})
        later = schema.load_crds(crds.resolve(), gadget_only)
        assert later.schemas == {k: v for k, v in full.schemas.items() if k in gadget_only}
        assert len(conversions) == 2
    finally:
        schema.load_crds.cache_clear()


@pytest.mark.parametrize("style", ["json", "block", "flow", "quoted"])
def test_a_crd_written_as_json_or_flow_yaml_is_found_by_its_kind(
    cache_home: Path, tmp_path: Path, style: str
) -> None:
    """Only files naming a validated kind in a ``kind:`` entry are parsed: a CRD written as
    JSON, in flow style or with the kind quoted still names it there."""
    import json

    from gpufabric.outputs import schema
    from gpufabric.support import yamlcodec

    doc = yamlcodec.load(CRD)
    text = {
        "json": json.dumps(doc),
        "block": yamlcodec.dump(doc),
        "flow": CRD,
        "quoted": CRD.replace("kind: Widget", "kind: 'Widget'"),
    }[style]
    crds = tmp_path / "crds"
    crds.mkdir()
    (crds / "widget.yaml").write_text(text)
    (crds / "other.yaml").write_text(CRD.replace("Widget", "Gadget").replace("widgets", "gadgets"))
    schema.load_crds.cache_clear()
    try:
        report = schema.validate_objects([widget("big")], "1.33", crds)
        assert [e.path for e in report.errors] == ["spec.size"]
    finally:
        schema.load_crds.cache_clear()
