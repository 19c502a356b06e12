"""JSON Schema (draft 2020-12) compiled to plain Python checks that answer one question:
is this instance valid? The answer is the one ``jsonschema.Draft202012Validator`` (without
a format checker) gives, for the schemas the Kubernetes definitions and converted CRDs are
made of; a schema using any keyword outside that set is refused (:class:`Unsupported`) and
the caller uses jsonschema for it.

Why: ``render`` validates a thousand objects, nearly all valid. jsonschema walks each one
through its general machinery (a validator object per subschema, reference resolution on
every ``$ref``) and costs more than importing it; a compiled check does the same walk in a
tenth of the time and lets a render that finds no error skip importing jsonschema at all.
jsonschema still writes every error message: an object the check rejects is validated
again by it, so a report is always jsonschema's own.
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Callable, Mapping, Sequence, Sized
from typing import Any
from urllib.parse import unquote, urldefrag, urljoin

Check = Callable[[Any], bool]


class Unsupported(Exception):
    """The schema uses something the compiler does not implement: use jsonschema."""


# Keywords of draft 2020-12 that jsonschema applies; those not implemented here are refused.
IMPLEMENTED = frozenset(
    {
        "$ref",
        "type",
        "properties",
        "additionalProperties",
        "required",
        "items",
        "enum",
        "const",
        "allOf",
        "anyOf",
        "oneOf",
        "not",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minLength",
        "maxLength",
        "pattern",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
        "format",  # an annotation only: no format checker is configured
    }
)
REFUSED = frozenset(
    {
        "$dynamicRef",
        "$recursiveRef",
        "$anchor",
        "$dynamicAnchor",
        "contains",
        "dependentRequired",
        "dependentSchemas",
        "if",
        "multipleOf",
        "patternProperties",
        "prefixItems",
        "propertyNames",
        "unevaluatedItems",
        "unevaluatedProperties",
        "uniqueItems",
    }
)
"""Keywords jsonschema applies that this module leaves to it (and ``$id`` below the root of
a document, which moves the base of references)."""


def _is_integer(x: Any) -> bool:
    if isinstance(x, bool):
        return False
    return isinstance(x, int) or (isinstance(x, float) and x.is_integer())


def _is_number(x: Any) -> bool:
    return not isinstance(x, bool) and isinstance(x, numbers.Number)


TYPES: dict[str, Check] = {
    "array": lambda x: isinstance(x, list),
    "boolean": lambda x: isinstance(x, bool),
    "integer": _is_integer,
    "null": lambda x: x is None,
    "number": _is_number,
    "object": lambda x: isinstance(x, dict),
    "string": lambda x: isinstance(x, str),
}


def equal(one: Any, two: Any) -> bool:
    """jsonschema's equality: ``True`` is not ``1``, sequences and mappings compared
    element by element the same way."""
    if one is two:
        return True
    if isinstance(one, str) or isinstance(two, str):
        return bool(one == two)
    if isinstance(one, Sequence) and isinstance(two, Sequence):
        return len(one) == len(two) and all(equal(a, b) for a, b in zip(one, two, strict=True))
    if isinstance(one, Mapping) and isinstance(two, Mapping):
        return one.keys() == two.keys() and all(equal(one[k], two[k]) for k in one)
    if isinstance(one, bool) or isinstance(two, bool):
        return one is two
    return bool(one == two)


def _always(_x: Any) -> bool:
    return True


def _never(_x: Any) -> bool:
    return False


class Compiler:
    """Compiles schemas whose references point into ``resources`` (a document by its URI),
    sharing the check of every referenced subschema across the schemas it compiles."""

    def __init__(self, resources: Mapping[str, Any] | None = None) -> None:
        self._resources = dict(resources or {})
        self._refs: dict[int, Check] = {}
        self._keep: list[Any] = []  # the schemas keyed by id() stay alive

    def compile(self, schema: Any, base: str = "") -> Check:
        """The check for ``schema`` (its references resolved against ``base``, or its own
        ``$id``); Unsupported when it uses what this module does not implement."""
        if isinstance(schema, dict) and isinstance(schema.get("$id"), str):
            base = urljoin(base, schema["$id"])
        if isinstance(schema, dict):
            # its own "#/..." references (all resolved while compiling, so a later schema
            # that takes the same base does not change this one's)
            self._resources[base] = schema
        try:
            return self._schema(schema, base, root=True)
        except Unsupported:
            self._refs.clear()  # checks waiting on a subschema that failed are dropped
            raise
        except (TypeError, ValueError, re.error) as exc:
            self._refs.clear()
            raise Unsupported(f"malformed schema: {exc}") from exc

    def _schema(self, schema: Any, base: str, root: bool = False) -> Check:
        if schema is True:
            return _always
        if schema is False:
            return _never
        if not isinstance(schema, dict):
            raise Unsupported(f"schema is a {type(schema).__name__}")
        refused = REFUSED.intersection(schema)
        if refused or ("$id" in schema and not root):
            raise Unsupported(", ".join(sorted(refused)) or "$id below the root")
        checks = [self._object(schema, base)] if _object_like(schema) else []
        checks += [self._keyword(k, schema[k], schema, base) for k in _ORDER if k in schema]
        checks = [c for c in checks if c is not _always]
        if not checks:
            return _always
        if len(checks) == 1:
            return checks[0]
        return _all(tuple(checks))

    def _keyword(self, key: str, value: Any, schema: dict[str, Any], base: str) -> Check:
        if key == "$ref":
            return self._ref(value, base)
        if key in _SIMPLE:
            return _SIMPLE[key](value)
        if key == "items":
            return _items(self._schema(value, base))
        subs = tuple(self._schema(s, base) for s in _schemas(value, key))
        if key == "not":
            (sub,) = subs
            return lambda x: not sub(x)
        return _COMBINED[key](subs)

    def _object(self, schema: dict[str, Any], base: str) -> Check:
        props = schema.get("properties", {})
        if not isinstance(props, dict):
            raise Unsupported("properties is not a mapping")
        checks = {k: self._schema(v, base) for k, v in props.items()}
        extra = schema.get("additionalProperties", True)
        other: Check | None = None if extra is True else self._schema(extra, base)
        required = tuple(schema.get("required", ()))
        if not all(isinstance(r, str) for r in required):
            raise Unsupported("required names a non-string")
        return _properties(checks, other, required)

    def _ref(self, ref: Any, base: str) -> Check:
        if not isinstance(ref, str):
            raise Unsupported("$ref is not a string")
        target, target_base = self._resolve(urljoin(base, ref))
        key = id(target)
        if key in self._refs:
            return self._refs[key]
        cell: list[Check] = []
        self._refs[key] = lambda x: cell[0](x)  # a reference back to itself (recursion)
        self._keep.append(target)
        check = self._schema(target, target_base)
        cell.append(check)
        self._refs[key] = check
        return check

    def _resolve(self, uri: str) -> tuple[Any, str]:
        document_uri, fragment = urldefrag(uri)
        document = self._resources.get(document_uri)
        if document is None:
            raise Unsupported(f"$ref to an unknown document: {uri}")
        node = document
        if fragment:
            if not fragment.startswith("/"):
                raise Unsupported(f"$ref to an anchor: {uri}")
            for part in unquote(fragment).split("/")[1:]:
                part = part.replace("~1", "/").replace("~0", "~")
                if isinstance(node, dict) and part in node:
                    node = node[part]
                elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                    node = node[int(part)]
                else:
                    raise Unsupported(f"$ref does not resolve: {uri}")
        return node, document_uri


def _object_like(schema: Mapping[str, Any]) -> bool:
    return any(k in schema for k in ("properties", "additionalProperties", "required"))


def _schemas(value: Any, key: str) -> list[Any]:
    if key == "not":
        return [value]
    if not isinstance(value, list) or not value:
        raise Unsupported(f"{key} is not a non-empty list")
    return value


def _all(checks: tuple[Check, ...]) -> Check:
    def check(x: Any) -> bool:
        for c in checks:  # noqa: SIM110 (a loop: all() over a generator costs more per call)
            if not c(x):
                return False
        return True

    return check


def _properties(props: dict[str, Check], other: Check | None, required: tuple[str, ...]) -> Check:
    """properties, additionalProperties and required of one schema, in one pass."""

    def check(x: Any) -> bool:
        if not isinstance(x, dict):
            return True
        for k, v in x.items():
            c = props.get(k) if isinstance(k, str) else None
            if c is None:
                if other is not None and k not in props and not other(v):
                    return False
            elif not c(v):
                return False
        for r in required:  # noqa: SIM110
            if r not in x:
                return False
        return True

    return check


def _items(sub: Check) -> Check:
    def check(x: Any) -> bool:
        if not isinstance(x, list):
            return True
        for v in x:  # noqa: SIM110
            if not sub(v):
                return False
        return True

    return check


def _type(value: Any) -> Check:
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(n in TYPES for n in names):
        raise Unsupported(f"type {value!r}")
    if names == ["string", "null"]:  # the Kubernetes definitions' most common case
        return lambda x: x is None or isinstance(x, str)
    tests = tuple(TYPES[n] for n in names)
    if len(tests) == 1:
        return tests[0]
    return lambda x: any(t(x) for t in tests)


def _enum(value: Any) -> Check:
    if not isinstance(value, list):
        raise Unsupported("enum is not a list")
    if all(isinstance(v, str) for v in value):
        strings = frozenset(value)
        return lambda x: isinstance(x, str) and x in strings
    return lambda x: any(equal(x, v) for v in value)


def _const(value: Any) -> Check:
    return lambda x: equal(x, value)


def _number(op: Callable[[Any, Any], bool]) -> Callable[[Any], Check]:
    def make(limit: Any) -> Check:
        if not _is_number(limit):
            raise Unsupported(f"limit {limit!r} is not a number")
        return lambda x: not _is_number(x) or op(x, limit)

    return make


def _size(kind: type[Sized], op: Callable[[int, Any], bool]) -> Callable[[Any], Check]:
    def make(limit: Any) -> Check:
        if not _is_integer(limit):
            raise Unsupported(f"size limit {limit!r} is not an integer")
        return lambda x: not isinstance(x, kind) or op(len(x), limit)

    return make


def _pattern(value: Any) -> Check:
    if not isinstance(value, str):
        raise Unsupported("pattern is not a string")
    search = re.compile(value).search
    return lambda x: not isinstance(x, str) or search(x) is not None


def _any(subs: tuple[Check, ...]) -> Check:
    return lambda x: any(s(x) for s in subs)


def _one(subs: tuple[Check, ...]) -> Check:
    return lambda x: sum(1 for s in subs if s(x)) == 1


_SIMPLE: dict[str, Callable[[Any], Check]] = {
    "type": _type,
    "enum": _enum,
    "const": _const,
    "minimum": _number(lambda x, m: not x < m),
    "maximum": _number(lambda x, m: not x > m),
    "exclusiveMinimum": _number(lambda x, m: x > m),
    "exclusiveMaximum": _number(lambda x, m: x < m),
    "minLength": _size(str, lambda n, m: n >= m),
    "maxLength": _size(str, lambda n, m: n <= m),
    "minItems": _size(list, lambda n, m: n >= m),
    "maxItems": _size(list, lambda n, m: n <= m),
    "minProperties": _size(dict, lambda n, m: n >= m),
    "maxProperties": _size(dict, lambda n, m: n <= m),
    "pattern": _pattern,
    "format": lambda _v: _always,
}
_COMBINED: dict[str, Callable[[tuple[Check, ...]], Check]] = {
    "allOf": _all,
    "anyOf": _any,
    "oneOf": _one,
}
_OBJECT_KEYS = frozenset({"properties", "additionalProperties", "required"})
_ORDER = ("type", *sorted(IMPLEMENTED - _OBJECT_KEYS - {"type", "format"}))
"""The keywords checked one by one (the cheap type test first); the object keywords are
checked together in one pass."""
