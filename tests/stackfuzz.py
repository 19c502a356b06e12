"""Mutated stack files, and the CLI run over them: what the fuzz test and
benchmarks/fuzz_stacks.py share.

A mutation changes one thing of an example stack: removes a key, replaces a value with one
of another type or an extreme of the same type, duplicates a section in the text, flips a
byte, or truncates the file. Each mutated file goes through ``validate``, and when that
accepts it, ``render``, ``runbook``, ``images`` and ``plan``; every command must end with
exit 0 or 2, never a traceback, within its time limit.
"""

from __future__ import annotations

import contextlib
import copy
import io
import random
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from builders import SHIPPED_STACKS, example_config

from gpufabric.cli import main

ODD_VALUES: tuple[Any, ...] = (
    None,
    True,
    False,
    0,
    -1,
    10**30,
    1.5,
    float("inf"),
    "",
    " ",
    "x" * 5000,
    "kube-system",
    "nvidia-network-operator",
    "eth0",
    "0.0.0.0/0",
    "127.0.0.1/8",
    "https://user:secret@host/x",
    "a\nb",
    "1.30",
    [],
    [1, 2],
    {},
    {"a": 1},
)
COMMANDS = ("render", "runbook", "images", "plan")
LIMIT_S = 10


def _paths(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield (*path, key)
            yield from _paths(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield (*path, i)
            yield from _paths(value, (*path, i))


def _parent(doc: Any, path: tuple[Any, ...]) -> Any:
    for key in path[:-1]:
        doc = doc[key]
    return doc


def mutate(rng: random.Random, name: str) -> tuple[str, str]:
    """(description, stack file text) of one mutation of an example stack."""
    config = example_config(name)
    doc: dict[str, Any] = {"config": copy.deepcopy(config)}
    kind = rng.choice(("delete", "replace", "replace", "duplicate", "bytes", "truncate"))
    if kind in ("delete", "replace"):
        path = ("config", *rng.choice(list(_paths(config))))
        parent = _parent(doc, path)
        if kind == "delete":
            del parent[path[-1]]
        else:
            parent[path[-1]] = rng.choice(ODD_VALUES)
        return f"{name}: {kind} {'.'.join(map(str, path[1:]))}", yaml.safe_dump(doc)
    text = yaml.safe_dump(doc, sort_keys=False)
    if kind == "duplicate":
        section = rng.choice(list(config))
        extra = yaml.safe_dump({section: config[section]}, sort_keys=False)
        text += "".join(f"  {line}\n" for line in extra.splitlines())
        return f"{name}: duplicate {section}", text
    if kind == "bytes":
        data = bytearray(text.encode())
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return f"{name}: bytes flipped", data.decode("latin-1")
    return f"{name}: truncated", text[: rng.randrange(len(text))]


@dataclass
class Outcome:
    description: str
    command: str
    code: int
    seconds: float
    error: str = ""


class TooSlow(Exception):
    pass


def _alarm(_signum: int, _frame: Any) -> None:
    raise TooSlow


def run(argv: list[str]) -> tuple[int, float, str]:
    """Run the CLI in-process: (exit code, seconds, what went wrong if it crashed)."""
    start = time.perf_counter()
    err = io.StringIO()
    old = signal.signal(signal.SIGALRM, _alarm)
    # the one real-time timer, also a test runner's limit (pytest-timeout): set aside here,
    # given back with what is left of it
    outer, _ = signal.setitimer(signal.ITIMER_REAL, LIMIT_S)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(argv)
    except TooSlow:
        return -1, time.perf_counter() - start, f"over {LIMIT_S} s"
    except SystemExit as exc:  # argparse
        code = int(exc.code or 0)
    except BaseException as exc:  # a crash is what the fuzzing looks for
        return -2, time.perf_counter() - start, f"{type(exc).__name__}: {exc}"[:300]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        if outer:
            left = outer - (time.perf_counter() - start)
            signal.setitimer(signal.ITIMER_REAL, max(left, 0.001))
    text = err.getvalue()
    crashed = "Traceback (most recent call last)" in text
    return code, time.perf_counter() - start, text[-300:] if crashed else ""


def fuzz(seed: int, count: int, workdir: Path) -> Iterator[Outcome]:
    rng = random.Random(seed)
    for i in range(count):
        name = SHIPPED_STACKS[i % len(SHIPPED_STACKS)]
        description, text = mutate(rng, name)
        path = workdir / f"Pulumi.fuzz{i}.yaml"
        path.write_bytes(text.encode("latin-1", errors="replace"))
        code, seconds, error = run(["validate", "--stack", str(path)])
        yield Outcome(description, "validate", code, seconds, error)
        if code != 0:
            continue
        for command in COMMANDS:
            argv = [command, "--stack", str(path)]
            if command == "render":
                argv += ["--out", str(workdir / f"out{i}")]
            code, seconds, error = run(argv)
            yield Outcome(description, command, code, seconds, error)
