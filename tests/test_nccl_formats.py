"""Golden tests: every output form nccl-tests and its launchers produce is read, and judged
by the documented rules (PASS only when the transport is proven and the threshold met at
>= 1 GiB on >= 2 nodes)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
from nccllogs import IB_8X400, Log, kubectl_prefix, mpich, openmpi, slurm, text

from gpufabric.cli import main
from gpufabric.verify.nccl import report as nccl_report
from gpufabric.verify.nccl.rules import NcclExpectation

IB = IB_8X400


def judge(body: str, exp: NcclExpectation = IB) -> nccl_report.NcclReport:
    return nccl_report.report({"run.log": body}, exp)


FORMATS = {
    "plain": Log(),
    "per-iteration -I 1": Log(per_iter=True),
    "timestamps -S 1": Log(timestamps=True),
    "timestamps and per-iteration -S 1 -I 1": Log(timestamps=True, per_iter=True),
    "no check -c 0": Log(check=False),
    "memory report -M 1": Log(memory=True),
    "cycles -N 3": Log(cycles=3),
    "cpu time -C 1": Log(cputime=True),
}


@pytest.mark.parametrize("name", FORMATS)
def test_every_table_format_is_read_and_passes(name: str) -> None:
    log = FORMATS[name]
    doc = judge(text(log))
    assert doc.verdict == "PASS", doc.reasons
    (run,) = doc.runs
    assert len(run.rows) == len(log.sizes) * log.cycles
    assert run.busbw_max_gbps == pytest.approx(370.0)
    assert run.transport.nodes == 2


@pytest.mark.parametrize(
    ("launcher", "wrap"),
    [
        ("Open MPI --tag-output", openmpi),
        ("MPICH -prepend-rank", mpich),
        ("MPICH -prepend-rank, rows in pieces", lambda b: mpich(b, split_rows=True)),
        ("srun -l", slurm),
        ("kubectl logs --prefix", kubectl_prefix),
        ("kubectl --prefix over mpirun --tag-output", lambda b: kubectl_prefix(openmpi(b))),
    ],
)
def test_launcher_prefixes_are_stripped(launcher: str, wrap: Any) -> None:
    doc = judge(wrap(text(Log(timestamps=True))))
    assert doc.verdict == "PASS", (launcher, doc.reasons)
    assert len(doc.runs[0].rows) == 4


def test_several_tests_in_one_log_are_judged_each() -> None:
    body = text(Log(test="all_reduce_perf_mpi"), Log(test="all_gather_perf_mpi", busbw=300))
    doc = judge(body)
    assert [r.test for r in doc.runs] == ["all_reduce_perf_mpi", "all_gather_perf_mpi"]
    assert [r.verdict for r in doc.runs] == ["PASS", "FAIL"]
    assert doc.verdict == "FAIL"
    assert any("below the threshold" in r for r in doc.reasons)


def test_logs_of_several_files_and_the_json_of_the_same_run() -> None:
    log = Log()
    files = {"stdout.log": text(log), "out.json": log.json()}
    doc = nccl_report.report(files, IB)
    assert doc.verdict == "PASS", doc.reasons
    assert len(doc.runs) == 1  # the JSON adds nothing the log had not proven


def test_json_version_3_alone_cannot_prove_the_transport() -> None:
    doc = nccl_report.report({"out.json": Log().json()}, IB)
    (run,) = doc.runs
    assert run.test == "all_reduce_perf_mpi"
    assert run.busbw_max_gbps == pytest.approx(370.0)
    assert run.transport.nodes == 2  # from the devices' hostnames
    assert doc.verdict == "INCONCLUSIVE"
    assert any("no transport lines" in r for r in doc.reasons)


# -------------------------------------------------------------- verdicts on real cases


def test_one_rank_on_one_host_is_inconclusive_not_a_socket_failure() -> None:
    log = Log(hosts=("solo",), gpus_per_host=1, network="Socket")
    doc = judge(text(log))
    assert doc.verdict == "INCONCLUSIVE"
    assert any("single node" in r for r in doc.reasons)
    assert not any("socket" in r for r in doc.reasons)


def test_two_hosts_with_one_gpu_each_are_two_nodes() -> None:
    """nranks <= GPUs per node must not be read as a single node."""
    log = Log(hosts=("gpu-node-0", "gpu-node-1"), gpus_per_host=1)
    doc = judge(text(log))
    assert doc.runs[0].transport.nodes == 2
    assert not any("single node" in r for r in doc.reasons)
    assert doc.verdict == "PASS", doc.reasons


def test_socket_between_nodes_fails_whatever_order_the_lines_come_in() -> None:
    log = Log(network="Socket")
    lines = text(log).splitlines()
    info = [ln for ln in lines if "NCCL INFO" in ln]
    rest = [ln for ln in lines if "NCCL INFO" not in ln]
    for body in ("\n".join(rest + info), "\n".join(info[::-1] + rest)):
        doc = judge(body + "\n")
        assert doc.verdict == "FAIL"
        assert any("socket fallback" in r for r in doc.reasons)


def test_one_rank_falling_back_to_socket_fails() -> None:
    extra = ["node-b:1001:1030 [3] NCCL INFO Channel 02/0 : 11[3] -> 3[3] [send] via NET/Socket/0"]
    doc = judge(text(Log(extra_info=extra)))
    assert doc.verdict == "FAIL"
    assert any("socket fallback" in r for r in doc.reasons)


def test_a_run_killed_mid_sweep_fails() -> None:
    body = text(Log(rows_printed=2, concluded=False))
    body += "mpirun noticed that process rank 3 with PID 1003 on node node-a exited on signal 9 (Killed).\n"
    doc = judge(body)
    assert doc.verdict == "FAIL"
    assert any("ended early: 2 of 4" in r for r in doc.reasons)
    assert any("killed" in r for r in doc.reasons)


@pytest.mark.parametrize("value", ["nan", "-nan", "inf", "-12.50"])
def test_impossible_bandwidths_fail(value: str) -> None:
    lines = text(Log()).splitlines()
    row = next(i for i, ln in enumerate(lines) if ln.strip().startswith(str(8 << 30)))
    tokens = lines[row].split()
    tokens[7] = value
    lines[row] = "  ".join(tokens)
    doc = judge("\n".join(lines) + "\n")
    assert doc.verdict == "FAIL"
    assert any("impossible values" in r for r in doc.reasons)


def test_bandwidth_above_the_line_rate_is_not_a_pass() -> None:
    doc = judge(text(Log(busbw=900)))
    assert doc.verdict == "FAIL"
    assert any("above the nodes' line rate" in r for r in doc.reasons)


@pytest.mark.parametrize(
    "doc",
    [
        {"version": 3, "results": [{"size": "big", "out_of_place": {"bus_bw": 1}}]},
        {"version": 3, "results": [{"size": 1 << 30, "out_of_place": {"bus_bw": "fast"}}]},
        {"version": 3, "results": "none"},
        "DEEP",
        {"version": 3, "results": [{"size": 1 << 30, "out_of_place": {"bus_bw": "nan"}}]},
    ],
)
def test_hostile_json_never_passes_and_never_crashes(doc: Any) -> None:
    body = "[" * 40 + '"deep"' + "]" * 40 if doc == "DEEP" else json.dumps(doc)
    report = nccl_report.report({"x.json": body}, IB)
    assert report.verdict in ("FAIL", "INCONCLUSIVE")
    assert report.reasons


def test_absurdly_nested_json_is_refused_without_recursion() -> None:
    report = nccl_report.report({"x.json": "[" * 100_000 + "]" * 100_000}, IB)
    assert report.verdict == "INCONCLUSIVE"


def test_long_lines_are_read_in_linear_time() -> None:
    body = text(Log()) + "x" * 100_000 + "\n" + "NCCL INFO Channel " + "0" * 100_000 + "\n"
    doc = judge(body)
    assert doc.verdict == "PASS"


def test_cli_refuses_nan_thresholds_and_non_files(tmp_path: Path, capsys: Any) -> None:
    log = tmp_path / "run.log"
    log.write_text(text(Log()))
    assert main(["nccl-report", str(log), "--min-busbw", "nan"]) == 2
    assert "--min-busbw" in capsys.readouterr().err
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert main(["nccl-report", str(fifo)]) == 2
    assert "not a regular file" in capsys.readouterr().err
    assert main(["nccl-report", "/dev/null"]) == 2


def test_verdict_fields_match_the_facts() -> None:
    doc = judge(text(Log()))
    run = doc.runs[0]
    assert run.transport.network == "IB"
    assert run.gdr.inter_node_channels_with_gdrdma == 4
    assert math.isclose(run.threshold_gbps or 0, 360.0)
