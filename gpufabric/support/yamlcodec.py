"""YAML in and out, through libyaml when PyYAML was built with it (the wheels are).

:func:`load` is ``yaml.safe_load`` with libyaml's parser (and a bare ``=`` read as the
string, as upstream CRDs use it). :func:`dump` gives what ``yaml.safe_dump`` gives with
block style, keys sorted, multi-line strings as literal blocks and lines folded at 100
columns, without PyYAML's representer and serializer: it hands libyaml's emitter the
events that serializing the node tree would produce, each distinct scalar's event made
once (a render writes the same names and labels a thousand times). That path is the one
speed-only piece kept here: with PyYAML's own serializer over libyaml's emitter the stress
render (1,024 nodes, 200 tenants) runs 20 % more instructions on its critical path.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from typing import Any

import yaml
from yaml.events import (
    DocumentEndEvent,
    DocumentStartEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
    StreamStartEvent,
)
from yaml.nodes import ScalarNode
from yaml.resolver import Resolver

_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_BaseDumper: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

_STR = "tag:yaml.org,2002:str"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"
_RESOLVER = Resolver()
WIDTH = 100


class Loader(_BaseLoader):  # type: ignore[misc,valid-type]
    """The safe loader (libyaml's parser when available)."""


# A bare `=` resolves to YAML 1.1's "value" type, which PyYAML's safe loader cannot construct;
# upstream CRDs use it as an enum value (the Prometheus Operator's relabel actions, `- =`).
Loader.add_constructor(
    "tag:yaml.org,2002:value",
    lambda loader, node: loader.construct_scalar(node),
)


def load(text: str) -> Any:
    return yaml.load(text, Loader=Loader)


def load_all(text: str) -> list[Any]:
    """Every document of ``text``."""
    return list(yaml.load_all(text, Loader=Loader))


_OTHER_WORDS = frozenset(
    (
        "y",
        "Y",
        "n",
        "N",
        "<<",
        ".nan",
        ".NaN",
        ".NAN",
        *(s + w for s in "+-" for w in (".inf", ".Inf", ".INF")),
    )
)
"""Plain scalars that YAML 1.1's boolean type (``y``, ``n``) or YAML 1.2's core schema and
Go's yaml.v3 resolve to something other than a string (PyYAML's resolver lacks ``y``/``n``)."""
_OTHER_NUMBER = re.compile(
    r"[-+]?(?:0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+"
    r"|(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?)"
    r"|[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}(?:[Tt ][0-9].*)?"
)
"""A number to YAML 1.2's core schema (``09`` an int, ``1e3`` and ``6e1`` floats, ``0o17``)
or to Go's yaml.v3, Pulumi's reader of stack files (its resolve.go drops every ``_`` of a
scalar that starts with a digit, sign or dot, takes Go's integer prefixes in either case,
``0B11``, ``0X1f``, and dates with one-digit fields, ``2024-1-2``), after the ``_`` are
dropped."""


def other_readers_resolve(text: str) -> bool:
    """Whether a YAML 1.1 reader (``y``, ``n``), a YAML 1.2 core schema one or Go's yaml.v3
    would take the plain scalar ``text``, which PyYAML's YAML 1.1 resolver reads as a
    string, for a bool, a number or a date: written quoted, every reader reads the string."""
    if text in _OTHER_WORDS:
        return True
    if not text or text[0] not in ".+-0123456789":
        return False
    return _OTHER_NUMBER.fullmatch(text.replace("_", "")) is not None


_STREAM_START = StreamStartEvent(encoding=None)
_STREAM_END = StreamEndEvent()
_DOC_START = DocumentStartEvent(explicit=False, version=None, tags=None)
_DOC_END = DocumentEndEvent(explicit=False)
_MAP_START = MappingStartEvent(None, _MAP, True, flow_style=False)
_MAP_END = MappingEndEvent()
_SEQ_START = SequenceStartEvent(None, _SEQ, True, flow_style=False)
_SEQ_END = SequenceEndEvent()
_SCALARS_MAX = 1 << 16
_SCALAR_EVENTS: dict[Any, ScalarEvent] = {}
"""The event of every scalar written so far (by type and value; the emitter only reads
them), floats excepted: most values repeat across a render's thousand files."""


def _scalar(data: Any, dumper: yaml.SafeDumper) -> ScalarEvent:
    """The event PyYAML's serializer makes of the node its representer makes of ``data``
    (a str written literal when multi-line, its tag implicit where the text resolves to
    the same tag), a str quoted also where another YAML reader would resolve it to
    another type (:func:`other_readers_resolve`)."""
    if type(data) is str:
        tag, value, style = _STR, data, ("|" if "\n" in data else None)
    else:
        node: Any = dumper.represent_data(data)
        tag, value, style = node.tag, node.value, node.style
    detected = _RESOLVER.resolve(ScalarNode, value, (True, False))  # type: ignore[no-untyped-call]
    plain = tag == detected and not (tag == _STR and other_readers_resolve(value))
    return ScalarEvent(None, tag, (plain, tag == _STR), value, style=style)


def _emit(
    data: Any,
    dumper: yaml.SafeDumper,
    emit: Callable[[Any], None],
    convert: Callable[[Any], Any] | None,
) -> None:
    """The events of ``data`` straight to the emitter: what serializing the node tree the
    representer builds would emit, without building the tree or resolving each scalar's
    tag twice."""
    kind = type(data)
    if kind is dict and all(type(k) is str for k in data):
        emit(_MAP_START)
        for k in sorted(data):
            emit(_SCALAR_EVENTS.get((str, k)) or _remember(k, dumper))
            _emit(data[k], dumper, emit, convert)
        emit(_MAP_END)
    elif kind is list:
        emit(_SEQ_START)
        for v in data:
            _emit(v, dumper, emit, convert)
        emit(_SEQ_END)
    elif kind in (str, int, bool) or data is None:
        emit(_SCALAR_EVENTS.get((kind, data)) or _remember(data, dumper))
    elif kind is float:  # not remembered: -0.0 == 0.0 would find the other's text
        emit(_scalar(data, dumper))
    elif convert is not None:
        _emit(convert(data), dumper, emit, None)
    else:
        raise TypeError(f"cannot write {kind.__name__} as YAML: {data!r}")


def _remember(data: Any, dumper: yaml.SafeDumper) -> ScalarEvent:
    if len(_SCALAR_EVENTS) >= _SCALARS_MAX:
        _SCALAR_EVENTS.clear()
    event = _SCALAR_EVENTS[(type(data), data)] = _scalar(data, dumper)
    return event


def dump(data: Any, convert: Callable[[Any], Any] | None = None) -> str:
    """YAML text of plain data (str keys; dict, list, str, int, float, bool, None).

    ``convert`` turns anything else (a value of another type, a mapping with other keys)
    into plain data, once per such value: the caller's objects are written without first
    copying every plain dict and list around them."""
    stream = io.StringIO()
    dumper = _BaseDumper(stream, default_flow_style=False, width=WIDTH, sort_keys=True)
    emit = dumper.emit
    emit(_STREAM_START)
    emit(_DOC_START)
    _emit(data, dumper, emit, convert)
    emit(_DOC_END)
    emit(_STREAM_END)
    return stream.getvalue()
