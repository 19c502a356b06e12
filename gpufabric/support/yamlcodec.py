"""YAML in and out, through libyaml when PyYAML was built with it (the wheels are).

Same results as ``yaml.safe_load`` and ``yaml.safe_dump``, with the Python-side costs
that dominate a large render removed:

- resolving a plain scalar's tag (is ``9000`` an int, ``true`` a bool?) runs a regex per
  scalar, twice per scalar when dumping; the answer depends only on the text, so it is
  remembered;
- the generic representer checks every value for aliases and dispatches through the
  class hierarchy; :func:`dump` builds the node tree straight from plain data (dict, list,
  str, int, float, bool, None) and hands it to the emitter.

Output of :func:`dump`: block style, keys sorted, multi-line strings as literal blocks,
lines folded at 100 columns.
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
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import Resolver

_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_BaseDumper: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

_STR = "tag:yaml.org,2002:str"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"
_RESOLVER = Resolver()
WIDTH = 100


_TAGS: dict[tuple[str, tuple[bool, bool]], str] = {}
"""A plain scalar's tag by its text and implicitness: the answer depends on nothing else."""


def _scalar_tag(value: str, implicit: tuple[bool, bool]) -> str:
    tag = _TAGS.get((value, implicit))
    if tag is None:
        if len(_TAGS) >= 1 << 16:
            _TAGS.clear()
        tag = _TAGS[(value, implicit)] = Resolver.resolve(_RESOLVER, ScalarNode, value, implicit)  # type: ignore[no-untyped-call]
    return tag


_FIRST = frozenset(k for k in Resolver.yaml_implicit_resolvers if k)
"""First characters of the texts an implicit type (int, bool, null, ...) can match."""
_FAST = None not in Resolver.yaml_implicit_resolvers and not Resolver.yaml_path_resolvers
"""No resolver that applies to every text (PyYAML's safe resolver has none)."""


class _MemoResolver:
    """Scalar tags from the cache; no path resolvers (PyYAML's safe classes have none)."""

    def resolve(self, kind: type[Node], value: Any, implicit: Any) -> str:
        if kind is ScalarNode:
            # As Resolver.resolve decides, without its regexes where none can apply: a
            # quoted or block scalar, or a plain one whose first character starts no
            # implicit type, is a string (most of a CRD's megabytes of descriptions).
            if _FAST and (not implicit[0] or (value and value[0] not in _FIRST)):
                return _STR
            # libyaml's parser passes a tuple: one dict lookup for a text seen before
            known = _TAGS.get((value, implicit)) if type(implicit) is tuple else None
            return known or _scalar_tag(value, tuple(implicit))
        tag: str = Resolver.resolve(_RESOLVER, kind, value, implicit)  # type: ignore[no-untyped-call]
        return tag

    def descend_resolver(self, current_node: Any, current_index: Any) -> None:
        pass

    def ascend_resolver(self) -> None:
        pass


class Loader(_MemoResolver, _BaseLoader):  # type: ignore[misc,valid-type]
    """The safe loader (libyaml's parser when available)."""


# A bare `=` resolves to YAML 1.1's "value" type, which PyYAML's safe loader cannot construct;
# upstream CRDs use it as an enum value (the Prometheus Operator's relabel actions, `- =`).
Loader.add_constructor(
    "tag:yaml.org,2002:value",
    lambda loader, node: loader.construct_scalar(node),
)


class _Dumper(_MemoResolver, _BaseDumper):  # type: ignore[misc,valid-type]
    pass


if Resolver.yaml_path_resolvers or getattr(_BaseLoader, "yaml_path_resolvers", None):
    raise RuntimeError(
        "gpufabric.support.yamlcodec assumes PyYAML's safe classes have no path resolvers"
    )


def load(text: str) -> Any:
    return yaml.load(text, Loader=Loader)


class _Unusual(Exception):
    """The document has something :func:`load_simple` leaves to PyYAML's constructor."""


_MERGE = "tag:yaml.org,2002:merge"
_SCALARS = {
    tag: constructor
    for tag, constructor in yaml.constructor.SafeConstructor.yaml_constructors.items()
    if tag
    in (
        "tag:yaml.org,2002:null",
        "tag:yaml.org,2002:bool",
        "tag:yaml.org,2002:int",
        "tag:yaml.org,2002:float",
    )
}


def _build(node: Node, constructor: Any, seen: set[int]) -> Any:
    tag = node.tag
    if tag == _STR and type(node) is ScalarNode:
        return node.value
    if tag == _MAP and type(node) is MappingNode:
        if id(node) in seen:
            raise _Unusual  # an alias: PyYAML shares the object
        seen.add(id(node))
        out = {}
        for key, value in node.value:
            if type(key) is not ScalarNode or key.tag == _MERGE:
                raise _Unusual
            out[_build(key, constructor, seen)] = _build(value, constructor, seen)
        return out
    if tag == _SEQ and type(node) is SequenceNode:
        if id(node) in seen:
            raise _Unusual
        seen.add(id(node))
        return [_build(v, constructor, seen) for v in node.value]
    if type(node) is ScalarNode and tag in _SCALARS:
        return _SCALARS[tag](constructor, node)
    raise _Unusual


def _document(loader: Loader, node: Node) -> Any:
    try:
        return _build(node, loader, set())
    except _Unusual:
        return loader.construct_document(node)


def load_simple(text: str) -> Any:
    """:func:`load` for the documents gpufabric's templates produce: mappings, sequences and
    plain scalars are built directly (PyYAML's general constructor costs more than the
    parse); a document with anything else (aliases, merge keys, complex keys, other tags)
    goes through the general constructor. Same result either way."""
    loader = Loader(text)
    try:
        node = loader.get_single_node()
        return None if node is None else _document(loader, node)
    finally:
        loader.dispose()


def load_all_simple(text: str) -> list[Any]:
    """Every document of ``text``, each built as :func:`load_simple` builds one (CRDs and
    other upstream manifests: megabytes of plain mappings)."""
    loader = Loader(text)
    docs: list[Any] = []
    try:
        while loader.check_node():
            docs.append(_document(loader, loader.get_node()))
    finally:
        loader.dispose()
    return docs


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


def _scalar(data: Any, dumper: _Dumper) -> ScalarEvent:
    """The event PyYAML's serializer makes of the node its representer makes of ``data``
    (a str written literal when multi-line, its tag implicit where the text resolves to
    the same tag)."""
    if type(data) is str:
        tag, value, style = _STR, data, ("|" if "\n" in data else None)
    else:
        node = dumper.represent_data(data)
        tag, value, style = node.tag, node.value, node.style
    implicit = (tag == _scalar_tag(value, (True, False)), tag == _STR)
    return ScalarEvent(None, tag, implicit, value, style=style)


def _emit(
    data: Any, dumper: _Dumper, emit: Callable[[Any], None], convert: Callable[[Any], Any] | None
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


def _remember(data: Any, dumper: _Dumper) -> ScalarEvent:
    if len(_SCALAR_EVENTS) >= _SCALARS_MAX:
        _SCALAR_EVENTS.clear()
    event = _SCALAR_EVENTS[(type(data), data)] = _scalar(data, dumper)
    return event


def dump(data: Any, convert: Callable[[Any], Any] | None = None) -> str:
    """YAML text of plain data (str keys; dict, list, str, int, float, bool, None).

    ``convert`` turns anything else (a value of another type, a mapping with other keys)
    into plain data, once per such value: the caller's objects are written without first
    copying every plain dict and list around them.

    The text is libyaml's: each distinct scalar is written by libyaml once (see
    :func:`_value_text`), and a document whose scalars all keep their text wherever they
    stand is assembled from those texts (:class:`_Block`); any other document is written
    by libyaml whole."""
    kind = type(data)
    if data and (kind is list or (kind is dict and all(type(k) is str for k in data))):
        text = _Block(convert).document(data)
        if text is not None:
            return text
    return _dump_events(data, convert)


def _dump_events(data: Any, convert: Callable[[Any], Any] | None) -> str:
    """:func:`dump` through libyaml's emitter, event by event."""
    stream = io.StringIO()
    dumper = _Dumper(stream, default_flow_style=False, width=WIDTH, sort_keys=True)
    emit = dumper.emit
    emit(_STREAM_START)
    emit(_DOC_START)
    _emit(data, dumper, emit, convert)
    emit(_DOC_END)
    emit(_STREAM_END)
    return stream.getvalue()


_PLAIN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./-]*\Z")
"""Texts libyaml writes plain wherever they stand (no indicator, space, quote or
non-ASCII character) when they read back as a string."""
_Literal = tuple[str, tuple[str, ...]]
"""A literal block: its header (``|-``, ``|2+`` ...) and its lines as libyaml indents
them under a key at column 0 (two spaces; an empty line empty)."""
_Text = str | _Literal | None
"""How libyaml writes a scalar: one line, a literal block, or None where it is neither
(wrapped over lines, or a key it writes as a complex key)."""
_VALUE_TEXTS: dict[Any, _Text] = {}
_STR_TEXTS: dict[str, str] = {}
"""The one-line texts of strings, by the string (the common case, one lookup)."""
_KEY_TEXTS: dict[str, str | None] = {}


def _value_text(data: Any) -> _Text:
    """How libyaml writes ``data`` as a block mapping's value or a sequence's entry (the
    same in both: block context, not a key), found once per distinct scalar."""
    key = (type(data), repr(data) if type(data) is float else data)
    text = _VALUE_TEXTS.get(key, _MISSING)
    if text is _MISSING:
        if len(_VALUE_TEXTS) >= _SCALARS_MAX:
            _VALUE_TEXTS.clear()
        if type(data) is str and _PLAIN.match(data) and _scalar_tag(data, (True, False)) == _STR:
            text = data
        else:
            text = _parse_probe(_dump_events({"k": data}, None))
        _VALUE_TEXTS[key] = text
        if type(data) is str and isinstance(text, str):
            if len(_STR_TEXTS) >= _SCALARS_MAX:
                _STR_TEXTS.clear()
            _STR_TEXTS[data] = text
    result: _Text = text
    return result


_MISSING: Any = object()


def _parse_probe(probe: str) -> _Text:
    """The scalar's text in ``k: <scalar>\n`` as libyaml wrote it."""
    rest = probe[3:]
    if rest.startswith(("|", ">")):
        header, _, body = rest.partition("\n")
        lines = body.split("\n")[:-1]
        if lines and lines[-1] == "...":  # a kept final line break leaves the document open
            lines.pop()
        if header[0] == ">" or any(line and not line.startswith("  ") for line in lines):
            return None
        return header, tuple(lines)
    if rest.count("\n") != 1 or not rest.endswith("\n"):
        return None  # folded over lines
    return rest[:-1]


def _key_text(key: str) -> str | None:
    """How libyaml writes ``key`` as a simple key (None: it writes a complex key)."""
    text = _KEY_TEXTS.get(key, _MISSING)
    if text is _MISSING:
        if len(_KEY_TEXTS) >= _SCALARS_MAX:
            _KEY_TEXTS.clear()
        if _PLAIN.match(key) and len(key) <= 128 and _scalar_tag(key, (True, False)) == _STR:
            text = key
        else:
            probe = _dump_events({key: 0}, None)
            head = probe[: -len(": 0\n")]
            simple = probe.endswith(": 0\n") and "\n" not in head and not head.startswith("?")
            text = head if simple else None
        _KEY_TEXTS[key] = text
    result: str | None = text
    return result


class _Unsure(Exception):
    """A scalar whose text could depend on where it stands: libyaml writes the document."""


class _Block:
    """A document in libyaml's block style (indent 2, sequences under a key not indented,
    empty collections as ``{}`` and ``[]``), assembled from the scalars' texts."""

    def __init__(self, convert: Callable[[Any], Any] | None) -> None:
        self.convert = convert
        self.out: list[str] = []
        self.open_ended = False

    def document(self, data: Any) -> str | None:
        try:
            if type(data) is dict:
                self.mapping(data, 0, "")
            else:
                self.sequence(data, 0, "")
        except _Unsure:
            return None
        if self.open_ended:
            self.out.append("...\n")
        return "".join(self.out)

    def mapping(self, data: dict[str, Any], indent: int, first: str) -> None:
        pad = " " * indent
        texts = _KEY_TEXTS
        for i, key in enumerate(sorted(data)):
            text = texts.get(key) or _key_text(key)
            if text is None:
                raise _Unsure
            self.entry(data[key], indent, f"{first if i == 0 else pad}{text}:", True)

    def sequence(self, data: list[Any], indent: int, first: str) -> None:
        pad = " " * indent
        for i, item in enumerate(data):
            self.entry(item, indent, f"{first if i == 0 else pad}-", False)

    def entry(self, value: Any, indent: int, line: str, in_mapping: bool) -> None:
        """``line`` (a key and its colon, or a dash) and the value written after it."""
        kind = type(value)
        if kind is str:
            text = _STR_TEXTS.get(value)
            if text is not None and (len(line) + len(text) < WIDTH or " " not in text):
                self.out.append(f"{line} {text}\n")
            else:
                self.scalar(value, indent, line)
        elif kind is dict:
            if not all(type(k) is str for k in value):
                self.converted(value, indent, line, in_mapping)
            elif not value:
                self.out.append(f"{line} {{}}\n")
            elif in_mapping:
                self.out.append(line + "\n")
                self.mapping(value, indent + 2, " " * (indent + 2))
            else:
                self.mapping(value, indent + 2, line + " ")
        elif kind is list:
            if not value:
                self.out.append(f"{line} []\n")
            elif in_mapping:
                self.out.append(line + "\n")
                self.sequence(value, indent, " " * indent)
            else:
                self.sequence(value, indent + 2, line + " ")
        elif kind is int or kind is bool or kind is float or value is None:
            self.scalar(value, indent, line)
        else:
            self.converted(value, indent, line, in_mapping)

    def converted(self, value: Any, indent: int, line: str, in_mapping: bool) -> None:
        """A value that is not plain data, converted once and written without converting
        again (as :func:`_emit` does)."""
        convert = self.convert
        if convert is None:
            raise TypeError(f"cannot write {type(value).__name__} as YAML: {value!r}")
        self.convert = None
        try:
            self.entry(convert(value), indent, line, in_mapping)
        finally:
            self.convert = convert

    def scalar(self, value: Any, indent: int, line: str) -> None:
        text = _value_text(value)
        if isinstance(text, str):
            if " " in text and len(line) + 1 + len(text) > WIDTH:
                raise _Unsure  # libyaml may fold it over lines here
            self.out.append(f"{line} {text}\n")
        elif text is None:
            raise _Unsure
        else:
            header, lines = text
            pad = " " * indent
            self.out.append(f"{line} {header}\n")
            self.out.extend(f"{pad}{raw}\n" if raw else "\n" for raw in lines)
            # libyaml ends the document with "..." when the last literal block kept its
            # final line breaks (each block's header sets or clears that)
            self.open_ended = header.endswith("+")
