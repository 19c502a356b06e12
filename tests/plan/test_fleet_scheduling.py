"""Scheduling and tenants of a fleet (several node pools, stacks/Pulumi.fleet-mixed.yaml: an
H100 InfiniBand pool and an L40S RoCE pool): a Kueue ResourceFlavor per pool and each
tenant's quota per flavor, the flavor a pool's job is admitted through (Kueue's own matching
rule), Volcano's queues summed over the pools with a warning, the NCCL settings per pool
(``nccl-env-<pool>``), the namespace's ResourceQuota over every pool, and the pod policy
admitting every pool's networks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from builders import body, chart, example_config, gpu_pods, model_of, plan_of
from test_scheduling import kueue_config

from gpufabric.authorities import kueue
from gpufabric.model.stackfile import stack_warnings
from gpufabric.outputs.jobs import JobRequest, job_manifest
from gpufabric.outputs.schema import validate_objects
from gpufabric.plan import ids
from gpufabric.plan.build import Plan

POOLS = ("h100", "l40s")
QUOTAS = {"llm-pretrain": {"h100": 96}, "inference-eval": {"h100": 32, "l40s": 32}}
SELECTORS = {
    "h100": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
    "l40s": {"nvidia.com/gpu.product": "NVIDIA-L40S"},
}


def fleet(gang: str = "kueue", borrow: int = 0, **l40s_fabric: Any) -> dict[str, Any]:
    """fleet-mixed, under ``gang``, every tenant with ``borrow`` GPUs of borrowing limit and
    the l40s pool's fabric keys replaced by ``l40s_fabric``."""
    config = example_config("fleet-mixed")
    config["gpufabric:scheduling"]["gang"] = gang
    if gang == "volcano":
        del config["gpufabric:scheduling"]["allOrNothingTimeout"]  # Kueue's (a warning)
    for tenant in config["gpufabric:tenants"]:
        if borrow:
            tenant["gpuBorrowingLimit"] = borrow
    config["gpufabric:gpuNodes"][1]["fabric"].update(l40s_fabric)
    return config


def flavor_matches(pod_spec: dict[str, Any], flavor: dict[str, Any]) -> bool:
    """Kueue 0.19's flavor assigner (pkg/scheduler/flavorassigner, checkFlavorForPodSets and
    flavorSelector): the pod's nodeSelector, restricted to the keys of this flavor's own
    nodeLabels, must match those labels; taints the flavor lists must be tolerated."""
    labels = flavor["spec"]["nodeLabels"]
    selector = pod_spec.get("nodeSelector", {})
    return all(labels[k] == v for k, v in selector.items() if k in labels)


# ------------------------------------------------------------------------------ Kueue


def test_a_resource_flavor_per_pool_through_one_topology() -> None:
    plan = plan_of(fleet())
    ids_of = {it.id for it in plan.items}
    assert ids.FLAVOR not in ids_of  # no single gpu-nodes flavor in a fleet
    assert ids.TOPOLOGY in ids_of
    for pool in POOLS:
        flavor = body(plan, ids.flavor(pool))
        assert flavor["kind"] == "ResourceFlavor"
        assert flavor["metadata"]["name"] == pool
        assert flavor["metadata"]["labels"]["gpufabric.io/pool"] == pool
        assert flavor["spec"]["nodeLabels"] == SELECTORS[pool]
        # one Topology: Kueue builds each flavor's domains from the nodes it selects
        assert flavor["spec"]["topologyName"] == kueue.TOPOLOGY_NAME
        assert plan.item(ids.flavor(pool)).depends_on == (ids.TOPOLOGY,)
        assert "tolerations" not in flavor["spec"]


def test_each_pools_taints_are_tolerated_by_its_own_flavor_only() -> None:
    config = fleet()
    taint = {"key": "nvidia.com/l40s", "operator": "Exists", "effect": "NoSchedule"}
    config["gpufabric:gpuNodes"][1]["tolerations"] = [taint]
    plan = plan_of(config)
    assert body(plan, ids.flavor("l40s"))["spec"]["tolerations"] == [taint]
    assert "tolerations" not in body(plan, ids.flavor("h100"))["spec"]


@pytest.mark.parametrize("borrow", [0, 16])
def test_cluster_queue_has_the_tenants_quota_per_pool_flavor(borrow: int) -> None:
    plan = plan_of(fleet(borrow=borrow))
    for ns, quota in QUOTAS.items():
        cq = body(plan, ids.tenant_queue(ns))
        (group,) = cq["spec"]["resourceGroups"]
        assert group["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu"]
        assert [f["name"] for f in group["flavors"]] == list(POOLS)  # the stack's order
        for flavor in group["flavors"]:
            res = {r["name"]: r for r in flavor["resources"]}
            assert list(res) == group["coveredResources"]
            # a pool the tenant's gpuQuota leaves out: 0, borrowing still allowed
            assert res["nvidia.com/gpu"]["nominalQuota"] == quota.get(flavor["name"], 0)
            assert res["nvidia.com/gpu"]["borrowingLimit"] == borrow
            assert res["cpu"]["nominalQuota"] == kueue.UNLIMITED_CPU
        assert set(plan.item(ids.tenant_queue(ns)).depends_on) == {ids.flavor(p) for p in POOLS}


def test_cpu_and_memory_quotas_hold_in_each_pool() -> None:
    config = fleet()
    config["gpufabric:tenants"][1].update(cpuQuota="512", memoryQuota="4Ti")
    cq = body(plan_of(config), ids.tenant_queue("inference-eval"))
    for flavor in cq["spec"]["resourceGroups"][0]["flavors"]:
        res = {r["name"]: r["nominalQuota"] for r in flavor["resources"]}
        assert (res["cpu"], res["memory"]) == ("512", "4Ti")


@pytest.mark.parametrize("kind", ["mpijob", "pytorchjob"])
@pytest.mark.parametrize("pool", POOLS)
def test_a_pools_job_matches_only_its_pools_flavor(pool: str, kind: str) -> None:
    """Kueue admits a workload only through a flavor its pods' node selector matches: the
    job of one pool is counted against that pool's quota and placed on its nodes."""
    plan = plan_of(fleet())
    flavors = {p: body(plan, ids.flavor(p)) for p in POOLS}
    request = JobRequest(tenant="inference-eval", kind=kind)  # type: ignore[arg-type]
    job = job_manifest(plan.for_pool(pool), request)
    for template in gpu_pods(job):
        spec = template["spec"]
        assert [p for p in POOLS if flavor_matches(spec, flavors[p])] == [pool]
        # and the pool's own NCCL settings
        (env_from,) = [c["envFrom"] for c in spec["containers"] if "envFrom" in c]
        assert env_from == [{"configMapRef": {"name": f"nccl-env-{pool}"}}]


def test_the_matching_rule_is_kueues() -> None:
    """The helper above against the cases Kueue's flavorSelector decides: a key the flavor
    lacks is ignored, a shared key must agree."""
    flavor = {"spec": {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-L40S"}}}
    assert flavor_matches({"nodeSelector": {"other": "x"}}, flavor)
    assert flavor_matches({}, flavor)
    assert not flavor_matches({"nodeSelector": {"nvidia.com/gpu.product": "H100"}}, flavor)


def test_kueue_excludes_every_pools_rdma_resources_from_quota() -> None:
    plan = plan_of(fleet())
    excluded = kueue_config(plan)["resources"]["excludeResourcePrefixes"]
    wanted = {n for p in plan.facts.pools for n in p.fabric.rdma_resources}
    assert set(excluded) == wanted
    assert {"rdma/ib0", "rdma/roce0"} <= wanted  # a RoCE job would be refused otherwise


def test_kueue_holds_quotas_per_pool_without_a_warning() -> None:
    assert not [w for w in stack_warnings(model_of(fleet())) if w.path == "scheduling.gang"]


# ----------------------------------------------------------------------------- Volcano


@pytest.mark.parametrize("borrow", [0, 8])
def test_volcano_queue_capability_is_summed_over_the_pools(borrow: int) -> None:
    plan = plan_of(fleet("volcano", borrow=borrow))
    for ns, quota in QUOTAS.items():
        q = body(plan, ids.tenant_queue(ns))
        total = sum(quota.values())
        assert q["spec"]["deserved"] == {"nvidia.com/gpu": total}
        # gpuBorrowingLimit holds in each pool, as Kueue's per-flavor borrowingLimit does
        assert q["spec"]["capability"] == {"nvidia.com/gpu": total + borrow * len(POOLS)}
        quota_obj = body(plan, ids.tenant_quota(ns))
        assert quota_obj["spec"]["hard"] == {"requests.nvidia.com/gpu": total + borrow * 2}
    assert not [it.id for it in plan.items if it.id.startswith(ids.FLAVOR)]


def test_volcano_in_a_fleet_warns_that_the_split_is_not_held() -> None:
    (warning,) = [
        w for w in stack_warnings(model_of(fleet("volcano"))) if w.path == "scheduling.gang"
    ]
    assert "not one per pool" in warning.message
    assert "llm-pretrain 96, inference-eval 64" in warning.message
    assert "gang: kueue" in warning.message


def test_volcano_hypernodes_are_discovered_from_the_levels_for_every_pool() -> None:
    config = fleet("volcano")
    config["gpufabric:scheduling"]["topologyLevels"] = ["topology.gpufabric.io/leaf"]
    values = chart(plan_of(config), ids.authority_chart("volcano")).values
    discovery = values["custom"]["controller_config_override"]["networkTopologyDiscovery"]
    (source,) = discovery
    # one label discovery over every node: each pool's leaves become their own HyperNodes
    assert source["config"]["networkTopologyTypes"][kueue.TOPOLOGY_NAME] == [
        {"nodeLabel": "topology.gpufabric.io/leaf"},
        {"nodeLabel": "kubernetes.io/hostname"},
    ]


# ----------------------------------------------------------------------------- tenants


def nccl_env(plan: Plan, ns: str, pool: str) -> dict[str, Any]:
    return body(plan, ids.tenant_nccl_env(ns, pool))


def test_nccl_env_per_pool() -> None:
    plan = plan_of(fleet())
    for ns in QUOTAS:
        assert ids.tenant_nccl_env(ns) not in {it.id for it in plan.items}
        h100, l40s = (nccl_env(plan, ns, p) for p in POOLS)
        for pool, cm in (("h100", h100), ("l40s", l40s)):
            assert cm["metadata"]["name"] == f"nccl-env-{pool}"
            assert cm["metadata"]["namespace"] == ns
            assert cm["metadata"]["labels"]["gpufabric.io/pool"] == pool
            assert cm["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpufabric"
        assert h100["data"]["NCCL_IB_HCA"] == "=" + ",".join(f"mlx5_{i}" for i in range(8))
        assert l40s["data"]["NCCL_IB_HCA"] == "=mlx5_0,mlx5_1"
        # RoCE's lossless class (dscp 26 x 4); InfiniBand has none
        assert l40s["data"]["NCCL_IB_TC"] == "104"
        assert "NCCL_IB_TC" not in h100["data"]
        assert "roce0" in l40s["metadata"]["annotations"]["gpufabric.io/networks"]
        assert "ib0" not in l40s["metadata"]["annotations"]["gpufabric.io/networks"]
        assert '"rdma/ib7":1' in h100["metadata"]["annotations"]["gpufabric.io/rdma-resources"]


def test_nccl_env_gid_index_and_socket_interface_per_pool() -> None:
    # a fixed GID index needs exclusive devices (shared macvlan pods add GIDs of their own)
    gid = plan_of(
        fleet(
            rdma="sriov",
            sriov={"numVfs": 8},
            roce={"dscp": 26, "pfcPriority": 3, "gidIndex": 3},
        )
    )
    assert nccl_env(gid, "inference-eval", "l40s")["data"]["NCCL_IB_GID_INDEX"] == "3"
    assert "NCCL_IB_GID_INDEX" not in nccl_env(gid, "inference-eval", "h100")["data"]
    # a pool without RDMA: NCCL's sockets run over its rails, the other pool's bootstrap only
    tcp = plan_of(fleet(rdma="none"))
    sockets = {p: nccl_env(tcp, "inference-eval", p)["data"]["NCCL_SOCKET_IFNAME"] for p in POOLS}
    assert sockets == {"h100": "=eth0", "l40s": "=roce0,roce1"}


def test_one_pool_keeps_its_nccl_env() -> None:
    plan = plan_of(example_config("lab-roce"))
    for ns, contract in plan.wiring.items():
        cm = body(plan, ids.tenant_nccl_env(ns))
        assert cm["metadata"]["name"] == contract.nccl_env_name == "nccl-env"
        assert "gpufabric.io/pool" not in cm["metadata"]["labels"]


def test_resource_quota_is_the_sum_with_each_pools_share_annotated() -> None:
    plan = plan_of(fleet(borrow=4))
    quota = body(plan, ids.tenant_quota("inference-eval"))
    assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": 32 + 4 + 32 + 4}
    assert quota["metadata"]["annotations"] == {
        "gpufabric.io/gpu-quota-h100": "32",
        "gpufabric.io/gpu-limit-h100": "36",
        "gpufabric.io/gpu-quota-l40s": "32",
        "gpufabric.io/gpu-limit-l40s": "36",
    }
    assert plan.facts.tenant_gpu_limit("llm-pretrain") == 96 + 4 + 0 + 4
    one = body(plan_of(example_config("lab-roce")), ids.tenant_quota("team-vision"))
    assert "annotations" not in one["metadata"]


def test_pod_policy_admits_every_pools_networks() -> None:
    from admission import Policy, Request

    plan = plan_of(fleet())
    policy = Policy(body(plan, ids.TENANT_POLICY))
    for pool in POOLS:
        contract = plan.for_pool(pool).wiring["inference-eval"]
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "p",
                "namespace": "inference-eval",
                "annotations": {"k8s.v1.cni.cncf.io/networks": contract.networks},
            },
            "spec": {"containers": [{"name": "c", "image": "i"}]},
        }
        assert policy.denials(pod, Request(namespace="inference-eval")) == [], pool


@pytest.mark.parametrize("gang", ["kueue", "volcano"])
def test_fleet_objects_validate_against_the_pinned_crds(gang: str, crd_dir: Path) -> None:
    plan = plan_of(fleet(gang, borrow=8))
    bodies = [
        o.body
        for it, o in plan.objects()
        if it.layer.value in ("scheduling", "tenants", "training")
    ]
    kinds = {b["kind"] for b in bodies}
    assert ({"ResourceFlavor", "ClusterQueue"} if gang == "kueue" else {"Queue"}) <= kinds
    report = validate_objects(bodies, "1.34", crd_dir)
    assert report.ok, report.errors
    assert not report.unchecked
