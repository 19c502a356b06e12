"""render_object parses a template's shape once and puts the values in place: the object
must be exactly what parsing the rendered text gives, for every template every stack
renders, and for the texts where putting values in place could differ (a token inside a
quoted or block scalar, a comment, a value YAML folds or refuses)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jinja2
import pytest
from builders import REPO
from jinja2 import nodes

from gpufabric.model.stackfile import load_stack
from gpufabric.support import templates
from gpufabric.support.templates import TEMPLATES_DIR, TemplateError, environment

STACKS = sorted(
    p.name.removeprefix("Pulumi.").removesuffix(".yaml")
    for p in (REPO / "stacks").glob("Pulumi.*.yaml")
)


def parsed(template: str, compiled: jinja2.Template, context: dict[str, Any]) -> Any:
    """What the text the template renders parses to (the path without shapes)."""
    return templates._parse(template, compiled.render(**context))


def same(a: Any, b: Any) -> bool:
    """Equal with the same types all the way down (1 == 1.0 == True would hide a change);
    NaN equal to NaN."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def no_shared_containers(obj: Any, seen: set[int] | None = None) -> bool:
    seen = set() if seen is None else seen
    if isinstance(obj, dict | list):
        if id(obj) in seen:
            return False
        seen.add(id(obj))
        children = obj.values() if isinstance(obj, dict) else obj
        return all(no_shared_containers(c, seen) for c in children)
    return True


@pytest.mark.parametrize("stack", STACKS)
def test_every_object_of_every_stack_is_what_its_text_parses_to(stack: str, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    calls: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
    real = templates._object

    def recording(template: str, compiled: jinja2.Template, context: Any) -> dict[str, Any]:
        obj = real(template, compiled, context)
        calls.append((template, dict(context), obj))
        return obj

    monkeypatch.setattr(templates, "_object", recording)
    load_stack(stack, REPO / "stacks").plan  # noqa: B018 (builds every object)
    assert calls, "the stack rendered no templates"
    env = environment()
    for template, context, obj in calls:
        assert same(obj, parsed(template, env.get_template(template), context)), template
        assert no_shared_containers(obj), template


def render(text: str, **context: Any) -> tuple[Any, Any]:
    """(render_object's object, the parsed text's) for a template given as text."""
    compiled = environment().from_string(text)
    try:
        expected: Any = parsed("t", compiled, context)
    except TemplateError as exc:
        expected = exc
    try:
        got: Any = templates._object("t", compiled, context)
    except TemplateError as exc:
        got = exc
    return got, expected


HEAD = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ name | json }}\n"

CASES = {
    "plain values": HEAD + "data:\n  a: {{ a | json }}\n  b: [{{ a | json }}, {{ n | json }}]\n",
    "a mapping and a list": HEAD + "spec: {{ m | json }}\nlist:\n  - {{ l | json }}\n",
    "a key": HEAD + "data:\n  {{ a | json }}: x\n",
    "json of json": HEAD + "data:\n  config: {{ m | json | json }}\n",
    "json of json, parenthesised": HEAD + "data:\n  config: {{ (l | json) | json }}\n",
    "inside a double-quoted scalar": HEAD + 'data:\n  a: "x-{{ n | json }}"\n',
    "inside a single-quoted scalar": HEAD + "data:\n  a: 'x {{ a | json }}'\n",
    "alone in a literal block": HEAD + "data:\n  a: |-\n    {{ a | json }}\n",
    "a line of a literal block": HEAD + "data:\n  a: |\n    k: {{ a | json }}\n    j: 2\n",
    "in a comment": HEAD + "data:\n  a: x # {{ a | json }}\n",
    "only in a comment": HEAD + "# {{ a | json }}\ndata: {}\n",
    "a plain continuation line": HEAD + "data:\n  a: some\n    {{ n | json }}\n",
    "used twice": HEAD + "{% set v = l | json %}data:\n  a: {{ v }}\n  b: {{ v }}\n",
    "a collection as a key": HEAD + "data:\n  {{ l | json }}: x\n",
    "a whole document": "{{ doc | json }}\n",
    "a flow mapping entry": HEAD + "data: {a: {{ a | json }}, b: {{ f | json }}}\n",
    "after a colon in a quoted key": HEAD + 'data:\n  "k: {{ a | json }}": 1\n',
}

VALUES: dict[str, Any] = {
    "name": "cm",
    "a": "text: with # and - and 'quotes' \"and\" \\ and \n newline",
    "n": 10**20,
    "m": {"z": [1.5, -0.0, 1e20, 1e-07, True, None], "a": {"b": "é"}},
    "l": ["yes", "no", "on", "0x1F", "1_000", "null", "~", ""],
    "f": 2.5,
    "doc": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}},
}

ODD = [
    "del \x7f",
    "c1 \x85 nel",
    "ls \u2028",
    "ps \u2029",
    "bom \ufeff",
    "e \u00e9 ok",
    "tab\tcr\r",
]


@pytest.mark.parametrize("case", sorted(CASES))
def test_values_in_place_or_the_parsed_text(case: str) -> None:
    got, expected = render(CASES[case], **VALUES)
    if isinstance(expected, TemplateError):
        assert isinstance(got, TemplateError)
        assert str(got) == str(expected)
    else:
        assert same(got, expected)
        assert no_shared_containers(got)


@pytest.mark.parametrize("value", [*ODD, float("nan"), float("inf"), -1e300, 3.0, 2**70])
@pytest.mark.parametrize("where", ["value", "in a list", "in a mapping"])
def test_values_yaml_reads_otherwise_than_json_come_out_as_yaml_reads_them(value: Any, where: str) -> None:  # fmt: skip
    wrapped = {"value": value, "in a list": [value], "in a mapping": {"k": value}}[where]
    got, expected = render(HEAD + "data:\n  a: {{ v | json }}\n", name="cm", v=wrapped)
    if isinstance(expected, TemplateError):
        assert isinstance(got, TemplateError)
    else:
        assert same(got, expected)


def test_the_shape_of_a_text_is_parsed_once() -> None:
    text = HEAD + "data:\n  a: {{ a | json }}\n"
    templates._SHAPES.clear()
    first, _ = render(text, name="one", a="x")
    second, _ = render(text, name="two", a="y")
    assert len(templates._SHAPES) == 1
    assert first["metadata"]["name"] == "one"
    assert second["data"]["a"] == "y"


def _templates() -> Iterator[Path]:
    return iter(sorted(TEMPLATES_DIR.rglob("*.j2")))


def test_no_template_writes_a_token_of_its_own() -> None:
    for path in _templates():
        assert "__gpufabric_value_" not in path.read_text(), path


def _written_out(expr: nodes.Node) -> Iterator[nodes.Filter]:
    """The json filters whose result ``expr``, an expression a template writes, writes:
    through filters and ``~`` joins only."""
    if isinstance(expr, nodes.Filter):
        if expr.name == "json":
            yield expr
        if expr.node is not None:
            yield from _written_out(expr.node)
    elif isinstance(expr, nodes.Concat):
        for part in expr.nodes:
            yield from _written_out(part)


def test_the_json_filter_is_only_ever_written_out() -> None:
    """A value in a condition, a loop, a comparison or a variable would see the token, not
    the value: templates write the json filter's result and nothing else."""
    env = environment()
    for path in _templates():
        tree = env.parse(path.read_text())
        allowed = {id(f) for out in tree.find_all(nodes.Output) for e in out.nodes for f in _written_out(e)}  # fmt: skip
        misuse = [f.lineno for f in tree.find_all(nodes.Filter) if f.name == "json" and id(f) not in allowed]  # fmt: skip
        assert not misuse, f"{path.relative_to(TEMPLATES_DIR)}: json filter used at lines {misuse}"
