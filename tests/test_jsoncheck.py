"""The compiled schema checks (gpufabric.support.jsoncheck) against jsonschema itself: a
render trusts a check that passes an object, so a check must never pass what jsonschema
rejects (nor, where it sits under ``not`` or ``oneOf``, reject what jsonschema passes)."""

from __future__ import annotations

import copy
import random
from typing import Any

import jsonschema
import pytest
from builders import SHIPPED_STACKS, example_config, plan_of
from conftest import CRD_DIR

from gpufabric.outputs import schema
from gpufabric.outputs.render import plain
from gpufabric.support import jsoncheck

MINOR = "1.33"
ODD_VALUES: list[Any] = [
    None,
    True,
    False,
    0,
    1,
    1.0,
    1.5,
    -3,
    "",
    "x",
    "1",
    [],
    {},
    ["a"],
    {"a": 1},
]


def _spots(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into ``node`` (mapping keys and list indexes)."""
    out = [path]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _spots(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _spots(v, (*path, i))
    return out


def _at(node: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        node = node[p]
    return node


def mutate(obj: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """One random change a careless template could make: a field dropped, an unknown field
    added, a value of another type or shape."""
    out = copy.deepcopy(obj)
    path = rng.choice(_spots(out)[1:])
    parent, last = _at(out, path[:-1]), path[-1]
    action = rng.randrange(3)
    if action == 0:
        del parent[last]
    elif action == 1 and isinstance(parent[last], dict):
        parent[last]["unknownField"] = rng.choice(ODD_VALUES)
    else:
        parent[last] = copy.deepcopy(rng.choice(ODD_VALUES))
    return out


def _objects_by_kind() -> dict[tuple[str, str], list[dict[str, Any]]]:
    found: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for name in SHIPPED_STACKS:
        for _, obj in plan_of(example_config(name), name).objects():
            body = plain(obj.body)
            found.setdefault((body["apiVersion"], body["kind"]), []).append(body)
    return found


OBJECTS = _objects_by_kind()
BUILTIN = sorted(k for k in OBJECTS if schema.is_builtin(MINOR, *k))


def test_every_builtin_kind_the_examples_render_compiles() -> None:
    """The speed of a render rests on it: no built-in kind falls back to jsonschema."""
    assert BUILTIN
    refused = [k for k in BUILTIN if schema._core_check(MINOR, *k) is None]
    assert not refused


@pytest.mark.parametrize("kind", BUILTIN, ids=lambda k: f"{k[1]}-{k[0]}")
def test_builtin_checks_agree_with_jsonschema(kind: tuple[str, str]) -> None:
    check = schema._core_check(MINOR, *kind)
    validator = schema._core_validator(MINOR, *kind)
    assert check is not None
    assert validator is not None
    rng = random.Random(f"{kind}")
    bodies = OBJECTS[kind][:3]
    verdicts = set()
    for body in bodies:
        assert check(body)
        assert validator.is_valid(body)
        for _ in range(60):
            bad = mutate(body, rng)
            verdict = validator.is_valid(bad)
            verdicts.add(verdict)
            assert check(bad) == verdict, bad
    assert False in verdicts  # the mutations did reach invalid objects


@pytest.mark.shared
def test_crd_checks_agree_with_jsonschema() -> None:
    if not CRD_DIR.is_dir():
        pytest.skip("../shared/crds is absent (a user's clone has none)")
    custom = {k: v for k, v in OBJECTS.items() if not schema.is_builtin(MINOR, *k)}
    crds = schema.load_crds(CRD_DIR.resolve(), frozenset(custom))
    compared = 0
    for kind, bodies in sorted(custom.items()):
        check, validator = crds.check(*kind), crds.validator(*kind)
        if validator is None:
            continue
        assert check is not None, f"{kind} fell back to jsonschema"
        rng = random.Random(f"{kind}")
        for body in bodies[:2]:
            assert check(body) == validator.is_valid(body)
            for _ in range(40):
                bad = mutate(body, rng)
                assert check(bad) == validator.is_valid(bad), (kind, bad)
                compared += 1
    assert compared


KEYWORD_CASES: list[tuple[dict[str, Any], list[Any]]] = [
    ({"type": "integer"}, [1, 1.0, 1.5, True, "1", None]),
    ({"type": "number"}, [1, 1.5, True, "1"]),
    ({"type": ["string", "null"]}, ["", None, 0, False]),
    ({"type": ["boolean", "array"]}, [True, [], 0, {}]),
    (
        {"enum": [1, "a", None, [1], {"k": True}]},
        [1, 1.0, True, "a", None, [1], [True], {"k": True}, {"k": 1}],
    ),
    ({"enum": ["a", "b"]}, ["a", "c", 1, None]),
    ({"const": False}, [False, 0, None]),
    ({"oneOf": [{"type": ["string", "null"]}, {"type": ["integer", "null"]}]}, ["a", 1, None, 1.5]),
    ({"anyOf": [{"minimum": 3}, {"type": "string"}]}, [1, 3, "a", None]),
    ({"allOf": [{"maximum": 3}, {"exclusiveMinimum": 1}]}, [1, 2, 3, 4, 1.5, "x"]),
    ({"not": {"type": "object"}}, [{}, [], 1]),
    ({"minLength": 2, "maxLength": 3, "pattern": "^a"}, ["a", "ab", "abcd", "ba", 5]),
    (
        {"minItems": 1, "maxItems": 2, "items": {"type": "string"}},
        [[], ["a"], ["a", 1], ["a", "b", "c"], "ab"],
    ),
    ({"minProperties": 1, "maxProperties": 1}, [{}, {"a": 1}, {"a": 1, "b": 2}, []]),
    (
        {
            "type": "object",
            "properties": {"a": {"type": "string"}, "b": {"additionalProperties": False}},
            "required": ["a"],
            "additionalProperties": {"type": "integer"},
        },
        [
            {"a": "x"},
            {"a": 1},
            {},
            {"a": "x", "z": 1},
            {"a": "x", "z": "no"},
            {"a": "x", "b": {"c": 1}},
            [],
        ],
    ),
    ({"properties": {"a": False}, "additionalProperties": False}, [{}, {"a": 1}, {"b": 1}, "s"]),
    (
        {
            "$defs": {
                "n": {"properties": {"next": {"$ref": "#/$defs/n"}}, "additionalProperties": False}
            },
            "$ref": "#/$defs/n",
        },
        [{}, {"next": {"next": {}}}, {"next": {"next": {"x": 1}}}],
    ),
    (
        {
            "format": "date-time",
            "description": "annotations only",
            "x-kubernetes-map-type": "atomic",
        },
        ["not a date", 1],
    ),
]


@pytest.mark.parametrize(("schema_doc", "instances"), KEYWORD_CASES)
def test_keywords_agree_with_jsonschema(schema_doc: dict[str, Any], instances: list[Any]) -> None:
    check = jsoncheck.Compiler().compile(schema_doc)
    validator = jsonschema.Draft202012Validator(schema_doc)
    for instance in instances:
        assert check(instance) == validator.is_valid(instance), instance


@pytest.mark.parametrize(
    "schema_doc",
    [
        {"uniqueItems": True},
        {"patternProperties": {"^a": {}}},
        {"multipleOf": 2},
        {"if": {}, "then": {}},
        {"items": [{"type": "string"}]},
        {"$ref": "other.json#/x"},
        {"properties": {"a": {"$id": "nested", "type": "string"}}},
    ],
)
def test_what_the_compiler_does_not_implement_is_refused(schema_doc: dict[str, Any]) -> None:
    with pytest.raises(jsoncheck.Unsupported):
        jsoncheck.Compiler().compile(schema_doc)


def test_every_jsonschema_keyword_is_implemented_or_refused() -> None:
    """A keyword jsonschema applies is never silently ignored."""
    keywords = set(jsonschema.Draft202012Validator.VALIDATORS)
    assert keywords <= jsoncheck.IMPLEMENTED | jsoncheck.REFUSED
    assert not jsoncheck.IMPLEMENTED & jsoncheck.REFUSED


def test_a_failing_object_gets_jsonschema_messages() -> None:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": 1}}
    report = schema.validate_objects([body], MINOR)
    assert [(e.path, e.message) for e in report.errors] == [
        ("data.a", "1 is not of type 'string', 'null'")
    ]
