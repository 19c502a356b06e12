"""Network layer of a fleet: each pool's rails, networks, SR-IOV policies and device plugins,
a NicNodePolicy per pool whose per-node parts differ, and a NicClusterPolicy that keeps only
what is cluster-wide (the Network Operator's webhook refuses a section both carry)."""

from __future__ import annotations

import json
from typing import Any

from builders import body, plan_of, problems_of
from fleetvariants import fleet_mixed, fleet_same_layout, fleet_sriov_drivers

from gpufabric.plan import ids
from gpufabric.plan.build import Plan
from gpufabric.plan.items import HelmChart

NODE_SECTIONS = {"ofedDriver", "rdmaSharedDevicePlugin", "sriovDevicePlugin"}


def plugin_config(policy: dict[str, Any]) -> list[dict[str, Any]]:
    return json.loads(policy["spec"]["rdmaSharedDevicePlugin"]["config"])["configList"]  # type: ignore[no-any-return]


def by_kind(plan: Plan, kind: str) -> dict[str, dict[str, Any]]:
    out = {}
    for item in plan.items:
        obj = getattr(item.payload, "body", None)
        if isinstance(obj, dict) and obj.get("kind") == kind:
            out[obj["metadata"]["name"]] = obj
    return out


def test_each_pool_gets_a_nic_node_policy_with_its_own_device_plugin() -> None:
    plan = plan_of(fleet_mixed())
    policies = by_kind(plan, "NicNodePolicy")
    assert sorted(policies) == ["h100", "l40s"]
    h100, l40s = policies["h100"], policies["l40s"]
    assert h100["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert l40s["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-L40S"}
    assert [c["resourceName"] for c in plugin_config(h100)] == [f"ib{i}" for i in range(8)]
    assert plugin_config(h100)[0]["selectors"] == {
        "ifNames": ["ibp24s0"],
        "linkTypes": ["infiniband"],
    }
    assert plugin_config(l40s) == [
        {
            "resourceName": "roce0",
            "rdmaHcaMax": 63,
            "selectors": {"ifNames": ["ens1f0np0"], "linkTypes": ["ether"]},
        },
        {
            "resourceName": "roce1",
            "rdmaHcaMax": 63,
            "selectors": {"ifNames": ["ens2f0np0"], "linkTypes": ["ether"]},
        },
    ]
    # the operator's webhook: a section is in the NicClusterPolicy or in NicNodePolicies
    cluster = body(plan, ids.NIC_POLICY)["spec"]
    assert not NODE_SECTIONS & set(cluster)
    assert set(cluster) == {"nvIpam", "secondaryNetwork"}
    # IPoIB for the InfiniBand pool's rails, from the one cluster policy
    assert set(cluster["secondaryNetwork"]) == {"cniPlugins", "ipoib"}
    # a node policy follows the cluster policy (which must have given its sections up)
    for pool in ("h100", "l40s"):
        item = plan.item(ids.nic_node_policy(pool))
        assert ids.NIC_POLICY in item.depends_on


def test_every_pools_rails_get_their_pool_and_network_once() -> None:
    plan = plan_of(fleet_mixed())
    nads = by_kind(plan, "NetworkAttachmentDefinition")
    assert sorted(nads) == sorted([f"ib{i}" for i in range(8)] + ["roce0", "roce1"])
    roce = json.loads(nads["roce0"]["spec"]["config"])
    assert roce["type"] == "macvlan"
    assert roce["master"] == "ens1f0np0"
    assert roce["mtu"] == 9000
    ib = json.loads(nads["ib0"]["spec"]["config"])
    assert ib["type"] == "ipoib"
    assert ib["master"] == "ibp24s0"
    assert ib["mtu"] == 4092
    assert nads["roce0"]["metadata"]["annotations"] == {
        "k8s.v1.cni.cncf.io/resourceName": "rdma/roce0"
    }
    assert body(plan, ids.pool("roce1"))["spec"]["subnet"] == "10.120.4.0/22"
    # a rail's network waits for the node policy whose device plugin serves it
    assert ids.nic_node_policy("l40s") in plan.item(ids.nad("roce0")).depends_on
    assert ids.nic_node_policy("h100") not in plan.item(ids.nad("roce0")).depends_on


def test_an_sriov_pool_gets_vfs_on_its_own_nodes_and_a_shared_rail_renders_once() -> None:
    plan = plan_of(fleet_sriov_drivers())
    chart = plan.item(ids.NETWORK_OPERATOR).payload
    assert isinstance(chart, HelmChart)
    assert chart.values["sriovNetworkOperator"] == {"enabled": True}
    vfs = by_kind(plan, "SriovNetworkNodePolicy")
    assert sorted(vfs) == ["l40s-roce0-vfs", "l40s-roce1-vfs"]
    spec = vfs["l40s-roce0-vfs"]["spec"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-L40S"}
    assert spec["resourceName"] == "sriov_roce0"
    assert spec["linkType"] == "eth"
    assert spec["numVfs"] == 8
    assert spec["nicSelector"] == {"vendor": "15b3", "pfNames": ["ens1f0np0"]}
    (exclusive,) = by_kind(plan, "SriovNetworkPoolConfig").values()
    assert exclusive["metadata"]["name"] == "l40s-rdma-exclusive"
    assert exclusive["spec"]["nodeSelector"] == {
        "matchLabels": {"nvidia.com/gpu.product": "NVIDIA-L40S"}
    }
    nads = by_kind(plan, "NetworkAttachmentDefinition")
    cni = json.loads(nads["roce0"]["spec"]["config"])
    assert [p["type"] for p in cni["plugins"]] == ["sriov", "rdma"]
    assert nads["roce0"]["metadata"]["annotations"] == {
        "k8s.v1.cni.cncf.io/resourceName": "nvidia.com/sriov_roce0"
    }
    # h100 and h200 share the stack's InfiniBand rails: one pool and network each
    assert sum(1 for n in nads if n.startswith("ib")) == 8
    assert ids.sriov_policy("roce0", "l40s") in plan.item(ids.nad("roce0")).depends_on
    # the SR-IOV pool has no node section; the two InfiniBand pools each get theirs
    policies = by_kind(plan, "NicNodePolicy")
    assert sorted(policies) == ["h100", "h200"]
    assert plugin_config(policies["h100"]) == plugin_config(policies["h200"])
    assert policies["h200"]["spec"]["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "h200", "effect": "NoSchedule"}
    ]
    assert "tolerations" not in policies["h100"]["spec"]
    # the cluster-wide operands run on every pool's nodes
    assert (
        body(plan, ids.NIC_POLICY)["spec"]["tolerations"] == policies["h200"]["spec"]["tolerations"]
    )
    assert len({it.id for it in plan.items}) == len(plan.items)


def test_pools_with_one_layout_keep_the_device_plugin_in_the_cluster_policy() -> None:
    plan = plan_of(fleet_same_layout())
    assert not by_kind(plan, "NicNodePolicy")
    config = plugin_config(body(plan, ids.NIC_POLICY))
    assert [c["resourceName"] for c in config] == [f"ib{i}" for i in range(8)]


def test_operator_nic_drivers_go_per_pool_and_the_gpu_operator_waits_for_them() -> None:
    cfg = fleet_mixed()
    cfg["gpufabric:fabric"]["nicDriver"] = {"source": "operator"}
    cfg["gpufabric:fabric"]["gpuDirect"] = "peermem"
    cfg["gpufabric:gpuNodes"][1]["fabric"]["nicDriver"] = {"source": "host"}
    cfg["gpufabric:gpuNodes"][1]["fabric"]["gpuDirect"] = "peermem"
    plan = plan_of(cfg)
    policies = by_kind(plan, "NicNodePolicy")
    assert policies["h100"]["spec"]["ofedDriver"]["image"] == "doca-driver"
    assert "ofedDriver" not in policies["l40s"]["spec"]
    assert "ofedDriver" not in body(plan, ids.NIC_POLICY)["spec"]
    assert ids.nic_node_policy("h100") in plan.item(ids.GPU_OPERATOR).depends_on
    assert ids.nic_node_policy("l40s") not in plan.item(ids.GPU_OPERATOR).depends_on


def test_one_pool_keeps_the_one_nic_cluster_policy() -> None:
    cfg = fleet_mixed()
    cfg["gpufabric:gpuNodes"] = cfg["gpufabric:gpuNodes"][:1]
    for tenant in cfg["gpufabric:tenants"]:
        tenant["gpuQuota"] = {"h100": tenant["gpuQuota"].get("h100", 0)}
    plan = plan_of(cfg)
    assert not by_kind(plan, "NicNodePolicy")
    assert "rdmaSharedDevicePlugin" in body(plan, ids.NIC_POLICY)["spec"]


def test_a_pool_driver_needs_the_nvidia_driver_crd() -> None:
    cfg = fleet_sriov_drivers()
    del cfg["gpufabric:gpuOperator"]
    problems = problems_of(cfg)
    assert "useNvidiaDriverCRD: true" in problems["gpuNodes[1].driver"]
    assert "gpuNodes[2].driver" in problems
    cfg["gpufabric:gpuOperator"] = {"driver": {"enabled": False}}
    assert "hosts bring their driver" in problems_of(cfg)["gpuNodes[1].driver"]


def test_another_gpudirect_mode_in_a_pool_needs_the_nvidia_driver_crd() -> None:
    cfg = fleet_mixed()
    cfg["gpufabric:gpuNodes"][1]["fabric"]["gpuDirect"] = "peermem"
    cfg["gpufabric:gpuNodes"][1]["fabric"]["nicDriver"] = {"source": "host", "hostStack": "doca"}
    problems = problems_of(cfg)
    assert "useNvidiaDriverCRD" in problems["gpuNodes[1].fabric.gpuDirect"]
