"""Strict reading of stack files: the YAML a user (or a tool) wrote, refused when it is not
what it seems.

Plain ``yaml.safe_load`` keeps the last of two equal keys (a second ``gpufabric:tenants:``
silently drops the first block's tenants), expands aliases without bound (a few hundred
bytes can stand for gigabytes), recurses once per nesting level and decodes bytes the
caller guessed. Here the file is read as bytes up to a size limit, decoded as UTF-8 (naming
the line of an invalid byte; UTF-16 and UTF-32 are recognised by their byte-order mark),
composed into nodes, and the node tree is walked with budgets - nesting depth, nodes and
scalar characters after alias expansion - and checked for duplicate keys, each problem
naming its line, before any value is built.
"""

from __future__ import annotations

import codecs
from pathlib import Path
from typing import Any

import yaml
from msgspec import Struct

MAX_FILE_BYTES = 1 << 20
"""Stack files are a few kilobytes; a megabyte is far beyond any real one."""
MAX_DEPTH = 32
"""A stack nests about six levels deep."""
NESTED_TOO_DEEP = (
    f"nested more than {MAX_DEPTH} levels deep; a stack file nests about 6 levels, so this is "
    "not one (generated data, or aliases that nest each other)"
)
MAX_NODES = 200_000
"""Nodes after alias expansion (a 1,000-tenant stack has about 20,000)."""
MAX_SCALAR_CHARS = 4 << 20
"""Characters of all scalars after alias expansion."""

_CORE = "tag:yaml.org,2002:"
ACCEPTED_TAGS = frozenset(
    _CORE + t for t in ("null", "bool", "int", "float", "str", "seq", "map", "merge", "timestamp")
)
"""Tags of the YAML core schema a stack's values can carry (timestamps only as plain text
resolves them; no field takes one, so the model refuses them by type). ``!!binary``,
``!!set``, ``!!omap``, ``!!pairs`` and local ``!tags`` are refused: they would be decoded
into bytes, sets or pairs and silently taken for names."""

_BOMS = (
    (codecs.BOM_UTF32_LE, "UTF-32"),
    (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"),
    (codecs.BOM_UTF16_BE, "UTF-16"),
)


class StackFileError(Exception):
    """The file cannot be read as a stack file; ``problems`` are (line or None, message)."""

    def __init__(self, problems: list[tuple[int | None, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(m for _, m in problems))


def read_bytes(path: Path) -> bytes:
    """The file's bytes, refused when it is not a regular file or too large."""
    if not path.is_file():
        raise StackFileError([(None, "not a regular file")])
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise StackFileError(
            [(None, f"{size} bytes is too large for a stack file (at most {MAX_FILE_BYTES})")]
        )
    with path.open("rb") as f:
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise StackFileError([(None, f"too large for a stack file (at most {MAX_FILE_BYTES})")])
    return data


def decode(data: bytes) -> str:
    """UTF-8 text (a UTF-8 byte-order mark is dropped)."""
    for bom, name in _BOMS:
        if data.startswith(bom):
            raise StackFileError(
                [(None, f"the file is {name}-encoded; save it as UTF-8 (Pulumi reads UTF-8)")]
            )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise StackFileError(
            [
                (
                    line,
                    f"byte 0x{data[exc.start]:02x} at offset {exc.start} is not UTF-8; "
                    "save the file as UTF-8",
                )
            ]
        ) from None


class _Budget(Struct):
    nodes: int = 0
    chars: int = 0


def _line(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1


def _check_tag(node: yaml.Node) -> None:
    """Refuse a node whose tag is not one of :data:`ACCEPTED_TAGS`, naming it as the file
    spells it (``!!binary``)."""
    if node.tag in ACCEPTED_TAGS:
        return
    tag = node.tag
    short = "!!" + tag[len(_CORE) :] if tag.startswith(_CORE) else tag
    raise StackFileError(
        [
            (
                _line(node),
                f"the YAML tag {short[:40]!r} is not accepted in a stack file; write the value "
                "as plain text (accepted: !!str, !!int, !!float, !!bool, !!null, !!seq, !!map)",
            )
        ]
    )


def _walk(
    node: yaml.Node, depth: int, budget: _Budget, problems: list[tuple[int | None, str]]
) -> None:
    """Depth-first over the node graph as construction would expand it."""
    if depth > MAX_DEPTH:
        raise StackFileError([(_line(node), NESTED_TOO_DEEP)])
    _check_tag(node)
    budget.nodes += 1
    if budget.nodes > MAX_NODES:
        raise StackFileError(
            [
                (
                    _line(node),
                    f"more than {MAX_NODES} values once aliases are expanded; "
                    "write the values out instead of aliasing them repeatedly",
                )
            ]
        )
    if isinstance(node, yaml.ScalarNode):
        budget.chars += len(node.value)
        if budget.chars > MAX_SCALAR_CHARS:
            raise StackFileError(
                [
                    (
                        _line(node),
                        f"more than {MAX_SCALAR_CHARS} characters of values once aliases are "
                        "expanded; a stack file holds settings, not data",
                    )
                ]
            )
        return
    if isinstance(node, yaml.SequenceNode):
        for child in node.value:
            _walk(child, depth + 1, budget, problems)
        return
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                if key.value in seen:
                    problems.append(
                        (
                            _line(key),
                            f"duplicate key {key.value!r} (first at line {seen[key.value]}); "
                            "YAML keeps only the last one, so merge the two blocks",
                        )
                    )
                else:
                    seen[key.value] = _line(key)
            _walk(key, depth + 1, budget, problems)
            _walk(value, depth + 1, budget, problems)


def load(text: str) -> Any:
    """The document in ``text``, or StackFileError listing what makes it unsafe to use."""
    loader = yaml.SafeLoader(text)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise StackFileError([(None, NESTED_TOO_DEEP)]) from None
        if node is None:
            return None
        problems: list[tuple[int | None, str]] = []
        _walk(node, 0, _Budget(), problems)
        if problems:
            raise StackFileError(problems)
        return loader.construct_document(node)
    finally:
        loader.dispose()


__all__ = ["MAX_FILE_BYTES", "StackFileError", "decode", "load", "read_bytes"]
