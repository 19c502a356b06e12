"""Every generated job can start: the gang and launcher rules of each operator, at the
pinned versions, simulated for each job kind under each queueing authority.

The rules come from the operators' source:
- MPI Operator v0.8 (pkg/controller/mpi_job_controller.go, podgroup.go): workers are created
  at once; the launcher at once with launcherCreationPolicy AtStartup, or only when every
  worker is Ready with WaitForWorkersReady; the Volcano PodGroup's minMember is
  runPolicy.schedulingPolicy.minAvailable, by default workers + 1.
- Training Operator v1.9: every replica's pods are created at once; the PodGroup's minMember
  is schedulingPolicy.minAvailable, by default all replicas.
- Trainer v2 / JobSet: every replicated job's pods are created at once; with the Volcano
  podGroupPolicy the PodGroup's minMember is every pod.
- Volcano's gang plugin binds no pod of a PodGroup until minMember pods exist and fit.
- Kueue admits a workload's pod sets together when the ClusterQueue (with borrowing) covers
  the whole request, then unsuspends the job; waitForPodsReady evicts it if its pods are not
  ready in time, and counts the launcher once it exists.
"""

from __future__ import annotations

from typing import Any

import pytest
from builders import example_config, plan_of

from gpufabric.outputs.jobs import JobRequest, job_manifest
from gpufabric.plan.build import Plan

KINDS = ("mpijob", "pytorchjob", "trainjob")


def pods_of(job: dict[str, Any]) -> tuple[int, int, int]:
    """(pods created at start, pods created once those are ready, pods with GPUs)."""
    kind = job["kind"]
    if kind == "MPIJob":
        specs = job["spec"]["mpiReplicaSpecs"]
        workers = specs["Worker"]["replicas"]
        launcher = specs["Launcher"]["replicas"]
        if job["spec"].get("launcherCreationPolicy", "AtStartup") == "AtStartup":
            return workers + launcher, 0, workers
        return workers, launcher, workers
    if kind == "PyTorchJob":
        total = sum(r["replicas"] for r in job["spec"]["pytorchReplicaSpecs"].values())
        return total, 0, total
    nodes = job["spec"]["trainer"]["numNodes"]
    return nodes, 0, nodes


def min_member(job: dict[str, Any], at_start: int, later: int) -> int:
    policy = job["spec"].get("runPolicy", {}).get("schedulingPolicy") or {}
    if "minAvailable" in policy:
        return int(policy["minAvailable"])
    if job["kind"] == "MPIJob":
        return at_start + later if later else at_start  # operator default: workers + 1
    return at_start + later


def can_start(plan: Plan, job: dict[str, Any]) -> tuple[bool, str]:
    gpus = plan.facts.nodes.gpus_per_node
    at_start, later, gpu_pods = pods_of(job)
    if plan.facts.gang.authority == "volcano":
        need = min_member(job, at_start, later)
        if at_start < need:
            return False, (
                f"Volcano waits for {need} pods, only {at_start} exist until they run "
                f"({later} more are created once the first are ready): deadlock"
            )
        return True, f"{at_start} pods exist, the gang needs {need}"
    tenant = plan.facts.tenants[job["metadata"]["namespace"]]
    requested = gpu_pods * gpus
    if requested > tenant.gpu_limit:
        return False, f"{requested} GPUs requested, the tenant may hold {tenant.gpu_limit}"
    labels = job["metadata"].get("labels", {})
    if "kueue.x-k8s.io/queue-name" not in labels:
        return False, "no queue label: Kueue never admits it"
    return True, f"admitted as one workload of {requested} GPUs"


CASES = [
    (name, gang, kind)
    for name in ("lab-roce", "prod-ib", "roce-sriov-volcano")
    for gang in ("kueue", "volcano")
    for kind in KINDS
]


def config_for(name: str, gang: str) -> dict[str, Any]:
    config = example_config(name)
    config["gpufabric:scheduling"]["gang"] = gang
    levels = config["gpufabric:scheduling"].get("topologyLevels")
    if levels and levels[-1] != "kubernetes.io/hostname":
        levels.append("kubernetes.io/hostname")  # Kueue topologies end at the node
    training = config.setdefault("gpufabric:training", {})
    training["mpiOperator"] = True
    training.setdefault("trainingOperator", {})["schemes"] = ["pytorchjob"]
    training["trainer"] = {"enabled": True}
    return config


@pytest.mark.parametrize(("name", "gang", "kind"), CASES)
def test_every_job_kind_can_start_under_every_authority(name: str, gang: str, kind: str) -> None:
    plan = plan_of(config_for(name, gang), name)
    tenant = next(iter(plan.facts.tenants))
    job = job_manifest(plan, JobRequest(tenant=tenant, kind=kind, nodes=2))  # type: ignore[arg-type]
    ok, why = can_start(plan, job)
    assert ok, f"{name}/{gang}/{kind}: {why}"


def test_the_simulation_finds_the_mpijob_deadlock() -> None:
    """workers + 1 with WaitForWorkersReady under Volcano (kubeflow/mpi-operator#608)."""
    plan = plan_of(config_for("roce-sriov-volcano", "volcano"), "roce-sriov-volcano")
    tenant = next(iter(plan.facts.tenants))
    job = job_manifest(plan, JobRequest(tenant=tenant, kind="mpijob", nodes=2))
    job["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] = 3
    ok, why = can_start(plan, job)
    assert not ok
    assert "deadlock" in why
    del job["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"]  # the operator default
    assert not can_start(plan, job)[0]


def test_acceptance_job_can_start_under_volcano() -> None:
    from gpufabric.verify.nccl.job import acceptance_job

    plan = plan_of(config_for("roce-sriov-volcano", "volcano"), "roce-sriov-volcano")
    tenant = next(iter(plan.facts.tenants))
    ok, why = can_start(plan, acceptance_job(plan, tenant, 2))
    assert ok, why
