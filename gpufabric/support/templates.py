"""Jinja2 templates in manifests/ that produce the Kubernetes objects gpufabric writes.

Values enter templates only through the ``json`` filter (JSON is valid YAML), never by
pasting strings, and a template that refers to an undefined name fails loudly. Every
rendered document is parsed back as YAML and checked to be one Kubernetes object.

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
import stat
import sys
import tempfile
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
    return yamlcodec.load_simple(text)


class TemplateError(Exception):
    """A template produced something that is not one Kubernetes object."""


_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
_encode_str: Any = json.encoder.encode_basestring  # what _ENCODER does with a str, in C
_CONSTANTS = {True: "true", False: "false", None: "null"}


def _to_json(value: Any) -> str:
    """``json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)``
    without building an encoder per call (templates call it 7,000 times a large render)."""
    kind = type(value)
    if kind is str:
        return str(_encode_str(value))
    if kind is bool or value is None:
        return _CONSTANTS[value]
    if kind is int:
        return int.__repr__(value)
    return _ENCODER.encode(value)


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
        cache_size=-1,  # every template kept: Jinja's LRU scans a deque on every lookup
        **_OPTIONS,
    )
    env.filters["json"] = _to_json
    return env


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
    """Render one template into one Kubernetes object (a dict)."""
    text = environment().get_template(template).render(**context)
    try:
        obj = load_yaml(text)
    except yaml.YAMLError as exc:
        raise TemplateError(f"{template} rendered invalid YAML: {exc}") from exc
    if not isinstance(obj, dict) or not {"apiVersion", "kind", "metadata"} <= obj.keys():
        raise TemplateError(f"{template} did not render a Kubernetes object")
    if not obj["metadata"].get("name"):
        raise TemplateError(f"{template} rendered an object without metadata.name")
    return obj
