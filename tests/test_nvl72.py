"""NVL72 pools (gpuNodes[].nvlink): what is refused, what is installed, and what every
multi-node job on NVL72 trays carries (a ComputeDomain, an IMEX channel claim per pod, the
NCCL multi-node NVLink settings), placed by the racks' GFD clique label."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from builders import body, chart, example_config, gpu_pods, model_of, plan_of, problems_of
from nvl72variants import gb200, gb300

from gpufabric.model.problems import StackError
from gpufabric.outputs.jobs import JobRequest, job_objects
from gpufabric.outputs.runbook import render
from gpufabric.plan import ids
from gpufabric.plan.pulls import collect
from gpufabric.verify.nccl import job as nccl_job


def _job(config: dict[str, Any], kind: str, nodes: int) -> list[dict[str, Any]]:
    plan = plan_of(config)
    return job_objects(plan, JobRequest(tenant="frontier-pretrain", kind=kind, nodes=nodes))  # type: ignore[arg-type]


# ------------------------------------------------------------------------ refused


@pytest.mark.parametrize(
    ("edit", "path", "words"),
    [
        (
            lambda c: c["gpufabric:cluster"].update(kubernetesVersion="1.33"),
            "cluster.kubernetesVersion",
            "1.34.2",
        ),
        (
            lambda c: c["gpufabric:cluster"].update(kubernetesVersion="1.34.1"),
            "cluster.kubernetesVersion",
            "resource.k8s.io/v1",
        ),
        (
            lambda c: c["gpufabric:gpuOperator"]["driver"].update(version="565.57.01"),
            "gpuOperator.driver.version",
            "570.158.01",
        ),
        (lambda c: c["gpufabric:gpuOperator"].update(cdi=False), "gpuOperator.cdi", "CDI"),
        (
            lambda c: c["gpufabric:gpuNodes"].update(gpusPerNode=8),
            "gpuNodes.gpusPerNode",
            "gpusPerNode: 4",
        ),
        (
            lambda c: c["gpufabric:training"].update(
                mpiOperator=False, trainingOperator={"schemes": []}, trainer={"enabled": True}
            ),
            "training.mpiOperator",
            "TrainJob",
        ),
    ],
)
def test_what_cannot_work_is_refused_by_config_path_with_the_fix(
    edit: Any, path: str, words: str
) -> None:
    config = gb200()
    edit(config)
    problems = problems_of(config)
    assert path in problems, problems
    assert words in problems[path]


def test_a_fleet_pool_is_refused_under_its_own_path() -> None:
    config = example_config("fleet-mixed")
    config["gpufabric:gpuNodes"][1]["nvlink"] = {"system": "GB200-NVL72"}
    plan_of(config)  # l40s has 4 GPUs a node: accepted
    config["gpufabric:gpuNodes"][0]["nvlink"] = {"system": "GB300-NVL72"}
    assert "8, but a GB300-NVL72 node" in problems_of(config)["gpuNodes[0].gpusPerNode"]


def test_an_unknown_system_names_the_accepted_ones() -> None:
    config = gb200()
    config["gpufabric:gpuNodes"]["nvlink"] = {"system": "GB200-NVL36"}
    problems = problems_of(config)
    assert "GB200-NVL72" in problems["gpuNodes.nvlink.system"]


# ---------------------------------------------------------------------- installed


@pytest.mark.parametrize("variant", [gb200, gb300])
def test_the_dra_driver_runs_on_the_trays_and_gpus_stay_with_the_device_plugin(
    variant: Any,
) -> None:
    plan = plan_of(variant())
    values = chart(plan, ids.DRA_DRIVER).values
    assert values["resources"] == {"gpus": {"enabled": False}, "computeDomains": {"enabled": True}}
    assert values["resourceApiVersion"] == "resource.k8s.io/v1"
    terms = values["kubeletPlugin"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms == [
        {
            "matchExpressions": [
                {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}
            ]
        }
    ]
    gpu = chart(plan, ids.GPU_OPERATOR).values
    assert gpu["cdi"] == {"enabled": True}
    assert gpu["gfd"] == {"enabled": True}
    assert values["nvidiaDriverRoot"] == "/run/nvidia/driver"


def test_hosts_that_bring_the_driver_get_the_host_root() -> None:
    config = gb200()
    config["gpufabric:gpuOperator"]["driver"] = {"enabled": False}
    assert chart(plan_of(config), ids.DRA_DRIVER).values["nvidiaDriverRoot"] == "/"


def test_only_stacks_with_an_nvl72_pool_install_it() -> None:
    plan = plan_of(example_config("prod-ib"))
    assert ids.DRA_DRIVER not in {i.id for i in plan.items}
    assert "cdi" not in chart(plan, ids.GPU_OPERATOR).values


def test_tenants_may_manage_compute_domains() -> None:
    role = body(plan_of(gb200()), "tenants/role")
    rules = [r for r in role["rules"] if r["apiGroups"] == ["resource.nvidia.com"]]
    assert rules
    assert rules[0]["resources"] == ["computedomains"]


def test_the_pools_nccl_env_turns_multi_node_nvlink_on() -> None:
    env = plan_of(gb200()).facts.nccl_env
    assert env["NCCL_MNNVL_ENABLE"] == "1"
    assert env["NCCL_CUMEM_ENABLE"] == "1"
    assert env["NCCL_NVLS_ENABLE"] == "1"
    assert "NCCL_MNNVL_ENABLE" not in plan_of(example_config("prod-ib")).facts.nccl_env


def test_the_stacks_own_nccl_env_still_wins() -> None:
    config = gb200()
    config["gpufabric:fabric"]["ncclEnv"] = {"NCCL_NVLS_ENABLE": "0"}
    assert plan_of(config).facts.nccl_env["NCCL_NVLS_ENABLE"] == "0"


# ---------------------------------------------------------------------- placement


def test_kueue_places_inside_a_clique_first() -> None:
    gang = plan_of(gb200()).facts.gang
    assert gang.topology_levels == ("nvidia.com/gpu.clique", "kubernetes.io/hostname")
    assert gang.preferred_topology_level == "nvidia.com/gpu.clique"
    assert gang.hand_levels == ()


def test_volcano_discovers_a_hypernode_per_clique() -> None:
    gang = plan_of(gb300()).facts.gang
    assert gang.switch_levels == ("nvidia.com/gpu.clique",)
    assert gang.discovered_topology is not None


def test_configured_switch_levels_keep_the_clique_under_them() -> None:
    config = gb200()
    config["gpufabric:scheduling"]["topologyLevels"] = [
        "topology.gpufabric.io/block",
        "kubernetes.io/hostname",
    ]
    gang = plan_of(config).facts.gang
    assert gang.topology_levels == (
        "topology.gpufabric.io/block",
        "nvidia.com/gpu.clique",
        "kubernetes.io/hostname",
    )
    assert gang.hand_levels == ("topology.gpufabric.io/block",)


def test_the_runbook_never_hand_labels_the_clique() -> None:
    config = gb200()
    config["gpufabric:scheduling"]["topologyLevels"] = [
        "topology.gpufabric.io/block",
        "kubernetes.io/hostname",
    ]
    text = render(plan_of(config), collect("t", model_of(config)))
    labels = [line for line in text.splitlines() if line.startswith("kubectl label node")]
    assert labels
    assert all("gpu.clique" not in line for line in labels)
    assert "which GPU Feature Discovery sets" in text
    assert "systemctl mask nvidia-imex.service" in text
    assert "#### NVL72 racks: ComputeDomains and IMEX" in text


# ----------------------------------------------------------------------------- jobs


@pytest.mark.parametrize("kind", ["mpijob", "pytorchjob"])
def test_a_36_tray_job_carries_one_compute_domain_and_a_channel_claim_on_every_pod(
    kind: str,
) -> None:
    objects = _job(gb200(), kind, 36)
    domains = [o for o in objects if o["kind"] == "ComputeDomain"]
    assert len(domains) == 1
    assert objects[0] is domains[0]
    (domain,) = domains
    assert domain["spec"]["numNodes"] == 36
    template = domain["spec"]["channel"]["resourceClaimTemplate"]["name"]
    job = objects[-1]
    pods = gpu_pods(job)
    replicas = sum(
        r["replicas"]
        for r in (job["spec"].get("mpiReplicaSpecs") or job["spec"]["pytorchReplicaSpecs"]).values()
        if "resourceClaims" in r["template"]["spec"]
    )
    assert replicas == 36
    for pod in pods:
        spec = pod["spec"]
        assert spec["resourceClaims"] == [
            {"name": "imex-channel", "resourceClaimTemplateName": template}
        ]
        (container,) = spec["containers"]
        assert container["resources"]["claims"] == [{"name": "imex-channel"}]


def test_a_one_tray_job_needs_no_compute_domain() -> None:
    (job,) = _job(gb200(), "mpijob", 1)
    assert all("resourceClaims" not in p["spec"] for p in gpu_pods(job))


def test_a_multi_tray_trainjob_is_refused_naming_the_kinds_that_work() -> None:
    config = gb200()
    config["gpufabric:training"]["trainer"] = {"enabled": True}
    with pytest.raises(StackError) as info:
        _job(config, "trainjob", 4)
    (problem,) = info.value.problems
    assert problem.path == "--kind"
    assert "mpijob, pytorchjob" in problem.message


@pytest.mark.parametrize("variant", [gb200, gb300])
def test_the_acceptance_job_runs_in_a_compute_domain_created_with_it(variant: Any) -> None:
    plan = plan_of(variant())
    job = nccl_job.acceptance_job(plan, "frontier-pretrain", nodes=18)
    assert job["metadata"]["annotations"][nccl_job.COMPUTE_DOMAIN_NODES] == "18"
    companions = nccl_job.companions(job)
    domains = [c for c in companions if c["kind"] == "ComputeDomain"]
    assert domains == [
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomain",
            "metadata": {"name": "gpufabric-nccl-imex", "namespace": "frontier-pretrain"},
        }
    ]
    for pod in gpu_pods(job):
        claims = pod["spec"]["resourceClaims"]
        assert claims[0]["resourceClaimTemplateName"] == "gpufabric-nccl-imex-channel"


def test_the_gb300_variant_runs_its_acceptance_as_a_pytorchjob() -> None:
    job = nccl_job.acceptance_job(plan_of(gb300()), "frontier-pretrain", nodes=2)
    assert job["kind"] == "PyTorchJob"


def test_a_run_creates_the_compute_domain_owned_by_the_job() -> None:
    job = nccl_job.acceptance_job(plan_of(gb200()), "frontier-pretrain", nodes=4)
    created: list[dict[str, Any]] = []

    class Kube:
        def create(self, obj: dict[str, Any]) -> dict[str, Any]:
            created.append(copy.deepcopy(obj))
            return obj

    made: list[dict[str, Any]] = []
    answer = {**job, "metadata": {**job["metadata"], "uid": "u-1"}}
    nccl_job._create_companions(Kube(), job, answer, made, lambda _m: None)  # type: ignore[arg-type]
    (domain,) = created
    assert domain["kind"] == "ComputeDomain"
    assert domain["spec"]["numNodes"] == 4
    assert domain["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert made == [domain]


def test_the_clique_level_and_label_are_never_the_stacks() -> None:
    """A new user listed the clique as a topology level (Kueue got it twice: a Topology its
    API refuses at apply, immutably) and hand-set it on a node (fighting GFD)."""
    from builders import example_config, problems_of

    config = example_config("gb200-nvl72")
    config["gpufabric:scheduling"]["topologyLevels"] = [
        "nvidia.com/gpu.clique",
        "kubernetes.io/hostname",
    ]
    assert "which gpufabric adds itself" in problems_of(config)["scheduling.topologyLevels[0]"]
    config = example_config("gb200-nvl72")
    config["gpufabric:scheduling"]["nodeTopology"] = {"t1": {"nvidia.com/gpu.clique": "u.1"}}
    assert "set by GPU Feature Discovery" in problems_of(config)["scheduling.nodeTopology.t1"]


def test_driver_versions_are_read_as_written() -> None:
    from builders import example_config, problems_of

    for value, words in (
        (570, "YAML read 570 as a number"),
        ("r580", "'r580' is not a driver version"),
    ):
        config = example_config("gb200-nvl72")
        config.setdefault("gpufabric:gpuOperator", {}).setdefault("driver", {})["version"] = value
        assert words in problems_of(config)["gpuOperator.driver.version"]


def test_a_system_the_gpu_model_contradicts_is_a_warning() -> None:
    from builders import example_config, model_of

    from gpufabric.model.stackfile import stack_warnings

    config = example_config("gb200-nvl72")
    config["gpufabric:gpuNodes"]["nvlink"] = {"system": "GB300-NVL72"}
    config["gpufabric:gpuNodes"]["gpuModel"] = "GB200"
    warnings = [str(w) for w in stack_warnings(model_of(config))]
    assert any(
        "'GB200' names GB200, but gpuNodes.nvlink.system is GB300-NVL72" in w for w in warnings
    )


def test_a_job_of_one_racks_trays_must_run_in_one_rack() -> None:
    """Judged inside one NVLink domain, a run of at most 18 trays is required (not merely
    preferred) to fit one clique; a larger one prefers it; a pinned sweep pair is placed by
    its pins (a pair across racks must stay admissible)."""
    from gpufabric.authorities import kueue
    from gpufabric.verify.nccl import job as nccl

    plan = plan_of(example_config("gb200-nvl72"))

    def worker(job: dict[str, Any]) -> dict[str, str]:
        annotations: dict[str, str] = gpu_pods(job)[0]["metadata"]["annotations"]
        return annotations

    tenant = "frontier-pretrain"
    one_rack = nccl.acceptance_job(plan, tenant, 18)
    assert worker(one_rack)[kueue.TOPOLOGY_REQUIRED] == "nvidia.com/gpu.clique"
    racks = nccl.acceptance_job(plan, tenant, 36)
    assert kueue.TOPOLOGY_REQUIRED not in worker(racks)
    assert worker(racks)[kueue.TOPOLOGY_HINT] == "nvidia.com/gpu.clique"
    pair = nccl.acceptance_job(plan, tenant, 2, pin_nodes=("tray-a", "tray-b"))
    assert kueue.TOPOLOGY_REQUIRED not in worker(pair)
