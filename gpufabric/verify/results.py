"""One result model for every ``gpufabric verify`` command, and its three outputs.

A check is PASS, FAIL, SKIP (does not apply to this stack or node) or ERROR (could not be
decided: a file unreadable, a tool missing, the API refusing): a
:class:`gpufabric.exitcodes.CheckStatus`. The checks' verdict is FAIL
when anything failed, else INCONCLUSIVE when anything could not be decided, else PASS; its
exit code comes from the one verdict table (:data:`gpufabric.exitcodes.VERDICT_EXIT`: 0 PASS,
4 FAIL, 5 INCONCLUSIVE), as ``gpufabric nccl-report``'s does.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from gpufabric.errors import GpufabricError
from gpufabric.exitcodes import CheckStatus, ExitCode, Verdict
from gpufabric.model.redaction import printable


class SuiteError(GpufabricError):
    """pytest could not run the suite (bad --hosts, missing backend tool, ...): the hosts
    could not be asked (exit 3, while a check runs)."""

    exit_code = ExitCode.UNREACHABLE
    check_only = True


@dataclass(frozen=True, kw_only=True)
class Check:
    """The outcome of one check on one target (a node, a pod, the cluster)."""

    check: str
    """Stable identifier, e.g. ``rail.rail0.port``."""
    target: str
    status: CheckStatus
    message: str
    hint: str = ""
    """What to look at or change when the check did not pass."""
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def passed(check: str, target: str, message: str, **details: Any) -> Check:
    return Check(
        check=check, target=target, status=CheckStatus.PASS, message=message, details=details
    )


def failed(check: str, target: str, message: str, hint: str = "", **details: Any) -> Check:
    return Check(
        check=check,
        target=target,
        status=CheckStatus.FAIL,
        message=message,
        hint=hint,
        details=details,
    )


def skipped(check: str, target: str, message: str) -> Check:
    return Check(check=check, target=target, status=CheckStatus.SKIP, message=message)


def error(check: str, target: str, message: str, hint: str = "") -> Check:
    return Check(check=check, target=target, status=CheckStatus.ERROR, message=message, hint=hint)


def verdict(checks: Iterable[Check]) -> Verdict:
    """FAIL when a check failed, else INCONCLUSIVE when one errored (or none ran), else PASS."""
    statuses = {c.status for c in checks}
    if CheckStatus.FAIL in statuses:
        return Verdict.FAIL
    if CheckStatus.ERROR in statuses or not statuses:
        return Verdict.INCONCLUSIVE
    return Verdict.PASS


def exit_code(checks: Iterable[Check]) -> ExitCode:
    return verdict(checks).exit_code


def counts(checks: Iterable[Check]) -> dict[str, int]:
    """How many checks ended in each status, every status named (PASS, FAIL, SKIP, ERROR)."""
    c = Counter(ch.status for ch in checks)
    return {s.value: c.get(s, 0) for s in CheckStatus}


def document(suite: str, checks: Sequence[Check]) -> dict[str, Any]:
    """The stable ``--json`` document."""
    return {
        "suite": suite,
        "verdict": verdict(checks),
        "counts": counts(checks),
        "checks": [c.as_dict() for c in checks],
    }


def to_json(suite: str, checks: Sequence[Check]) -> str:
    return json.dumps(document(suite, checks), indent=2) + "\n"


def format_table(title: str, checks: Sequence[Check]) -> str:
    """Terminal table: one line per check, failures with their hint underneath."""
    if not checks:
        return f"{title}: no checks ran\n"
    w_target = max(len("TARGET"), *(len(c.target) for c in checks))
    w_check = max(len("CHECK"), *(len(c.check) for c in checks))
    lines = [f"{'TARGET':<{w_target}}  {'CHECK':<{w_check}}  {'STATUS':<6}  DETAIL"]
    for c in checks:
        lines.append(f"{c.target:<{w_target}}  {c.check:<{w_check}}  {c.status:<6}  {c.message}")
        if c.hint and c.status in (CheckStatus.FAIL, CheckStatus.ERROR):
            lines.append(f"{'':<{w_target}}  {'':<{w_check}}  {'':<6}  -> {c.hint}")
    n = counts(checks)
    summary = ", ".join(f"{v} {k.lower()}" for k, v in n.items() if v)
    lines.append(f"{title}: {verdict(checks)} ({summary})")
    return printable("\n".join(lines) + "\n")


def junit_xml(suite: str, checks: Sequence[Check]) -> str:
    """JUnit XML as CI systems read it: one testcase per check, classname = target."""
    n = counts(checks)
    root = ET.Element(
        "testsuites",
        name="gpufabric verify",
        tests=str(len(checks)),
        failures=str(n[CheckStatus.FAIL]),
    )
    ts = ET.SubElement(
        root,
        "testsuite",
        name=suite,
        tests=str(len(checks)),
        failures=str(n[CheckStatus.FAIL]),
        errors=str(n[CheckStatus.ERROR]),
        skipped=str(n[CheckStatus.SKIP]),
    )
    for c in checks:
        tc = ET.SubElement(ts, "testcase", classname=f"{suite}.{c.target}", name=c.check)
        text = c.message + (f"\nhint: {c.hint}" if c.hint else "")
        if c.status == CheckStatus.FAIL:
            ET.SubElement(tc, "failure", message=c.message).text = text
        elif c.status == CheckStatus.ERROR:
            ET.SubElement(tc, "error", message=c.message).text = text
        elif c.status == CheckStatus.SKIP:
            ET.SubElement(tc, "skipped", message=c.message)
        else:
            ET.SubElement(tc, "system-out").text = c.message
    for element in root.iter():
        element.attrib = {k: printable(v) for k, v in element.attrib.items()}
        element.text = printable(element.text) if element.text else element.text
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def progress(msg: str) -> None:
    """A verify check's progress line on standard error (``verify: ...``), as it happens."""
    print(f"verify: {msg}", file=sys.stderr, flush=True)
