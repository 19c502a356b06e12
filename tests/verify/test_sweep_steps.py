"""The steps of ``verify nccl --sweep`` that decide something: which nodes are swept, how
many jobs run at once, the JSON document, and the sweep's verdict (its exit code)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from gpufabric.exitcodes import ExitCode, Verdict
from gpufabric.verify.sweep import session
from gpufabric.verify.sweep.run import NodeResult, RailResult, SweepReport


def node(ready: str = "True", unschedulable: Any = None) -> dict[str, Any]:
    spec = {} if unschedulable is None else {"unschedulable": unschedulable}
    return {
        "metadata": {"name": "n"},
        "spec": spec,
        "status": {"conditions": [{"type": "Ready", "status": ready}]},
    }


@pytest.mark.parametrize(
    ("n", "why"),
    [
        (node(), None),
        (node(unschedulable=False), None),
        (node(unschedulable=True), "cordoned"),
        (node(ready="False"), "notReady"),
        (node(ready="False", unschedulable=True), "notReady"),  # not Ready wins
        ({"metadata": {"name": "n"}, "spec": None, "status": {}}, "notReady"),
    ],
)
def test_skip_reason(n: dict[str, Any], why: str | None) -> None:
    assert session.skip_reason(n) == why


def plan_with(admissible: int | None, gpus_per_node: int = 8) -> Any:
    tenants = {} if admissible is None else {"t": SimpleNamespace(gpu_admissible=admissible)}
    nodes = SimpleNamespace(gpus_per_node=gpus_per_node)
    return SimpleNamespace(facts=SimpleNamespace(tenants=tenants, nodes=nodes))


@pytest.mark.parametrize(("limit", "jobs"), [(64, 4), (63, 3), (16, 1), (8, 1), (0, 1), (None, 1)])
def test_sweep_concurrency_is_what_the_quota_admits_at_least_one(
    limit: int | None, jobs: int
) -> None:
    assert session.sweep_concurrency(plan_with(limit), "t") == jobs


def test_sweep_document_adds_rails_only_for_nodes_that_ran_them() -> None:
    bad = NodeResult(node="b", verdict="BAD", busbw=100.0, network="IB", pairs=[(1, "g", "FAIL")])
    bad.rails["rail0"] = RailResult(Verdict.FAIL, 20.0, "IB", "g")
    good = NodeResult(node="g", verdict="GOOD", busbw=370.0, network="IB", pairs=[(1, "b", "FAIL")])
    report = SweepReport(
        nodes={"g": good, "b": bad}, rounds=2, rail_rounds=1, rail_threshold_gbps=45
    )
    doc = session.sweep_document(report, {"cordoned": ["c"], "notReady": []})
    assert list(doc) == [
        "rounds",
        "railRounds",
        "railThreshold",
        "drain",
        "notLocalized",
        "skipped",
        "nodes",
        "stopped",
        "flaky",
        "pathFaults",
        "topologyLevels",
        "confirm",
        "partners",
        "jobs",
    ]
    assert doc["stopped"] is None
    assert list(doc["nodes"]) == ["b", "g"]
    assert list(doc["nodes"]["g"]) == ["verdict", "busbw", "network", "pairs"]
    assert doc["nodes"]["b"]["rails"] == {
        "rail0": {"verdict": "FAIL", "busbw": 20.0, "network": "IB", "partner": "g"}
    }
    assert doc["nodes"]["b"]["failingRails"] == ["rail0"]
    assert doc["drain"] == ["b"]


@pytest.mark.parametrize(
    ("words", "verdict", "code"),
    [
        (["GOOD", "GOOD"], Verdict.PASS, ExitCode.OK),
        (["GOOD", "UNKNOWN"], Verdict.INCONCLUSIVE, ExitCode.INCONCLUSIVE),
        (["UNKNOWN", "BAD", "GOOD"], Verdict.FAIL, ExitCode.FAIL),
    ],
)
def test_sweep_verdict_maps_node_words_through_the_one_table(
    words: list[str], verdict: Verdict, code: ExitCode
) -> None:
    nodes = {f"n{i}": NodeResult(node=f"n{i}", verdict=w) for i, w in enumerate(words)}
    report = SweepReport(nodes=nodes, rounds=1)
    assert report.verdict == verdict
    assert report.verdict.exit_code == code
