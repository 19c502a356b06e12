"""Issue 23: the analyzer tells the truth. Healthy runs in the formats real launchers and
NCCL versions write are read (not INCONCLUSIVE or FAIL), each test kind is judged against
its own ceiling and threshold, and crafted or damaged logs never PASS.

Format sources: nccl-tests 2.19.6 src/common.cu:1545 ("# Reducing maxBytes to %ld due to
memory limitation"), src/util.cu:349 ("# Writing JSON output to %s"), util.cu:273 (jsonBool
writes "true"/"false"), util.cu:702 (devices inside "config"), util.cu:777 (the out-of-bounds
footer), util.cu:846 (errors); NCCL src/transport/net.cc:324-379 (channel lines
"via NET/%s/%d%s%s%s": /GDRDMA, (PCI), /Shared), src/init.cc:1646 ("%d coll channels, %d
collnet channels, %d nvls channels, ..."), src/transport/net_ib/init.cc:470 ("NET/IB : No
device found."); Open MPI 4 --tag-output "[1,0]<stdout>:", Open MPI 5 (PRRTE) --output
tag-detailed "[1,0][host:pid]<stdout>: "; Slurm srun -l pads the task id to the widest one;
torchrun (torch.distributed.elastic) prefixes "[default0]:"; the mpirun/prterun
"... detected that one or more processes exited with non-zero status" message."""

from __future__ import annotations

import json

import pytest
from nccllogs import IB_8X400, Log, openmpi, openmpi5, slurm, text, torchrun

from gpufabric.verify.nccl import job as nccl
from gpufabric.verify.nccl import report as nccl_report
from gpufabric.verify.nccl import rules as nccl_rules
from gpufabric.verify.nccl.rules import NcclExpectation

IB = IB_8X400
GIB = 1 << 30


def judge(files: dict[str, str] | str, exp: NcclExpectation = IB) -> nccl_report.NcclReport:
    return nccl_report.report({"run.log": files} if isinstance(files, str) else files, exp)


def replace_line(body: str, old: str, new: str) -> str:
    assert old in body
    return body.replace(old, new)


# ---------------------------------------------------------------- formats now understood


@pytest.mark.parametrize(
    ("launcher", "wrap"),
    [
        ("srun -l with 16 tasks (' 0: ')", lambda b: slurm(b, tasks=16)),
        ("Open MPI 5 --output tag-detailed", openmpi5),
        ("torchrun [default0]:", torchrun),
    ],
)
def test_more_launcher_prefixes_pass(launcher: str, wrap: object) -> None:
    doc = judge(wrap(text(Log())))  # type: ignore[operator]
    assert doc.verdict == "PASS", (launcher, doc.reasons)
    assert len(doc.runs[0].rows) == 4


def _reduced(body: str, notice: bool) -> str:
    """maxBytes announced as 16 GiB, lowered to 8 GiB by the memory check."""
    body = replace_line(body, "maxBytes 8589934592", "maxBytes 17179869184")
    if notice:
        last_rank = [line for line in body.splitlines() if line.startswith("#  Rank")][-1]
        body = replace_line(
            body,
            last_rank,
            last_rank + "\n#\n# Reducing maxBytes to 8589934592 due to memory limitation",
        )
    return body


def test_reducing_max_bytes_is_not_an_early_end() -> None:
    assert judge(_reduced(text(Log()), notice=True)).verdict == "PASS"
    doc = judge(_reduced(text(Log()), notice=False))
    assert doc.verdict == "FAIL"
    assert any("ended early" in r for r in doc.reasons)


@pytest.mark.parametrize(
    "via", ["NET/IB/0/GDRDMA(PCI)", "NET/IB/0/GDRDMA/Shared", "NET/IB/0(8)/GDRDMA"]
)
def test_nccl_2_26_gdrdma_channel_forms_count_as_gdr(via: str) -> None:
    doc = judge(text(Log()).replace("via NET/IB/0/GDRDMA", f"via {via}"))
    assert doc.verdict == "PASS", doc.reasons
    assert doc.runs[0].gdr.inter_node_channels_with_gdrdma == 4


def test_nccl_debug_files_join_the_test_of_their_processes() -> None:
    body = text(Log())
    info = [line for line in body.splitlines() if "NCCL INFO" in line]
    stdout = "\n".join(line for line in body.splitlines() if "NCCL INFO" not in line) + "\n"
    files = {"stdout.log": stdout, "nccl.node-a.1000.log": "\n".join(info) + "\n"}
    doc = judge(files)
    assert doc.verdict == "PASS", doc.reasons
    assert len(doc.runs) == 1
    stray = {"stdout.log": stdout, "nccl.x.log": "other:77:77 [0] NCCL INFO Using network IB\n"}
    doc = judge(stray)
    assert doc.verdict == "INCONCLUSIVE"
    assert any("no test's ranks name" in r for r in doc.reasons)


# ----------------------------------------------------------------------- -J documents


def test_json_as_nccl_tests_2_19_6_writes_it_is_read() -> None:
    """okay is the string "true", hosts are in config.devices, errors is [""]: before, the
    document was judged FAIL with "0 out-of-bounds values" and "node count unknown"."""
    doc = judge({"out.json": Log().json()})
    (run,) = doc.runs
    assert run.transport.nodes == 2
    assert not any("out-of-bounds" in r or "node count unknown" in r for r in doc.reasons)
    assert doc.verdict == "INCONCLUSIVE"  # the JSON alone does not prove the transport


def _json(**change: object) -> str:
    doc = json.loads(Log().json())
    for key, value in change.items():
        doc[key] = value
    return json.dumps(doc)


def test_json_failures_are_failures() -> None:
    bad = _json(out_of_bounds={"count": 3, "okay": "false"})
    assert judge({"out.json": bad}).verdict == "FAIL"
    lying = _json(out_of_bounds={"count": 3, "okay": "true"})
    assert judge({"out.json": lying}).verdict == "FAIL"
    error = _json(errors=["NCCL failure common.cu:1012 'unhandled system error'"])
    doc = judge({"out.json": error})
    assert doc.verdict == "FAIL"
    assert any("unhandled system error" in r for r in doc.reasons)


def test_json_matches_its_log_through_a_tagged_writing_line_and_keeps_its_evidence() -> None:
    log = Log()
    doc = json.loads(log.json())
    doc["args"][0] = "./renamed_binary"  # no test-name match: only the Writing line links it
    doc["results"][2]["in_place"]["nwrong"] = 3.0
    stdout = openmpi("# Writing JSON output to /results/out.json.1\n" + text(log))
    report = judge({"stdout.log": stdout, "out.json.1": json.dumps(doc)})
    assert len(report.runs) == 1
    assert report.verdict == "FAIL"
    assert any("3 wrong elements at 4294967296 B" in r for r in report.reasons)


# ------------------------------------------------------------------------- semantics


def test_one_rank_run_is_inconclusive_not_below_threshold() -> None:
    doc = judge(text(Log(hosts=("solo",), gpus_per_host=1, busbw=0.0)))
    assert doc.verdict == "INCONCLUSIVE", doc.reasons
    assert not any("below the threshold" in r for r in doc.reasons)


@pytest.mark.parametrize("test", ["alltoall_perf_mpi", "sendrecv_perf_mpi", "gather_perf"])
def test_kinds_not_bounded_by_the_line_rate_get_no_all_reduce_threshold(test: str) -> None:
    doc = judge(text(Log(test=test, busbw=90.0)))
    assert doc.verdict == "INCONCLUSIVE", doc.reasons
    assert any("no stack threshold for" in r for r in doc.reasons)
    own = NcclExpectation(
        **{**IB.__dict__, "threshold_gbps": 80.0, "threshold_source": "--min-busbw"}
    )
    assert judge(text(Log(test=test, busbw=90.0)), own).verdict == "PASS"


@pytest.mark.parametrize("channels", ["32 collnet channels, 0 nvls", "0 collnet channels, 16 nvls"])
def test_in_network_reduction_is_judged_against_its_own_ceiling(channels: str) -> None:
    line = (
        f"node-a:1000:1020 [0] NCCL INFO 32 coll channels, {channels} channels, "
        "32 p2p channels, 32 p2p channels per peer"
    )
    doc = judge(text(Log(busbw=700.0, extra_info=[line])))
    assert doc.verdict == "PASS", doc.reasons
    (run,) = doc.runs
    assert run.transport.in_network
    assert run.ceiling_gbps == 750.0
    assert "in-network reduction" in nccl_report.format_text(doc)
    doc = judge(text(Log(busbw=700.0)))  # no such line: above the line rate
    assert doc.verdict == "FAIL"
    assert any("line rate" in r for r in doc.reasons)


# --------------------------------------------------------- crafted or damaged logs


def test_header_lost_and_cut_mid_table_fails() -> None:
    lines = text(Log()).splitlines()
    start = next(i for i, line in enumerate(lines) if "NCCL INFO" in line)
    end = next(i for i, line in enumerate(lines) if line.strip().startswith("2147483648"))
    doc = judge("\n".join(lines[start : end + 1]) + "\n")
    assert doc.verdict == "FAIL"
    assert any("no out-of-bounds footer" in r for r in doc.reasons)


def test_old_format_failed_footer_is_not_overwritten_by_a_later_ok() -> None:
    body = text(Log()).replace("# Collective test starting: all_reduce_perf_mpi\n", "")
    body = body.replace("# Collective test concluded: all_reduce_perf_mpi\n", "")
    oob = "# Out of bounds values : 0 OK"
    body = replace_line(body, oob, "# Out of bounds values : 3 FAILED\n" + oob)
    assert judge(body).verdict == "FAIL"


def test_out_of_bounds_line_saying_3_ok_fails() -> None:
    body = replace_line(text(Log()), "Out of bounds values : 0 OK", "Out of bounds values : 3 OK")
    doc = judge(body)
    assert doc.verdict == "FAIL"
    assert any("3 out-of-bounds values" in r for r in doc.reasons)


@pytest.mark.parametrize("wrong", ["0.5", "1e400", "-1", "x"])
def test_wrong_count_that_is_not_a_count_is_not_zero(wrong: str) -> None:
    lines = text(Log()).splitlines()
    i = next(i for i, line in enumerate(lines) if line.strip().startswith("1073741824"))
    tokens = lines[i].split()
    tokens[8] = wrong
    lines[i] = "  ".join(tokens)
    doc = judge("\n".join(lines) + "\n")
    assert doc.verdict == "FAIL", doc.reasons
    assert any(f"#wrong {wrong}" in r for r in doc.reasons)


def test_a_garbled_row_is_not_skipped_silently() -> None:
    """A row cut short (a line lost its tail) under a full header: not PASS."""
    lines = text(Log()).splitlines()
    i = next(i for i, line in enumerate(lines) if line.strip().startswith("2147483648"))
    lines.insert(i + 1, lines[i][:40])
    doc = judge("\n".join(lines) + "\n")
    assert doc.verdict == "INCONCLUSIVE"
    assert any("a table row of" in r for r in doc.reasons)


WARN = "node-b:1001:1030 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2 with status=12"


def test_warn_glued_to_a_comment_line_counts() -> None:
    """Interleaved writes: stderr's WARN lands at the end of a '#' line of stdout."""
    oob = "# Out of bounds values : 0 OK"
    body = replace_line(text(Log()), oob, "# Avg bus bandwidth : 350 " + WARN + "\n" + oob)
    doc = judge(body)
    assert doc.verdict == "FAIL"
    assert any("NCCL WARN" in r for r in doc.reasons)


def test_warn_past_column_4096_counts() -> None:
    body = text(Log(extra_info=["node-a:1000:1000 [0] NCCL INFO cfg " + "x" * 5000 + WARN]))
    doc = judge(body)
    assert doc.verdict == "FAIL"
    assert any("NCCL WARN" in r for r in doc.reasons)


def test_link_layer_must_be_proven() -> None:
    no_layer = "\n".join(line for line in text(Log()).splitlines() if "NET/IB : Using" not in line)
    doc = judge(no_layer + "\n")
    assert doc.verdict == "INCONCLUSIVE"
    assert any("link layer not proven" in r for r in doc.reasons)
    # the SHARP plugin's IBext net (nccl-rdma-sharp-plugins ib_plugin.c .name "IBext_v11";
    # its device line is p2p_plugin.c:704 "NET/IB : Using...") over RoCE HCAs on an IB stack
    ibext = text(Log(layer="RoCE")).replace("network IB", "network IBext_v11")
    ibext = ibext.replace("via NET/IB/", "via NET/IBext_v11/")
    doc = judge(ibext)
    assert doc.verdict == "FAIL"
    assert any("expected IB" in r for r in doc.reasons)


def test_a_rank_without_an_ib_device_fails() -> None:
    line = "node-b:1001:1001 [0] NCCL INFO NET/IB : No device found."
    doc = judge(text(Log(extra_info=[line])))
    assert doc.verdict == "FAIL"
    assert any("No device found" in r for r in doc.reasons)


@pytest.mark.parametrize("launcher", ["mpirun", "prterun"])
def test_launcher_non_zero_exit_fails(launcher: str) -> None:
    line = (
        f"{launcher} detected that one or more processes exited with non-zero status, "
        "thus causing the job to be terminated."
    )
    doc = judge(text(Log()) + line + "\n")
    assert doc.verdict == "FAIL"
    assert any("non-zero status" in r for r in doc.reasons)


def test_verify_nccl_with_a_test_missing_from_the_log_does_not_pass() -> None:
    log = (
        nccl.MARKER.format(test="all_gather_perf_mpi")
        + "\n"
        + text(Log(test="all_gather_perf_mpi"))
    )
    parts = nccl.split_log(log)
    assert set(parts) == set(nccl.TESTS)
    doc = nccl_report.report(parts, IB)
    assert doc.verdict != "PASS"
    assert any("all_reduce_perf_mpi" in r for r in doc.reasons)


def test_a_rail_scaled_min_busbw_is_the_users_threshold_for_every_kind() -> None:
    """verify sweep's one-rail runs scale --min-busbw ("--min-busbw x 1/8 rails"): still the
    user's own threshold, so it applies to alltoall too."""
    exp = NcclExpectation(threshold_gbps=45.0, threshold_source="--min-busbw x 1/8 rails")
    bound = nccl_rules.test_bound("alltoall_perf_mpi", 16, (), exp)
    assert (bound.threshold_gbps, bound.no_threshold) == (45.0, None)
    stack = NcclExpectation(threshold_gbps=45.0, threshold_source="0.9 x line rate")
    assert nccl_rules.test_bound("alltoall_perf_mpi", 16, (), stack).threshold_gbps is None


def _avg_word(body: str, word: str) -> str:
    """The footer as nccl-tests prints it with NCCL_TESTS_MIN_BW set (common.cu:
    "# %-20s : %g %s" with "FAILED" below 0.9 x the floor, else "OK")."""
    lines = body.splitlines(keepends=True)
    out = []
    for line in lines:
        if line.startswith("# Avg bus bandwidth"):
            line = line.rstrip("\n").rstrip() + f" {word}\n"
        out.append(line)
    return "".join(out)


def test_nccl_tests_own_bandwidth_check_failed_fails() -> None:
    """Before: the word after the average was ignored, so a run whose own
    NCCL_TESTS_MIN_BW check failed (and whose binary exited with failure) could PASS."""
    assert judge(_avg_word(text(Log()), "OK")).verdict == "PASS"
    doc = judge(_avg_word(text(Log()), "FAILED"))
    assert doc.verdict == "FAIL"
    assert any("NCCL_TESTS_MIN_BW" in r for r in doc.reasons)
    assert judge(_avg_word(text(Log()), "MAYBE")).verdict != "PASS"


def test_json_own_bandwidth_check_false_fails() -> None:
    """-J: average_bus_bandwidth.okay is "unchecked" without NCCL_TESTS_MIN_BW, else the
    string "true" or "false" (util.cu jsonBool); "false" is nccl-tests' own failure."""
    unchecked = json.loads(Log().json())["average_bus_bandwidth"]
    failed = _json(average_bus_bandwidth={**unchecked, "okay": "false"})
    doc = judge({"stdout.log": text(Log()), "all_reduce_perf_mpi.json": failed})
    assert doc.verdict == "FAIL"
    assert any("NCCL_TESTS_MIN_BW" in r for r in doc.reasons)
    odd = _json(average_bus_bandwidth={**unchecked, "okay": "perhaps"})
    assert judge({"stdout.log": text(Log()), "all_reduce_perf_mpi.json": odd}).verdict != "PASS"


@pytest.mark.parametrize(
    "prefix", ["[pod/gpufabric-nccl-launcher-x7k2p/mpi-launcher] ", " 0: ", "[1,0]<stdout>: "]
)
def test_markers_under_a_launcher_prefix_still_split_the_log(prefix: str) -> None:
    """Before: a launcher log saved with `kubectl logs --prefix` (or through srun -l) had
    no marker line equal to gpufabric's, so every test was judged on the whole log."""
    log = "".join(
        prefix + nccl.MARKER.format(test=test) + "\n" + text(Log(test=test)) for test in nccl.TESTS
    )
    parts = nccl.split_log(log)
    assert set(parts) == set(nccl.TESTS)
    for test in nccl.TESTS:
        assert f"# Collective test starting: {test}" in parts[test]
        assert parts[test].count("# Collective test starting") == 1
