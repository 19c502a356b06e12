"""The exit codes of every ``gpufabric`` command: one table, one meaning per code.

| code | meaning |
|-----:|---------|
| 0 | success; a verdict of PASS |
| 1 | the command stopped for another reason (e.g. the disk filled up while writing) |
| 2 | bad input: stack file, arguments, files named on the command line (e.g. an --out) |
| 3 | the cluster or the hosts could not be asked (unreachable, unauthorized, no kubectl) |
| 4 | a verdict of FAIL (checks, NCCL acceptance; ``diff --fail-on-disruptive``) |
| 5 | a verdict of INCONCLUSIVE: something could not be decided, or the run timed out |
| 6 | rendered objects failed schema validation (nothing was written) |

A judged run (an NCCL run, a suite of checks, a sweep) ends in one :class:`Verdict`, and
:data:`VERDICT_EXIT` is the one table from a verdict to its exit code. Each check of a
``verify`` suite ends in a :class:`CheckStatus`, and the checks' verdict follows from theirs
(:func:`gpufabric.verify.results.verdict`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import IntEnum, StrEnum


class ExitCode(IntEnum):
    OK = 0
    ERROR = 1
    BAD_INPUT = 2
    UNREACHABLE = 3
    FAIL = 4
    INCONCLUSIVE = 5
    INVALID_OBJECTS = 6


class Verdict(StrEnum):
    """The verdict on a judged run; prints (and serializes) as its word."""

    PASS = "PASS"
    FAIL = "FAIL"
    INCONCLUSIVE = "INCONCLUSIVE"

    @property
    def severity(self) -> int:
        """PASS < INCONCLUSIVE < FAIL: the worst of several runs is the verdict over them."""
        return SEVERITY[self]

    @property
    def exit_code(self) -> ExitCode:
        return VERDICT_EXIT[self]


class CheckStatus(StrEnum):
    """The status of one check on one target; prints (and serializes) as its word."""

    PASS = "PASS"
    FAIL = "FAIL"
    SKIP = "SKIP"
    """The check does not apply to this stack or node."""
    ERROR = "ERROR"
    """The check could not be decided: a file unreadable, a tool missing, the API refusing."""


SEVERITY: Mapping[Verdict, int] = {Verdict.PASS: 0, Verdict.INCONCLUSIVE: 1, Verdict.FAIL: 2}
VERDICT_EXIT: Mapping[Verdict, ExitCode] = {
    Verdict.PASS: ExitCode.OK,
    Verdict.FAIL: ExitCode.FAIL,
    Verdict.INCONCLUSIVE: ExitCode.INCONCLUSIVE,
}
"""The one table from a verdict to the command's exit code."""


def worst(verdicts: Iterable[Verdict]) -> Verdict:
    """The worst of ``verdicts`` (PASS when there are none)."""
    return max(verdicts, key=lambda v: v.severity, default=Verdict.PASS)


__all__ = ["SEVERITY", "VERDICT_EXIT", "CheckStatus", "ExitCode", "Verdict", "worst"]
