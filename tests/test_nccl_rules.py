"""Each rule of the NCCL verdict alone: it fires on its condition and stays silent on a
proven run; the rules combine into the verdict (failures first, then doubts); the -J
reader's steps each read their part of the document."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from gpufabric.exitcodes import Verdict
from gpufabric.verify.nccl import parse_json as pj
from gpufabric.verify.nccl import rules as nr
from gpufabric.verify.nccl.parsed import Row, Run
from gpufabric.verify.nccl.report import judge
from gpufabric.verify.nccl.rules import Evidence, Finding, NcclExpectation

GIB = nr.GIB
EXP = NcclExpectation(
    link_layer="IB", threshold_gbps=300.0, threshold_source="line rate", line_rate_gbytes=400.0
)


def proven() -> Run:
    """A two-node run every rule accepts: finished, IB with GDRDMA, 350 GB/s at 1-2 GiB."""
    return Run(
        test="all_reduce_perf",
        rows=[
            Row(size=GIB, busbw_oop=340.0, busbw_ip=341.0, wrong=0),
            Row(size=2 * GIB, busbw_oop=350.0, busbw_ip=349.0, wrong=0),
        ],
        expected_rows=2,
        concluded=True,
        footer=True,
        out_of_bounds=0,
        out_of_bounds_ok=True,
        networks={"IB"},
        link_layers={"mlx5_0": "IB"},
        inter_node=["NET/IB/0/GDRDMA", "NET/IB/1/GDRDMA"],
        nnodes=2,
    )


def fail(reason: str) -> list[Finding]:
    return [Finding(Verdict.FAIL, reason)]


def unsure(reason: str) -> list[Finding]:
    return [Finding(Verdict.INCONCLUSIVE, reason)]


Case = tuple[nr.Rule, Callable[[Run], Any], NcclExpectation, list[Finding]]
NVL = dataclasses.replace(EXP, nvlink=nr.nvlink_domain("GB200"))
"""A run inside one GB200 NVLink domain."""
FIRES: dict[str, Case] = {
    "nccl too old for mnnvl": (
        nr.rule_nccl_version,
        lambda r: r.nccl_versions.update({(2, 24, 3), (2, 27, 7)}),
        NVL,
        fail("NCCL 2.24.3 is older than 2.25.2, the first release multi-node NVLink works with"),
    ),
    "mnnvl off inside a domain": (
        nr.rule_mnnvl_unproven,
        lambda r: setattr(r, "mnnvl_off", True),
        NVL,
        fail(
            "NCCL runs without multi-node NVLink (its comm line says MNNVL 0): the trays talk "
            "over the network inside one NVLink domain"
        ),
    ),
    "two cliques inside a domain": (
        nr.rule_one_clique,
        lambda r: r.cliques.update({"2": 8, "3": 8}),
        NVL,
        fail("the run spans 2 NVLink cliques (2 (8 ranks), 3 (8 ranks)), not one domain"),
    ),
    "net inside a domain": (
        nr.rule_net_inside_domain,
        lambda r: None,
        NVL,
        fail(
            "2 channels over NET (IB) inside one NVLink domain: NCCL fell back to the network "
            "between trays of one rack"
        ),
    ),
    "below the domain bar": (
        nr.rule_domain_bar,
        lambda r: r.rows.append(Row(size=8 * GIB, busbw_oop=700.0, busbw_ip=None, wrong=0)),
        NVL,
        fail(
            "best bus bandwidth at >= 8 GiB is 700 GB/s, below the NVLink domain bar 750 GB/s "
            f"({nr.NVLINK_BARS['GB200'][1]})"
        ),
    ),
    "test failed": (
        nr.rule_test_failed,
        lambda r: r.fatal.extend(["x.cu:1 Test NCCL failure", "second"]),
        EXP,
        fail("the test failed: x.cu:1 Test NCCL failure"),
    ),
    "killed": (
        nr.rule_killed,
        lambda r: r.killed.append("Segmentation fault"),
        EXP,
        fail("the run was killed or crashed: Segmentation fault"),
    ),
    "malformed, first three": (
        nr.rule_malformed,
        lambda r: r.malformed.extend(["a", "b", "c", "d"]),
        EXP,
        unsure("malformed input: a; b; c"),
    ),
    "ended early": (
        nr.rule_unfinished,
        lambda r: setattr(r, "expected_rows", 4),
        EXP,
        fail("the run ended early: 2 of 4 announced sizes were printed"),
    ),
    "not concluded": (
        nr.rule_unfinished,
        lambda r: setattr(r, "concluded", False),
        EXP,
        fail("the run did not finish (no 'Collective test concluded' line)"),
    ),
    "no rows": (
        nr.rule_no_rows,
        lambda r: r.rows.clear(),
        EXP,
        unsure("no data rows: the test printed no results table"),
    ),
    "impossible values, first three": (
        nr.rule_impossible_values,
        lambda r: [row.impossible.extend(["busbw nan", "busbw -1"]) for row in r.rows],
        EXP,
        fail("impossible values: busbw nan, busbw -1, busbw nan"),
    ),
    "out of bounds": (
        nr.rule_out_of_bounds,
        lambda r: (setattr(r, "out_of_bounds", 7), setattr(r, "out_of_bounds_ok", False)),
        EXP,
        fail("7 out-of-bounds values"),
    ),
    "nccl-tests' own NCCL_TESTS_MIN_BW check failed": (
        nr.rule_own_bandwidth_check,
        lambda r: (setattr(r, "avg_failed", True), setattr(r, "avg_busbw", 41.5)),
        EXP,
        fail(
            "nccl-tests' own check failed: average bus bandwidth 41.5 GB/s is below its "
            "NCCL_TESTS_MIN_BW floor (the binary exits with failure)"
        ),
    ),
    "wrong elements, summed": (
        nr.rule_wrong_elements,
        lambda r: [setattr(row, "wrong", 3) for row in r.rows],
        EXP,
        fail("6 wrong elements reported by -c 1"),
    ),
    "one finding per warning": (
        nr.rule_nccl_warnings,
        lambda r: r.warnings.extend([{"cause": "one"}, {"cause": "two"}]),
        EXP,
        [*fail("NCCL WARN: one"), *fail("NCCL WARN: two")],
    ),
    "a rank found no IB device": (
        nr.rule_no_ib_device,
        lambda r: setattr(r, "no_ib_device", True),
        EXP,
        fail("a rank found no RDMA device ('NET/IB : No device found.')"),
    ),
    "link layer never named": (
        nr.rule_link_layer,
        lambda r: r.link_layers.clear(),
        EXP,
        unsure(
            "link layer not proven: no 'NET/IB : Using' line names the HCAs' link layer "
            "(expected IB)"
        ),
    ),
    "table cut before its footer": (
        nr.rule_unfinished,
        lambda r: (setattr(r, "test", None), setattr(r, "footer", False)),
        EXP,
        fail("the run did not finish: the table has no out-of-bounds footer (cut?)"),
    ),
    "out-of-bounds word contradicts the count": (
        nr.rule_out_of_bounds,
        lambda r: (setattr(r, "out_of_bounds", 0), setattr(r, "out_of_bounds_ok", False)),
        EXP,
        fail("the out-of-bounds check did not say OK"),
    ),
    "alltoall has no stack threshold": (
        nr.rule_no_threshold,
        lambda r: setattr(r, "test", "alltoall_perf"),
        EXP,
        unsure(
            "no stack threshold for alltoall: its bus bandwidth over the NICs depends on how "
            "many ranks cross the network, not on the line rate alone (pass --min-busbw)"
        ),
    ),
    "socket fallback (said)": (
        nr.rule_socket_fallback,
        lambda r: setattr(r, "socket_in_use", True),
        EXP,
        fail("socket fallback: NCCL used TCP (NET/Socket) between nodes, not RDMA"),
    ),
    "socket fallback (channels)": (
        nr.rule_socket_fallback,
        lambda r: r.inter_node.append("NET/Socket/0"),
        EXP,
        fail("socket fallback: NCCL used TCP (NET/Socket) between nodes, not RDMA"),
    ),
    "no transport lines": (
        nr.rule_transport_unproven,
        lambda r: (r.networks.clear(), r.inter_node.clear()),
        EXP,
        unsure("no transport lines: rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET"),
    ),
    "no inter-node channels": (
        nr.rule_transport_unproven,
        lambda r: r.inter_node.clear(),
        EXP,
        unsure(
            "no inter-node channel lines: the transport between nodes is not proven "
            "(NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET prints them)"
        ),
    ),
    "wrong link layer, sorted": (
        nr.rule_link_layer,
        lambda r: r.link_layers.update({"mlx5_3": "RoCE", "mlx5_1": "RoCE"}),
        EXP,
        fail("link layer mlx5_1/RoCE, mlx5_3/RoCE, expected IB"),
    ),
    "GDR disabled, distinct and sorted": (
        nr.rule_gdr_disabled,
        lambda r: r.gdr_disabled.extend(["mlx5_1", "mlx5_0", "mlx5_1"]),
        EXP,
        fail("GPU Direct RDMA disabled for mlx5_0, mlx5_1"),
    ),
    "staged channels": (
        nr.rule_staged_channels,
        lambda r: r.inter_node.extend(["NET/IB/2", "NET/IB/3"]),
        EXP,
        fail("2 inter-node channels without GDRDMA (staged through host memory)"),
    ),
    "node count unknown": (
        nr.rule_node_count,
        lambda r: setattr(r, "nnodes", None),
        EXP,
        unsure("node count unknown: no '# Rank ... on HOST' lines and no NCCL 'nNodes' line"),
    ),
    "single node": (
        nr.rule_node_count,
        lambda r: setattr(r, "nnodes", 1),
        EXP,
        unsure("single node: no inter-node traffic was measured"),
    ),
    "no large sizes": (
        nr.rule_no_large_sizes,
        lambda r: setattr(r, "rows", [Row(size=1 << 20, busbw_oop=10.0, busbw_ip=10.0, wrong=0)]),
        EXP,
        unsure("no results at message sizes >= 1 GiB (run with -e 8G or more)"),
    ),
    "above line rate": (
        nr.rule_above_line_rate,
        lambda r: r.rows.append(Row(size=4 * GIB, busbw_oop=441.0, busbw_ip=None, wrong=0)),
        EXP,
        fail(
            "best bus bandwidth 441 GB/s is above the nodes' line rate 400 GB/s by more than "
            "10%: not a measurement over the NICs (a tree/NVLS algorithm? run all_reduce with "
            "NCCL_ALGO=Ring)"
        ),
    ),
    "no threshold": (
        nr.rule_no_threshold,
        lambda r: None,
        dataclasses.replace(EXP, threshold_gbps=None),
        unsure("no threshold: pass --stack (line rate) or --min-busbw"),
    ),
    "below threshold": (
        nr.rule_below_threshold,
        lambda r: None,
        dataclasses.replace(EXP, threshold_gbps=360.0),
        fail(
            "best bus bandwidth at >= 1 GiB is 350 GB/s, below the threshold 360 GB/s (line rate)"
        ),
    ),
}


@pytest.mark.parametrize("case", FIRES.values(), ids=FIRES.keys())
def test_rule_fires_on_its_condition(case: Case) -> None:
    rule, change, exp, expected = case
    run = proven()
    change(run)
    assert rule(Evidence.of(run, exp), exp) == expected


@pytest.mark.parametrize("rule", nr.RULES, ids=lambda r: r.__name__)
def test_rule_is_silent_on_a_proven_run(rule: nr.Rule) -> None:
    assert rule(Evidence.of(proven(), EXP), EXP) == []


def test_every_rule_has_a_case() -> None:
    assert {case[0] for case in FIRES.values()} == set(nr.RULES)


SILENT: dict[str, Case] = {
    "socket fallback without RDMA expected": (
        nr.rule_socket_fallback,
        lambda r: setattr(r, "socket_in_use", True),
        dataclasses.replace(EXP, rdma=False),
        [],
    ),
    "socket fallback on one node": (
        nr.rule_socket_fallback,
        lambda r: (setattr(r, "socket_in_use", True), setattr(r, "nnodes", 1)),
        EXP,
        [],
    ),
    "no transport lines after a socket fallback": (
        nr.rule_transport_unproven,
        lambda r: (r.networks.clear(), r.inter_node.clear(), setattr(r, "socket_in_use", True)),
        EXP,
        [],
    ),
    "no transport lines on one node": (
        nr.rule_transport_unproven,
        lambda r: (r.networks.clear(), r.inter_node.clear(), setattr(r, "nnodes", 1)),
        EXP,
        [],
    ),
    "any link layer when none is expected": (
        nr.rule_link_layer,
        lambda r: r.link_layers.update({"mlx5_1": "RoCE"}),
        dataclasses.replace(EXP, link_layer=None),
        [],
    ),
    "GDR disabled when GDR is not expected": (
        nr.rule_gdr_disabled,
        lambda r: r.gdr_disabled.append("mlx5_0"),
        dataclasses.replace(EXP, gdr=False),
        [],
    ),
    "staged channels after a socket fallback": (
        nr.rule_staged_channels,
        lambda r: (r.inter_node.append("NET/IB/2"), setattr(r, "socket_in_use", True)),
        EXP,
        [],
    ),
    "no large sizes when values were impossible": (
        nr.rule_no_large_sizes,
        lambda r: setattr(
            r,
            "rows",
            [
                Row(
                    size=GIB,
                    busbw_oop=None,
                    busbw_ip=None,
                    wrong=0,
                    impossible=["busbw nan at 1 B"],
                )
            ],
        ),
        EXP,
        [],
    ),
    "no large sizes without rows (no_rows says it)": (
        nr.rule_no_large_sizes,
        lambda r: r.rows.clear(),
        EXP,
        [],
    ),
    "above line rate within noise": (
        nr.rule_above_line_rate,
        lambda r: r.rows.append(Row(size=4 * GIB, busbw_oop=440.0, busbw_ip=None, wrong=0)),
        EXP,
        [],
    ),
    "above line rate over multi-node NVLink": (
        nr.rule_above_line_rate,
        lambda r: (
            r.rows.append(Row(size=4 * GIB, busbw_oop=900.0, busbw_ip=None, wrong=0)),
            setattr(r, "mnnvl", True),
        ),
        EXP,
        [],
    ),
    "above line rate on one node": (
        nr.rule_above_line_rate,
        lambda r: (
            r.rows.append(Row(size=4 * GIB, busbw_oop=900.0, busbw_ip=None, wrong=0)),
            setattr(r, "nnodes", 1),
        ),
        EXP,
        [],
    ),
    "at the threshold": (
        nr.rule_below_threshold,
        lambda r: None,
        dataclasses.replace(EXP, threshold_gbps=350.0),
        [],
    ),
    "below threshold without a threshold": (
        nr.rule_below_threshold,
        lambda r: None,
        dataclasses.replace(EXP, threshold_gbps=None),
        [],
    ),
    "below threshold with no large sizes": (
        nr.rule_below_threshold,
        lambda r: setattr(r, "rows", [Row(size=1 << 20, busbw_oop=1.0, busbw_ip=1.0, wrong=0)]),
        EXP,
        [],
    ),
    "unfinished when the announced rows all came (JSON has no end line)": (
        nr.rule_unfinished,
        lambda r: (setattr(r, "test", None), setattr(r, "concluded", False)),
        EXP,
        [],
    ),
}


@pytest.mark.parametrize("case", SILENT.values(), ids=SILENT.keys())
def test_rule_stays_silent_outside_its_condition(case: Case) -> None:
    rule, change, exp, expected = case
    run = proven()
    change(run)
    assert rule(Evidence.of(run, exp), exp) == expected


def test_evidence_derives_once_what_the_rules_share() -> None:
    run = proven()
    run.inter_node.append("NET/Socket/1")
    run.rows.append(
        Row(
            size=1 << 20,
            busbw_oop=999.0,
            busbw_ip=None,
            wrong=0,
            impossible=["busbw inf at 1048576 B"],
        )
    )
    ev = Evidence.of(run)
    assert (ev.nodes, ev.multi, ev.socket) == (2, True, True)
    assert ev.gdr_channels == 2
    assert ev.best == 350.0  # only sizes >= 1 GiB count
    assert ev.impossible == ("busbw inf at 1048576 B",)


def test_combine_lists_failures_first_then_doubts_each_in_rule_order() -> None:
    found = [*unsure("u1"), *fail("f1"), *unsure("u2"), *fail("f2")]
    assert nr.combine(found) == (Verdict.FAIL, ("f1", "f2", "u1", "u2"))
    assert nr.combine([*unsure("u1")]) == (Verdict.INCONCLUSIVE, ("u1",))
    assert nr.combine([]) == (Verdict.PASS, ())


def test_judge_runs_the_rules_in_order() -> None:
    run = proven()
    run.killed.append("Killed")
    run.fatal.append("Test CUDA failure")
    run.nnodes = 1
    doc = judge(run, dataclasses.replace(EXP, threshold_gbps=None))
    assert doc.verdict == Verdict.FAIL
    assert doc.reasons == (
        "the test failed: Test CUDA failure",
        "the run was killed or crashed: Killed",
        "single node: no inter-node traffic was measured",
        "no threshold: pass --stack (line rate) or --min-busbw",
    )
    assert judge(proven(), EXP).verdict == Verdict.PASS


def test_findings_take_a_rule_list() -> None:
    run = proven()
    run.nnodes = 1
    ev = Evidence.of(run)
    assert nr.findings(ev, EXP, [nr.rule_no_rows]) == []
    assert nr.findings(ev, EXP, [nr.rule_node_count, nr.rule_no_rows]) == unsure(
        "single node: no inter-node traffic was measured"
    )


# -J document steps


def json_run(doc: dict[str, Any]) -> Run:
    run = Run()
    for step in pj.JSON_STEPS:
        step(doc, run)
    return run


def test_json_identity_reads_the_program_and_hosts() -> None:
    run = Run()
    pj._json_identity(
        {"args": ["/opt/bin/all_gather_perf", "-b"], "devices": [{"hostname": "a"}, "x"]}, run
    )
    assert (run.test, run.hosts) == ("all_gather_perf", {"a"})
    run = Run()
    pj._json_identity({"args": [7], "devices": None}, run)
    assert (run.test, run.hosts) == (None, set())


def test_json_part_names_impossible_bandwidth_and_wrong_counts() -> None:
    """A negative, fractional or overflowing nwrong is impossible, never read as 0 (it was)."""
    run = Run()
    assert pj._json_part({"bus_bw": "nan", "nwrong": -2}, "p", 8, run) == pj._Part(
        None, 0, ("bus_bw nan at 8 B", "nwrong -2 at 8 B")
    )
    assert pj._json_part({"bus_bw": -1.0, "nwrong": 3}, "p", 8, run) == pj._Part(
        None, 3, ("bus_bw -1.0 at 8 B",)
    )
    assert pj._json_part({"bus_bw": 1.0, "nwrong": 0.5}, "p", 8, run).impossible == (
        "nwrong 0.5 at 8 B",
    )
    assert pj._json_part({"bus_bw": 1.0, "nwrong": 1e400}, "p", 8, run).impossible == (
        "nwrong inf at 8 B",
    )
    assert pj._json_part({"bus_bw": 12.5}, "p", 8, run) == pj._Part(12.5, 0)
    assert run.malformed == []
    assert pj._json_part([], "p", 8, run) is None
    assert run.malformed == ["p is not an object"]


def test_json_row_skips_what_is_not_a_result() -> None:
    run = Run()
    assert pj._json_row(0, "x", run) is None
    assert pj._json_row(1, {"size": True}, run) is None
    assert pj._json_row(2, {"size": -1}, run) is None
    assert run.malformed == [
        "results[0] is not an object",
        "results[1].size is not a byte count",
        "results[2].size is not a byte count",
    ]
    row = pj._json_row(3, {"size": 4, "out_of_place": {"bus_bw": 1}, "in_place": 5}, run)
    assert row == Row(size=4, busbw_oop=1.0, busbw_ip=None, wrong=0)
    assert run.malformed[-1] == "results[3].in_place is not an object"


def test_json_footers_and_config() -> None:
    run = json_run(
        {
            "results": [],
            "out_of_bounds": {"count": 2, "okay": False},
            "average_bus_bandwidth": {"bandwidth": 9},
            "config": {"minimum_bytes": 1, "maximum_bytes": 8, "step_factor": 2},
            "end_time": "t",
        }
    )
    assert (run.out_of_bounds, run.out_of_bounds_ok, run.avg_busbw) == (2, False, 9.0)
    assert (run.expected_rows, run.concluded) == (4, True)
    run = json_run({"config": {"minimum_bytes": 1, "maximum_bytes": 9, "step_bytes": 4}})
    assert (run.expected_rows, run.concluded, run.malformed) == (3, False, ["no results list"])
    assert json_run({"config": {"minimum_bytes": 1, "maximum_bytes": 9}}).expected_rows is None
