"""The Plan: ordering, determinism, and what the tenants layer gives a training pod."""

from __future__ import annotations

import json
from typing import Any

import pytest
from builders import model_of
from conftest import EXAMPLE_STACKS, example_config

from gpufabric.model.stackfile import load_stack
from gpufabric.plan.build import build_plan
from gpufabric.plan.items import HelmChart, Item, K8sObject, Layer, PlanError, order_items


def tenant_objects(config: dict[str, Any], namespace: str) -> tuple[dict[str, Any], dict[str, Any]]:
    plan = build_plan("t", model_of(config))
    ns = plan.item(f"tenants/{namespace}/namespace").payload
    cm = plan.item(f"tenants/{namespace}/nccl-env").payload
    assert isinstance(ns, K8sObject)
    assert isinstance(cm, K8sObject)
    return dict(ns.body), dict(cm.body)


@pytest.mark.parametrize("name", EXAMPLE_STACKS)
def test_plan_is_deterministic(name: str) -> None:
    model = load_stack(name).model
    assert build_plan(name, model) == build_plan(name, model)


def test_every_tenant_gets_a_namespace_before_its_config(lab: dict[str, Any]) -> None:
    plan = build_plan("lab-roce", model_of(lab))
    ids = [it.id for it in plan.items]
    for tenant in lab["gpufabric:tenants"]:
        ns = f"tenants/{tenant['namespace']}/namespace"
        cm = f"tenants/{tenant['namespace']}/nccl-env"
        assert ids.index(ns) < ids.index(cm)
        assert plan.item(cm).depends_on == (ns,)
        assert plan.item(ns).protect
        assert plan.item(ns).retain_on_delete


def test_namespaces_allow_rdma_pods_and_warn_at_baseline(lab: dict[str, Any]) -> None:
    ns, _ = tenant_objects(lab, "team-vision")
    labels = ns["metadata"]["labels"]
    # IPC_LOCK is outside "baseline", so enforcing baseline would reject every RDMA pod.
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    assert labels["pod-security.kubernetes.io/warn"] == "baseline"
    assert labels["pod-security.kubernetes.io/enforce-version"] == "v1.33"
    assert labels["gpufabric.io/tenant"] == "true"


def test_roce_shared_tenant_sees_lossless_class_and_exact_hcas(lab: dict[str, Any]) -> None:
    _, cm = tenant_objects(lab, "team-vision")
    env = cm["data"]
    assert env["NCCL_IB_TC"] == "104"  # DSCP 26 x 4
    assert env["NCCL_IB_HCA"] == "=mlx5_0,mlx5_1"
    assert env["NCCL_SOCKET_IFNAME"] == "=eth0"
    assert env["NCCL_IB_QPS_PER_CONNECTION"] == "4"
    assert "NCCL_IB_GID_INDEX" not in env  # auto-selection unless the stack sets it
    networks = json.loads(cm["metadata"]["annotations"]["gpufabric.io/networks"])
    assert networks == [
        {"name": "rail0", "namespace": "gpufabric-networks", "interface": "rail0"},
        {"name": "rail1", "namespace": "gpufabric-networks", "interface": "rail1"},
    ]
    resources = json.loads(cm["metadata"]["annotations"]["gpufabric.io/rdma-resources"])
    assert resources == {"rdma/rail0": 1, "rdma/rail1": 1}


def test_infiniband_sriov_tenant_has_no_roce_settings() -> None:
    _, cm = tenant_objects(example_config("prod-ib"), "research")
    env = cm["data"]
    assert "NCCL_IB_TC" not in env
    assert "NCCL_IB_GID_INDEX" not in env
    # VFs get other device names inside the pod, so no HCA list is pinned.
    assert "NCCL_IB_HCA" not in env
    resources = json.loads(cm["metadata"]["annotations"]["gpufabric.io/rdma-resources"])
    assert resources == {f"nvidia.com/sriov_rail{i}": 1 for i in range(8)}


def test_gid_index_and_extra_env_when_the_stack_sets_them() -> None:
    config = example_config("roce-sriov-volcano")
    config["gpufabric:fabric"]["roce"]["gidIndex"] = 3
    config["gpufabric:fabric"]["ncclEnv"] = {"NCCL_DEBUG": "INFO", "NCCL_IB_TC": "106"}
    _, cm = tenant_objects(config, "ml-batch")
    assert cm["data"]["NCCL_IB_GID_INDEX"] == "3"
    assert cm["data"]["NCCL_DEBUG"] == "INFO"
    assert cm["data"]["NCCL_IB_TC"] == "106"  # the stack's explicit value wins


def test_without_rdma_nccl_uses_sockets_over_the_rails() -> None:
    _, cm = tenant_objects(example_config("kind-dev"), "dev")
    assert cm["data"]["NCCL_IB_DISABLE"] == "1"
    assert cm["data"]["NCCL_SOCKET_IFNAME"] == "=rail0"
    assert json.loads(cm["metadata"]["annotations"]["gpufabric.io/rdma-resources"]) == {}


def test_per_tenant_networks_reference_the_tenant_namespace(lab: dict[str, Any]) -> None:
    lab["gpufabric:fabric"]["nadScope"] = "tenant"
    _, cm = tenant_objects(lab, "team-speech")
    networks = json.loads(cm["metadata"]["annotations"]["gpufabric.io/networks"])
    assert {n["namespace"] for n in networks} == {"team-speech"}


def _item(item_id: str, layer: Layer, *deps: str) -> Item:
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": item_id.replace("/", "-")},
    }
    return Item(id=item_id, layer=layer, payload=K8sObject(body), depends_on=deps)


def test_order_follows_dependencies_then_layers() -> None:
    items = [
        _item("tenants/a", Layer.TENANTS),
        _item("network/nad", Layer.NETWORK, "gpu/op"),
        _item("gpu/op", Layer.GPU),
        _item("scheduling/q", Layer.SCHEDULING, "tenants/a"),
    ]
    assert [it.id for it in order_items(items)] == [
        "gpu/op",
        "network/nad",
        "tenants/a",
        "scheduling/q",
    ]


def test_cycles_and_dangling_dependencies_are_bugs() -> None:
    with pytest.raises(PlanError, match="cycle"):
        order_items([_item("a", Layer.GPU, "b"), _item("b", Layer.GPU, "a")])
    with pytest.raises(PlanError, match="unknown item"):
        order_items([_item("a", Layer.GPU, "zzz")])
    with pytest.raises(PlanError, match="duplicate"):
        order_items([_item("a", Layer.GPU), _item("a", Layer.GPU)])


def test_oci_charts_are_referenced_by_full_url() -> None:
    chart = HelmChart(
        repository="oci://registry.k8s.io/kueue/charts",
        chart="kueue",
        version="0.19.2",
        namespace="kueue-system",
        release="kueue",
        values={},
    )
    assert chart.chart_ref == "oci://registry.k8s.io/kueue/charts/kueue"
    chart = HelmChart(
        repository="https://helm.ngc.nvidia.com/nvidia",
        chart="gpu-operator",
        version="v26.7.0",
        namespace="gpu-operator",
        release="gpu-operator",
        values={},
    )
    assert chart.chart_ref == "gpu-operator"
