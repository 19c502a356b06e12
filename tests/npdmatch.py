"""node-problem-detector's kernel-log matching, mirrored for tests (v1.36.0).

At v1.36.0 (kubernetes/node-problem-detector 19d58b0e, pkg/systemlogmonitor):

- the kmsg watcher passes each record's message with surrounding white space trimmed
  (logwatchers/kmsg/log_watcher_linux.go: ``strings.TrimSpace(msg.Message)``);
- the log monitor pushes it into a ring buffer of ``bufferSize`` lines (10 unless the config
  says otherwise, config.go) and, for every rule, matches after each push (log_monitor.go
  parseLog);
- log_buffer.go Match compiles the rule's pattern plus ``\\z`` and runs FindStringIndex over
  the buffer's lines joined by ``\\n``, oldest first, empty slots included: a pattern is
  unanchored at its start and must reach the end of the newest line.

Go's RE2 and Python's ``re`` agree on the constructs gpufabric's patterns use once ``\\d``,
``\\w`` and ``\\s`` are ASCII (``re.ASCII``) and Go's ``\\z`` is written ``\\Z``; constructs RE2
refuses (look-around, back-references, possessive quantifiers) are refused here too.
"""

from __future__ import annotations

import re

_NOT_RE2 = re.compile(r"\(\?[=!<]|\(\?P=|\\[1-9]|[*+?}]\+")


def compile_rule(pattern: str) -> re.Pattern[str]:
    """The pattern as node-problem-detector compiles it: RE2 syntax, plus ``\\z``."""
    if _NOT_RE2.search(pattern):
        raise ValueError(f"{pattern!r}: RE2 (Go regexp) refuses look-around and back-references")
    return re.compile(pattern + r"\Z", re.ASCII)


class LogBuffer:
    """pkg/systemlogmonitor/log_buffer.go's ring buffer."""

    def __init__(self, size: int = 10) -> None:
        self.size = size
        self.msg = [""] * size
        self.current = 0

    def push(self, message: str) -> None:
        self.msg[self.current % self.size] = message.strip()
        self.current += 1

    def text(self) -> str:
        i = self.current % self.size
        return "\n".join(self.msg[i:] + self.msg[:i])

    def match(self, pattern: str) -> bool:
        return compile_rule(pattern).search(self.text()) is not None


def reasons_after_each_line(config: dict[str, object], lines: list[str]) -> list[list[str]]:
    """The reasons of the rules that match after each line is pushed, in rule order."""
    rules = config["rules"]
    assert isinstance(rules, list)
    size = config.get("bufferSize", 10)
    assert isinstance(size, int)
    buf = LogBuffer(size)
    out: list[list[str]] = []
    for line in lines:
        buf.push(line)
        out.append([r["reason"] for r in rules if buf.match(r["pattern"])])
    return out
