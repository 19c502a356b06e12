"""Discovery of fleets whose pools differ in their NICs: each pool keeps its own link and NIC
mode (an InfiniBand shared pool beside a RoCE SR-IOV one), under Kueue (flavors name the
pools) and under Volcano (the per-pool objects do: NicNodePolicy, NVIDIADriver, SR-IOV
policies, else the tenants' nccl-env-<pool> and quota annotations), and a GPU node no pool
takes is said, never dropped in silence. The fleet is a new user's (not an example stack)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from builders import plan_of
from discoverseed import discovered as discover_as
from discoverseed import seeded

from gpufabric.discover.compose import infer
from gpufabric.discover.infer import Context, Notes
from gpufabric.discover.infer_fabric import pool_fabric
from gpufabric.discover.snapshot import Snapshot

B200 = {"nvidia.com/gpu.product": "NVIDIA-B200"}
A100 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}


def mixed(gang: str) -> dict[str, Any]:
    """12 B200 nodes on 4 RoCE SR-IOV rails (the pool's own fabric) and 6 A100 nodes on 2
    InfiniBand rails with shared RDMA (the stack's), three tenants with quotas per pool."""
    return {
        "gpufabric:cluster": {"name": "mixed", "kubernetesVersion": "1.33"},
        "gpufabric:gpuNodes": [
            {
                "name": "b200",
                "count": 12,
                "nodeSelector": B200,
                "fabric": {
                    "type": "roce",
                    "rdma": "sriov",
                    "sriov": {"numVfs": 4},
                    "rails": [
                        {
                            "name": f"rx{i}",
                            "netdev": f"ens{i + 1}f0np0",
                            "hca": f"mlx5_{i}",
                            "subnet": f"10.130.{4 * i}.0/22",
                        }
                        for i in range(4)
                    ],
                },
            },
            {"name": "a100", "count": 6, "gpusPerNode": 4, "nodeSelector": A100},
        ],
        "gpufabric:fabric": {
            "type": "infiniband",
            "rdma": "shared",
            "rails": [
                {"name": "hdr0", "netdev": "ibp12s0", "hca": "mlx5_4", "subnet": "10.140.0.0/23"},
                {"name": "hdr1", "netdev": "ibp75s0", "hca": "mlx5_5", "subnet": "10.140.2.0/23"},
            ],
        },
        "gpufabric:scheduling": {"gang": gang},
        "gpufabric:tenants": [
            {"namespace": "foundation", "gpuQuota": {"b200": 64, "a100": 8}},
            {"namespace": "vision", "gpuQuota": {"b200": 16, "a100": 8}},
            {"namespace": "interns", "gpuQuota": {"a100": 8}},
        ],
    }


def discovered(snap: Snapshot) -> tuple[dict[str, Any], list[str], list[str]]:
    """(config, differences against the snapshot, not-mapped lines)."""
    config, diffs, notes = discover_as(snap, "mixed")
    return config, diffs, notes.unmapped


@pytest.mark.parametrize("gang", ["kueue", "volcano"])
def test_each_pool_keeps_its_own_link_and_nic_mode(gang: str) -> None:
    # before: the stack's fabric was the first pool's (RoCE SR-IOV) and the InfiniBand pool
    # inherited rdma: sriov (22 differences); under Volcano both pools became one
    config, diffs, _ = discovered(seeded(plan_of(mixed(gang), "mixed")))
    assert diffs == []
    pools = {p["name"]: p for p in config["gpufabric:gpuNodes"]}
    assert sorted(pools) == ["a100", "b200"]
    assert (pools["b200"]["count"], pools["a100"]["count"]) == (12, 6)
    assert config["gpufabric:fabric"]["type"] == "infiniband"
    assert "rdma" not in config["gpufabric:fabric"]  # shared, the default
    assert pools["b200"]["fabric"]["rdma"] == "sriov"
    assert "fabric" not in pools["a100"]


def test_a_pool_the_stack_fabric_differs_from_gets_the_defaults_it_would_inherit() -> None:
    # were the stack's fabric a RoCE SR-IOV one, an InfiniBand shared pool must say rdma:
    # shared and its link's MTU (it would inherit sriov and 9000 otherwise); a section it
    # cannot unset is said
    base = {"type": "roce", "rdma": "sriov", "sriov": {"numVfs": 4}, "mtu": 9000, "rails": []}
    raw = {"type": "infiniband", "rdma": "shared", "rails": []}
    ctx = Context(Snapshot(), Notes(), "mixed")
    assert pool_fabric(ctx, raw, base, "a100") == {
        "type": "infiniband",
        "rdma": "shared",
        "mtu": 4092,
    }
    assert ctx.notes.unmapped == [
        "pool a100: fabric.sriov: the stack's fabric sets it and this pool's objects show "
        "none; a pool inherits it and cannot unset it"
    ]


def test_a_volcano_pool_with_no_object_of_its_own_is_found_from_its_tenants() -> None:
    # the A100 pool's parts all live in the cluster-wide policy: its name comes from the
    # tenants' nccl-env-a100 and quota annotations, its selector from its nodes' product
    plan = plan_of(mixed("volcano"), "mixed")
    snap = seeded(plan)
    snap.objects["NicNodePolicy"] = [
        p for p in snap.objects.get("NicNodePolicy", []) if p["metadata"]["name"] != "a100"
    ]
    config, diffs, unmapped = discovered(snap)
    pools = {p["name"]: p for p in config["gpufabric:gpuNodes"]}
    assert pools["a100"]["nodeSelector"] == A100
    assert pools["a100"]["count"] == 6
    assert any(line.startswith("pool a100: no per-pool object") for line in unmapped)
    # what differs is the object the cluster lacks, and only that
    assert diffs == ['NicNodePolicy a100: (object): live (absent), rendered "created"']


def test_a_gpu_node_no_pool_takes_is_said() -> None:
    # before: a relabelled node vanished from its pool's count with no word
    plan = plan_of(mixed("kueue"), "mixed")
    snap = seeded(plan)
    odd = copy.deepcopy(snap.nodes[0])
    odd["metadata"]["name"] = "b200-odd"
    odd["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-B200-180GB"
    snap.objects["Node"].append(odd)
    _, _, unmapped = discovered(snap)
    assert any(
        line.startswith("Node b200-odd: GPU node(s) (NVIDIA-B200-180GB, 8 GPUs)")
        for line in unmapped
    )


def test_kinds_of_gpu_node_under_one_pools_selector_are_said() -> None:
    # a one-pool Kueue stack: the flavor's selector takes a node of another product too
    # (before: counted into the pool with the first kind's model, silently)
    from builders import example_config

    snap = seeded(plan_of(example_config("dgx-h100"), "dgx-h100"))
    snap.nodes[0]["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-H100-80GB-HBM3-X"
    _, _, notes = infer(snap, "dgx-h100")
    assert any(
        n.startswith("Node: 2 kinds of GPU node under the one pool's selector")
        for n in notes.unmapped
    )


def test_a_fleets_queue_and_quota_that_disagree_are_said() -> None:
    plan = plan_of(mixed("kueue"), "mixed")
    snap = seeded(plan)
    cq = next(q for q in snap.objects["ClusterQueue"] if q["metadata"]["name"] == "foundation")
    for flavor in cq["spec"]["resourceGroups"][0]["flavors"]:
        if flavor["name"] == "b200":
            next(r for r in flavor["resources"] if r["name"] == "nvidia.com/gpu")[
                "nominalQuota"
            ] = 48
    _, _, unmapped = discovered(snap)
    assert any(
        "gpu-quota-b200: 64 GPUs, and ClusterQueue foundation admits 48 of pool b200" in n
        for n in unmapped
    )
