"""Mutated example stacks never crash the CLI: exit 0 or 2, no traceback, never over the
time limit (a fixed seed, so a failure reproduces; benchmarks/fuzz_stacks.py runs more)."""

from __future__ import annotations

from pathlib import Path

from stackfuzz import fuzz

SEED = 20261122
CASES = 160


def test_mutated_stacks_end_in_exit_0_or_2(tmp_path: Path) -> None:
    outcomes = list(fuzz(SEED, CASES, tmp_path))
    bad = [o for o in outcomes if o.code not in (0, 2) or o.error]
    assert not bad, "\n".join(
        f"{o.description} / {o.command}: exit {o.code} {o.error}" for o in bad[:10]
    )
    # the fuzzing reaches both outcomes, so it tests the refusals and the renders
    assert {o.code for o in outcomes if o.command == "validate"} == {0, 2}
    assert any(o.command == "render" for o in outcomes)
