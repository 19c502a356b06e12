"""GPU nodes that carry taints (`gpuNodes.tolerations`): the operators' DaemonSets that must
run on them tolerate them, proven with the real charts. Before, only jobs (through the
queue) and gpufabric's own probes tolerated them: the GPU Operator's driver, toolkit and
device plugin, NFD's worker and the NicClusterPolicy's operands stayed off the GPU nodes,
so phase 1 of the runbook never became ready.

The plan part runs in every test run; the helm part is conformance (`make conformance`) and
skips cleanly without ../shared/upstream.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest
from builders import example_config, plan_of
from upstream import helm_template

from gpufabric.plan import ids
from gpufabric.plan.build import Plan
from gpufabric.plan.items import HelmChart, K8sObject

TAINT = {"key": "dedicated", "operator": "Equal", "value": "training", "effect": "NoSchedule"}
GPU = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


@cache
def plan(stack: str, tainted: bool = True) -> Plan:
    config = example_config(stack)
    if stack == "prod-ib":  # NFD moves to the Network Operator (peermem waits for its driver)
        config["gpufabric:fabric"]["gpuDirect"] = "peermem"
    if tainted:
        config["gpufabric:gpuNodes"]["tolerations"] = [dict(TAINT), dict(GPU)]
    return plan_of(config, stack)


def _chart(p: Plan, item_id: str) -> HelmChart:
    payload = p.item(item_id).payload
    assert isinstance(payload, HelmChart)
    return payload


def _policy(p: Plan) -> dict[str, Any]:
    payload = p.item(ids.NIC_POLICY).payload
    assert isinstance(payload, K8sObject)
    return dict(payload.body["spec"])


def test_gpu_operator_operands_and_nfd_tolerate_the_gpu_nodes_taints() -> None:
    values = _chart(plan("lab-roce"), ids.GPU_OPERATOR).values  # NFD from the GPU Operator
    # the chart's own toleration kept (a list value replaces it), each one once
    assert values["daemonsets"]["tolerations"] == [GPU, TAINT]
    worker = values["node-feature-discovery"]["worker"]["tolerations"]
    assert worker[-2:] == [GPU, TAINT]
    assert {"key": "node-role.kubernetes.io/control-plane"}.items() <= worker[0].items()


def test_network_operator_operands_and_its_nfd_tolerate_them() -> None:
    p = plan("prod-ib")  # peermem with the Network Operator's NIC driver: NFD runs there
    assert p.facts.operators.nfd_owner == "network-operator"
    assert _policy(p)["tolerations"] == [TAINT]  # the operator adds nvidia.com/gpu itself
    worker = _chart(p, ids.NETWORK_OPERATOR).values["node-feature-discovery"]["worker"]
    assert worker["tolerations"][-2:] == [GPU, TAINT]
    assert "worker" not in _chart(p, ids.GPU_OPERATOR).values.get("node-feature-discovery", {})


def test_untainted_gpu_nodes_leave_the_charts_defaults() -> None:
    for stack in ("lab-roce", "prod-ib"):
        p = plan(stack, tainted=False)
        assert "daemonsets" not in _chart(p, ids.GPU_OPERATOR).values
        for item_id in (ids.GPU_OPERATOR, ids.NETWORK_OPERATOR):
            assert "worker" not in _chart(p, item_id).values.get("node-feature-discovery", {})
        assert "tolerations" not in _policy(p)


def _tolerations(objs: list[dict[str, Any]], kind: str, name_end: str) -> list[Any]:
    obj = next(o for o in objs if o["kind"] == kind and o["metadata"]["name"].endswith(name_end))
    if kind == "ClusterPolicy":
        return list(obj["spec"]["daemonsets"]["tolerations"])
    return list(obj["spec"]["template"]["spec"]["tolerations"])


@pytest.mark.conformance
@pytest.mark.parametrize(
    ("stack", "item_id"), [("lab-roce", ids.GPU_OPERATOR), ("prod-ib", ids.NETWORK_OPERATOR)]
)
def test_the_charts_render_the_tolerations_where_the_pods_read_them(
    stack: str, item_id: str
) -> None:
    p = plan(stack)
    objs = helm_template(_chart(p, item_id), p.facts.kubernetes_minor)
    assert TAINT in _tolerations(objs, "DaemonSet", "node-feature-discovery-worker")
    if item_id == ids.GPU_OPERATOR:
        assert _tolerations(objs, "ClusterPolicy", "") == [GPU, TAINT]
