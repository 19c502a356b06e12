"""`gpufabric job`: manifests wired for each stack, kind and authority, validated against the
CRDs, and clear refusals for requests the stack cannot run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import gpu_pods
from conftest import EXAMPLE_STACKS, example_config, sections

from gpufabric.authorities import kueue, volcano
from gpufabric.cli import main
from gpufabric.model.problems import StackError
from gpufabric.model.stackfile import load_stack, model_from_config
from gpufabric.outputs.jobs import JOB_KINDS, JobRequest, job_manifest
from gpufabric.outputs.render import render_files
from gpufabric.outputs.schema import validate_objects
from gpufabric.plan.build import Plan, build_plan
from gpufabric.plan.resolve import on_one_leaf


def setup(config: dict[str, Any]) -> tuple[Plan, Any]:
    model = model_from_config(sections(config), "t", from_file=True)
    return build_plan("t", model), model


def installed(config: dict[str, Any]) -> list[str]:
    t = config.get("gpufabric:training", {})
    out = []
    if t.get("mpiOperator", True):
        out.append("mpijob")
    if "pytorchjob" in t.get("trainingOperator", {}).get("schemes", []):
        out.append("pytorchjob")
    if t.get("trainer", {}).get("enabled"):
        out.append("trainjob")
    return out


CASES = [
    (name, gang, kind)
    for name in EXAMPLE_STACKS
    for gang in ("kueue", "volcano")
    for kind in installed(example_config(name))
]


def config_for(name: str, gang: str) -> dict[str, Any]:
    config = example_config(name)
    config["gpufabric:scheduling"]["gang"] = gang
    levels = config["gpufabric:scheduling"].get("topologyLevels")
    if levels and levels[-1] != "kubernetes.io/hostname":
        levels.append("kubernetes.io/hostname")
    return config


@pytest.mark.parametrize(("name", "gang", "kind"), CASES)
def test_job_is_wired_for_the_stack_and_tenant(name: str, gang: str, kind: str) -> None:
    config = config_for(name, gang)
    plan, _ = setup(config)
    if plan.facts.fleet:  # a fleet's job runs in one pool: the last, on its own rails
        plan = plan.for_pool(plan.facts.pool_names[-1])
    # the last tenant whose queue admits a two-node job (dgx-h100's last has one node's GPUs)
    tenant = next(
        t["namespace"]
        for t in reversed(config["gpufabric:tenants"])
        if plan.facts.tenants[t["namespace"]].gpu_admissible >= 2 * plan.facts.nodes.gpus_per_node
    )
    wiring = plan.wiring[tenant]
    leaf = next(iter(wiring.leaf_networks), None)  # rails routed per leaf: a job names one
    request = JobRequest(tenant=tenant, kind=kind, nodes=2, leaf=leaf)  # type: ignore[arg-type]
    job = job_manifest(plan, request)
    if leaf is not None:
        wiring = on_one_leaf(wiring, leaf)
    gpus = plan.facts.nodes.gpus_per_node
    meta = job["metadata"]
    assert meta["namespace"] == tenant
    if gang == "kueue":
        assert meta["labels"][kueue.QUEUE_LABEL] == kueue.LOCAL_QUEUE_NAME
        assert meta["labels"][kueue.PRIORITY_LABEL] == f"tenant-{tenant}"
    elif kind != "trainjob":
        assert meta["annotations"][volcano.QUEUE_ANNOTATION] == tenant
        policy = job["spec"]["runPolicy"]["schedulingPolicy"]
        assert policy["queue"] == tenant
        # the gang is the GPU pods; an MPIJob launcher joins once the workers are ready
        assert policy["minAvailable"] == 2
    for template in gpu_pods(job):
        annotations = template["metadata"]["annotations"]
        assert annotations["k8s.v1.cni.cncf.io/networks"] == wiring.networks
        assert json.loads(annotations["k8s.v1.cni.cncf.io/networks"])
        if gang == "kueue":  # a topology to place by: preferred, or one rack required (NVL72)
            assert {
                "kueue.x-k8s.io/podset-preferred-topology",
                "kueue.x-k8s.io/podset-required-topology",
            } & set(annotations)
        spec = template["spec"]
        (container,) = spec["containers"]
        assert container["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
        assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
        (shm,) = [v for v in spec["volumes"] if v["name"] == "dshm"]
        assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": f"{8 * gpus}Gi"}
        if kind != "trainjob":
            assert container["envFrom"] == [{"configMapRef": {"name": wiring.nccl_env_name}}]
            assert container["resources"]["limits"] == {
                "nvidia.com/gpu": gpus,
                **wiring.rdma_resources,
            }
    if kind == "mpijob":
        spec = job["spec"]
        assert spec["slotsPerWorker"] == gpus
        assert spec["runPolicy"]["cleanPodPolicy"] == "Running"
        assert spec["launcherCreationPolicy"] == "WaitForWorkersReady"
        assert spec["mpiReplicaSpecs"]["Worker"]["replicas"] == 2
        launcher = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
        assert launcher["command"][:4] == ["mpirun", "--allow-run-as-root", "-np", str(2 * gpus)]
        for var in wiring.nccl_env:
            assert ["-x", var] in [
                launcher["command"][i : i + 2] for i in range(len(launcher["command"]))
            ]
    if kind == "pytorchjob":
        assert job["spec"]["nprocPerNode"] == str(gpus)
        assert job["spec"]["runPolicy"]["cleanPodPolicy"] == "Running"
    if kind == "trainjob":
        trainer = job["spec"]["trainer"]
        assert trainer["numNodes"] == 2
        assert trainer["numProcPerNode"] == gpus
        assert trainer["resourcesPerNode"]["limits"] == {
            "nvidia.com/gpu": gpus,
            **wiring.rdma_resources,
        }
        from_config = [e for e in trainer["env"] if "valueFrom" in e]
        assert {e["name"] for e in from_config} == set(wiring.nccl_env)
        assert all(
            e["valueFrom"]["configMapKeyRef"]["name"] == wiring.nccl_env_name for e in from_config
        )
        own = {e["name"]: e["value"] for e in trainer["env"] if "valueFrom" not in e}
        assert own == _checkpoint_env(plan, tenant, f"trainjob/{job['metadata']['name']}")
        if gang == "volcano":
            patch = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]
            assert patch["metadata"]["annotations"] == {volcano.QUEUE_ANNOTATION: tenant}


def _checkpoint_env(plan: Plan, tenant: str, job: str) -> dict[str, str]:
    storage = plan.facts.storage_of(tenant)
    claim = storage.checkpoint_claim if storage else None
    return {} if claim is None else {"GPUFABRIC_CHECKPOINT_DIR": f"{claim.mount_path}/{job}"}


@pytest.mark.parametrize(("name", "gang", "kind"), CASES)
def test_job_validates_against_the_crds(name: str, gang: str, kind: str, crd_dir: Path) -> None:
    plan, model = setup(config_for(name, gang))
    tenant = model.tenants[0].namespace
    leaf = next(iter(plan.wiring[tenant].leaf_networks), None)
    request = JobRequest(tenant=tenant, kind=kind, leaf=leaf)  # type: ignore[arg-type]
    job = job_manifest(plan, request)
    report = validate_objects([job], model.cluster.kubernetes_minor, crd_dir)
    assert report.ok, report.errors
    assert report.checked_custom == 1


def test_cli_prints_the_manifest(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "job",
        "--stack",
        "prod-ib",
        "--tenant",
        "llm-finetune",
        "--kind",
        "mpijob",
        "--nodes",
        "4",
        "--image",
        "harbor.prod-ib.example.internal/team/nccl:1",
        "--command",
        "all_reduce_perf_mpi -b 8 -e 16G -f 2",
        "--name",
        "nccl-check",
    ]
    assert main(argv) == 0
    job = yaml.safe_load(capsys.readouterr().out)
    assert job["metadata"]["name"] == "nccl-check"
    assert job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 4
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert launcher["image"] == "harbor.prod-ib.example.internal/team/nccl:1"
    assert launcher["command"][-7:] == ["all_reduce_perf_mpi", "-b", "8", "-e", "16G", "-f", "2"]


def test_cli_output_is_deterministic(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["job", "--stack", "prod-ib", "--tenant", "eval", "--kind", "trainjob"]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert main(argv) == 0
    assert capsys.readouterr().out == first


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--tenant", "nobody", "--kind", "mpijob"],
            "--tenant: 'nobody' is not a tenant of this stack; accepted: team-speech, team-vision",
        ),
        (
            ["--tenant", "team-vision", "--kind", "trainjob"],
            "--kind: trainjob: training.trainer.enabled is false",
        ),
        (
            ["--tenant", "team-vision", "--kind", "mpijob", "--nodes", "99"],
            "--nodes: 99 is not between 1 and the stack's 4 GPU nodes",
        ),
        (
            ["--tenant", "team-vision", "--kind", "mpijob", "--name", "Bad_Name"],
            "--name: 'Bad_Name' is not a valid job name",
        ),
        (
            ["--tenant", "team-vision", "--kind", "mpijob", "--runtime", "torch-distributed"],
            "--runtime: applies to --kind trainjob only",
        ),
    ],
)
def test_bad_requests_exit_2_naming_the_option(
    args: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["job", "--stack", "lab-roce", *args]) == 2
    captured = capsys.readouterr()
    assert expected in captured.err
    assert captured.out == ""
    assert "Traceback" not in captured.err


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--image", "x y"], "--image: 'x y' is not an image reference; expected an image"),
        (["--image", "nvcr.io/x:$(id)"], "--image: 'nvcr.io/x:$(id)' is not an image reference"),
        (["--image", "nvcr.io/Upper/x"], "--image: 'nvcr.io/Upper/x' is not an image reference"),
        (["--image", ""], "--image: '' is empty; expected an image reference"),
        (["--command", ""], "--command: '' is empty; give the program to run"),
        (["--command", "   "], "--command: '   ' is empty"),
    ],
)
def test_an_image_or_command_that_cannot_run_exits_2(
    args: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: written into the job as given (an image no runtime pulls, shell syntax in a
    YAML field), and an empty --command silently ran the default NCCL test."""
    argv = ["job", "--stack", "lab-roce", "--tenant", "team-vision", "--kind", "mpijob"]
    assert main([*argv, *args]) == 2
    captured = capsys.readouterr()
    assert expected in captured.err
    assert captured.out == ""
    assert "Traceback" not in captured.err


def _images(out: str) -> set[str]:
    job = yaml.safe_load(out)
    replicas = job["spec"]["mpiReplicaSpecs"].values()
    return {c["image"] for r in replicas for c in r["template"]["spec"]["containers"]}


@pytest.mark.parametrize(
    ("image", "pulled"),
    [
        (
            "nvcr.io/nvidia/pytorch:24.12-py3",
            "harbor.prod-ib.example.internal/nvcr/nvidia/pytorch:24.12-py3",
        ),
        ("alpine:3", "harbor.prod-ib.example.internal/dockerhub/library/alpine:3"),
        (
            "harbor.prod-ib.example.internal/nvcr/own:1",
            "harbor.prod-ib.example.internal/nvcr/own:1",
        ),
    ],
)
def test_an_image_goes_through_the_stacks_mirrors(
    image: str, pulled: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An air-gapped stack (prod-ib) pulls --image through its mirror as its own images."""
    argv = ["job", "--stack", "prod-ib", "--tenant", "eval", "--kind", "mpijob"]
    assert main([*argv, "--image", image]) == 0
    assert _images(capsys.readouterr().out) == {pulled}


def test_an_air_gapped_stack_refuses_an_image_it_has_no_mirror_for(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["job", "--stack", "prod-ib", "--tenant", "eval", "--kind", "mpijob"]
    assert main([*argv, "--image", "public.ecr.aws/team/trainer:1"]) == 2
    captured = capsys.readouterr()
    assert (
        "--image: 'public.ecr.aws/team/trainer:1' is pulled from public.ecr.aws, which this "
        "air-gapped stack has no mirror for" in captured.err
    )
    assert "add 'public.ecr.aws: <mirror prefix>' to sources.registries" in captured.err
    assert captured.out == ""
    # a stack that is not air-gapped pulls an unmirrored registry as given
    assert (
        main(
            [
                "job",
                "--stack",
                "lab-roce",
                "--tenant",
                "team-vision",
                "--kind",
                "mpijob",
                "--image",
                "quay.io/team/trainer:1",
            ]
        )
        == 0
    )
    assert _images(capsys.readouterr().out) == {"quay.io/team/trainer:1"}


def test_all_kinds_are_offered() -> None:
    assert set(JOB_KINDS) == {"mpijob", "pytorchjob", "trainjob"}


def test_routed_leaves_a_job_runs_under_one_leaf_with_its_networks(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Rails routed per leaf (routed-b200): each leaf block is its own network, so a job
    names its leaf and its pods attach that leaf's networks and are placed under it. Before:
    the job attached the rails' own networks, which such a fabric does not have, and the
    tenant admission policy refused its pods."""
    base = ["job", "--stack", "routed-b200", "--tenant", "ml-train", "--kind", "mpijob"]
    assert main(base) == 2
    err = capsys.readouterr().err
    assert "--leaf: this stack's rails are routed per leaf" in err
    assert "accepted: leaf-01, leaf-02" in err
    assert main([*base, "--leaf", "leaf-03"]) == 2
    assert "'leaf-03' is not a leaf" in capsys.readouterr().err
    assert main([*base, "--leaf", "leaf-02"]) == 0
    job = yaml.safe_load(capsys.readouterr().out)
    for template in gpu_pods(job):
        nets = json.loads(template["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"])
        assert [n["name"] for n in nets] == [f"rail{i}-leaf-02" for i in range(4)]
        assert template["spec"]["nodeSelector"]["topology.gpufabric.io/leaf"] == "leaf-02"
    args = ["job", "--stack", "lab-roce", "--tenant", "team-vision", "--kind", "mpijob"]
    assert main([*args, "--leaf", "leaf-01"]) == 2
    assert "--leaf: applies only to stacks whose rails are routed" in capsys.readouterr().err


def test_routed_leaves_the_tenant_configmap_names_each_leafs_networks() -> None:
    plan = build_plan("routed-b200", load_stack("routed-b200").model)
    files = render_files(plan)
    (name,) = [f for f in files if f.endswith("nccl-env.yaml")]
    annotations = yaml.safe_load(files[name])["metadata"]["annotations"]
    assert annotations["gpufabric.io/networks"] == ""
    for leaf in ("leaf-01", "leaf-02"):
        nets = json.loads(annotations[f"gpufabric.io/networks-{leaf}"])
        assert {n["name"] for n in nets} == {f"rail{i}-{leaf}" for i in range(4)}


def test_a_job_the_tenants_queue_can_never_admit_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """prod-ib's eval holds 16 GPUs and borrows none: a four-node job (32 GPUs) would sit in
    its queue forever, so nothing is printed to apply; the error names the sizes and the
    tenants that would be admitted, and those are accepted."""
    job = ["job", "--stack", "prod-ib", "--kind", "mpijob"]
    assert main([*job, "--tenant", "eval", "--nodes", "4"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "--nodes: 4 nodes ask for 32 GPUs (8 a node), but tenant 'eval' can never" in err
    assert "more than 16 (gpuQuota 16 + gpuBorrowingLimit 0" in err
    assert "accepted: --nodes 1 to 2, --tenant llm-pretrain (up to 128), " in err
    assert "--tenant research (up to 48), or the tenant's gpuQuota" in err
    assert "Traceback" not in err
    assert main([*job, "--tenant", "eval", "--nodes", "2"]) == 0
    assert main([*job, "--tenant", "research", "--nodes", "4"]) == 0


@pytest.mark.parametrize("gang", ["kueue", "volcano"])
def test_a_job_within_the_borrowing_limit_is_accepted(gang: str) -> None:
    """Beyond its quota a job is admitted once others' quota is idle: accepted up to quota
    + borrowing limit (lab-roce's team-vision: 16 + 8 = three nodes), refused beyond."""
    config = config_for("lab-roce", gang)
    config["gpufabric:tenants"][0]["gpuBorrowingLimit"] = 8
    plan, _ = setup(config)
    manifest = job_manifest(plan, JobRequest(tenant="team-vision", kind="pytorchjob", nodes=3))
    assert manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2
    with pytest.raises(StackError, match="can never be admitted with more than 24"):
        job_manifest(plan, JobRequest(tenant="team-vision", kind="pytorchjob", nodes=4))
