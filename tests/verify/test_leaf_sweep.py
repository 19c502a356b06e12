"""A sweep on a fabric whose rails are routed per leaf pairs only the nodes under the leaf it
was given: another leaf's nodes cannot attach this leaf's networks."""

from __future__ import annotations

from typing import Any

import pytest

from gpufabric.cli import main
from gpufabric.model.stackfile import load_stack
from gpufabric.plan.build import build_plan
from gpufabric.verify.sweep import session

LEAF = "topology.gpufabric.io/leaf"


def node(name: str, leaf: str | None) -> dict[str, Any]:
    labels = {LEAF: leaf} if leaf else {}
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def test_sweep_nodes_are_those_under_the_leaf(monkeypatch: pytest.MonkeyPatch) -> None:
    plan = build_plan("routed-b200", load_stack("routed-b200").model)
    fleet = [node("a", "leaf-01"), node("b", "leaf-02"), node("c", "leaf-01"), node("d", None)]
    monkeypatch.setattr(session.cluster, "gpu_nodes", lambda kube, facts: fleet)
    names, _, _ = session.sweep_nodes(None, plan, "leaf-01", LEAF)  # type: ignore[arg-type]
    assert names == ["a", "c"]
    names, _, _ = session.sweep_nodes(None, plan)  # type: ignore[arg-type]
    assert names == ["a", "b", "c", "d"]


def test_sweep_without_a_leaf_on_a_routed_fabric_exits_2_before_any_api_call(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["verify", "nccl", "--stack", "routed-b200", "--tenant", "ml-train", "--sweep"]
    argv += ["--kubeconfig", "/nonexistent/kubeconfig"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--leaf" in err
    assert "leaf-01, leaf-02" in err
    assert "Traceback" not in err
