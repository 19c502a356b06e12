"""Network layer: what each fabric x device-exposure mode gives a pod (the exact CNI config,
the device-plugin resource, the IP pool), the NicClusterPolicy, SR-IOV policies, and the
ordering rules between the GPU and Network Operators."""

from __future__ import annotations

import json
from typing import Any

import golden
import pytest
from builders import body, plan_of, problems_of
from conftest import EXAMPLE_STACKS, example_config, sections

from gpufabric.model.stackfile import load_stack, model_from_config
from gpufabric.model.versions import effective_components
from gpufabric.nics import infiniband, sriov
from gpufabric.plan import ids as plan_ids
from gpufabric.plan.build import Plan, build_plan
from gpufabric.plan.items import HelmChart, KustomizeOverlay


def nad(plan: Plan, rail: str) -> tuple[dict[str, Any], dict[str, Any]]:
    obj = body(plan, f"network/nad/{rail}")
    return obj, json.loads(obj["spec"]["config"])


def values(plan: Plan, item_id: str) -> Any:
    chart = plan.item(item_id).payload
    assert isinstance(chart, HelmChart)
    return chart.values


def test_roce_shared_is_macvlan_on_the_rail_netdev(lab: dict[str, Any]) -> None:
    plan = plan_of(lab)
    obj, cni = nad(plan, "rail1")
    assert cni == {
        "cniVersion": "0.3.1",
        "name": "rail1",
        "type": "macvlan",
        "master": "ens2f0np0",
        "mode": "bridge",
        "mtu": 9000,
        "ipam": {"type": "nv-ipam", "poolName": "rail1-pool"},
    }
    assert obj["metadata"]["namespace"] == "gpufabric-networks"
    assert obj["metadata"]["annotations"] == {"k8s.v1.cni.cncf.io/resourceName": "rdma/rail1"}
    pool = body(plan, "network/pool/rail1")
    assert pool["kind"] == "IPPool"
    assert pool["spec"] == {"subnet": "192.168.11.0/24", "perNodeBlockSize": 16}
    config = json.loads(body(plan, plan_ids.NIC_POLICY)["spec"]["rdmaSharedDevicePlugin"]["config"])
    assert config["configList"][1] == {
        "resourceName": "rail1",
        "rdmaHcaMax": 63,
        "selectors": {"ifNames": ["ens2f0np0"], "linkTypes": ["ether"]},
    }


def test_infiniband_shared_is_ipoib_with_the_ipoib_cni_installed() -> None:
    config = example_config("prod-ib")
    fabric = config["gpufabric:fabric"]
    fabric["rdma"] = "shared"
    del fabric["sriov"]
    fabric["infiniband"] = {}
    plan = plan_of(config)
    _, cni = nad(plan, "rail3")
    assert cni["type"] == "ipoib"
    assert cni["master"] == "ibp79s0"
    assert cni["mtu"] == 4092
    spec = body(plan, plan_ids.NIC_POLICY)["spec"]
    assert "ipoib" in spec["secondaryNetwork"]
    selectors = json.loads(spec["rdmaSharedDevicePlugin"]["config"])["configList"][0]["selectors"]
    assert selectors["linkTypes"] == ["infiniband"]


def test_infiniband_sriov_carries_the_pkey_with_rdma_isolation() -> None:
    plan = plan_of(example_config("prod-ib"))
    obj, cni = nad(plan, "rail0")
    assert cni["type"] == "ib-sriov"
    assert cni["pkey"] == "0x8001"
    assert cni["rdmaIsolation"] is True
    assert "ibKubernetesEnabled" not in cni  # static pkeys: no ib-kubernetes
    assert (
        obj["metadata"]["annotations"]["k8s.v1.cni.cncf.io/resourceName"]
        == "nvidia.com/sriov_rail0"
    )
    policy = body(plan, "network/sriov-policy/rail0")["spec"]
    assert policy["linkType"] == "ib"
    assert policy["numVfs"] == 8
    assert policy["nicSelector"] == {"vendor": "15b3", "pfNames": ["ibp24s0"]}
    assert policy["resourceName"] == "sriov_rail0"
    assert values(plan, plan_ids.NETWORK_OPERATOR)["sriovNetworkOperator"] == {"enabled": True}


def test_roce_sriov_chains_rdma_and_sets_exclusive_mode() -> None:
    plan = plan_of(example_config("roce-sriov-volcano"))
    _, cni = nad(plan, "rail2")
    assert [p["type"] for p in cni["plugins"]] == ["sriov", "rdma"]
    assert cni["plugins"][0]["ipam"] == {
        "type": "nv-ipam",
        "poolName": "rail2-pool",
        "poolType": "cidrpool",
    }
    pool = body(plan, plan_ids.SRIOV_POOL)
    assert pool["spec"]["rdmaMode"] == "exclusive"
    assert "reboots" in pool["metadata"]["annotations"][sriov.DISRUPTIVE]
    assert body(plan, "network/sriov-policy/rail2")["spec"]["linkType"] == "eth"
    cidr = body(plan, "network/pool/rail2")
    assert cidr["kind"] == "CIDRPool"
    assert cidr["spec"] == {
        "cidr": "172.20.16.0/21",
        "perNodeNetworkPrefix": 27,
        "gatewayIndex": 1,
        "routes": [{"dst": "172.20.16.0/21"}],
    }


def test_hostdevice_uses_the_sriov_device_plugin(lab: dict[str, Any]) -> None:
    lab["gpufabric:fabric"]["rdma"] = "hostdevice"
    plan = plan_of(lab)
    obj, cni = nad(plan, "rail0")
    assert cni == {
        "cniVersion": "0.3.1",
        "name": "rail0",
        "type": "host-device",
        "ipam": {"type": "nv-ipam", "poolName": "rail0-pool"},
    }
    assert (
        obj["metadata"]["annotations"]["k8s.v1.cni.cncf.io/resourceName"]
        == "nvidia.com/hostdev_rail0"
    )
    spec = body(plan, plan_ids.NIC_POLICY)["spec"]
    resources = json.loads(spec["sriovDevicePlugin"]["config"])["resourceList"]
    assert resources[0]["resourceName"] == "hostdev_rail0"
    assert resources[0]["selectors"]["isRdma"] is True
    assert "rdmaSharedDevicePlugin" not in spec
    assert values(plan, plan_ids.NETWORK_OPERATOR)["sriovNetworkOperator"] == {"enabled": False}


def test_without_rdma_there_is_no_device_resource() -> None:
    plan = plan_of(example_config("kind-dev"))
    obj, cni = nad(plan, "rail0")
    assert cni["type"] == "macvlan"
    assert cni["master"] == "eth0"
    assert "annotations" not in obj["metadata"]


def test_ufm_pkeys_run_ib_kubernetes_after_its_secret() -> None:
    config = example_config("prod-ib")
    config["gpufabric:fabric"]["infiniband"] = {
        "pkey": "0x8001",
        "pkeyManagement": "ufm",
        "ufm": {"address": "ufm.internal", "username": "k8s", "password": {"secure": "AAAB"}},
    }
    plan = plan_of(config)
    spec = body(plan, plan_ids.NIC_POLICY)["spec"]
    assert spec["ibKubernetes"]["ufmSecret"] == infiniband.UFM_SECRET_NAME
    assert plan_ids.UFM_SECRET in plan.item(plan_ids.NIC_POLICY).depends_on
    _, cni = nad(plan, "rail0")
    assert cni["ibKubernetesEnabled"] is True


def test_operator_managed_drivers_drain_one_node_at_a_time() -> None:
    config = example_config("prod-ib")
    del config["gpufabric:sources"]  # upstream names (test_sources covers mirrors)
    spec = body(plan_of(config), plan_ids.NIC_POLICY)["spec"]
    driver = spec["ofedDriver"]
    doca = effective_components({})["doca-driver"]
    assert f"{driver['repository']}/{driver['image']}" == doca.image
    assert driver["version"] == doca.version
    assert driver["upgradePolicy"]["maxParallelUpgrades"] == 1
    assert driver["upgradePolicy"]["drain"]["enable"] is True


def test_host_drivers_mean_no_driver_container(lab: dict[str, Any]) -> None:
    assert "ofedDriver" not in body(plan_of(lab), plan_ids.NIC_POLICY)["spec"]


@pytest.mark.parametrize("name", EXAMPLE_STACKS)
def test_node_feature_discovery_runs_exactly_once(name: str) -> None:
    plan = build_plan(name, load_stack(name).model)
    enabled = [
        values(plan, c)["nfd"]["enabled"]
        for c in (plan_ids.GPU_OPERATOR, plan_ids.NETWORK_OPERATOR)
    ]
    assert enabled.count(True) == 1


def test_peermem_with_operator_drivers_orders_the_gpu_operator_after_the_nic_driver(
    lab: dict[str, Any],
) -> None:
    lab["gpufabric:fabric"]["gpuDirect"] = "peermem"
    lab["gpufabric:fabric"]["nicDriver"] = {"source": "operator"}
    plan = plan_of(lab)
    ids = [it.id for it in plan.items]
    assert plan_ids.NIC_POLICY in plan.item(plan_ids.GPU_OPERATOR).depends_on
    assert ids.index(plan_ids.NIC_POLICY) < ids.index(plan_ids.GPU_OPERATOR)
    # The Network Operator goes first, so it brings NFD.
    assert values(plan, plan_ids.NETWORK_OPERATOR)["nfd"] == {"enabled": True}
    assert values(plan, plan_ids.GPU_OPERATOR)["nfd"] == {"enabled": False}
    assert plan_ids.GPU_OPERATOR not in plan.item(plan_ids.NETWORK_OPERATOR).depends_on
    policy = body(plan, plan_ids.NIC_POLICY)
    assert (
        policy["metadata"]["annotations"]["pulumi.com/waitFor"] == "jsonpath={.status.state}=ready"
    )


def test_dmabuf_does_not_wait_for_the_nic_driver() -> None:
    plan = plan_of(example_config("prod-ib"))  # DMA-BUF with operator-managed drivers
    assert plan_ids.NIC_POLICY not in plan.item(plan_ids.GPU_OPERATOR).depends_on
    assert plan_ids.GPU_OPERATOR in plan.item(plan_ids.NETWORK_OPERATOR).depends_on


def test_per_tenant_networks(lab: dict[str, Any]) -> None:
    lab["gpufabric:fabric"]["nadScope"] = "tenant"
    plan = plan_of(lab)
    ids = {it.id for it in plan.items}
    assert "network/nad/team-vision/rail0" in ids
    assert "network/nad/team-speech/rail1" in ids
    assert plan_ids.NETWORKS_NAMESPACE not in ids
    item = plan.item("network/nad/team-speech/rail1")
    assert "tenants/team-speech/namespace" in item.depends_on


def test_network_operator_multus_replaces_the_thick_overlay(lab: dict[str, Any]) -> None:
    lab["gpufabric:fabric"]["multus"] = "network-operator"
    plan = plan_of(lab)
    assert plan_ids.MULTUS not in {it.id for it in plan.items}
    assert "multus" in body(plan, plan_ids.NIC_POLICY)["spec"]["secondaryNetwork"]
    assert plan_ids.NIC_POLICY in plan.item("network/nad/rail0").depends_on


def test_multus_overlay_pins_the_release_image(lab: dict[str, Any]) -> None:
    lab["gpufabric:versions"] = {"multus": "v4.2.4"}
    overlay = plan_of(lab).item(plan_ids.MULTUS).payload
    assert isinstance(overlay, KustomizeOverlay)
    text = overlay.files()["kustomization.yaml"]
    assert "/multus-cni/v4.2.4/deployments/multus-daemonset-thick.yml" in text
    assert 'newTag: "v4.2.4-thick"' in text


# Which item installs the CRD each custom resource needs.
CRD_INSTALLER = {
    "nvidia.com": plan_ids.GPU_OPERATOR,
    "mellanox.com": plan_ids.NETWORK_OPERATOR,
    "nv-ipam.nvidia.com": plan_ids.NIC_POLICY,
    "sriovnetwork.openshift.io": plan_ids.NETWORK_OPERATOR,
    "k8s.cni.cncf.io": plan_ids.MULTUS,
}


def _ancestors(plan: Plan, item_id: str) -> set[str]:
    seen: set[str] = set()
    todo = list(plan.item(item_id).depends_on)
    while todo:
        current = todo.pop()
        if current not in seen:
            seen.add(current)
            todo.extend(plan.item(current).depends_on)
    return seen


@pytest.mark.parametrize("name", EXAMPLE_STACKS)
def test_custom_resources_follow_what_installs_their_crd(name: str) -> None:
    plan = build_plan(name, load_stack(name).model)
    for item, obj in plan.objects():
        group = obj.api_version.split("/")[0] if "/" in obj.api_version else ""
        if group in CRD_INSTALLER:
            assert CRD_INSTALLER[group] in _ancestors(plan, item.id), item.id
    for installer in set(CRD_INSTALLER.values()) - {plan_ids.NIC_POLICY}:
        assert plan.item(installer).protect, installer


def test_ipoib_mtu_is_limited_to_datagram_mode() -> None:
    config = example_config("prod-ib")
    config["gpufabric:fabric"]["mtu"] = 65520
    assert "datagram mode only" in problems_of(config)["fabric.mtu"]


def test_cidrpool_gateway_must_be_an_offset_in_the_first_block() -> None:
    config = example_config("roce-sriov-volcano")
    config["gpufabric:fabric"]["rails"][0]["gateway"] = "172.20.7.254"
    assert "first /27 block" in problems_of(config)["fabric.rails[0].gateway"]


def test_suspicious_netdevs_and_small_roce_mtu_are_warnings(lab: dict[str, Any]) -> None:
    from gpufabric.model.stackfile import stack_warnings

    lab["gpufabric:fabric"]["mtu"] = 1500
    lab["gpufabric:fabric"]["rails"][1]["netdev"] = "ibp2s0"
    model = model_from_config(sections(lab), "t", from_file=True)  # still valid
    warnings = {w.path: w.message for w in stack_warnings(model)}
    assert "jumbo frames" in warnings["fabric.mtu"]
    assert "looks like an IPoIB interface" in warnings["fabric.rails[1].netdev"]
    config = example_config("prod-ib")
    config["gpufabric:fabric"]["rails"][0]["netdev"] = "ens1f0np0"
    model = model_from_config(sections(config), "t", from_file=True)
    assert "fabric.rails[0].netdev" in {w.path for w in stack_warnings(model)}


@pytest.mark.parametrize("name", EXAMPLE_STACKS)
def test_example_stacks_have_no_warnings(name: str) -> None:
    from gpufabric.model.stackfile import stack_warnings

    # The one expected warning: the pinned GPU Operator / Network Operator pair is not in
    # NVIDIA's GPUDirect RDMA matrix (see gpudirectPairs in manifests/versions.yaml).
    others = [w for w in stack_warnings(load_stack(name).model) if w.path != "versions"]
    assert others == []


def test_no_nccl_pkey_variable_even_with_a_pkey() -> None:
    # NCCL_IB_PKEY is a P_Key *table index* (qp pkey_index), not the partition value; a VF
    # in one partition has it at index 0, NCCL's default.
    plan = plan_of(example_config("prod-ib"))
    for wiring in plan.wiring.values():
        assert "NCCL_IB_PKEY" not in wiring.nccl_env


def test_per_tenant_partitions_isolate_tenants() -> None:
    config = example_config("prod-ib")
    config["gpufabric:fabric"]["nadScope"] = "tenant"
    config["gpufabric:fabric"]["infiniband"].update(pkeyManagement="ufm", ufm=golden.UFM)
    config["gpufabric:tenants"][0]["pkey"] = "0x8010"
    config["gpufabric:tenants"][1]["pkey"] = "0x8011"
    plan = plan_of(config)
    first = json.loads(body(plan, "network/nad/llm-pretrain/rail0")["spec"]["config"])
    second = json.loads(body(plan, "network/nad/llm-finetune/rail0")["spec"]["config"])
    third = json.loads(body(plan, "network/nad/research/rail0")["spec"]["config"])
    assert (first["pkey"], second["pkey"], third["pkey"]) == ("0x8010", "0x8011", "0x8001")


def test_per_tenant_vlans_on_roce_vfs() -> None:
    config = example_config("roce-sriov-volcano")
    config["gpufabric:fabric"]["nadScope"] = "tenant"
    config["gpufabric:tenants"][0]["vlan"] = 101
    plan = plan_of(config)
    cni = json.loads(body(plan, "network/nad/ml-platform/rail0")["spec"]["config"])
    assert cni["plugins"][0]["vlan"] == 101
    other = json.loads(body(plan, "network/nad/ml-research/rail0")["spec"]["config"])
    assert "vlan" not in other["plugins"][0]


def test_tenant_isolation_errors(lab: dict[str, Any]) -> None:
    lab["gpufabric:tenants"][0]["vlan"] = 100
    lab["gpufabric:tenants"][1]["vlan"] = 100
    from gpufabric.model.problems import StackError

    with pytest.raises(StackError) as info:
        model_from_config(sections(lab), "t", from_file=True)
    messages = [str(p) for p in info.value.problems]
    assert any(m.startswith("tenants[0].vlan: applies to per-tenant networks") for m in messages)
    assert any(
        m.startswith("tenants[0].vlan: a per-tenant vlan is carried by roce SR-IOV")
        for m in messages
    )
    assert any(m.startswith("tenants[1].vlan: 100 is already tenants[0]'s") for m in messages)
    config = example_config("prod-ib")
    config["gpufabric:fabric"]["nadScope"] = "tenant"
    config["gpufabric:tenants"][0]["vlan"] = 7
    assert "carried by roce SR-IOV VFs" in problems_of(config)["tenants[0].vlan"]
