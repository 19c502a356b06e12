"""The ``json`` filter that puts every value into a template writes exactly what
``json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False)`` writes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpufabric.support.templates import _to_json

VALUES: list[Any] = [
    "",
    "plain",
    'quote " backslash \\ newline \n tab \t',
    "é ü 日本 \u2028 \x00 \x7f",
    0,
    -5,
    10**30,
    True,
    False,
    None,
    1.5,
    -0.0,
    1e100,
    float("nan"),
    float("inf"),
    [],
    {},
    [1, "a", {"b": 2, "a": [None, True]}],
    {"z": 1, "a": {"y": "é"}},
    (1, "x"),
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_the_json_filter_writes_what_json_dumps_writes(value: Any) -> None:
    expected = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert _to_json(value) == expected


def test_a_value_json_cannot_write_is_refused_as_json_dumps_refuses_it() -> None:
    with pytest.raises(TypeError):
        _to_json({1j})
