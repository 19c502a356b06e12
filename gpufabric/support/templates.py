"""Jinja2 templates in manifests/ that produce the Kubernetes objects gpufabric writes.

Values enter templates only through the ``json`` filter (JSON is valid YAML), never by
pasting strings, and a template that refers to an undefined name fails loudly. Every
rendered document is parsed back as YAML and checked to be one Kubernetes object; a
document's shape is parsed once per render and its values put in place (see
:func:`render_object`).

Compiled templates are kept where Python keeps gpufabric's own compiled modules, this
package's ``__pycache__`` (compiling them all costs about 50 ms a run): whoever can write
there can already change gpufabric's code, so keeping template code there trusts nobody
new. The user's cache directory never holds code: compiled code read back from there would
run as gpufabric for anyone able to plant one entry in it. See :class:`CompiledTemplates`.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import marshal
import os
import re
import stat
import sys
import tempfile
import threading
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jinja2
import yaml

from gpufabric.support import yamlcodec


def _manifests_dir() -> Path:
    package = Path(__file__).resolve().parent.parent
    packaged = package / "_manifests"  # wheel installs carry manifests/ inside the package
    return packaged if packaged.is_dir() else package.parent / "manifests"


MANIFESTS_DIR: Path = _manifests_dir()
TEMPLATES_DIR: Path = MANIFESTS_DIR / "templates"


def load_yaml(text: str) -> Any:
    return yamlcodec.load(text)


class TemplateError(Exception):
    """A template produced something that is not one Kubernetes object."""


def _to_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


_OPTIONS: dict[str, Any] = {
    "undefined": jinja2.StrictUndefined,
    "autoescape": False,
    "keep_trailing_newline": True,
    "auto_reload": False,  # templates are package data: no stat per render
    "trim_blocks": True,
    "lstrip_blocks": True,
}


COMPILED_DIR: Path = Path(__file__).resolve().parent / "__pycache__"
"""Where compiled templates are kept: beside this module's own compiled code."""
_FORMAT = "gpufabric-template 1"


def _fingerprint() -> str:
    """What compiled code depends on besides the template's text: Python, Jinja, options."""
    options = repr(sorted((k, repr(v)) for k, v in _OPTIONS.items()))
    seed = f"{sys.implementation.cache_tag} {jinja2.__version__} {options}"
    return hashlib.sha256(seed.encode()).hexdigest()[:16]


def _trusted(st: os.stat_result, owner: int) -> bool:
    """Owned by the owner of gpufabric's code and writable by nobody else."""
    return st.st_uid == owner and not st.st_mode & 0o022


class CompiledTemplates(jinja2.BytecodeCache):
    """Jinja's compiled templates kept in :data:`COMPILED_DIR`, the way Python keeps
    bytecode in ``__pycache__`` (and, like Python, written only when bytecode may be
    written: not under ``PYTHONDONTWRITEBYTECODE``).

    An entry is used only when it is a regular file with one name, in a directory, both
    owned by the owner of gpufabric's own code and writable by nobody else, opened without
    following links; its header names the format, the Python, Jinja and options it was
    compiled with, the template's checksum (Jinja's, of its text) and a SHA-256 of the code
    that follows, so a stale, damaged or half-written entry is compiled again. Entries are
    written to a temporary name and renamed into place: concurrent renders each see a whole
    entry or none."""

    def __init__(self, directory: Path = COMPILED_DIR) -> None:
        self.directory = directory
        self.fingerprint = _fingerprint()

    def _path(self, bucket: jinja2.bccache.Bucket) -> str:
        return str(self.directory / f"jinja-{self.fingerprint}-{bucket.key}.bin")

    def _header(self, bucket: jinja2.bccache.Bucket, code: bytes) -> bytes:
        digest = hashlib.sha256(code).hexdigest()
        return f"{_FORMAT} {self.fingerprint} {bucket.checksum} {digest}\n".encode()

    def _usable(self) -> bool:
        try:
            owner = os.stat(__file__).st_uid
            st = os.stat(self.directory, follow_symlinks=False)
        except OSError:
            return False
        return stat.S_ISDIR(st.st_mode) and _trusted(st, owner)

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        data = self._read(self._path(bucket)) if self._usable() else None
        if data is None:
            return
        header, newline, code = data.partition(b"\n")
        if not newline or header + newline != self._header(bucket, code):
            return
        try:
            loaded = marshal.loads(code)
        except (EOFError, ValueError, TypeError):
            return
        if isinstance(loaded, types.CodeType):
            bucket.code = loaded

    def _read(self, path: str) -> bytes | None:
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            return None
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
                return None
            if not _trusted(st, os.stat(__file__).st_uid):
                return None
            return f.read()

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        if sys.dont_write_bytecode or bucket.code is None:
            return
        with contextlib.suppress(OSError):
            self.directory.mkdir(mode=0o755, exist_ok=True)
        if not self._usable():
            return
        code = marshal.dumps(bucket.code)
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(prefix=".jinja-", dir=self.directory)
            with os.fdopen(fd, "wb") as f:
                f.write(self._header(bucket, code) + code)
            os.replace(tmp, self._path(bucket))
            tmp = None
        except OSError:
            pass  # a read-only install: compiled again next time
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)


@functools.cache
def environment(directory: Path = TEMPLATES_DIR) -> jinja2.Environment:
    """Templates under ``directory``: strict about undefined names, values via ``json``."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(directory)),
        bytecode_cache=CompiledTemplates(COMPILED_DIR),
        **_OPTIONS,
    )
    env.filters["json"] = _json_filter
    return env


def _json_filter(value: Any) -> str:
    """The ``json`` filter: the value's JSON text, or while :func:`render_object` collects
    values, a token standing for it."""
    slots = _STATE.slots
    return _to_json(value) if slots is None else slots.token(value)


def render_overlay(directory: str, parameters: Mapping[str, Any]) -> dict[str, str]:
    """Files of a kustomize overlay under manifests/: ``*.j2`` rendered, others as they are."""
    src = MANIFESTS_DIR / directory
    loader = environment(src)
    out: dict[str, str] = {}
    for path in sorted(p for p in src.rglob("*") if p.is_file()):
        rel = path.relative_to(src).as_posix()
        if rel.endswith(".j2"):
            out[rel[: -len(".j2")]] = loader.get_template(rel).render(**parameters)
        else:
            out[rel] = path.read_text()
    return out


def render_object(template: str, **context: Any) -> dict[str, Any]:
    """Render one template into one Kubernetes object (a dict).

    The object is what parsing the rendered text as YAML gives; most of a large render's
    objects share a few shapes (200 tenants, one namespace template), so the template is
    rendered with a token in place of each value the ``json`` filter writes, the tokens'
    document is parsed once per distinct text, and the values are put where their tokens
    are. Where that could differ from parsing the text (see :class:`_Shape`), the text with
    the values is rendered and parsed instead."""
    return _object(template, environment().get_template(template), context)


def _object(template: str, compiled: jinja2.Template, context: Mapping[str, Any]) -> dict[str, Any]:
    slots = _Slots()
    _STATE.slots = slots
    try:
        skeleton = compiled.render(**context)
    finally:
        _STATE.slots = None
    try:
        obj = None if slots.odd else _shape(skeleton).fill(slots)
    except _Unplaceable:
        obj = None
    if obj is None:
        obj = _parse(template, compiled.render(**context))
    if not isinstance(obj, dict) or not {"apiVersion", "kind", "metadata"} <= obj.keys():
        raise TemplateError(f"{template} did not render a Kubernetes object")
    if not isinstance(obj["metadata"], dict) or not obj["metadata"].get("name"):
        raise TemplateError(f"{template} rendered an object without metadata.name")
    return obj


def _parse(template: str, text: str) -> Any:
    try:
        return load_yaml(text)
    except yaml.YAMLError as exc:
        raise TemplateError(f"{template} rendered invalid YAML: {exc}") from exc


_TOKEN = re.compile(r"__gpufabric_value_(\d+)__")
"""What the ``json`` filter writes while :func:`render_object` collects the values; no
template's own text holds it (tests/test_template_shapes.py)."""
_ODD = re.compile("[\x7f-\x9f\u2028\u2029\ud800-\udfff\ufeff\ufffe\uffff]")
"""Characters a YAML parser refuses or folds when JSON leaves them unescaped: a value
holding one takes the parsing path, which says what YAML makes of it."""


class _Slots:
    """The values the ``json`` filter wrote in one render, by token number: each as the
    data YAML makes of its JSON text (a str for a str, ``None`` for null, ...), or the
    JSON text where that is a collection (parsed at every place it is put, as YAML
    parses each occurrence into new lists and dicts)."""

    __slots__ = ("consumed", "data", "odd", "texts")

    def __init__(self) -> None:
        self.data: list[Any] = []
        self.texts: list[str | None] = []
        self.consumed: set[int] = set()
        self.odd = False

    def token(self, value: Any) -> str:
        kind = type(value)
        if kind is str:
            if "__gpufabric_value_" in value:  # a JSON text of an earlier value, e.g. json | json
                value = _TOKEN.sub(self._text_of, value)
            if value.isascii():
                self.odd = self.odd or "\x7f" in value
            else:
                self.odd = self.odd or _ODD.search(value) is not None
            data, text = value, None
        elif kind is bool or kind is int or value is None:
            data, text = value, None
        else:
            text = _to_json(value)
            self.odd = self.odd or _ODD.search(text) is not None or "__gpufabric_value_" in text
            data = None
        self.data.append(data)
        self.texts.append(text)
        return f"__gpufabric_value_{len(self.data) - 1}__"

    def _text_of(self, match: re.Match[str]) -> str:
        i = int(match.group(1))
        self.consumed.add(i)
        text = self.texts[i]
        return text if text is not None else _to_json(self.data[i])

    def value(self, i: int) -> Any:
        text = self.texts[i]
        if text is None:
            return self.data[i]
        return json.loads(text, parse_float=_yaml_scalar, parse_constant=_yaml_scalar)


def _yaml_scalar(text: str) -> Any:
    """What YAML makes of a JSON number or constant as a plain scalar (``1e+20`` and
    ``NaN`` are strings in YAML 1.1)."""
    return yamlcodec.load(text)


class _State(threading.local):
    slots: _Slots | None = None


_STATE = _State()


class _Shape:
    """A document parsed from a render with tokens for values, and whether its values can
    be put in place: every token stands alone as a plain scalar (a mapping's value or key,
    a sequence's entry, an entry of a flow collection), never inside a quoted or block
    scalar, a comment or a longer text; anything else renders the text and parses it."""

    __slots__ = ("frozen", "places", "tokens", "tree")

    def __init__(self, text: str) -> None:
        self.tree: Any = None
        self.tokens: frozenset[int] | None = None  # None: values cannot be put in place
        self.frozen: bytes | None = None
        self.places: list[tuple[tuple[Any, ...], int]] = []
        try:
            tree = load_yaml(text)
        except yaml.YAMLError:
            return
        found: list[int] = []
        if not _tokens_alone(text, found) or not _whole_tokens(tree, found):
            return
        self.tree, self.tokens = tree, frozenset(found)
        if _token_places(tree, (), self.places):
            # No token is a key: a copy of the tree at C speed, then the values set in place.
            self.frozen = marshal.dumps(tree)

    def fill(self, slots: _Slots) -> Any:
        """The document with ``slots``' values in place; None where that could differ from
        parsing the rendered text."""
        if self.tokens is None or self.tokens | slots.consumed != set(range(len(slots.data))):
            return None
        if self.frozen is None:
            return _filled(self.tree, slots)
        obj = marshal.loads(self.frozen)
        for path, i in self.places:
            node = obj
            for step in path[:-1]:
                node = node[step]
            node[path[-1]] = slots.value(i)
        return obj


def _token_places(
    node: Any, path: tuple[Any, ...], places: list[tuple[tuple[Any, ...], int]]
) -> bool:
    """Add where each token of ``node`` stands (the keys and indices from the root);
    False where a token is a mapping key."""
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(key, str) and key.startswith("__gpufabric_value_"):
                return False
            if not _token_places(value, (*path, key), places):
                return False
    elif isinstance(node, list):
        for i, value in enumerate(node):
            if not _token_places(value, (*path, i), places):
                return False
    elif isinstance(node, str) and node.startswith("__gpufabric_value_"):
        places.append((path, int(node[18:-2])))
    return True


def _tokens_alone(text: str, found: list[int]) -> bool:
    """Every token in ``text`` stands where a plain scalar of its own starts and ends."""
    for match in _TOKEN.finditer(text):
        start, end = match.span()
        line_start = text.rfind("\n", 0, start) + 1
        before = text[line_start:start]
        after = text[end : end + 2]
        as_value = before.endswith((": ", "- ", "[", "{", ", ")) and "#" not in before
        as_key = before.strip(" ") == "" and after == ": "
        ends = after[:1] in ("", "\n", ",", "]", "}") or after == ": "
        if not ((as_value or as_key) and ends):
            return False
        found.append(int(match.group(1)))
    return True


def _whole_tokens(tree: Any, found: list[int]) -> bool:
    """Every token the text holds is a whole scalar (key or value) of ``tree``, and no
    other scalar holds one."""
    seen: list[int] = []
    pending = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            pending.extend(node.keys())
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
        elif isinstance(node, str) and "__gpufabric_value_" in node:
            match = _TOKEN.fullmatch(node)
            if match is None:
                return False
            seen.append(int(match.group(1)))
    return sorted(seen) == sorted(found)


def _filled(node: Any, slots: _Slots) -> Any:
    kind = type(node)
    if kind is dict:
        out = {}
        for key, value in node.items():
            if type(key) is str and key.startswith("__gpufabric_value_"):
                key = slots.value(int(key[18:-2]))
                if not isinstance(key, str | int | bool | None):
                    raise _Unplaceable
            out[key] = _filled(value, slots)
        return out
    if kind is list:
        return [_filled(v, slots) for v in node]
    if kind is str and node.startswith("__gpufabric_value_"):
        return slots.value(int(node[18:-2]))
    return node


class _Unplaceable(Exception):
    """A value cannot stand where its token is (a collection as a mapping key)."""


_SHAPES: dict[str, _Shape] = {}
_SHAPES_MAX = 4096


def _shape(text: str) -> _Shape:
    shape = _SHAPES.get(text)
    if shape is None:
        if len(_SHAPES) >= _SHAPES_MAX:
            _SHAPES.clear()
        shape = _SHAPES[text] = _Shape(text)
    return shape
