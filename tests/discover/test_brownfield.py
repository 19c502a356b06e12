"""gpufabric discover on clusters gpufabric did not make: one shaped like k8s-launch-kit's
output (RoCE, SR-IOV policies, NADs the SR-IOV operator made from SriovNetworks), one like
AI Cluster Runtime's (InfiniBand, the RDMA shared device plugin in a Helm-labelled
NicClusterPolicy, Kueue TAS over Topograph tiers, IPoIB NADs written by hand). The shapes
and their upstream sources are in tests/fixtures/discover/brownfield.py.

Each cluster gives a stack that validates and renders the equivalent (same netdevs, subnets,
gateways, VFs, MTU, topology levels, node selector); the gate names, per field, only what
``pulumi up`` would change; what the stack cannot say is a ``not mapped:`` line by object
and field; the hand-made objects the render does not name are foreign."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from fake_kube import FakeKube

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "discover"))

from brownfield import (
    GKE_LEVELS,
    TOPOGRAPH_LEGACY,
    TOPOGRAPH_V1,
    aicr_ib_shared,
    l8k_sriov_roce,
)

from gpufabric.cli import main
from gpufabric.discover.compose import infer
from gpufabric.discover.infer import Notes
from gpufabric.discover.roundtrip import Gate, compare
from gpufabric.discover.snapshot import Snapshot
from gpufabric.model.stackfile import load_stack, parse_stack_text
from gpufabric.plan.build import Plan, build_plan


def discover(objs: list[dict[str, Any]]) -> tuple[dict[str, Any], Notes, Gate, Plan]:
    snap = Snapshot()
    for obj in objs:
        snap.objects.setdefault(obj["kind"], []).append(obj)
    name, config, notes = infer(snap, "brownfield")
    model = parse_stack_text(yaml.safe_dump({"config": config}), name)  # raises if invalid
    plan = build_plan(name, model)
    return config, notes, compare(plan, snap.all()), plan


def rendered(plan: Plan, kind: str) -> list[dict[str, Any]]:
    return [o.body for _, o in plan.objects() if o.kind == kind]


def of(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def fields(gate: Gate, obj: str) -> set[str]:
    return {d.field for d in gate.differences if d.object == obj}


# --- k8s-launch-kit: RoCE SR-IOV --------------------------------------------------------


def test_l8k_cluster_gives_a_stack_that_renders_the_same_rails() -> None:
    live = l8k_sriov_roce()
    config, _, _, plan = discover(live)
    fabric = config["gpufabric:fabric"]
    assert (fabric["type"], fabric["rdma"], fabric["sriov"]) == ("roce", "sriov", {"numVfs": 8})
    assert "networkNamespace" not in fabric  # the operator's "default" is Kubernetes'
    # the rendered policies carve the same PFs with the same VFs, MTU and link type
    hand = sorted(of(live, "SriovNetworkNodePolicy"), key=lambda p: p["metadata"]["name"])
    ours = sorted(rendered(plan, "SriovNetworkNodePolicy"), key=lambda p: p["metadata"]["name"])
    assert len(ours) == len(hand) == 4
    for h, r in zip(hand, ours, strict=True):
        for key in ("numVfs", "mtu", "isRdma", "deviceType"):
            assert r["spec"][key] == h["spec"][key], key
        assert r["spec"]["linkType"].lower() == h["spec"]["linkType"].lower()
        assert r["spec"]["nicSelector"]["pfNames"] == h["spec"]["nicSelector"]["pfNames"]
    # the same subnets, gateways and per-node blocks
    pools = {p["spec"]["subnet"]: p["spec"] for p in rendered(plan, "IPPool")}
    for h in of(live, "IPPool"):
        r = pools[h["spec"]["subnet"]]
        assert (r["gateway"], r["perNodeBlockSize"]) == (
            h["spec"]["gateway"],
            h["spec"]["perNodeBlockSize"],
        )
    # SR-IOV networks with nv-ipam, as the operator's NADs are
    for nad in rendered(plan, "NetworkAttachmentDefinition"):
        cfg = json.loads(nad["spec"]["config"])
        assert cfg["plugins"][0]["type"] == "sriov"
        assert cfg["plugins"][0]["ipam"]["type"] == "nv-ipam"


def test_l8k_cluster_diff_names_only_what_pulumi_up_changes() -> None:
    live = l8k_sriov_roce()
    _, notes, gate, _ = discover(live)
    # the singleton NicClusterPolicy is adopted and compared field by field: gpufabric's
    # labels and wait annotation, and multus (the render leaves it to the chart's default)
    assert gate.adopted == [
        "Namespace gpu-operator",
        "Namespace nvidia-network-operator",
        "NicClusterPolicy nic-cluster-policy",
    ]
    assert fields(gate, "NicClusterPolicy nic-cluster-policy") == {
        "metadata.annotations",
        "metadata.labels",
        "spec.secondaryNetwork.multus",
    }
    assert fields(gate, "Namespace gpu-operator") == {"metadata.labels"}
    # everything else is an object the render creates beside the hand-made ones
    created = {d.object for d in gate.differences if d.field == "(object)"}
    assert all(d.rendered == "created" for d in gate.differences if d.field == "(object)")
    assert created == {
        *(f"IPPool nvidia-network-operator/rail{n}-pool" for n in range(4)),
        *(f"NetworkAttachmentDefinition gpufabric-networks/rail{n}" for n in range(4)),
        *(f"SriovNetworkNodePolicy nvidia-network-operator/rail{n}-vfs" for n in range(4)),
        "Namespace gpufabric-networks",
        "Namespace kueue-system",
        "ResourceFlavor gpu-nodes",
        "Topology gpufabric",
        # l8k installs no GPU Operator: the fixture has no ClusterPolicy, the stack installs it
        "ClusterPolicy (the GPU Operator's)",
        # RDMA exclusive mode for the SR-IOV pool's VFs (gpufabric's own object)
        "SriovNetworkPoolConfig nvidia-network-operator/gpu-nodes-rdma-exclusive",
    }
    # the hand-made ones are foreign, and each is named in a not-mapped line
    for kind in ("SriovNetworkNodePolicy", "IPPool", "NetworkAttachmentDefinition"):
        for obj in of(live, kind):
            meta = obj["metadata"]
            name = f"{kind} {meta['namespace']}/{meta['name']}"
            assert name in gate.foreign
            assert any(line.startswith(name + ": ") for line in notes.unmapped), name
    assert "NicClusterPolicy nic-cluster-policy" not in gate.foreign
    joined = "\n".join(notes.unmapped)
    assert "resource sriov_resource_rail_0 becomes sriov_rail0" in joined
    assert "metadata.name: 20 characters, no rail name" in joined
    assert "'default' belongs to Kubernetes" in joined


def test_sriov_policy_by_pci_address_takes_the_pf_name_the_node_reports() -> None:
    # l8k without the NIC interface name template selects by rootDevices (PCI addresses):
    # the SriovNetworkNodeState's interfaces name the PF
    live = l8k_sriov_roce()
    for n, pol in enumerate(of(live, "SriovNetworkNodePolicy")):
        pol["spec"]["nicSelector"] = {"vendor": "15b3", "rootDevices": [f"0000:{5 + n:02x}:00.0"]}
    live.append(
        {
            "apiVersion": "sriovnetwork.openshift.io/v1",
            "kind": "SriovNetworkNodeState",
            "metadata": {"name": "dgx-000", "namespace": "nvidia-network-operator"},
            "status": {
                "interfaces": [
                    {"name": f"ens{n + 1}f0np0", "pciAddress": f"0000:{5 + n:02x}:00.0"}
                    for n in range(4)
                ]
            },
        }
    )
    config, _, _, _ = discover(live)
    assert [r["netdev"] for r in config["gpufabric:fabric"]["rails"]] == [
        "ens1f0np0",
        "ens2f0np0",
        "ens3f0np0",
        "ens4f0np0",
    ]


# --- AI Cluster Runtime: InfiniBand, shared device plugin, Kueue TAS ---------------------


@pytest.mark.parametrize("levels", [TOPOGRAPH_V1, TOPOGRAPH_LEGACY, GKE_LEVELS])
def test_aicr_cluster_gives_the_same_topology_levels_and_rails(levels: list[str]) -> None:
    live = aicr_ib_shared(levels)
    config, notes, _, plan = discover(live)
    assert config["gpufabric:scheduling"]["topologyLevels"] == [*levels, "kubernetes.io/hostname"]
    (topology,) = rendered(plan, "Topology")
    (hand,) = of(live, "Topology")
    assert topology["spec"]["levels"] == hand["spec"]["levels"]
    legacy = [line for line in notes.unmapped if "Topograph before 1.0" in line]
    assert bool(legacy) == (levels == TOPOGRAPH_LEGACY)
    # the flavor's node labels select the pool; the same netdevs and subnets per rail
    assert config["gpufabric:gpuNodes"]["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    (flavor,) = rendered(plan, "ResourceFlavor")
    assert flavor["spec"]["nodeLabels"] == {"nvidia.com/gpu.present": "true"}
    fabric = config["gpufabric:fabric"]
    assert fabric["type"] == "infiniband"
    assert fabric["nicDriver"] == {"source": "operator"}
    hand_nads = {n["metadata"]["name"]: n for n in of(live, "NetworkAttachmentDefinition")}
    pools = {p["metadata"]["name"]: p["spec"]["subnet"] for p in of(live, "IPPool")}
    for rail in fabric["rails"]:
        cfg = json.loads(hand_nads[rail["name"]]["spec"]["config"])
        assert rail["netdev"] == cfg["master"]
        assert rail["subnet"] == pools[cfg["ipam"]["poolName"]]


def test_aicr_cluster_diff_names_only_what_pulumi_up_changes() -> None:
    live = aicr_ib_shared()
    _, notes, gate, _ = discover(live)
    assert "NicClusterPolicy nic-cluster-policy" in gate.adopted
    assert "NetworkAttachmentDefinition training/ib0" in gate.adopted
    # Helm's labels give way to gpufabric's; what AICR sets that gpufabric does not render
    # (telemetry, node affinity, multus) goes; the driver and device plugin are gpufabric's
    assert fields(gate, "NicClusterPolicy nic-cluster-policy") == {
        "metadata.annotations.aicr/skip-hook-validation",
        "metadata.annotations.pulumi.com/waitFor",
        "metadata.labels.app.kubernetes.io/managed-by",
        "metadata.labels.gpufabric.io/stack",
        "metadata.labels.helm.sh/chart",
        "spec.docaTelemetryService",
        "spec.nodeAffinity",
        "spec.ofedDriver.version",
        "spec.rdmaSharedDevicePlugin.config.configList",
        "spec.rdmaSharedDevicePlugin.config.periodicUpdateInterval",
        "spec.secondaryNetwork.multus",
    }
    # a hand-written NAD of a rail's name: compared inside its CNI config, key by key
    for n in range(4):
        assert fields(gate, f"NetworkAttachmentDefinition training/ib{n}") == {
            "metadata.annotations.k8s.v1.cni.cncf.io/resourceName",
            "metadata.labels",
            "spec.config.ipam.poolName",
            "spec.config.mtu",
        }
    mtu = next(d for d in gate.differences if d.field == "spec.config.mtu")
    assert (mtu.live, mtu.rendered) == (None, "4092")
    assert set(gate.foreign) >= {
        "ClusterQueue cluster-queue",
        "ResourceFlavor tas-flavor",
        "Topology tas-topology",
        *(f"IPPool nvidia-network-operator/ib-fabric-{n}" for n in range(4)),
    }
    joined = "\n".join(notes.unmapped)
    for expected in (
        "NicClusterPolicy nic-cluster-policy: spec.rdmaSharedDevicePlugin.config.configList[0]: "
        "one resource rdma/hca_shared_devices_a",
        "NicClusterPolicy nic-cluster-policy: spec.ofedDriver.version: doca3.2.0",
        "ClusterQueue cluster-queue: spec.resourceGroups: a queue for every namespace",
        "ResourceFlavor tas-flavor: spec.tolerations",
        "IPPool nvidia-network-operator/ib-fabric-0: read as rail ib0's subnet",
    ):
        assert expected in joined, expected
    # a Namespace's server-set label and finalizer are no change to apply
    assert fields(gate, "Namespace training") == {"metadata.labels"}


def test_per_port_shared_plugin_names_the_rail_netdevs() -> None:
    # the OKE GB200 form: one port per entry (ifNames) and no master in the NAD
    live = aicr_ib_shared()
    policy = of(live, "NicClusterPolicy")[0]
    policy["spec"]["rdmaSharedDevicePlugin"]["config"] = json.dumps(
        {
            "configList": [
                {
                    "resourceName": f"ib{n}",
                    "rdmaHcaMax": 63,
                    "selectors": {"ifNames": [f"ibp{n}s0"], "linkTypes": ["infiniband"]},
                }
                for n in range(4)
            ]
        }
    )
    for n, nad in enumerate(of(live, "NetworkAttachmentDefinition")):
        cfg = json.loads(nad["spec"]["config"])
        del cfg["master"]
        nad["spec"]["config"] = json.dumps(cfg)
        nad["metadata"]["annotations"]["k8s.v1.cni.cncf.io/resourceName"] = f"rdma/ib{n}"
    for node in of(live, "Node"):
        node["status"]["allocatable"] = {
            "nvidia.com/gpu": "8",
            **{f"rdma/ib{n}": "63" for n in range(4)},
        }
    config, notes, gate, _ = discover(live)
    assert [r["netdev"] for r in config["gpufabric:fabric"]["rails"]] == [
        f"ibp{n}s0" for n in range(4)
    ]
    assert not any("rdmaSharedDevicePlugin" in line for line in notes.unmapped)
    assert "spec.rdmaSharedDevicePlugin.config.configList" not in fields(
        gate, "NicClusterPolicy nic-cluster-policy"
    )


# --- the command ------------------------------------------------------------------------


@pytest.mark.parametrize("cluster", [l8k_sriov_roce, aicr_ib_shared])
def test_command_on_a_hand_made_cluster(cluster: Any, tmp_path: Path, capsys) -> None:
    with FakeKube() as fake:
        for obj in cluster():
            fake.add(obj)
        cfg = str(fake.kubeconfig(tmp_path))
        out = tmp_path / "stacks" / "Pulumi.found.yaml"
        code = main(["discover", "--kubeconfig", cfg, "--out", str(out)])
        captured = capsys.readouterr()
        assert code == 4, captured.err  # the render differs: printed, not hidden
        assert {m for m, _ in fake.requests} == {"GET"}
        err = captured.err
        assert "adopted (compared field by field): NicClusterPolicy nic-cluster-policy" in err
        assert "foreign (left alone): NicClusterPolicy" not in err
        assert "diff: NicClusterPolicy nic-cluster-policy: spec.secondaryNetwork.multus: " in err
        assert "not mapped: IPPool nvidia-network-operator/" in err
        if cluster is l8k_sriov_roce:
            assert (
                "foreign (left alone): NetworkAttachmentDefinition default/sriov-network-rail-0"
                in err
            )
        else:
            assert "diff: NetworkAttachmentDefinition training/ib0: spec.config.mtu: " in err
        assert main(["discover", "--kubeconfig", cfg, "--out", str(out), "--allow-diff"]) == 0
    assert load_stack(str(out)).model.cluster.name == "found"
