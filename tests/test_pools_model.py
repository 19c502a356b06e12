"""Node pools in the stack model: a fleet of pools with their own GPUs and NIC layouts,
validated by config path, resolved into per-pool facts; a one-pool mapping stays today's
stack."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from builders import example_config, model_of, plan_of, problem_lines, problems_of

from gpufabric.model.config import DEFAULT_POOL


@pytest.fixture
def fleet() -> dict[str, Any]:
    return example_config("fleet-mixed")


def _pool(config: dict[str, Any], i: int) -> dict[str, Any]:
    pool: dict[str, Any] = config["gpufabric:gpuNodes"][i]
    return pool


def test_a_mapping_is_one_default_pool_with_the_stack_fabric() -> None:
    model = model_of(example_config("lab-roce"))
    (pool,) = model.pools
    assert pool.name == DEFAULT_POOL
    assert pool.path == "gpuNodes"
    assert pool.fabric == model.fabric
    plan = plan_of(example_config("lab-roce"))
    assert plan.facts.pool_names == (DEFAULT_POOL,)
    assert not plan.facts.fleet
    assert plan.for_pool(None) is plan


def test_a_pool_fabric_replaces_the_stack_keys_it_sets(fleet: dict[str, Any]) -> None:
    h100, l40s = model_of(fleet).pools
    assert h100.fabric.type == "infiniband"
    assert len(h100.fabric.rails) == 8
    assert l40s.fabric.type == "roce"
    assert [r.name for r in l40s.fabric.rails] == ["roce0", "roce1"]
    assert l40s.fabric.linkRateGbps == 100
    assert l40s.fabric.mtu == 9000
    # Cluster-wide keys and keys the pool leaves out come from the stack's fabric.
    assert l40s.fabric.networkNamespace == h100.fabric.networkNamespace
    assert l40s.fabric.gpuDirect == "dmabuf"


def test_a_pool_on_another_link_inherits_no_settings_of_the_stack_link(
    fleet: dict[str, Any],
) -> None:
    fleet["gpufabric:fabric"]["infiniband"] = {"pkeyManagement": "static"}
    del _pool(fleet, 1)["fabric"]["roce"]
    _, l40s = model_of(fleet).pools
    assert l40s.fabric.infiniband is None


def test_each_pool_resolves_its_own_facts(fleet: dict[str, Any]) -> None:
    facts = plan_of(fleet).facts
    assert facts.fleet
    assert facts.pool_names == ("h100", "l40s")
    h100, l40s = (facts.for_pool(n) for n in facts.pool_names)
    assert h100.nodes.count == 16
    assert h100.nodes.gpus_per_node == 8
    assert l40s.nodes.count == 8
    assert l40s.nodes.gpus_per_node == 4
    assert l40s.nodes.selector == {"nvidia.com/gpu.product": "NVIDIA-L40S"}
    assert [r.name for r in l40s.fabric.rails] == ["roce0", "roce1"]
    # The pool decides NCCL's devices and lossless class.
    assert h100.nccl_env["NCCL_IB_HCA"].count("mlx5_") == 8
    assert l40s.nccl_env["NCCL_IB_HCA"] == "=mlx5_0,mlx5_1"
    assert "NCCL_IB_TC" in l40s.nccl_env
    assert "NCCL_IB_TC" not in h100.nccl_env
    # Thresholds: rails x link rate of the pool.
    assert h100.acceptance.line_rate_gbytes == 8 * 400 / 8
    assert l40s.acceptance.line_rate_gbytes == 2 * 100 / 8
    # Quotas per pool: a pool the tenant does not name gives it nothing there.
    assert h100.tenants["llm-pretrain"].gpu_quota == 96
    assert l40s.tenants["llm-pretrain"].gpu_quota == 0
    assert l40s.tenants["inference-eval"].gpu_quota == 32
    # The unnarrowed facts are the first pool's.
    assert facts.fabric == h100.fabric
    assert facts.pool == "h100"


def test_a_fleet_job_must_name_its_pool(fleet: dict[str, Any]) -> None:
    plan = plan_of(fleet)
    with pytest.raises(KeyError, match="h100, l40s"):
        plan.for_pool(None)
    with pytest.raises(KeyError, match="no pool 'a100'"):
        plan.for_pool("a100")
    assert plan.for_pool("l40s").facts.nodes.pool == "l40s"


def test_pools_that_can_select_one_node_are_refused(fleet: dict[str, Any]) -> None:
    _pool(fleet, 1)["nodeSelector"] = {"nvidia.com/gpu.present": "true"}
    found = problems_of(fleet)
    assert "can select the same node as gpuNodes[0]" in found["gpuNodes[1].nodeSelector"]
    # One differing value on a shared key keeps them apart.
    _pool(fleet, 1)["nodeSelector"]["nvidia.com/gpu.product"] = "NVIDIA-L40S"
    assert len(model_of(fleet).pools) == 2


def test_pool_names_are_unique_dns_labels(fleet: dict[str, Any]) -> None:
    _pool(fleet, 1)["name"] = "h100"
    assert "already gpuNodes[0]'s" in problems_of(fleet)["gpuNodes[1].name"]
    _pool(fleet, 1)["name"] = "L40S_pool"
    assert "pool name" in problems_of(fleet)["gpuNodes[1].name"]


def test_a_rail_name_with_another_layout_in_another_pool_is_refused(
    fleet: dict[str, Any],
) -> None:
    _pool(fleet, 1)["fabric"]["rails"][0]["name"] = "ib0"
    found = problems_of(fleet)
    message = found["gpuNodes[1].fabric.rails[0].name"]
    assert "also a rail of pool h100 with another layout" in message


def test_overlapping_subnets_across_pools_are_refused(fleet: dict[str, Any]) -> None:
    _pool(fleet, 1)["fabric"]["rails"][1]["subnet"] = "10.100.4.0/24"  # inside ib1's /22
    found = problems_of(fleet)
    assert "overlaps rail ib1 of pool h100" in found["gpuNodes[1].fabric.rails[1].subnet"]


def test_two_pools_may_share_the_stack_rails() -> None:
    """Same NIC layout, different GPUs (e.g. H100 and H200 trays on one fabric): one set of
    networks serves both pools."""
    config = example_config("fleet-mixed")
    l40s = _pool(config, 1)
    del l40s["fabric"]
    model = model_of(config)
    assert model.pools[0].fabric.rails == model.pools[1].fabric.rails


def test_a_pool_fabric_problem_is_reported_under_the_pool(fleet: dict[str, Any]) -> None:
    _pool(fleet, 1)["fabric"]["rails"][1]["netdev"] = "ens1f0np0"
    _pool(fleet, 1)["fabric"]["rdma"] = "sriov"  # needs sriov.numVfs
    found = problems_of(fleet)
    assert "rails[0]" in found["gpuNodes[1].fabric.rails[1].netdev"]
    assert "required with rdma: sriov" in found["gpuNodes[1].fabric.sriov"]
    # The stack's own (inherited) fabric stays reported under fabric.
    fleet2 = example_config("fleet-mixed")
    fleet2["gpufabric:fabric"]["rails"][1]["netdev"] = "ibp24s0"
    assert "rails[0]" in problems_of(fleet2)["fabric.rails[1].netdev"]


def test_an_unknown_pool_key_names_the_accepted_ones(fleet: dict[str, Any]) -> None:
    _pool(fleet, 0)["gpuModle"] = "H100"
    message = problems_of(fleet)["gpuNodes[0].gpuModle"]
    assert "did you mean 'gpuModel'" in message
    assert "fabric" in message


def test_tenant_quotas_per_pool(fleet: dict[str, Any]) -> None:
    tenants = fleet["gpufabric:tenants"]
    tenants[0]["gpuQuota"] = 16
    tenants[1]["gpuQuota"] = {"h100": 64, "l4": 8}
    found = problems_of(fleet)
    assert "names no pool" in found["tenants[0].gpuQuota"]
    assert "did you mean 'l40s'" in found["tenants[1].gpuQuota.l4"]
    tenants[0]["gpuQuota"] = {"h100": 96}
    tenants[1]["gpuQuota"] = {"h100": 64, "l40s": 40}
    tenants.append({"namespace": "extra", "gpuQuota": {"l40s": 32}})
    lines = problem_lines(fleet)
    assert any("pool h100 totals 160 GPUs" in line and "pool has 128" in line for line in lines)
    assert any("pool l40s totals 72 GPUs" in line for line in lines)


def test_a_one_pool_list_takes_a_number_quota() -> None:
    config = example_config("lab-roce")
    nodes = config["gpufabric:gpuNodes"]
    config["gpufabric:gpuNodes"] = [dict(nodes, name="h100")]
    model = model_of(config)
    assert model.pools[0].name == "h100"
    facts = plan_of(config).facts
    assert not facts.fleet
    first = config["gpufabric:tenants"][0]
    assert facts.tenants[first["namespace"]].gpu_quota == first["gpuQuota"]


def test_a_fleet_needs_the_network_operator_with_nic_node_policies(
    fleet: dict[str, Any],
) -> None:
    fleet["gpufabric:versions"] = {"network-operator": "26.1.2"}
    found = problems_of(fleet)
    assert "node-pools-need-nic-node-policy" in found["versions.network-operator"]


def test_a_fleet_counts_every_pool_for_node_topology(fleet: dict[str, Any]) -> None:
    fleet["gpufabric:scheduling"]["topologyLevels"] = [
        "topology.gpufabric.io/leaf",
        "kubernetes.io/hostname",
    ]
    fleet["gpufabric:scheduling"]["nodeTopology"] = {
        f"n{i}": {"topology.gpufabric.io/leaf": "l1"} for i in range(25)
    }
    assert "more than the pools' counts 24" in problems_of(fleet)["scheduling.nodeTopology"]
    fleet2 = copy.deepcopy(fleet)
    fleet2["gpufabric:scheduling"]["nodeTopology"] = {
        f"n{i}": {"topology.gpufabric.io/leaf": "l1"} for i in range(24)
    }
    assert len(model_of(fleet2).scheduling.nodeTopology) == 24


def test_borrowing_per_pool(fleet: dict[str, Any]) -> None:
    """research may borrow H100s only: a map holds the limit per pool."""
    tenants = fleet["gpufabric:tenants"]
    tenants[0]["gpuBorrowingLimit"] = {"h100": 16}
    facts = plan_of(fleet).facts
    assert facts.for_pool("h100").tenants["llm-pretrain"].gpu_borrowing_limit == 16
    assert facts.for_pool("l40s").tenants["llm-pretrain"].gpu_borrowing_limit == 0
    tenants[0]["gpuBorrowingLimit"] = 8  # a number holds in every pool
    facts = plan_of(fleet).facts
    assert facts.for_pool("l40s").tenants["llm-pretrain"].gpu_borrowing_limit == 8
    tenants[0]["gpuBorrowingLimit"] = {"h100": 16, "a1": 3}
    assert "'a1' is not a pool" in problems_of(fleet)["tenants[0].gpuBorrowingLimit.a1"]


def test_a_bad_pool_key_in_a_quota_is_one_problem(fleet: dict[str, Any]) -> None:
    fleet["gpufabric:tenants"][0]["gpuQuota"] = {"H100": 64}
    lines = problem_lines(fleet)
    assert len(lines) == 1
    assert lines[0].startswith("tenants[0].gpuQuota.H100: 'H100' is not a pool name")


def test_a_quota_map_in_a_one_pool_stack_is_refused() -> None:
    config = example_config("lab-roce")
    config["gpufabric:tenants"][0]["gpuQuota"] = {"default": 8}
    assert "gpuNodes is one pool" in problems_of(config)["tenants[0].gpuQuota"]


def test_cluster_wide_fabric_keys_stay_under_fabric(fleet: dict[str, Any]) -> None:
    _pool(fleet, 1)["fabric"]["multus"] = "thick"
    (line,) = problem_lines(fleet)  # and no follow-on problem of the tenants' quota maps
    assert line.startswith("gpuNodes[1].fabric: multus: one for the whole cluster")


def test_a_pool_problem_message_names_the_pool_key(fleet: dict[str, Any]) -> None:
    _pool(fleet, 1)["fabric"]["sriov"] = {"numVfs": 8}
    message = problems_of(fleet)["gpuNodes[1].fabric.sriov"]
    assert "but gpuNodes[1].fabric.rdma is shared" in message


def test_duplicate_pool_names_give_no_follow_on_quota_problems(fleet: dict[str, Any]) -> None:
    _pool(fleet, 1)["name"] = "h100"
    lines = problem_lines(fleet)
    assert [line.split(":")[0] for line in lines] == ["gpuNodes[1].name"]


def test_gpus_outside_every_quota_are_a_warning_under_kueue(fleet: dict[str, Any]) -> None:
    from gpufabric.model.stackfile import stack_warnings

    fleet["gpufabric:tenants"][0]["gpuQuota"] = {"h100": 64}
    warnings = [str(w) for w in stack_warnings(model_of(fleet))]
    assert any(
        "pool h100 has 128 GPUs and only 96" in w and "32 of its GPUs" in w for w in warnings
    )
    fleet["gpufabric:scheduling"]["gang"] = "volcano"  # a Volcano queue grows into idle GPUs
    warnings = [str(w) for w in stack_warnings(model_of(fleet))]
    assert not any("pool h100 has 128 GPUs" in w for w in warnings)
