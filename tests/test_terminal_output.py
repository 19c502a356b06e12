"""What others wrote (a job's log, a host's answer, an API object) never drives the terminal
of the person reading gpufabric's tables, and never breaks the JUnit XML a CI parses: control
characters and bidirectional overrides are shown as escapes."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gpufabric.cli import main
from gpufabric.exitcodes import CheckStatus
from gpufabric.verify.results import Check, format_table, junit_xml

FIXTURES = Path(__file__).parent / "fixtures" / "nccl"
HOSTILE = "\x1b]0;owned\x07\x1b[2J\x1b]8;;http://evil.example\x07click\x1b]8;;\x07\u202etxt.exe"
ESCAPED = (
    "\\x1b]0;owned\\x07\\x1b[2J\\x1b]8;;http://evil.example\\x07click\\x1b]8;;\\x07\\u202etxt.exe"
)


def _raw(text: str) -> list[str]:
    return [c for c in text if (ord(c) < 32 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F]


def test_a_warn_line_with_escapes_reaches_the_terminal_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "launcher.log"
    warn = f"gpu-a:11:11 [0] transport/net.cc:1 NCCL WARN {HOSTILE}\n"
    log.write_text(warn + (FIXTURES / "roce-pass.log").read_text())
    main(["nccl-report", str(log), "--min-busbw", "10"])
    out = capsys.readouterr().out
    assert ESCAPED in out
    assert _raw(out) == []
    assert "\u202e" not in out


def test_check_tables_and_junit_escape_what_a_host_answered() -> None:
    checks = [
        Check(
            check="rail.rail0.port",
            target=f"gpu-a{HOSTILE}",
            status=CheckStatus.FAIL,
            message=f"state {HOSTILE}",
            hint=HOSTILE,
        )
    ]
    table = format_table("nodes (lab)", checks)
    assert ESCAPED in table
    assert _raw(table) == []
    root = ET.fromstring(junit_xml("nodes (lab)", checks).split("\n", 1)[1])
    case = root.find("testsuite/testcase")
    assert case is not None
    failure = case.find("failure")
    assert failure is not None
    assert failure.get("message") == f"state {ESCAPED}"
    assert case.get("classname") == f"nodes (lab).gpu-a{ESCAPED}"


def test_stacks_shows_a_hostile_file_name_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A stack file is anyone's to name (a pull request adds one): `gpufabric stacks` printed
    its name raw, and the ESC sequence retitled the reviewer's terminal."""
    source = Path(__file__).parents[1] / "stacks" / "Pulumi.kind-dev.yaml"
    (tmp_path / "Pulumi.x\x1b]0;owned\x07.yaml").write_text(source.read_text())
    assert main(["--stacks-dir", str(tmp_path), "stacks"]) == 2
    out = capsys.readouterr().out
    assert "x\\x1b]0;owned\\x07  INVALID" in out
    assert _raw(out) == []
