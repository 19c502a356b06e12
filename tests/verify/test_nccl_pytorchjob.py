"""``verify nccl`` (and its sweep) on a stack whose only job operator is the Training
Operator: the acceptance test runs as a PyTorchJob whose Master runs the same mpirun program
(nccl-tests all_reduce/all_gather, judged by the same analyzer) over sshd Workers, with an
SSH key pair minted per run into a Secret the job owns. The fake plays the Training
Operator (tests/fake_kube.py PyTorchJobOperator): pods and headless Services per replica,
pods held while the Secret they mount is missing, Succeeded when the Master succeeds,
Failed when a Worker fails."""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import stat
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from admission import Request
from builders import example_config, model_of, plan_of
from fake_kube import FakeKube, PyTorchJobOperator
from tenant_admission import policies
from test_nccl import launcher_log

from gpufabric.cli import main
from gpufabric.model.stackfile import stack_warnings
from gpufabric.outputs import jobs
from gpufabric.outputs.jobs import JobRequest, job_manifest
from gpufabric.outputs.schema import validate_objects
from gpufabric.plan.build import Plan
from gpufabric.verify.nccl import job as nccl
from gpufabric.verify.nccl import sshkeys

PYTORCH_ONLY = {"mpiOperator": False, "trainingOperator": {"schemes": ["pytorchjob"]}}
NS = "team-vision"
JOB = f"/apis/kubeflow.org/v1/namespaces/{NS}/pytorchjobs/gpufabric-nccl"
SECRET = f"/api/v1/namespaces/{NS}/secrets/gpufabric-nccl-ssh"


def config(training: dict[str, Any] = PYTORCH_ONLY, borrow: int = 0) -> dict[str, Any]:
    cfg = example_config("lab-roce")
    cfg["gpufabric:training"] = training
    cfg["gpufabric:tenants"][0]["gpuBorrowingLimit"] = borrow
    return cfg


def three_node_plan() -> Plan:
    """team-vision (16 GPUs) borrows team-speech's idle 16: its three-node jobs (24 GPUs)
    are admitted once team-speech's quota is idle."""
    return plan_of(config(borrow=16))


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    with FakeKube() as f:
        yield f


@pytest.fixture
def stack_path(write_stack: Callable[..., Path]) -> Path:
    return write_stack(config(), "pytorch-only")


def argv(fake: FakeKube, tmp_path: Path, stack: Path, *extra: str) -> list[str]:
    cfg = str(fake.kubeconfig(tmp_path))
    return [
        "verify", "nccl", "--stack", str(stack), "--tenant", NS,
        "--kubeconfig", cfg, "--context", "fake", "--poll", "0.01", *extra,
    ]  # fmt: skip


def private_keys(secret: dict[str, Any]) -> str:
    return base64.b64decode(secret["data"]["ssh-privatekey"]).decode()


# --------------------------------------------------------------------------- the fact


@pytest.mark.parametrize(
    ("training", "kind"),
    [
        (PYTORCH_ONLY, "pytorchjob"),
        ({**PYTORCH_ONLY, "trainer": {"enabled": True, "runtimes": ["torch-distributed"]}}, "trainjob"),
        ({**PYTORCH_ONLY, "mpiOperator": True}, "mpijob"),
        ({"mpiOperator": False, "trainingOperator": {"schemes": ["jaxjob"]}}, None),
    ],
)  # fmt: skip
def test_the_acceptance_kind_prefers_mpijob_then_trainjob_then_pytorchjob(
    training: dict[str, Any], kind: str | None
) -> None:
    assert plan_of(config(training)).facts.operators.acceptance_kind == kind


def test_a_pytorchjob_stack_is_no_longer_warned_that_it_has_no_acceptance_job() -> None:
    """It was: "verify nccl has no job to run its acceptance test as"."""
    assert not [str(w) for w in stack_warnings(model_of(config()))]
    jax = config({"mpiOperator": False, "trainingOperator": {"schemes": ["jaxjob"]}})
    [warning] = [str(w) for w in stack_warnings(model_of(jax))]
    assert "'pytorchjob' in training.trainingOperator.schemes (PyTorchJob)" in warning


def test_a_stack_without_any_acceptance_kind_is_refused_naming_the_pytorchjob_option(
    write_stack: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    jax = config({"mpiOperator": False, "trainingOperator": {"schemes": ["jaxjob"]}})
    path = write_stack(jax, "jax-only")
    code = main(["verify", "nccl", "--stack", str(path), "--tenant", NS, "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2
    assert "training: this stack runs jaxjob" in err
    assert "'pytorchjob' in training.trainingOperator.schemes" in err
    assert "Traceback" not in err


# --------------------------------------------------------------------------- the job


def test_the_acceptance_job_is_a_pytorchjob_whose_master_runs_the_mpi_test() -> None:
    plan = three_node_plan()
    job = nccl.acceptance_job(plan, NS, 3)
    assert job["kind"] == "PyTorchJob"
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["replicas"] == 1
    assert specs["Worker"]["replicas"] == 2
    assert {s["restartPolicy"] for s in specs.values()} == {"Never"}
    master = specs["Master"]["template"]["spec"]["containers"][0]
    worker = specs["Worker"]["template"]["spec"]["containers"][0]
    # the Training Operator injects its variables into the container named pytorch
    assert master["name"] == worker["name"] == "pytorch"
    # the same program as the MPIJob's: nccl-tests under mpirun over every GPU of 3 nodes
    w = nccl.wiring_for(plan, JobRequest(tenant=NS, kind="pytorchjob", nodes=3))
    script = master["command"][2]
    assert master["command"][:2] == ["/bin/bash", "-c"]
    assert script.endswith(nccl.launcher_script(w, 3))
    assert "-np 24" in script
    hostfile = [f"gpufabric-nccl-{r} slots=8" for r in ("master-0", "worker-0", "worker-1")]
    assert all(line in script for line in hostfile)
    env = {e["name"]: e["value"] for e in master["env"]}
    assert env["OMPI_MCA_orte_default_hostfile"] == jobs.HOSTFILE
    assert worker["command"] == ["/usr/sbin/sshd", "-De"]
    assert worker["readinessProbe"] == {"tcpSocket": {"port": 22}, "initialDelaySeconds": 5}
    # every replica is a GPU node with the tenant's wiring (a PyTorchJob's as gpufabric
    # job writes it, less the storage claims) and the run's keys at /root/.ssh
    bare = plan_of({k: v for k, v in config(borrow=16).items() if k != "gpufabric:storage"})
    ref = job_manifest(
        bare, JobRequest(tenant=NS, kind="pytorchjob", nodes=3, name="gpufabric-nccl")
    )
    ref_pod = ref["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    for spec in specs.values():
        pod = spec["template"]
        assert pod["metadata"] == ref_pod["metadata"]
        ref_c = ref_pod["spec"]["containers"][0]
        c = pod["spec"]["containers"][0]
        for key in ("resources", "envFrom", "securityContext", "image"):
            assert c[key] == ref_c[key], key
        assert c["volumeMounts"] == [*ref_c["volumeMounts"], _ssh_mount()]
        volume = pod["spec"]["volumes"][-1]
        assert volume["secret"]["secretName"] == "gpufabric-nccl-ssh"
        assert volume["secret"]["defaultMode"] == 0o600
    # one gang of 3 GPU pods, as gpufabric job's, but never restarted: the test's failure is
    # its result (a training job's failure policy does not apply)
    ref_policy = dict(ref["spec"]["runPolicy"], backoffLimit=0)
    ref_policy.pop("activeDeadlineSeconds", None)
    assert job["spec"]["runPolicy"] == ref_policy
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "training"


def test_under_volcano_the_job_carries_the_gang_of_every_pytorchjob() -> None:
    """The queue, priority and gang (minAvailable = every replica) a PyTorchJob gets from
    gpufabric job under Volcano, and the same pod metadata."""
    cfg = {**example_config("roce-sriov-volcano"), "gpufabric:training": PYTORCH_ONLY}
    cfg.pop("gpufabric:storage", None)
    plan = plan_of(cfg)
    tenant = next(iter(plan.facts.tenants))
    job = nccl.acceptance_job(plan, tenant, 3)
    ref = job_manifest(
        plan, JobRequest(tenant=tenant, kind="pytorchjob", nodes=3, name="gpufabric-nccl")
    )
    ref_policy = dict(ref["spec"]["runPolicy"], backoffLimit=0)  # the test never restarts
    ref_policy.pop("activeDeadlineSeconds", None)
    assert job["spec"]["runPolicy"] == ref_policy
    assert job["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] == 3
    ref_pod = ref["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        assert spec["template"]["metadata"] == ref_pod["metadata"]
        assert spec["template"]["spec"].get("schedulerName") == ref_pod["spec"].get("schedulerName")


def _ssh_mount() -> dict[str, Any]:
    return {"name": "ssh-auth", "mountPath": "/root/.ssh", "readOnly": True}


def test_one_node_has_no_workers_and_waits_for_no_sshd() -> None:
    job = nccl.acceptance_job(plan_of(config()), NS, 1)
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert set(specs) == {"Master"}
    assert "until ssh" not in specs["Master"]["template"]["spec"]["containers"][0]["command"][2]


def test_a_sweep_pins_master_and_worker_and_the_dry_run_prints_no_secret(
    stack_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = nccl.acceptance_job(plan_of(config()), NS, 2, name="s-r1-0", pin_nodes=("a", "b"))
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        affinity = spec["template"]["spec"]["affinity"]
        term = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["a", "b"]
        anti = affinity["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
        assert anti["labelSelector"]["matchLabels"] == {nccl.JOB_LABEL: "s-r1-0"}
    args = ["verify", "nccl", "--stack", str(stack_path), "--tenant", NS]
    for extra in (["--dry-run"], ["--sweep", "--dry-run"]):
        assert main([*args, *extra]) == 0
        out = capsys.readouterr().out
        docs = [d for d in yaml.safe_load_all(out) if d]
        assert docs
        assert all(d["kind"] == "PyTorchJob" for d in docs)
        assert "PRIVATE KEY" not in out


@pytest.mark.shared
def test_job_and_secret_validate_against_the_training_operator_crd(crd_dir: Path) -> None:
    plan = three_node_plan()
    job = nccl.acceptance_job(plan, NS, 3)
    pinned = nccl.acceptance_job(plan, NS, 2, pin_nodes=("a", "b"), rail="rail0")
    secret = sshkeys.secret(job, "uid-1")
    report = validate_objects([job, pinned, secret], plan.facts.kubernetes_minor, crd_dir)
    assert report.ok, report.errors
    assert report.checked_custom == 2


def test_tenant_admission_admits_the_job_its_pods_and_its_secret() -> None:
    plan = plan_of(config())
    checks = policies(plan)
    job = nccl.acceptance_job(plan, NS, 2)
    req = Request(namespace=NS, kind="PyTorchJob", group="kubeflow.org")
    assert checks["objects"].denials(job, req, None) == []
    secret = sshkeys.secret(job, "uid-1")
    assert checks["objects"].denials(secret, Request(namespace=NS, kind="Secret"), None) == []
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        template = spec["template"]
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {**template["metadata"], "namespace": NS},
            "spec": template["spec"],
        }
        assert checks["pods"].denials(pod, Request(namespace=NS), None) == []


# --------------------------------------------------------------------- the master's shell


def _run_master(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ssh_ok_after: int) -> Any:
    """The Master's script with sshd, ssh and mpirun replaced by recorders: ssh to a Worker
    fails ``ssh_ok_after`` times before it answers."""
    monkeypatch.setattr(jobs, "SSH_WAIT_TRIES", 3)
    monkeypatch.setattr(jobs, "SSH_WAIT_S", 0)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls = tmp_path / "calls"
    for tool, body in (
        ("sshd", f'echo "sshd $*" >> {calls}'),
        ("ssh", f'echo "ssh $*" >> {calls}; n=$(grep -c "^ssh " {calls}); '
                f'[ "$n" -gt {ssh_ok_after} ]'),
        ("mpirun", f'echo "mpirun $*" >> {calls}'),
    ):  # fmt: skip
        path = bindir / tool
        path.write_text(f"#!/bin/bash\n{body}\n")
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    script = jobs.master_script("j", 2, 8, "mpirun -np 16 x")
    script = script.replace("/usr/sbin/sshd", "sshd").replace("/run/sshd", str(tmp_path / "run"))
    script = script.replace(jobs.HOSTFILE, str(tmp_path / "hostfile"))
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True)
    return done, calls.read_text().splitlines()


def test_the_master_waits_for_each_worker_sshd_then_runs_mpirun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    done, calls = _run_master(tmp_path, monkeypatch, ssh_ok_after=2)
    assert done.returncode == 0, done.stderr
    assert calls[0] == "sshd "
    assert [c.split()[-2] for c in calls[1:4]] == ["j-worker-0"] * 3  # two refusals, then up
    assert calls[-1] == "mpirun -np 16 x"
    assert (tmp_path / "hostfile").read_text() == "j-master-0 slots=8\nj-worker-0 slots=8\n"


def test_the_master_fails_when_a_worker_sshd_never_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    done, calls = _run_master(tmp_path, monkeypatch, ssh_ok_after=99)
    assert done.returncode == 1
    assert "gpufabric: no sshd answered on j-worker-0" in done.stderr
    assert not [c for c in calls if c.startswith("mpirun")]


def test_the_master_script_passes_shellcheck(tmp_path: Path) -> None:
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed")
    plan = three_node_plan()
    job = nccl.acceptance_job(plan, NS, 3)
    script = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    path = tmp_path / "master.sh"
    path.write_text("#!/bin/bash\n" + script["command"][2] + "\n")
    done = subprocess.run(["shellcheck", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


# --------------------------------------------------------------------------- the keys


def test_each_run_gets_its_own_key_pair_owned_by_the_job(tmp_path: Path) -> None:
    job = nccl.acceptance_job(plan_of(config()), NS, 2)
    one, two = sshkeys.secret(job, "uid-7"), sshkeys.secret(job, "uid-7")
    assert one["type"] == "kubernetes.io/ssh-auth"
    assert one["metadata"]["ownerReferences"] == [
        {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "gpufabric-nccl", "uid": "uid-7"}
    ]  # fmt: skip
    assert private_keys(one) != private_keys(two)
    if shutil.which("ssh-keygen") is None:
        pytest.skip("ssh-keygen is not installed")
    key = tmp_path / "id"
    key.write_text(private_keys(one))
    key.chmod(0o600)
    derived = subprocess.run(["ssh-keygen", "-y", "-f", str(key)], capture_output=True, text=True)
    public = base64.b64decode(one["data"]["ssh-publickey"]).decode()
    assert derived.returncode == 0, derived.stderr
    assert public.split()[:2] == derived.stdout.split()[:2]


# ------------------------------------------------------------------- against the fake


def test_passing_run_reads_the_master_log_and_deletes_job_and_secret(
    fake: FakeKube, tmp_path: Path, stack_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    op = PyTorchJobOperator(launcher_log()).install(fake)
    code = main(argv(fake, tmp_path, stack_path, "--json"))
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["verdict"] == "PASS", doc["reasons"]
    assert code == 0
    assert {r["test"] for r in doc["runs"]} == set(nccl.TESTS)  # the Master's log
    assert "created PyTorchJob team-vision/gpufabric-nccl" in err
    assert "created Secret team-vision/gpufabric-nccl-ssh" in err
    assert "deleted PyTorchJob team-vision/gpufabric-nccl" in err
    assert "deleted Secret team-vision/gpufabric-nccl-ssh" in err
    assert JOB not in fake.objects
    assert SECRET not in fake.objects
    # the pods started with the run's Secret, owned by the job that was created
    [secret] = op.secrets_seen
    [owner] = secret["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("PyTorchJob", "gpufabric-nccl")
    assert owner["uid"].startswith("uid-")
    # the private key is never printed
    key = private_keys(secret)
    assert "PRIVATE KEY" in key
    assert key.splitlines()[1] not in out + err
    assert secret["data"]["ssh-privatekey"] not in out + err


def test_failed_worker_fails_the_run_with_the_operators_message(
    fake: FakeKube, tmp_path: Path, stack_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    PyTorchJobOperator(launcher_log(), outcome="Failed").install(fake)
    assert main(argv(fake, tmp_path, stack_path, "--json")) == 4
    doc = json.loads(capsys.readouterr().out)
    assert doc["reasons"][0] == (
        "the PyTorchJob failed: PyTorchJob gpufabric-nccl is failed because 1 Worker "
        "replica(s) failed."
    )
    assert JOB not in fake.objects
    assert SECRET not in fake.objects


def test_timeout_names_the_pytorchjob_and_deletes_job_and_secret(
    fake: FakeKube, tmp_path: Path, stack_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    PyTorchJobOperator("", outcome="never").install(fake)
    code = main(argv(fake, tmp_path, stack_path, "--timeout", "1", "--json"))
    doc = json.loads(capsys.readouterr().out)
    assert code == 5
    assert "kubectl -n team-vision describe pytorchjob gpufabric-nccl" in doc["reasons"][0]
    assert JOB not in fake.objects
    assert SECRET not in fake.objects


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_ends_the_run_and_deletes_job_and_secret(
    fake: FakeKube, tmp_path: Path, stack_path: Path, signum: int, capsys: Any
) -> None:
    PyTorchJobOperator(launcher_log(), outcome="never").install(fake)
    sent = {"done": False}

    def send(fake_: FakeKube, path: str) -> None:
        if path == JOB and SECRET in fake_.objects and not sent["done"]:
            sent["done"] = True
            threading.Timer(0.05, os.kill, (os.getpid(), signum)).start()

    fake.on_get.append(send)
    code = main(argv(fake, tmp_path, stack_path, "--timeout", "20"))
    assert sent["done"]
    assert code in (130, 128 + signum)
    assert JOB not in fake.objects
    assert SECRET not in fake.objects
    assert "PRIVATE KEY" not in capsys.readouterr().err


def test_a_ctrl_c_during_the_secret_create_still_deletes_both(
    fake: FakeKube, tmp_path: Path, stack_path: Path
) -> None:
    PyTorchJobOperator(launcher_log(), outcome="never").install(fake)

    def interrupt(method: str, path: str) -> None:
        if method == "POST" and path.endswith("/secrets"):
            os.kill(os.getpid(), signal.SIGINT)

    fake.on_request.append(interrupt)
    fake.faults.append(("POST", "/secrets", 0.3))  # the create is still in flight
    assert main(argv(fake, tmp_path, stack_path, "--timeout", "20")) == 130
    assert JOB not in fake.objects
    assert SECRET not in fake.objects


def test_an_existing_secret_is_not_overwritten(
    fake: FakeKube, tmp_path: Path, stack_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = nccl.acceptance_job(plan_of(config()), NS, 2)
    fake.add(sshkeys.secret(job, ""))
    assert main(argv(fake, tmp_path, stack_path)) == 3
    assert "kubectl -n team-vision delete secret gpufabric-nccl-ssh" in capsys.readouterr().err
    assert SECRET in fake.objects
    assert JOB not in fake.objects


def test_a_secret_created_by_someone_else_during_the_run_is_not_deleted(
    fake: FakeKube, tmp_path: Path, stack_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another hand creates the Secret between verify's check and its create (a tenant
    racing it with keys of its own): the run stops, deletes its job, and leaves that
    Secret alone."""
    theirs = sshkeys.secret(nccl.acceptance_job(plan_of(config()), NS, 2), "")

    def race(fake_: FakeKube, obj: dict[str, Any]) -> None:
        if obj["kind"] == "PyTorchJob":
            fake_.add(theirs)

    fake.on_create.append(race)
    assert main(argv(fake, tmp_path, stack_path)) == 3
    assert "Secret team-vision/gpufabric-nccl-ssh already exists" in capsys.readouterr().err
    assert fake.objects[SECRET] is theirs
    assert JOB not in fake.objects


def test_the_sweep_runs_pytorchjobs_and_leaves_no_secret(
    fake: FakeKube, tmp_path: Path, stack_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    op = PyTorchJobOperator(launcher_log()).install(fake)
    for i in range(3):  # three nodes: each is judged by two partners
        fake.add(_gpu_node(f"gpu-{i}"))
    code = main(argv(fake, tmp_path, stack_path, "--sweep", "--sweep-confirm", "2", "--json"))
    out = capsys.readouterr().out
    assert code == 0, out
    assert op.jobs
    assert len(op.secrets_seen) == len(op.jobs)
    assert not [p for p in fake.objects if "/pytorchjobs/" in p or "/secrets/" in p]


def _gpu_node(name: str) -> dict[str, Any]:
    plan = plan_of(config())
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **plan.facts.nodes.selector}},
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }  # fmt: skip
