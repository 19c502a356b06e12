"""The YAML and JSON writers give exactly what PyYAML's and json's general ones give:
renders stay byte-identical whichever path produced them."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
import yaml
from builders import SHIPPED_STACKS, example_config, plan_of

from gpufabric.outputs.render import plain, render_files
from gpufabric.support import yamlcodec

# Scalars whose YAML tag depends on their text: each must round-trip as the same type.
TRICKY = [
    "",
    "true",
    "True",
    "no",
    "off",
    "null",
    "~",
    "0",
    "0x1F",
    "0o17",
    "017",
    "1_000",
    "1e3",
    ".inf",
    "-.NaN",
    "12:30",
    "2026-11-22",
    "@x",
    "`y",
    "a: b",
    "- item",
    "#comment",
    "line one\nline two\n",
    "trailing space ",
    "ünïcödé",
    "'quoted'",
    '"double"',
    "{flow}",
    "[1, 2]",
    "x" * 250,
    "*alias",
    "&anchor",
    "!tag",
    "%directive",
    "|",
    ">",
    "=mlx5_0,mlx5_1",
]


def random_value(rng: random.Random, depth: int = 0) -> Any:
    pick = rng.random()
    if depth > 3 or pick < 0.5:
        return rng.choice(
            [
                *TRICKY,
                0,
                -7,
                2**40,
                1.5,
                -0.0,
                1e-9,
                True,
                False,
                None,
                rng.choice(TRICKY) + rng.choice(TRICKY),
            ]
        )
    if pick < 0.75:
        return {
            rng.choice(TRICKY) + str(i): random_value(rng, depth + 1)
            for i in range(rng.randrange(0, 5))
        }
    return [random_value(rng, depth + 1) for _ in range(rng.randrange(0, 5))]


def reference_dump(data: Any, dumper: type[yaml.SafeDumper] = yaml.SafeDumper) -> str:
    """What render wrote before the fast path: PyYAML's own representer and emitter (or,
    with ``dumper=libyaml``, libyaml's emitter under PyYAML's representer), a string that
    another YAML reader takes for a number quoted (``'09'``, ``'1e3'``)."""

    class Dumper(dumper):  # type: ignore[valid-type,misc]
        pass

    def literal(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        quoted = "'" if yamlcodec.other_readers_resolve(value) else None
        return dumper.represent_scalar(
            "tag:yaml.org,2002:str", value, style="|" if "\n" in value else quoted
        )

    Dumper.add_representer(str, literal)
    return yaml.dump(data, Dumper=Dumper, sort_keys=True, default_flow_style=False, width=100)


libyaml: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


@pytest.mark.parametrize("seed", range(40))
def test_dump_matches_pyyaml_and_loads_back(seed: int) -> None:
    value = {"root": random_value(random.Random(seed))}
    text = yamlcodec.dump(value)
    assert text == reference_dump(value)
    assert yamlcodec.load(text) == value == yaml.safe_load(text)


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_every_rendered_file_matches_the_general_paths(stack: str) -> None:
    plan = plan_of(example_config(stack), stack)
    files = render_files(plan)
    for _item, obj in plan.objects():
        body = plain(obj.body)
        assert yamlcodec.dump(body) == reference_dump(body)
    doc = json.loads(files["plan.json"])
    assert files["plan.json"] == json.dumps(doc, indent=2, sort_keys=True) + "\n"


def test_upstream_crds_with_a_bare_equals_enum_value_load() -> None:
    """The Prometheus Operator CRDs list ``=`` among relabel actions; it is the string."""
    text = "enum:\n- replace\n- =\n- keep\n"
    assert yamlcodec.load(text) == {"enum": ["replace", "=", "keep"]}
    assert yamlcodec.load_all(text + "---\na: 1\n") == [
        {"enum": ["replace", "=", "keep"]},
        {"a": 1},
    ]
    assert yamlcodec.load(yamlcodec.dump({"enum": ["="]})) == {"enum": ["="]}


def test_dump_refuses_what_is_not_plain_data() -> None:
    with pytest.raises(TypeError, match="cannot write set"):
        yamlcodec.dump({"a": {1, 2}})


def test_values_equal_in_python_keep_their_own_text() -> None:
    """dump remembers the text of the scalars it wrote: 0.0 and -0.0, 1 and True and 1.0
    are equal in Python but not in YAML."""
    values = [0.0, -0.0, 1, True, 1.0, 0, False, None, "1", "true"]
    for _ in range(2):  # the second time from what the first remembered
        text = yamlcodec.dump({"v": values})
        assert text == yaml.safe_dump({"v": values}, default_flow_style=False, width=100)
        assert [repr(v) for v in yamlcodec.load(text)["v"]] == [repr(v) for v in values]


def test_values_that_are_not_plain_are_converted_where_they_sit() -> None:
    """to_yaml converts secrets, tuples, other mappings and non-string keys where they
    occur, without copying the plain data around them: same text as dumping a plain copy."""
    from types import MappingProxyType

    from gpufabric.model.config import SecretValue
    from gpufabric.outputs.render import to_yaml
    from gpufabric.plan.items import SecretRef

    secret = SecretRef("sources.token", SecretValue(plaintext="hunter2"))
    body = {
        "b": {"token": secret, "list": ("x", secret, {"n": 1})},
        "a": MappingProxyType({"z": [1, 2.5, None, True], "y": "multi\nline"}),
        "c": {3: "three", 1: "one"},
        "d": [{"k": "v\n"}],
    }
    assert to_yaml(body) == yamlcodec.dump(plain(body))
    assert "<secret:sources.token>" in to_yaml(body)
    assert "hunter2" not in to_yaml(body)
    with pytest.raises(TypeError):
        yamlcodec.dump({"a": object()})


CHARS = "abcxyz019_./- :#'\"\n\t{}[],&*!|>%@`?~=\\é\u00a0\u2028"


def rich_value(rng: random.Random, depth: int = 0) -> Any:
    """Documents of every shape: literal blocks that keep, strip or lead with spaces,
    texts that fold past column 100 or are quoted, keys that are not simple."""
    pick = rng.random()
    if depth > 4 or pick < 0.45:
        if rng.random() < 0.6:
            size = rng.choice([3, 12, 40, 140])
            return "".join(rng.choice(CHARS) for _ in range(rng.randrange(0, size)))
        return rng.choice([*TRICKY, 0, -5, 10**20, 1.5, -0.0, 1e20, float("nan"), True, None])
    if pick < 0.75:
        return {
            rng.choice(["k", "name", "x" * 130, "a b", "multi\nkey", ""]) + str(i): rich_value(
                rng, depth + 1
            )
            for i in range(rng.randrange(0, 5))
        }
    return [rich_value(rng, depth + 1) for _ in range(rng.randrange(0, 5))]


@pytest.mark.parametrize("seed", range(20))
def test_documents_of_every_shape_are_libyamls(seed: int) -> None:
    """dump writes libyaml's text for hundreds of documents of every shape (literal blocks
    kept and stripped, texts folded at column 100, complex keys, sequences in sequences)."""
    rng = random.Random(seed)
    for _ in range(150):
        value = rich_value(rng)
        assert yamlcodec.dump(value) == reference_dump(value, libyaml), value


@pytest.mark.parametrize(
    "value",
    [
        {"a": "kept\n\n"},  # the last literal block keeps its breaks: the document ends "..."
        {"a": "kept\n\n", "b": "stripped\nx"},  # a later block clears that
        {"a": "kept\n\n", "b": 1},  # a later plain scalar does not
        {"a": ["x\n\n", {"b": "y\n"}]},
        {"a": {"b": [" leading\nspace", "\n", "a\n\n\n"]}},
        {"a": [["- x", "y\nz"], [{}], []]},
        {"k": "w " * 48, "deeper": {"k": "w " * 47}},  # folded where the column passes 100
        {"x" * 129: 1},  # no simple key past 128 characters
        {"multi\nline": 1},
    ],
)
def test_documents_libyaml_ends_or_folds_are_written_as_libyaml_writes_them(value: Any) -> None:
    """libyaml's text (what render has always written), which is PyYAML's own emitter's
    but for the "..." libyaml still writes after a plain scalar follows a kept block."""
    assert yamlcodec.dump(value) == reference_dump(value, libyaml)
    assert yamlcodec.load(yamlcodec.dump(value)) == value


@pytest.mark.parametrize(
    "text", ["09", "1e3", "6e1", "0o17", "0O17", "+1", ".5", "1_000", "-_1", "0B11", "y", "N"]
)
def test_strings_another_yaml_reader_takes_for_numbers_are_quoted(text: str) -> None:
    """YAML 1.2's core schema and Go's yaml.v3 (Pulumi's reader) take 09 for the int 9 and
    1e3 for a float, YAML 1.1 takes y for true: PyYAML's 1.1 resolver wrote some plain."""
    out = yamlcodec.dump({"k": text})
    assert out == f"k: '{text}'\n"
    assert yamlcodec.load(out) == {"k": text}


@pytest.mark.parametrize("text", ["v1", "10.0.0.1", "100Gi", "1.2.3", "e3", "_1", "0x", "1-2"])
def test_strings_no_yaml_reader_takes_for_numbers_stay_plain(text: str) -> None:
    assert yamlcodec.dump({"k": text}) == f"k: {text}\n"
