"""Stack files are read through libyaml, and what a user sees is what PyYAML's pure-Python
reader gives: the same values and lines for every stack, the same words for every error."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpufabric.model import stackyaml

REPO = Path(__file__).resolve().parents[1]
STACK_FILES = sorted((REPO / "stacks").glob("*.yaml")) + sorted(
    (REPO / "examples").rglob("Pulumi.*.yaml")
)

pytestmark = pytest.mark.skipif(stackyaml._CParser is None, reason="PyYAML without libyaml")


def pure(text: str) -> object:
    """What stackyaml.load gave before it used libyaml: PyYAML's pure-Python reader."""
    return stackyaml._load(yaml.SafeLoader(text))


def outcome(load: object, text: str) -> tuple[str, object]:
    try:
        return "value", load(text)  # type: ignore[operator]
    except stackyaml.StackFileError as err:
        return "refused", err.problems
    except yaml.YAMLError as err:
        return "syntax", (str(err), getattr(err, "problem", None))


@pytest.mark.parametrize("path", STACK_FILES, ids=lambda p: p.name)
def test_every_stack_reads_as_the_pure_reader_reads_it(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert outcome(stackyaml.load, text) == outcome(pure, text)


BROKEN = [
    "config:\n  gpufabric:cluster: {name: a\n",  # unclosed flow mapping
    "config:\n\tgpufabric:cluster: 1\n",  # a tab as indentation
    "config: [1, 2\n",
    "a: b: c\n",
    "config:\n  - a\n  b: 1\n",
    "key: 'unterminated\n",
    "a: *nowhere\n",
    "a: &x 1\nb: &x 2\nc: *x\n",
    "a: !!binary aGVsbG8=\n",
    "a: !local 1\n",
    "a: 1\na: 2\n",
    "%YAML 1.1\n%YAML 1.1\n--- a\n",
    "--- a\n--- b\n",
    "a: \x07\n",
    "a: [" * 1200 + "]" * 1200 + "\n",  # past libyaml's flow nesting limit
    "a:\n" + "".join(" " * i + "- \n" for i in range(1, 60)),
    "x" * 70000 + ": 1\n",  # a simple key longer than libyaml allows
    "",
    "# only a comment\n",
    "? [a, b]\n: 1\n",
    "a: {b: 1, b: 2}\n",
]


@pytest.mark.parametrize("text", BROKEN, ids=range(len(BROKEN)))
def test_every_odd_or_broken_file_gets_the_pure_readers_answer(text: str) -> None:
    assert outcome(stackyaml.load, text) == outcome(pure, text)


def test_a_valid_stack_is_read_by_libyaml_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pure-Python reader (five times the cost) is only for files libyaml refuses."""
    text = STACK_FILES[0].read_text(encoding="utf-8")
    expected = pure(text)

    def refuse(text: str) -> None:
        raise AssertionError("read by the pure-Python reader")

    monkeypatch.setattr(stackyaml.yaml, "SafeLoader", refuse)
    assert stackyaml.load(text) == expected
