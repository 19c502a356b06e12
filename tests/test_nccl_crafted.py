"""`gpufabric nccl-report` on crafted input (issue 40, item 6): numbers written in other
scripts' digits ('²', '①', full-width), sizes and counts thousands of digits long, and JSON
integers too large for a float. Each ends in a clear verdict with the reason, never a
traceback, and never a PASS read from a number that is not one."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO

from gpufabric.cli import main
from gpufabric.exitcodes import ExitCode

LOGS = REPO / "tests" / "fixtures" / "nccl"
PASSING = (LOGS / "ib-gdr-pass.log").read_text()
ROW = "   536870912     134217728"
DIGITS = "9" * 5001
FULLWIDTH = "".join(chr(0xFF10 + int(c)) for c in "536870912")  # full-width digits
NCCL_COMM = (
    "eval-mpijob-worker-0:211:211 [0] NCCL INFO comm 0x5581e0c0 rank 0 nRanks 16 nNodes {n} "
    "localRanks 8 localRank 0 MNNVL 0"
)


def _report(tmp_path: Path, name: str, text: str, *args: str) -> tuple[int, dict[str, Any]]:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["nccl-report", str(path), "--json", *args])
    return code, json.loads(out.getvalue())


def test_the_passing_log_passes(tmp_path: Path) -> None:
    assert _report(tmp_path, "ok.log", PASSING, "--stack", "prod-ib")[0] == ExitCode.OK


@pytest.mark.parametrize(
    ("size", "shown"),
    [
        ("53687091²", "'53687091²'"),
        ("①36870912", "'①36870912'"),
        (FULLWIDTH, repr(FULLWIDTH)),
        (DIGITS[:4000], "(4000 characters)"),
        ("536870912" * 3, "(27 characters)"),  # past 2**64
    ],
    ids=["superscript", "circled", "fullwidth", "4000-digits", "past-size_t"],
)
def test_a_size_that_is_not_a_byte_count_is_inconclusive(
    tmp_path: Path, size: str, shown: str
) -> None:
    text = PASSING.replace(ROW, f"   {size}     134217728")
    code, doc = _report(tmp_path, "size.log", text, "--stack", "prod-ib")
    assert code == ExitCode.INCONCLUSIVE, doc["reasons"]
    assert any("is not a byte count" in r and shown in r for r in doc["reasons"]), doc["reasons"]
    assert not any("ended early" in r for r in doc["reasons"])  # printed, not missing


def test_a_wrong_count_in_other_digits_is_not_zero(tmp_path: Path) -> None:
    text = PASSING.replace("337.28      0", "337.28      ²")
    code, doc = _report(tmp_path, "wrong.log", text, "--stack", "prod-ib")
    assert code == ExitCode.FAIL
    assert any("#wrong ²" in r for r in doc["reasons"])


def test_a_busbw_in_other_digits_is_not_read(tmp_path: Path) -> None:
    # '٣' is an Arabic-Indic digit: \\d matched it and float() read 3٣7.28 as 337.28.
    text = PASSING.replace("337.28      0", "3٣7.28      0")
    code, doc = _report(tmp_path, "bw.log", text, "--stack", "prod-ib")
    assert code == ExitCode.INCONCLUSIVE, doc["reasons"]
    assert any("busbw '3٣7.28' at 536870912 B is not a number" in r for r in doc["reasons"])


@pytest.mark.parametrize("digits", [4000, 8], ids=["4000-digits", "8-digits"])
def test_a_node_count_of_thousands_of_digits_is_not_a_count(tmp_path: Path, digits: int) -> None:
    # One node, which alone is INCONCLUSIVE; a crafted nNodes made it a multi-node PASS.
    single = (LOGS / "single-node.log").read_text()
    line = NCCL_COMM.format(n="1" * digits)
    code, doc = _report(tmp_path, "nodes.log", single + line + "\n", "--min-busbw", "1")
    assert code == ExitCode.INCONCLUSIVE, doc["reasons"]
    assert any("NCCL's nNodes" in r and "is not a count" in r for r in doc["reasons"])


def test_a_node_count_in_other_digits_is_not_read(tmp_path: Path) -> None:
    single = (LOGS / "single-node.log").read_text()
    code, doc = _report(
        tmp_path, "nodes.log", single + NCCL_COMM.format(n="\uff12") + "\n", "--min-busbw", "1"
    )
    assert code == ExitCode.INCONCLUSIVE, doc["reasons"]


def _json(mutate: Callable[[dict[str, Any]], None]) -> str:
    doc: dict[str, Any] = {
        "args": ["all_reduce_perf", "-J", "out.json"],
        "config": {
            "devices": [
                {"rank": 0, "hostname": "a", "pid": 1},
                {"rank": 8, "hostname": "b", "pid": 2},
            ]
        },
        "results": [
            {
                "size": 8 << 30,
                "out_of_place": {"time": 1.0, "alg_bw": 1.0, "bus_bw": 400.0, "nwrong": 0.0},
                "in_place": {"time": 1.0, "alg_bw": 1.0, "bus_bw": 400.0, "nwrong": 0.0},
            }
        ],
        "out_of_bounds": {"count": 0, "okay": "true"},
        "average_bus_bandwidth": {"bandwidth": 400.0, "okay": "unchecked"},
        "errors": [""],
        "end_time": "2026-01-01 00:00:00",
    }
    mutate(doc)
    return json.dumps(doc)


def _part(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda d: d["results"][0]["out_of_place"].__setitem__(key, value)


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (_part("bus_bw", 10**400), "bus_bw is an integer of 1329 bits"),
        (_part("nwrong", 10**400), "nwrong is an integer of 1329 bits"),
        (lambda d: d["results"][0].__setitem__("size", 10**400), "size is not a byte count"),
        (lambda d: d["results"][0].__setitem__("size", "53687091²"), "size is not a byte count"),
        (
            lambda d: d["average_bus_bandwidth"].__setitem__("bandwidth", 10**400),
            "bandwidth is an integer of 1329 bits",
        ),
    ],
    ids=["bus_bw", "nwrong", "size", "size-superscript", "average"],
)
def test_json_numbers_too_large_for_a_float_are_inconclusive(
    tmp_path: Path, mutate: Callable[[dict[str, Any]], None], reason: str
) -> None:
    code, doc = _report(tmp_path, "run.json", _json(mutate), "--min-busbw", "100")
    assert code == ExitCode.INCONCLUSIVE, doc["reasons"]
    assert any(reason in r for r in doc["reasons"]), doc["reasons"]


def test_a_json_integer_of_5001_digits_is_inconclusive(tmp_path: Path) -> None:
    text = _json(lambda d: None).replace(str(8 << 30), DIGITS, 1)
    code, doc = _report(tmp_path, "run.json", text, "--min-busbw", "100")
    assert code == ExitCode.INCONCLUSIVE
    assert any("JSON number too long to read" in r for r in doc["reasons"]), doc["reasons"]


def test_the_unmutated_json_is_read_without_complaint(tmp_path: Path) -> None:
    # Alone, a -J document has no NCCL transport lines: INCONCLUSIVE for that reason only.
    code, doc = _report(tmp_path, "run.json", _json(lambda d: None), "--min-busbw", "100")
    assert code == ExitCode.INCONCLUSIVE
    assert [r.split(": ", 1)[1] for r in doc["reasons"]] == [
        "no transport lines: rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET"
    ]
