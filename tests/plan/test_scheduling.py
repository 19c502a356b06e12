"""Scheduling layer: Kueue's manager configuration and queue objects, Volcano's scheduler
configuration and queues, and what switching authority changes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import body, chart, plan_of, problem_lines
from conftest import EXAMPLE_STACKS, example_config, sections

from gpufabric.authorities import kueue
from gpufabric.model.stackfile import model_from_config
from gpufabric.outputs.schema import validate_objects
from gpufabric.plan import ids as plan_ids
from gpufabric.plan.build import Plan


def kueue_config(plan: Plan) -> dict[str, Any]:
    values = chart(plan, plan_ids.authority_chart("kueue")).values
    doc: dict[str, Any] = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
    return doc


def expected_frameworks(config: dict[str, Any]) -> set[str]:
    t = config.get("gpufabric:training", {})
    out = {"batch/job"}
    if t.get("mpiOperator", True):
        out.add("kubeflow.org/mpijob")
    out |= {f"kubeflow.org/{s}" for s in t.get("trainingOperator", {}).get("schemes", [])}
    if t.get("trainer", {}).get("enabled"):
        out.add("trainer.kubeflow.org/trainjob")
    return out


KUEUE_STACKS = [
    n for n in EXAMPLE_STACKS if example_config(n)["gpufabric:scheduling"]["gang"] == "kueue"
]


@pytest.mark.parametrize("name", KUEUE_STACKS)
def test_kueue_integrations_are_exactly_the_installed_job_kinds(name: str) -> None:
    config = example_config(name)
    frameworks = kueue_config(plan_of(config))["integrations"]["frameworks"]
    assert len(frameworks) == len(set(frameworks))
    assert set(frameworks) == expected_frameworks(config)


def test_kueue_019_reenables_the_v1_kinds_in_use() -> None:
    frameworks = kueue_config(plan_of(example_config("prod-ib")))["integrations"]["frameworks"]
    # Off by default since Kueue 0.19: without these, PyTorchJobs would run unqueued.
    assert "kubeflow.org/pytorchjob" in frameworks
    assert "kubeflow.org/jaxjob" in frameworks
    assert "kubeflow.org/tfjob" not in frameworks


def test_kueue_manager_configuration() -> None:
    config = example_config("prod-ib")
    del config["gpufabric:sources"]  # upstream names (test_sources covers mirrors)
    plan = plan_of(config)
    cfg = kueue_config(plan)
    assert cfg["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    assert cfg["waitForPodsReady"]["timeout"] == "600s"  # allOrNothingTimeout: 10m
    assert cfg["waitForPodsReady"]["requeuingStrategy"] == {
        "timestamp": "Eviction",
        "backoffLimitCount": 5,
        "backoffBaseSeconds": 60,
        "backoffMaxSeconds": 3600,
    }
    assert cfg["manageJobsWithoutQueueName"] is False
    assert cfg["managedJobsNamespaceSelector"] == {"matchLabels": {"gpufabric.io/tenant": "true"}}
    # Per-pod RDMA devices are not quota: ClusterQueues would otherwise refuse every job.
    rdma = sorted(plan.wiring["eval"].rdma_resources)
    assert cfg["resources"]["excludeResourcePrefixes"] == rdma
    image = chart(plan, plan_ids.authority_chart("kueue")).values["controllerManager"]["manager"][
        "image"
    ]
    assert image["tag"] == "v0.19.2"
    assert image["repository"] == "registry.k8s.io/kueue/kueue"


def test_kueue_is_installed_after_the_job_operators() -> None:
    config = example_config("prod-ib")
    deps = plan_of(config).item(plan_ids.authority_chart("kueue")).depends_on
    assert set(plan_ids.job_operators(plan_of(config).facts.operators.job_kinds)) == set(deps) - {
        plan_ids.SCHEDULING_NAMESPACE
    }
    assert len(plan_ids.job_operators(plan_of(config).facts.operators.job_kinds)) == 3


def test_kueue_queue_objects_per_tenant() -> None:
    config = example_config("prod-ib")
    config["gpufabric:tenants"][1]["gpuBorrowingLimit"] = 32
    plan = plan_of(config)
    for tenant in config["gpufabric:tenants"]:
        ns = tenant["namespace"]
        cq = body(plan, f"scheduling/{ns}/queue")
        assert cq["kind"] == "ClusterQueue"
        assert cq["spec"]["cohortName"] == "gpufabric"
        assert cq["spec"]["namespaceSelector"] == {
            "matchLabels": {"kubernetes.io/metadata.name": ns}
        }
        (group,) = cq["spec"]["resourceGroups"]
        assert group["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu"]
        (flavor,) = group["flavors"]
        assert flavor["name"] == kueue.FLAVOR_NAME
        res = {r["name"]: r for r in flavor["resources"]}
        assert res["nvidia.com/gpu"]["nominalQuota"] == tenant["gpuQuota"]
        assert res["nvidia.com/gpu"]["borrowingLimit"] == tenant.get("gpuBorrowingLimit", 0)
        assert res["cpu"]["nominalQuota"] == tenant.get("cpuQuota", kueue.UNLIMITED_CPU)
        assert cq["spec"]["preemption"]["reclaimWithinCohort"] == "Any"
        lq = body(plan, f"tenants/{ns}/local-queue")
        assert lq["metadata"]["namespace"] == ns
        assert lq["spec"] == {"clusterQueue": ns}
        wpc = body(plan, f"scheduling/{ns}/priority")
        assert wpc["kind"] == "WorkloadPriorityClass"
        assert wpc["value"] == tenant.get("priority", 0)
        quota = body(plan, f"tenants/{ns}/resource-quota")
        assert quota["spec"]["hard"] == {
            "requests.nvidia.com/gpu": tenant["gpuQuota"] + tenant.get("gpuBorrowingLimit", 0)
        }


def test_topology_and_flavor() -> None:
    config = example_config("prod-ib")
    config["gpufabric:gpuNodes"]["tolerations"] = [
        {"key": "nvidia.com/gpu", "effect": "NoSchedule"}
    ]
    plan = plan_of(config)
    levels = [lv["nodeLabel"] for lv in body(plan, plan_ids.TOPOLOGY)["spec"]["levels"]]
    assert levels == config["gpufabric:scheduling"]["topologyLevels"]
    flavor = body(plan, plan_ids.FLAVOR)["spec"]
    assert flavor["nodeLabels"] == config["gpufabric:gpuNodes"]["nodeSelector"]
    assert flavor["topologyName"] == kueue.TOPOLOGY_NAME
    assert flavor["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]


def test_kueue_without_levels_places_by_node() -> None:
    plan = plan_of(example_config("lab-roce"))
    levels = body(plan, plan_ids.TOPOLOGY)["spec"]["levels"]
    assert levels == [{"nodeLabel": "kubernetes.io/hostname"}]


def volcano_conf(plan: Plan, key: str) -> dict[str, Any]:
    """The scheduler's config is a YAML string in the values; the controller's a mapping
    (its chart template runs toYaml over it)."""
    value = chart(plan, plan_ids.authority_chart("volcano")).values["custom"][key]
    doc: dict[str, Any] = yaml.safe_load(value) if isinstance(value, str) else dict(value)
    return doc


def test_volcano_scheduler_configuration() -> None:
    plan = plan_of(example_config("roce-sriov-volcano"))
    conf = volcano_conf(plan, "scheduler_config_override")
    plugins = [p["name"] for tier in conf["tiers"] for p in tier["plugins"]]
    assert "gang" in plugins
    assert "capacity" in plugins
    assert "proportion" not in plugins
    assert "network-topology-aware" in plugins
    assert "reclaim" in conf["actions"]
    discovery = volcano_conf(plan, "controller_config_override")["networkTopologyDiscovery"]
    (source,) = discovery
    assert source["source"] == "label"
    assert source["enabled"] is True
    levels = source["config"]["networkTopologyTypes"][kueue.TOPOLOGY_NAME]
    # HyperNodes from the stack's levels, widest first, the node last.
    assert levels == [
        {"nodeLabel": "topology.gpufabric.io/leaf"},
        {"nodeLabel": "kubernetes.io/hostname"},
    ]


def test_volcano_without_levels_has_no_topology_placement() -> None:
    config = example_config("roce-sriov-volcano")
    del config["gpufabric:scheduling"]["topologyLevels"]
    plan = plan_of(config)
    plugins = [
        p["name"]
        for t in volcano_conf(plan, "scheduler_config_override")["tiers"]
        for p in t["plugins"]
    ]
    assert "network-topology-aware" not in plugins
    assert (
        "controller_config_override"
        not in chart(plan, plan_ids.authority_chart("volcano")).values["custom"]
    )


def test_volcano_queues_per_tenant() -> None:
    config = example_config("roce-sriov-volcano")
    config["gpufabric:tenants"][0]["gpuBorrowingLimit"] = 16
    plan = plan_of(config)
    for tenant in config["gpufabric:tenants"]:
        ns = tenant["namespace"]
        q = body(plan, f"scheduling/{ns}/queue")
        assert q["kind"] == "Queue"
        assert q["metadata"]["name"] == ns
        assert q["spec"]["deserved"] == {"nvidia.com/gpu": tenant["gpuQuota"]}
        assert q["spec"]["capability"] == {
            "nvidia.com/gpu": tenant["gpuQuota"] + tenant.get("gpuBorrowingLimit", 0)
        }
        assert q["spec"]["reclaimable"] is True
        namespace = body(plan, plan_ids.tenant_namespace(ns))
        assert namespace["metadata"]["annotations"] == {"scheduling.volcano.sh/queue-name": ns}
        assert f"tenants/{ns}/local-queue" not in {it.id for it in plan.items}


def _bodies(plan: Plan) -> dict[str, Any]:
    from gpufabric.outputs.render import files_of

    return {it.id: files_of(it) for it in plan.items}


def test_switching_kueue_to_volcano_changes_only_what_it_must() -> None:
    config = example_config("lab-roce")
    before = _bodies(plan_of(config))
    config["gpufabric:scheduling"]["gang"] = "volcano"
    after = _bodies(plan_of(config))
    removed = before.keys() - after.keys()
    added = after.keys() - before.keys()
    changed = {k for k in before.keys() & after.keys() if before[k] != after[k]}
    tenant_ns = [t["namespace"] for t in config["gpufabric:tenants"]]
    assert removed == {
        plan_ids.authority_chart("kueue"),
        plan_ids.TOPOLOGY,
        plan_ids.FLAVOR,
        *(f"tenants/{ns}/local-queue" for ns in tenant_ns),
    }
    assert added == {plan_ids.authority_chart("volcano")}
    assert changed == {
        plan_ids.SCHEDULING_NAMESPACE,  # kueue-system -> volcano-system
        plan_ids.MPI_OPERATOR,  # --gang-scheduling=volcano
        plan_ids.TRAINING_OPERATOR,  # --gang-scheduler-name=volcano
        *(f"scheduling/{ns}/queue" for ns in tenant_ns),  # ClusterQueue -> Queue
        *(
            f"scheduling/{ns}/priority" for ns in tenant_ns
        ),  # WorkloadPriorityClass -> PriorityClass
        *(plan_ids.tenant_namespace(ns) for ns in tenant_ns),  # queue annotation
        plan_ids.TENANT_OBJECTS_POLICY,  # the queue and priority rules of the authority
        plan_ids.TENANT_ROLE,  # read access to its queue objects
    }
    # GPU, network, NCCL settings, quotas and the admission policy are untouched.
    for item_id in before.keys() & after.keys():
        if item_id.startswith(("gpu/", "network/")) or item_id.endswith(
            ("nccl-env", "resource-quota")
        ):
            assert before[item_id] == after[item_id], item_id


@pytest.mark.parametrize("name", EXAMPLE_STACKS)
@pytest.mark.parametrize("gang", ["kueue", "volcano"])
def test_scheduling_and_tenant_objects_validate_against_the_crds(
    name: str, gang: str, crd_dir: Path
) -> None:
    config = example_config(name)
    config["gpufabric:scheduling"]["gang"] = gang
    levels = config["gpufabric:scheduling"].get("topologyLevels")
    if gang == "kueue" and levels and levels[-1] != "kubernetes.io/hostname":
        levels.append("kubernetes.io/hostname")
    plan = plan_of(config)
    bodies = [
        o.body
        for it, o in plan.objects()
        if it.layer.value in ("scheduling", "tenants", "training")
    ]
    report = validate_objects(bodies, "1.33", crd_dir)
    assert report.ok, report.errors
    assert not report.unchecked


# ------------------------------------------------------------------------- validation


def test_oversubscribed_quotas_are_refused_with_the_arithmetic() -> None:
    config = example_config("lab-roce")  # 4 nodes x 8 GPUs
    config["gpufabric:tenants"][0]["gpuQuota"] = 24
    (msg,) = [m for m in problem_lines(config) if m.startswith("tenants:")]
    nodes = config["gpufabric:gpuNodes"]
    capacity = nodes["count"] * nodes.get("gpusPerNode", 8)
    total = 24 + config["gpufabric:tenants"][1]["gpuQuota"]
    assert f"gpuQuota totals {total} GPUs" in msg
    assert f"the cluster has {capacity}" in msg
    assert "gpuBorrowingLimit" in msg


def test_borrowing_beyond_the_cluster_is_only_a_warning() -> None:
    config = example_config("lab-roce")
    config["gpufabric:tenants"][0]["gpuBorrowingLimit"] = 1000
    model = model_from_config(sections(config), "t", from_file=True)
    from gpufabric.model.stackfile import stack_warnings

    (warning,) = [w for w in stack_warnings(model) if w.path != "versions"]
    assert warning.path == "tenants[0].gpuBorrowingLimit"
    assert "more than the cluster's 32" in warning.message


def test_kueue_topology_rules() -> None:
    config = example_config("prod-ib")
    config["gpufabric:scheduling"]["topologyLevels"] = []
    assert any("scheduling.topologyLevels: [] leaves Kueue" in m for m in problem_lines(config))
    config["gpufabric:scheduling"]["topologyLevels"] = ["topology.gpufabric.io/leaf"]
    assert any("add 'kubernetes.io/hostname' as the last level" in m for m in problem_lines(config))


def test_a_cluster_needs_a_job_operator() -> None:
    config = example_config("kind-dev")
    config["gpufabric:training"] = {"mpiOperator": False}
    assert any(m.startswith("training: installs no job operator") for m in problem_lines(config))


def test_kueue_mpijob_needs_mpi_operator_080() -> None:
    config = example_config("lab-roce")
    config["gpufabric:versions"] = {"mpi-operator": "v0.7.0"}
    assert any(
        "kueue-mpijob-needs-mpi-operator-0.8" in m or "v0.8.0" in m for m in problem_lines(config)
    )
