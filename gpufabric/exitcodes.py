"""The exit codes of every ``gpufabric`` command: one table, one meaning per code.

| code | meaning |
|-----:|---------|
| 0 | success; a verdict of PASS |
| 1 | the command stopped for another reason (e.g. an unwritable --out) |
| 2 | bad input: stack file, arguments or files named on the command line |
| 3 | the cluster or the hosts could not be asked (unreachable, unauthorized, no kubectl) |
| 4 | a verdict of FAIL (checks, NCCL acceptance; ``diff --fail-on-disruptive``) |
| 5 | a verdict of INCONCLUSIVE: something could not be decided, or the run timed out |
| 6 | rendered objects failed schema validation (nothing was written) |
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    ERROR = 1
    BAD_INPUT = 2
    UNREACHABLE = 3
    FAIL = 4
    INCONCLUSIVE = 5
    INVALID_OBJECTS = 6


__all__ = ["ExitCode"]
