"""Argument types, argument groups and flag rules that several ``gpufabric`` commands share.

Parsing them imports nothing of the checks: ``--help`` and every command start quickly.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpufabric.plan.resolve import DEFAULT_FRACTION

if TYPE_CHECKING:
    pass


def stack_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--stack",
        required=True,
        help="stack name (stacks/Pulumi.<name>.yaml) or path to a stack file",
    )


def directory_arg(text: str) -> Path:
    """A directory argument: an empty one would be the working directory (``Path("")``)."""
    if not text:
        raise argparse.ArgumentTypeError("empty; expected a directory")
    return Path(text)


def number(text: str, shown: str, noun: str, ok: Callable[[float], bool], expected: str) -> float:
    """``text`` as a float for which ``ok`` holds, else the argument's error: ``shown`` (how
    the message quotes the text) is not ``noun``, or ``expected``."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{shown} is not {noun}") from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"{shown}: {expected}")
    return value


def whole(text: str, least: int) -> int:
    """``text`` as a whole number of at least ``least``, else the argument's error."""
    if not (text.isascii() and text.isdigit()) or int(text) < least:
        raise argparse.ArgumentTypeError(f"{text[:40]!r}: expected a whole number >= {least}")
    return int(text)


def seconds(text: str) -> float:
    return number(
        text, repr(text), "a number of seconds", lambda v: 0 < v < 7 * 24 * 3600,
        "expected seconds > 0 and < 7 days",
    )  # fmt: skip


def confirm(text: str) -> int:
    if not text.isdigit() or not 2 <= int(text) <= 16:
        raise argparse.ArgumentTypeError(f"{text[:20]!r}: expected a whole number 2 to 16")
    return int(text)


def kube_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kubeconfig", help="kubeconfig file (default: KUBECONFIG / ~/.kube/config)")
    p.add_argument(
        "--context", help="kubeconfig context (default: the stack's cluster.kubeContext)"
    )


def add_threshold_args(p: argparse.ArgumentParser) -> None:
    """--min-busbw / --fraction, shared by ``nccl-report``, ``verify nccl`` and ``health``."""
    p.add_argument("--min-busbw", type=float, metavar="GBPS", help="explicit threshold in GB/s")
    p.add_argument(
        "--fraction",
        type=float,
        default=DEFAULT_FRACTION,
        help="threshold as a fraction of the line rate (default 0.9)",
    )


@dataclass(frozen=True)
class AppliesOnly:
    """A flag that acts only under a condition on the other flags: given where it would be
    ignored, the command refuses it (exit 2) instead of running without it."""

    flag: str
    dest: str
    when: Callable[[argparse.Namespace], bool]
    """True when the flag acts."""
    words: str
    """Where it acts and why, naming the other flag: ``only with --sweep``."""


RULES = "_applies_only"
"""The namespace key under which a parser carries its :class:`AppliesOnly` rules."""


def ignored_flags(args: argparse.Namespace, given: set[str]) -> list[tuple[str, str]]:
    """(flag, words) of each flag the user gave (``given``: the dests typed on the command
    line) that the other flags make the command ignore."""
    rules: tuple[AppliesOnly, ...] = getattr(args, RULES, ())
    return [
        (r.flag, _typed(getattr(args, r.dest)) + r.words)
        for r in rules
        if r.dest in given and not r.when(args)
    ]


def _typed(value: Any) -> str:
    """The value as the message echoes it before its words (none for a switch)."""
    if isinstance(value, bool) or value is None:
        return ""
    return f"{value:g}: " if isinstance(value, float) else f"{value}: "


THRESHOLD_RULES = (
    AppliesOnly(
        "--fraction",
        "fraction",
        lambda a: a.min_busbw is None,
        "applies only without --min-busbw (an explicit threshold replaces the fraction)",
    ),
)
