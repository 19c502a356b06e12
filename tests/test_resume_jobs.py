"""The resume contract in the jobs ``gpufabric job`` writes: every pod of a job, and every pod
the operator recreates after a failure, is told one checkpoint directory, shown on the job
as ``gpufabric.io/checkpoint-dir``, and no other job of the tenant shares it; ``--entrypoint``
ships a program (the DDP example) in a ConfigMap of the job that its GPU pods run from."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import example_plan, gpu_pods
from conftest import REPO, example_config, sections

from gpufabric.cli import main
from gpufabric.model.stackfile import model_from_config
from gpufabric.outputs.jobs import JobRequest, job_manifest, job_objects
from gpufabric.plan.build import build_plan

KINDS = ("mpijob", "pytorchjob", "trainjob")
TRAIN = REPO / "examples" / "train"
ANNOTATION = "gpufabric.io/checkpoint-dir"


def checkpoint_dirs(job: dict[str, Any]) -> set[str]:
    """Every value of GPUFABRIC_CHECKPOINT_DIR a pod of the job can see."""
    values = set()
    if job["kind"] == "TrainJob":
        values |= {e["value"] for e in job["spec"]["trainer"]["env"] if "value" in e}
    for pod in gpu_pods(job):
        for c in pod["spec"]["containers"]:
            values |= {e["value"] for e in c.get("env", [])}
    if job["kind"] == "MPIJob":
        launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
        command = launcher["containers"][0]["command"]
        values |= {w.split("=", 1)[1] for w in command if w.startswith("GPUFABRIC_CHECKPOINT_DIR=")}
    return values


@pytest.mark.parametrize("gang", ["kueue", "volcano"])
@pytest.mark.parametrize("kind", KINDS)
def test_every_pod_and_restart_of_a_job_checkpoints_to_one_directory(kind: str, gang: str) -> None:
    """The directory is a literal of the job's pod templates: each pod the operator creates,
    first or after a failure, gets the same one; the job's annotation names it."""
    plan = example_plan("prod-ib", gang)
    job = job_manifest(plan, JobRequest(tenant="research", kind=kind, nodes=4, name="llama"))  # type: ignore[arg-type]
    where = f"/checkpoints/{kind}/llama"
    assert checkpoint_dirs(job) == {where}
    assert job["metadata"]["annotations"][ANNOTATION] == where
    for pod in gpu_pods(job):
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        (container,) = pod["spec"]["containers"]
        (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/checkpoints"]
        # the tenant's own claim, in the job's namespace: another tenant's claim is another
        # volume, so the same job name in two tenants never meets
        assert volumes[mount["name"]]["persistentVolumeClaim"]["claimName"] == "checkpoints"
        assert job["metadata"]["namespace"] == "research"
    assert (
        job_manifest(plan, JobRequest(tenant="research", kind=kind, nodes=4, name="llama")) == job
    )  # type: ignore[arg-type]


def test_jobs_of_two_kinds_with_one_name_never_share_a_directory() -> None:
    """An MPIJob and a PyTorchJob may both be called ``llama`` in one namespace. Before, both
    were told /checkpoints/llama and each resumed from the other's checkpoints."""
    plan = example_plan("prod-ib", "kueue")
    dirs = [
        checkpoint_dirs(job_manifest(plan, JobRequest(tenant="research", kind=k, name="llama")))  # type: ignore[arg-type]
        for k in KINDS
    ]
    assert len(set().union(*dirs)) == len(KINDS)


def test_a_tenant_without_a_checkpoints_claim_is_told_no_directory() -> None:
    config = example_config("prod-ib")
    config["gpufabric:tenants"][0]["claims"] = []
    plan = build_plan("prod-ib", model_from_config(sections(config), "prod-ib", from_file=True))
    tenant = config["gpufabric:tenants"][0]["namespace"]
    for kind in KINDS:
        job = job_manifest(plan, JobRequest(tenant=tenant, kind=kind))  # type: ignore[arg-type]
        assert ANNOTATION not in job["metadata"].get("annotations", {})
        assert checkpoint_dirs(job) == set()


def test_a_pytorchjob_runs_a_python_script_under_torchrun() -> None:
    """``--command "python train.py"``: torchrun runs the script. Before, the container ran
    ``torchrun python train.py``, and torchrun tried to run a file called python."""
    plan = example_plan("prod-ib", "kueue")
    req = JobRequest(tenant="research", kind="pytorchjob", command="python train.py --lr 3")
    (pod, *_) = gpu_pods(job_manifest(plan, req))
    assert pod["spec"]["containers"][0]["command"] == ["torchrun", "train.py", "--lr", "3"]


# ----------------------------------------------------------------------- --entrypoint


def run_job(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["job", "--stack", "prod-ib", "--tenant", "research", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("kind", KINDS)
def test_the_example_ships_in_a_configmap_the_gpu_pods_run_from(
    kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--kind", kind, "--name", "ddp-demo", "--entrypoint", str(TRAIN)]
    code, out, err = run_job(capsys, *args, "--command", "torchrun ddp_resume.py --steps 50")
    assert code == 0, err
    configmap, job = yaml.safe_load_all(out)
    assert configmap["kind"] == "ConfigMap"
    assert configmap["metadata"]["name"] == "ddp-demo-entrypoint"
    assert configmap["metadata"]["namespace"] == "research"
    # a tenant may update its own ConfigMap: not marked as the platform's
    assert "app.kubernetes.io/managed-by" not in configmap["metadata"]["labels"]
    assert configmap["data"] == {
        "checkpoint.py": (TRAIN / "checkpoint.py").read_text(),
        "ddp_resume.py": (TRAIN / "ddp_resume.py").read_text(),
    }
    for pod in gpu_pods(job):
        (container,) = pod["spec"]["containers"]
        assert {
            "name": "entrypoint",
            "mountPath": "/opt/gpufabric/entrypoint",
            "readOnly": True,
        } in container["volumeMounts"]
        assert {"name": "entrypoint", "configMap": {"name": "ddp-demo-entrypoint"}} in pod["spec"][
            "volumes"
        ]
    if kind == "pytorchjob":
        (container,) = gpu_pods(job)[0]["spec"]["containers"]
        assert container["workingDir"] == "/opt/gpufabric/entrypoint"
        assert container["command"] == ["torchrun", "ddp_resume.py", "--steps", "50"]
    elif kind == "trainjob":  # the trainer has no workingDir: the command changes directory
        command = job["spec"]["trainer"]["command"]
        assert command[:4] == ["sh", "-c", 'cd /opt/gpufabric/entrypoint && exec "$@"', "sh"]
        assert command[4:] == ["torchrun", "ddp_resume.py", "--steps", "50"]
    else:
        spec = job["spec"]["mpiReplicaSpecs"]
        launcher = spec["Launcher"]["template"]["spec"]["containers"][0]["command"]
        assert launcher[:3] == ["mpirun", "-wdir", "/opt/gpufabric/entrypoint"]
        (worker,) = spec["Worker"]["template"]["spec"]["containers"]
        assert worker["workingDir"] == "/opt/gpufabric/entrypoint"


def test_one_shipped_file_is_the_default_program(capsys: pytest.CaptureFixture[str]) -> None:
    script = str(TRAIN / "ddp_resume.py")
    code, out, _ = run_job(capsys, "--kind", "pytorchjob", "--entrypoint", script)
    assert code == 0
    _, job = yaml.safe_load_all(out)
    (pod, *_) = gpu_pods(job)
    assert pod["spec"]["containers"][0]["command"] == ["torchrun", "ddp_resume.py"]


@pytest.mark.parametrize("kind", KINDS)
def test_the_job_and_its_configmap_validate(
    kind: str, crd_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--kind", kind, "--entrypoint", str(TRAIN), "--command", "torchrun ddp_resume.py"]
    code, out, err = run_job(capsys, *args, "--crd-dir", str(crd_dir))
    assert code == 0, err
    kinds = {"mpijob": "MPIJob", "pytorchjob": "PyTorchJob", "trainjob": "TrainJob"}
    assert [d["kind"] for d in yaml.safe_load_all(out)] == ["ConfigMap", kinds[kind]]


def _tree(tmp: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        (tmp / name).write_bytes(data)
    return tmp


KEY = b"-----BEGIN %s PRIVATE KEY-----\nb3BlbnNzaC1rZXk=\n-----END PRIVATE KEY-----\n"
PGP = b"-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQ==\n-----END PGP PRIVATE KEY BLOCK-----\n"


@pytest.mark.parametrize(
    ("files", "extra", "expected"),
    [
        ({}, [], "holds no file to ship"),
        ({".env": b"TOKEN=x"}, [], "holds no file to ship"),  # hidden files stay home
        ({"m.bin": b"\xff\xfe\x00"}, [], "is not UTF-8 text"),
        ({"a b.py": b"x"}, [], "'a b.py' cannot be a ConfigMap key"),
        ({"big.py": b"#" * 1_000_000}, [], "gpufabric ships at most 921600"),
        # issue 41: keys count too (the API server sums keys and values against 1 MiB)
        ({"k" * 30 + ".py": b"#" * (921600 - 10)}, [], "bytes of file names and contents"),
        # issue 41: a key the API server refuses (over 253 characters) is never printed
        ({"k" * 251 + ".py": b"x"}, [], "cannot be a ConfigMap key (254 characters)"),
        ({"a.py": b"x", "b.py": b"y"}, [], "--command: required with more than one"),
        ({"ddp_resume.py": b"x"}, [str(TRAIN)], "two files are named 'ddp_resume.py'"),
        ({"train.py": b"x", "id_ed25519": KEY % b"OPENSSH"}, [], "holds a private key"),
        ({"train.py": b"x", "tls.key": KEY % b"EC"}, [], "holds a private key"),
        ({"train.py": b"x", "k.asc": PGP}, [], "holds a private key"),
    ],
)
def test_bad_entrypoints_exit_2_naming_the_option(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    files: dict[str, bytes],
    extra: list[str],
    expected: str,
) -> None:
    src = _tree(tmp_path, files)
    args = ["--kind", "pytorchjob", "--entrypoint", str(src)]
    for more in extra:
        args += ["--entrypoint", more, "--command", "torchrun ddp_resume.py"]
    code, out, err = run_job(capsys, *args)
    assert code == 2
    assert expected in err
    assert out == ""
    assert "Traceback" not in err


def test_the_apply_paths_lower_limit_is_stated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 41: within the API server's 1 MiB, client-side `kubectl apply` still refuses a
    ConfigMap whose last-applied annotation passes 256 KiB; the job says so and how to apply
    it, and prints the objects (exit 0). A 253-character name is a key the API takes."""
    src = _tree(tmp_path, {"k" * 250 + ".py": b"#" * 300_000})
    code, out, err = run_job(capsys, "--kind", "pytorchjob", "--entrypoint", str(src))
    assert code == 0, err
    configmap, _ = yaml.safe_load_all(out)
    assert list(configmap["data"]) == ["k" * 250 + ".py"]
    assert "last-applied-configuration" in err
    assert "kubectl apply --server-side" in err
    small = tmp_path / "small"
    small.mkdir()
    (small / "t.py").write_text("x")
    code, _, err = run_job(capsys, "--kind", "pytorchjob", "--entrypoint", str(small))
    assert code == 0
    assert "last-applied" not in err


def test_a_link_out_of_the_directory_is_not_shipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("password")
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("print('hi')\n")
    os.symlink(secret, src / "notes.txt")
    code, out, err = run_job(capsys, "--kind", "pytorchjob", "--entrypoint", str(src))
    assert code == 0, err
    configmap, _ = yaml.safe_load_all(out)
    assert set(configmap["data"]) == {"train.py"}
    assert "password" not in out


def test_the_objects_in_apply_order() -> None:
    plan = example_plan("prod-ib", "kueue")
    req = JobRequest(tenant="research", kind="pytorchjob", entrypoint=(("t.py", "x"),))
    assert [o["kind"] for o in job_objects(plan, req)] == ["ConfigMap", "PyTorchJob"]
    assert [o["kind"] for o in job_objects(plan, JobRequest(tenant="research", kind="mpijob"))] == [
        "MPIJob"
    ]


def test_a_file_named_like_a_parent_directory_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The API server refuses ConfigMap keys that start with '..'; say so before it does."""
    (tmp_path / "..x.py").write_text("print()\n")
    code, out, err = run_job(
        capsys, "--kind", "pytorchjob", "--entrypoint", str(tmp_path / "..x.py")
    )
    assert code == 2
    assert "'..x.py' cannot be a ConfigMap key" in err
    assert out == ""


def test_a_huge_file_is_refused_without_reading_it_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--entrypoint .` beside a checkpoint: at most what a ConfigMap takes is read, and the
    size refusal names the limit (a sparse 8 GiB file: reading it whole took minutes and all
    memory)."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("print('hi')\n")
    with (src / "ckpt.pt").open("wb") as f:
        f.truncate(8 << 30)
    opened: list[int] = []
    real = Path.open

    def counting(self: Path, *args: Any, **kwargs: Any) -> Any:
        handle = real(self, *args, **kwargs)
        if self.name == "ckpt.pt":
            read = handle.read

            def bounded(n: int = -1) -> Any:
                opened.append(n)
                assert 0 < n <= 1 << 20, f"read({n}) of an 8 GiB file"
                return read(n)

            handle.read = bounded
        return handle

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Path, "open", counting)
        code, out, err = run_job(capsys, "--kind", "pytorchjob", "--entrypoint", str(src))
    assert (code, out) == (2, "")
    assert "gpufabric ships at most" in err or "is not UTF-8 text" in err
    assert opened


def test_an_entrypoint_configmap_never_takes_an_nccl_env_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 41: ConfigMaps named nccl-env or nccl-env-... are the platform's (the tenant
    managed policy denies them to a tenant), so a job's <name>-entrypoint never is one."""
    src = _tree(tmp_path, {"t.py": b"x"})
    args = ["--kind", "pytorchjob", "--entrypoint", str(src), "--name", "nccl-env-probe"]
    code, out, err = run_job(capsys, *args)
    assert code == 2
    assert "--name" in err
    assert "platform's" in err
    assert out == ""
