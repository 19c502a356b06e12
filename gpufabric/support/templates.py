"""Jinja2 templates in manifests/ that produce the Kubernetes objects gpufabric writes.

Values enter templates only through the ``json`` filter (JSON is valid YAML), never by
pasting strings, and a template that refers to an undefined name fails loudly. Every
rendered document is parsed back as YAML and checked to be one Kubernetes object.

Templates are compiled in the process that renders them, from the package's own files, and
never kept between runs: compiled code read back from a cache directory would run as
gpufabric (anyone able to write that directory, or to plant one entry in it, could change
every render). Compiling all of them costs about 50 ms.
"""

from __future__ import annotations

import functools
import json
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


@functools.cache
def environment(directory: Path = TEMPLATES_DIR) -> jinja2.Environment:
    """Templates under ``directory``: strict about undefined names, values via ``json``."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(directory)),
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
