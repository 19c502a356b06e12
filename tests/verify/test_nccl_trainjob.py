"""``verify nccl`` (and its sweep) on a stack without the MPI Operator: the acceptance test
runs as a TrainJob through gpufabric's nccl-tests ClusterTrainingRuntime (the Trainer's MPI
policy gives the launcher the hostfile and SSH keys), with the same mpirun program, wiring,
log analysis and cleanup as the MPIJob (a PyTorchJob-only stack: test_nccl_pytorchjob.py). A
stack with no MPIJob, TrainJob or PyTorchJob is refused with the options that would give it
an acceptance job. The fake plays the
Trainer and JobSet: on create it starts the launcher pod JobSet would label, whose log is a
real nccl-tests run, and after a few polls marks the TrainJob Complete or Failed."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import body, example_config, model_of, plan_of
from fake_kube import FakeKube
from test_nccl import launcher_log

from gpufabric.cli import main
from gpufabric.model.stackfile import stack_warnings
from gpufabric.outputs.jobs import JobRequest, job_manifest
from gpufabric.outputs.schema import validate_objects
from gpufabric.plan import ids
from gpufabric.plan.training import NCCL_TESTS_RUNTIME
from gpufabric.verify.nccl import job as nccl

TRAINER_ONLY = {
    "mpiOperator": False,
    "trainer": {"enabled": True, "runtimes": ["torch-distributed"]},
}
NO_ACCEPTANCE = {"mpiOperator": False, "trainingOperator": {"schemes": ["jaxjob"]}}
TRAINJOB = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-vision/trainjobs/gpufabric-nccl"


def config(training: dict[str, Any]) -> dict[str, Any]:
    cfg = example_config("lab-roce")
    cfg["gpufabric:training"] = training
    return cfg


def trainer(log: str, outcome: str = "Complete", after_polls: int = 2) -> Any:
    """Hooks making the fake behave like the Trainer + JobSet for one TrainJob."""
    polls = {"n": 0}

    def on_create(fake: FakeKube, obj: dict[str, Any]) -> None:
        if obj["kind"] != "TrainJob":
            return
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        obj["status"] = {"conditions": []}
        for rjob, index in (("launcher", 0), ("node", 0)):
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{name}-{rjob}-0-{index}-q8z4m",
                    "namespace": ns,
                    "creationTimestamp": "2026-11-24T10:00:00Z",
                    "labels": {nccl.JOBSET_LABEL: name, nccl.REPLICATED_JOB_LABEL: rjob},
                },
                "status": {"phase": "Running"},
            }
            fake.add(pod)
            # only the launcher runs mpirun; a node pod's log is sshd's
            text = log if rjob == "launcher" else "Server listening on 0.0.0.0 port 22.\n"
            fake.logs[f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}"] = text

    def on_get(fake: FakeKube, path: str) -> None:
        if path != TRAINJOB or path not in fake.objects:
            return
        polls["n"] += 1
        if polls["n"] >= after_polls and outcome != "never":
            message = "jobset completed" if outcome == "Complete" else "launcher: exit code 1"
            fake.objects[path]["status"]["conditions"].append(
                {"type": outcome, "status": "True", "reason": outcome, "message": message}
            )

    return on_create, on_get


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    with FakeKube() as f:
        yield f


@pytest.fixture
def stack_path(write_stack: Callable[..., Path]) -> Path:
    return write_stack(config(TRAINER_ONLY), "trainer-only")


def argv(fake: FakeKube, tmp_path: Path, stack: Path, *extra: str) -> list[str]:
    cfg = str(fake.kubeconfig(tmp_path))
    return [
        "verify", "nccl", "--stack", str(stack), "--tenant", "team-vision",
        "--kubeconfig", cfg, "--context", "fake", "--poll", "0.01", *extra,
    ]  # fmt: skip


# --------------------------------------------------------------------------- the job


def test_without_mpi_operator_the_acceptance_job_is_an_mpi_trainjob() -> None:
    plan = plan_of(config(TRAINER_ONLY))
    assert plan.facts.operators.acceptance_kind == "trainjob"
    job = nccl.acceptance_job(plan, "team-vision", 2)
    assert job["kind"] == "TrainJob"
    assert job["spec"]["runtimeRef"]["name"] == NCCL_TESTS_RUNTIME
    trainer_ = job["spec"]["trainer"]
    assert trainer_["numNodes"] == 2
    # the same launcher program as the MPIJob's: nccl-tests under mpirun over every GPU
    w = nccl.wiring_for(plan, JobRequest(tenant="team-vision", kind="trainjob", nodes=2))
    assert trainer_["command"] == ["/bin/bash", "-c", nccl.launcher_script(w, 2)]
    assert "mpirun" in trainer_["command"][2]
    assert "all_reduce_perf_mpi" in trainer_["command"][2]
    assert "-np 16" in trainer_["command"][2]  # 2 nodes x 8 GPUs
    # both replicated jobs hold GPU ranks: both get the tenant's rails and /dev/shm
    patch = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    pods = {r["name"]: r["template"]["spec"]["template"] for r in patch["replicatedJobs"]}
    assert set(pods) == {"launcher", "node"}
    # the tenant's wiring, less the storage claims the acceptance job does not mount
    bare = plan_of({k: v for k, v in config(TRAINER_ONLY).items() if k != "gpufabric:storage"})
    ref = job_manifest(
        bare, JobRequest(tenant="team-vision", kind="trainjob", nodes=2, name="gpufabric-nccl")
    )
    ref_patch = ref["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    assert pods["node"] == ref_patch["replicatedJobs"][0]["template"]["spec"]["template"]
    assert pods["launcher"] == pods["node"]
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "training"


def test_the_plan_installs_the_nccl_tests_runtime_only_without_mpi_operator() -> None:
    plan = plan_of(config(TRAINER_ONLY))
    runtime = body(plan, ids.trainer_runtime(NCCL_TESTS_RUNTIME))
    mpi = runtime["spec"]["mlPolicy"]["mpi"]
    assert mpi == {
        "numProcPerNode": 8,
        "mpiImplementation": "OpenMPI",
        "sshAuthMountPath": "/root/.ssh",
        "runLauncherAsNode": True,
    }
    jobs = {r["name"]: r for r in runtime["spec"]["template"]["spec"]["replicatedJobs"]}
    image = plan.components["training-image"].image_ref
    node = jobs["node"]["template"]["spec"]["template"]["spec"]["containers"][0]
    # the node pods keep the runtime's image (trainer.image replaces the launcher's only)
    assert node["image"] == image
    assert node["command"] == ["/usr/sbin/sshd"]
    assert jobs["launcher"]["dependsOn"] == [{"name": "node", "status": "Ready"}]
    # with the MPI Operator the MPIJob is the acceptance job: no extra runtime
    both = plan_of(config({**TRAINER_ONLY, "mpiOperator": True}))
    assert both.facts.operators.acceptance_kind == "mpijob"
    assert ids.trainer_runtime(NCCL_TESTS_RUNTIME) not in {it.id for it in both.items}


@pytest.mark.shared
def test_trainjob_and_runtime_validate_against_the_trainer_crds(crd_dir: Path) -> None:
    plan = plan_of(config(TRAINER_ONLY))
    runtime = body(plan, ids.trainer_runtime(NCCL_TESTS_RUNTIME))
    jobs = [
        nccl.acceptance_job(plan, "team-vision", 2),
        nccl.acceptance_job(plan, "team-vision", 2, pin_nodes=("a", "b"), rail="rail0"),
    ]
    report = validate_objects([runtime, *jobs], plan.facts.kubernetes_minor, crd_dir)
    assert report.ok, report.errors
    assert report.checked_custom == 3


def test_a_sweep_pins_every_gpu_pod_of_the_trainjob(capsys: pytest.CaptureFixture[str]) -> None:
    plan = plan_of(config(TRAINER_ONLY))
    job = nccl.acceptance_job(plan, "team-vision", 2, name="s-r1-0", pin_nodes=("a", "b"))
    patch = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    for rjob in patch["replicatedJobs"]:
        affinity = rjob["template"]["spec"]["template"]["spec"]["affinity"]
        term = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["a", "b"]
        anti = affinity["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
        assert anti["labelSelector"]["matchLabels"] == {nccl.JOBSET_LABEL: "s-r1-0"}


def test_sweep_dry_run_prints_trainjobs(
    stack_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["verify", "nccl", "--stack", str(stack_path), "--tenant", "team-vision"]
    assert main([*args, "--sweep", "--dry-run"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert docs
    assert all(d["kind"] == "TrainJob" for d in docs)


def test_a_stack_without_an_acceptance_kind_is_refused_with_what_would_run_it(
    write_stack: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_stack(config(NO_ACCEPTANCE), "jax-only")
    code = main(["verify", "nccl", "--stack", str(path), "--tenant", "team-vision", "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2
    assert "training: this stack runs jaxjob" in err
    assert "training.mpiOperator: true" in err
    assert "training.trainer.enabled: true" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("extra", [(), ("--sweep",)])
def test_a_stack_without_an_acceptance_kind_is_refused_before_the_cluster_is_asked(
    fake: FakeKube,
    tmp_path: Path,
    write_stack: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
    extra: tuple[str, ...],
) -> None:
    """The sweep asked the cluster for its nodes first and only then found that the stack
    has no acceptance job (exit 3 without a cluster): bad input is exit 2, nothing asked."""
    path = write_stack(config(NO_ACCEPTANCE), "jax-only")
    code = main(argv(fake, tmp_path, path, *extra))
    err = capsys.readouterr().err
    assert code == 2
    assert "training: this stack runs jaxjob" in err
    assert fake.requests == []


def test_only_a_stack_without_an_acceptance_job_is_warned_about_it() -> None:
    """A TrainJob-accepted stack was warned that verify nccl "runs as an MPIJob and will not
    work"; only a stack with neither MPI launcher is, with the options that give it one."""
    assert not [str(w) for w in stack_warnings(model_of(config(TRAINER_ONLY)))]
    [warning] = [str(w) for w in stack_warnings(model_of(config(NO_ACCEPTANCE)))]
    assert warning.startswith("training.mpiOperator: false, training.trainer.enabled false")
    assert "training.mpiOperator: true (MPIJob)" in warning
    assert "training.trainer.enabled: true (TrainJob)" in warning


# ------------------------------------------------------------------- against the fake


def test_passing_trainjob_run_reads_the_launcher_and_cleans_up(
    fake: FakeKube, tmp_path: Path, stack_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    on_create, on_get = trainer(launcher_log())
    fake.on_create.append(on_create)
    fake.on_get.append(on_get)
    code = main(argv(fake, tmp_path, stack_path, "--json"))
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["verdict"] == "PASS", doc["reasons"]
    assert code == 0
    assert "created TrainJob team-vision/gpufabric-nccl" in err
    assert "deleted TrainJob team-vision/gpufabric-nccl" in err
    assert TRAINJOB not in fake.objects
    # both tests were read from the launcher's log (not a node pod's sshd log)
    assert {r["test"] for r in doc["runs"]} == set(nccl.TESTS)


def test_failed_trainjob_fails_with_its_message(
    fake: FakeKube, tmp_path: Path, stack_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    on_create, on_get = trainer(launcher_log(all_reduce="socket-fallback.log"), "Failed")
    fake.on_create.append(on_create)
    fake.on_get.append(on_get)
    assert main(argv(fake, tmp_path, stack_path, "--json")) == 4
    doc = json.loads(capsys.readouterr().out)
    assert doc["reasons"][0] == "the TrainJob failed: launcher: exit code 1"


def test_timeout_names_the_trainjob_and_deletes_it(
    fake: FakeKube, tmp_path: Path, stack_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    on_create, on_get = trainer("", outcome="never")
    fake.on_create.append(on_create)
    fake.on_get.append(on_get)
    code = main(argv(fake, tmp_path, stack_path, "--timeout", "1", "--json"))
    doc = json.loads(capsys.readouterr().out)
    assert code == 5
    assert "kubectl -n team-vision describe trainjob gpufabric-nccl" in doc["reasons"][0]
    assert TRAINJOB not in fake.objects


def test_an_existing_trainjob_is_not_overwritten(
    fake: FakeKube, tmp_path: Path, stack_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = plan_of(config(TRAINER_ONLY))
    fake.add(nccl.acceptance_job(plan, "team-vision", 2))
    assert main(argv(fake, tmp_path, stack_path)) != 0
    assert "kubectl -n team-vision delete trainjob gpufabric-nccl" in capsys.readouterr().err
    assert TRAINJOB in fake.objects


def test_delete_command_names_the_kind_created() -> None:
    trainjob = nccl.acceptance_job(plan_of(config(TRAINER_ONLY)), "team-vision", 2)
    mpijob = nccl.acceptance_job(plan_of(example_config("lab-roce")), "team-vision", 2)
    assert nccl.delete_command(trainjob) == (
        "kubectl -n team-vision delete trainjob gpufabric-nccl --ignore-not-found"
    )
    assert nccl.delete_command(mpijob) == (
        "kubectl -n team-vision delete mpijob gpufabric-nccl --ignore-not-found"
    )
