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

import functools
import io
from collections.abc import Callable
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import Resolver

_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_BaseDumper: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

_STR = "tag:yaml.org,2002:str"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"
_RESOLVER = Resolver()
WIDTH = 100


@functools.lru_cache(maxsize=1 << 16)
def _scalar_tag(value: str, implicit: tuple[bool, bool]) -> str:
    tag: str = Resolver.resolve(_RESOLVER, ScalarNode, value, implicit)  # type: ignore[no-untyped-call]
    return tag


class _MemoResolver:
    """Scalar tags from the cache; no path resolvers (PyYAML's safe classes have none)."""

    def resolve(self, kind: type[Node], value: Any, implicit: Any) -> str:
        if kind is ScalarNode:
            return _scalar_tag(value, tuple(implicit))
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


def _node(data: Any, dumper: _Dumper, convert: Callable[[Any], Any] | None) -> Node:
    kind = type(data)
    if kind is str:
        return ScalarNode(_STR, data, style="|" if "\n" in data else None)
    if kind is dict and all(type(k) is str for k in data):
        return MappingNode(
            _MAP,
            [
                (ScalarNode(_STR, k, style="|" if "\n" in k else None), _node(v, dumper, convert))
                for k, v in sorted(data.items())
            ],
            flow_style=False,
        )
    if kind is list:
        return SequenceNode(_SEQ, [_node(v, dumper, convert) for v in data], flow_style=False)
    if kind in (int, float, bool) or data is None:
        node: Node = dumper.represent_data(data)
        return node
    if convert is not None:
        return _node(convert(data), dumper, None)
    raise TypeError(f"cannot write {kind.__name__} as YAML: {data!r}")


def dump(data: Any, convert: Callable[[Any], Any] | None = None) -> str:
    """YAML text of plain data (str keys; dict, list, str, int, float, bool, None).

    ``convert`` turns anything else (a value of another type, a mapping with other keys)
    into plain data, once per such value: the caller's objects are written without first
    copying every plain dict and list around them."""
    stream = io.StringIO()
    dumper = _Dumper(stream, default_flow_style=False, width=WIDTH, sort_keys=True)
    dumper.open()
    dumper.serialize(_node(data, dumper, convert))
    dumper.close()
    return stream.getvalue()
