"""Every job `gpufabric job` writes mounts the tenant's claims and says where to checkpoint;
the NCCL acceptance job (verify nccl) mounts none, so an unbound claim cannot hold it."""

from __future__ import annotations

from typing import Any

import pytest
from builders import example_plan, gpu_pods
from conftest import example_config, sections

from gpufabric.cli import main
from gpufabric.model.stackfile import model_from_config
from gpufabric.outputs.jobs import JobRequest, job_manifest
from gpufabric.plan.build import build_plan
from gpufabric.verify.nccl.job import acceptance_job

KINDS = ("mpijob", "pytorchjob", "trainjob")


def env_of(job: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
    if job["kind"] == "TrainJob":
        entries = job["spec"]["trainer"]["env"]
    else:
        entries = container.get("env", [])
    return {e["name"]: e["value"] for e in entries if "value" in e}


@pytest.mark.parametrize("gang", ["kueue", "volcano"])
@pytest.mark.parametrize("kind", KINDS)
def test_jobs_mount_the_tenants_claims(kind: str, gang: str) -> None:
    plan = example_plan("prod-ib", gang)
    job = job_manifest(plan, JobRequest(tenant="research", kind=kind, name="llama-70b"))  # type: ignore[arg-type]
    for pod in gpu_pods(job):
        (container,) = pod["spec"]["containers"]
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        assert mounts["/checkpoints"]["readOnly"] is False
        assert mounts["/data"]["readOnly"] is True  # datasets read-only by default
        assert mounts["/scratch"]["readOnly"] is False  # the tenant's own extra claim
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        for mount in mounts.values():
            if mount["mountPath"] == "/dev/shm":
                continue
            claim = volumes[mount["name"]]["persistentVolumeClaim"]
            assert claim["readOnly"] is mount["readOnly"]
        assert {
            v["persistentVolumeClaim"]["claimName"]
            for v in volumes.values()
            if "persistentVolumeClaim" in v
        } == {
            "checkpoints",
            "datasets",
            "scratch",
        }
        assert (
            env_of(job, container)["GPUFABRIC_CHECKPOINT_DIR"] == f"/checkpoints/{kind}/llama-70b"
        )
    if kind == "mpijob":
        launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
        # ranks started over ssh get it from mpirun, not from the worker's environment
        assert "GPUFABRIC_CHECKPOINT_DIR=/checkpoints/mpijob/llama-70b" in launcher["command"]


def test_a_tenant_without_claims_gets_no_mounts() -> None:
    config = example_config("prod-ib")
    config["gpufabric:tenants"][0]["claims"] = []
    plan = build_plan("prod-ib", model_from_config(sections(config), "prod-ib", from_file=True))
    tenant = config["gpufabric:tenants"][0]["namespace"]
    job = job_manifest(plan, JobRequest(tenant=tenant, kind="pytorchjob"))
    for pod in gpu_pods(job):
        (container,) = pod["spec"]["containers"]
        assert [m["mountPath"] for m in container["volumeMounts"]] == ["/dev/shm"]
        assert "env" not in container


def test_the_nccl_acceptance_job_mounts_no_claims() -> None:
    plan = example_plan("prod-ib", "kueue")
    job = acceptance_job(plan, "research")
    for pod in gpu_pods(job):
        assert [v["name"] for v in pod["spec"]["volumes"]] == ["dshm"]


def test_plan_prints_the_claims_in_each_tenants_pod_contract(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["plan", "--stack", "prod-ib"]) == 0
    contract = capsys.readouterr().out.split("pod contract")[1]
    research = contract.split("tenants: research")[1].split("tenants:")[0]
    assert (
        "volume    /data <- claim datasets (100Ti, class gpufabric-nfsordma, read-only, "
        "transport rdma)" in research
    )
    assert "/scratch <- claim scratch" in research
    assert "/scratch" not in contract.split("tenants: research")[0]
