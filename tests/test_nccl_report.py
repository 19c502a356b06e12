"""The NCCL analyzer on logs written in the documented formats: verdicts, the reasons a user
reads, the parsed transport, and the exit codes of `gpufabric nccl-report`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO

from gpufabric.cli import main
from gpufabric.model.stackfile import load_stack
from gpufabric.plan.build import build_plan
from gpufabric.verify.nccl import parse as nccl_parse
from gpufabric.verify.nccl import report as nccl_report
from gpufabric.verify.nccl import rules as nccl_rules

LOGS = REPO / "tests" / "fixtures" / "nccl"


def judge(name: str, stack: str | None = None, min_busbw: float | None = None) -> dict[str, Any]:
    facts = build_plan(stack, load_stack(stack).model).facts if stack else None
    exp = nccl_rules.expectation(facts, min_busbw)
    return nccl_report.judge(nccl_parse.parse((LOGS / name).read_text()), exp).to_dict()


def test_infiniband_with_gdrdma_passes_against_the_line_rate() -> None:
    doc = judge("ib-gdr-pass.log", "prod-ib")
    assert doc["verdict"] == "PASS", doc["reasons"]
    assert doc["threshold_gbps"] == 360.0  # 0.9 x 8 rails x 400 Gb/s / 8
    assert doc["busbw_max_gbps"] == 366.21
    assert doc["transport"]["network"] == "IB"
    assert set(doc["transport"]["link_layers"].values()) == {"IB"}
    assert doc["gdr"]["inter_node_channels_with_gdrdma"] == 3
    assert doc["avg_busbw_gbps"] == 353.547  # reported, not judged
    assert len(doc["rows"]) == 5  # MPI --tag-output prefixes stripped


def test_roce_passes_with_exponent_numbers_and_rank_prefixes() -> None:
    doc = judge("roce-pass.log", "lab-roce")
    assert doc["verdict"] == "PASS", doc["reasons"]
    assert doc["busbw_max_gbps"] == 94.0  # "9.4e+01"
    assert doc["transport"]["link_layers"] == {"mlx5_0": "RoCE", "mlx5_1": "RoCE"}


def test_roce_link_layer_on_an_infiniband_stack_fails() -> None:
    doc = judge("roce-pass.log", "prod-ib", min_busbw=50)
    assert doc["verdict"] == "FAIL"
    assert any("expected IB" in r for r in doc["reasons"])


def test_socket_fallback_fails() -> None:
    doc = judge("socket-fallback.log", "lab-roce")
    assert doc["verdict"] == "FAIL"
    assert doc["transport"]["socket_fallback"] is True
    assert any(r.startswith("socket fallback") for r in doc["reasons"])


def test_gdr_disabled_fails_even_at_full_bandwidth() -> None:
    doc = judge("gdr-disabled.log", "prod-ib")
    assert doc["busbw_max_gbps"] == 366.21
    assert doc["verdict"] == "FAIL"
    assert "GPU Direct RDMA disabled for mlx5_0" in doc["reasons"]
    assert any("3 inter-node channels without GDRDMA" in r for r in doc["reasons"])


def test_healthy_average_with_poor_large_messages_fails() -> None:
    doc = judge("healthy-average-poor-large.log", min_busbw=300)
    assert doc["avg_busbw_gbps"] == 273.71
    assert doc["verdict"] == "FAIL"
    assert doc["busbw_max_gbps"] == 211.92  # sizes below 1 GiB (336 GB/s) do not count
    (reason,) = doc["reasons"]
    assert "211.92 GB/s, below the threshold 300 GB/s (--min-busbw)" in reason


def test_warnings_are_diagnosed_with_the_check_that_confirms_them() -> None:
    doc = judge("warnings.log", "lab-roce")
    assert doc["verdict"] == "FAIL"
    causes = [w["cause"] for w in doc["warnings"]]
    assert len(causes) == 3
    assert "wrong GID index or traffic class" in causes[0]
    assert "locked-memory limit" in causes[1]
    assert "/dev/shm" in causes[2]
    assert "IPC_LOCK" in doc["warnings"][1]["check"]
    assert any(r.startswith("the test failed:") for r in doc["reasons"])
    assert doc["rows"] == []


def test_single_node_is_inconclusive_never_pass() -> None:
    doc = judge("single-node.log", "prod-ib")
    assert doc["verdict"] == "INCONCLUSIVE"
    assert any("single node" in r for r in doc["reasons"])


def test_old_header_with_iteration_columns_is_read_by_name() -> None:
    doc = judge("old-header-iter.log", min_busbw=20)
    assert doc["rows"] == [{"size": 1073741824, "busbw_oop": 22.37, "busbw_ip": 22.35, "wrong": 0}]
    assert doc["verdict"] == "PASS", doc["reasons"]


def test_no_threshold_and_no_transport_lines_are_inconclusive() -> None:
    text = "\n".join(
        line
        for line in (LOGS / "ib-gdr-pass.log").read_text().splitlines()
        if "NCCL INFO" not in line
    )
    doc = nccl_report.judge(nccl_parse.parse(text), nccl_rules.expectation(None, None)).to_dict()
    assert doc["verdict"] == "INCONCLUSIVE"
    assert any("no transport lines" in r for r in doc["reasons"])
    assert any("no threshold" in r for r in doc["reasons"])


def test_json_output_of_nccl_tests_is_parsed() -> None:
    results = [
        {
            "size": s,
            "count": s // 4,
            "type": "float",
            "redop": "sum",
            "root": "    -1",
            "out_of_place": {"time": 1.0, "alg_bw": bw / 1.9, "bus_bw": bw, "nwrong": 0},
            "in_place": {"time": 1.0, "alg_bw": bw / 1.9, "bus_bw": bw - 1, "nwrong": None},
        }
        for s, bw in ((1 << 29, 330.0), (1 << 33, 371.5))
    ]
    doc = {
        "results": results,
        "out_of_bounds": {"count": 0, "okay": True},
        "average_bus_bandwidth": {"bandwidth": 350.0, "okay": "unchecked"},
    }
    run = nccl_parse.parse(json.dumps(doc))
    assert [(r.size, r.best) for r in run.rows] == [(1 << 29, 330.0), (1 << 33, 371.5)]
    assert run.out_of_bounds_ok is True
    assert run.avg_busbw == 350.0


@pytest.mark.parametrize(
    ("log", "stack", "code"),
    [
        ("ib-gdr-pass.log", "prod-ib", 0),
        ("socket-fallback.log", "lab-roce", 4),
        ("single-node.log", "prod-ib", 5),
    ],
)
def test_exit_codes(log: str, stack: str, code: int, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["nccl-report", str(LOGS / log), "--stack", stack]) == code
    out = capsys.readouterr().out
    assert out.startswith("NCCL acceptance: ")


def test_json_document_is_stable_and_the_worst_run_decides(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [
        "nccl-report",
        str(LOGS / "ib-gdr-pass.log"),
        str(LOGS / "gdr-disabled.log"),
        "--stack",
        "prod-ib",
        "--json",
    ]
    assert main(argv) == 4
    first = capsys.readouterr().out
    assert main(argv) == 4
    assert capsys.readouterr().out == first
    doc = json.loads(first)
    assert doc["verdict"] == "FAIL"
    assert [r["verdict"] for r in doc["runs"]] == ["PASS", "FAIL"]
    for run in doc["runs"]:
        assert {
            "verdict",
            "reasons",
            "transport",
            "gdr",
            "busbw_max_gbps",
            "threshold_gbps",
            "rows",
            "warnings",
        } <= run.keys()


def test_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["nccl-report", str(tmp_path / "missing.log")]) == 2
    assert "missing.log" in capsys.readouterr().err
    assert main(["nccl-report", str(LOGS / "roce-pass.log"), "--fraction", "1.5"]) == 2
    assert main(["nccl-report", str(LOGS / "roce-pass.log"), "--stack", "no-such-stack"]) == 2


def test_an_empty_log_shows_no_python_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The text report of an empty log said "average line (not judged): None"."""
    log = tmp_path / "empty.log"
    log.write_text("")
    assert main(["nccl-report", str(log)]) == 5
    out = capsys.readouterr().out
    assert "average line (not judged): -" in out
    assert "None" not in out
