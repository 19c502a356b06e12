"""Issue 40, items 3-5, each as a new user would hit it: NFS over RDMA whose CSI controller
runs where the share is reachable, an air gap whose mirror needs credentials, and day-one
frictions (dry runs, storage-less jobs, the platform tenant, runbook text, diff's partition
step)."""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import example_config, sections
from conftest import SHARED

from gpufabric.cli import main
from gpufabric.model.stackfile import model_from_config
from gpufabric.outputs.jobs import JobRequest, checkpoint_notes, job_objects, read_entrypoint
from gpufabric.outputs.runbook import render as runbook
from gpufabric.plan.build import Plan, build_plan
from gpufabric.plan.items import HelmChart
from gpufabric.plan.pulls import collect
from gpufabric.verify.nccl.job import acceptance_job
from gpufabric.verify.storage import run as storage_run
from gpufabric.verify.storage.judge import StorageJudge, targets_from_plan

MIRROR = "harbor.prod-ib.example.internal"
SITE_IMAGE = f"{MIRROR}/site/gpufabric:2025.1"
SECRET = "harbor-prod-ib"
HELM = SHARED / "upstream" / "bin" / "helm"
NFS_CHART = SHARED / "upstream" / "charts" / "csi-driver-nfs-4.13.4.tgz"


def authenticated_air_gap() -> dict[str, Any]:
    """prod-ib (air-gapped) with a mirror that needs a login and the site's own health
    image on the mirror host."""
    config = example_config("prod-ib")
    config["gpufabric:sources"]["pullSecrets"] = [SECRET]
    config["gpufabric:monitoring"]["health"] = {
        "inCluster": {"enabled": True, "image": SITE_IMAGE, "tenant": "eval"}
    }
    return config


def plan_of(config: dict[str, Any], name: str = "t") -> Plan:
    return build_plan(name, model_from_config(sections(config), name, from_file=True))


def runbook_of(config: dict[str, Any], name: str = "t") -> str:
    model = model_from_config(sections(config), name, from_file=True)
    return runbook(build_plan(name, model), collect(name, model))


def pod_specs(obj: Any) -> list[dict[str, Any]]:
    """Every pod spec in an object (templates of jobs, runtime patches, pods)."""
    out: list[dict[str, Any]] = []
    if isinstance(obj, dict):
        if "containers" in obj:
            out.append(obj)
        for value in obj.values():
            out += pod_specs(value)
    elif isinstance(obj, list):
        for value in obj:
            out += pod_specs(value)
    return out


def nfs_values(plan: Plan) -> dict[str, Any]:
    chart = next(
        it.payload
        for it in plan.items
        if isinstance(it.payload, HelmChart) and it.payload.chart == "csi-driver-nfs"
    )
    return dict(chart.values)


# ------------------------------------------------------- item 3: NFS over RDMA provisions


def test_the_nfs_controller_runs_on_the_gpu_nodes_that_reach_the_share() -> None:
    """csi-nfs-controller mounts the share with the class's proto=rdma options to create each
    claim's directory; the chart alone puts it on any Linux node (control plane included)."""
    controller = nfs_values(plan_of(example_config("prod-ib")))["controller"]
    terms = controller["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [
        {
            "matchExpressions": [
                {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}
            ]
        }
    ]
    # the chart's control-plane tolerations are replaced by the GPU nodes' own (none here)
    assert controller["tolerations"] == []


def test_in_a_fleet_the_controller_may_run_on_any_pool_and_tolerates_each_pools_taints() -> None:
    config = example_config("fleet-mixed")
    config["gpufabric:storage"] = copy.deepcopy(example_config("prod-ib")["gpufabric:storage"])
    config["gpufabric:gpuNodes"][1]["tolerations"] = [
        {"key": "l40s", "operator": "Exists", "effect": "NoSchedule"}
    ]
    plan = plan_of(config)
    controller = nfs_values(plan)["controller"]
    required = controller["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    terms = required["nodeSelectorTerms"]
    assert len(terms) == len(plan.facts.pools) == 2  # ORed: a node of either pool
    for term, pool in zip(terms, plan.facts.pools, strict=True):
        assert {e["key"]: e["values"][0] for e in term["matchExpressions"]} == dict(
            pool.nodes.selector
        )
    assert {"key": "l40s", "operator": "Exists", "effect": "NoSchedule"} in controller[
        "tolerations"
    ]


@pytest.mark.skipif(not (HELM.is_file() and NFS_CHART.is_file()), reason="no helm or chart")
def test_the_pinned_chart_puts_the_placement_on_its_controller(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(nfs_values(plan_of(example_config("prod-ib")))))
    done = subprocess.run(
        [str(HELM), "template", "x", str(NFS_CHART), "-f", str(values)],
        capture_output=True,
        text=True,
        check=True,
    )
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    controller = next(d for d in docs if d["kind"] == "Deployment")
    spec = controller["spec"]["template"]["spec"]
    assert spec["hostNetwork"] is True  # it mounts the share from the node itself
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["key"] == "nvidia.com/gpu.present"
    assert "tolerations" not in spec  # no control-plane toleration left


def test_the_runbook_gates_the_controller_on_a_gpu_node() -> None:
    text = runbook_of(example_config("prod-ib"))
    gate = next(ln for ln in text.splitlines() if "the CSI controller runs on a GPU node" in ln)
    assert "kubectl -n csi-nfs get pods -l app=csi-nfs-controller -o wide" in gate
    assert "kubectl get nodes -l nvidia.com/gpu.present=true" in gate
    assert "proto=rdma,port=20049" in gate
    assert '"mount.nfs: Protocol not supported"' in text  # the triage row for a Pending claim


# ---------------------------------------------------- item 4: air gap with credentials


def test_the_sites_own_image_on_the_mirror_host_is_accepted(
    write_stack: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_stack(authenticated_air_gap(), "airgap-auth")
    assert main(["validate", "--stack", str(path)]) == 0, capsys.readouterr().err
    pulled = collect("t", model_from_config(sections(authenticated_air_gap()), "t", from_file=True))
    site = next(i for i in pulled.images if i.upstream == SITE_IMAGE)
    assert site.on_mirror
    assert site.pulled == SITE_IMAGE


def test_an_image_of_an_unmirrored_registry_is_still_refused(
    write_stack: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    config = authenticated_air_gap()
    config["gpufabric:monitoring"]["health"]["inCluster"]["image"] = "quay.example.org/x/y:1"
    assert main(["validate", "--stack", str(write_stack(config, "bad"))]) == 2
    assert "no mirror for registry quay.example.org" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["mpijob", "pytorchjob", "trainjob"])
def test_every_job_pod_names_the_pull_secret(kind: str) -> None:
    plan = plan_of(authenticated_air_gap())
    job = job_objects(plan, JobRequest(tenant="eval", kind=kind, nodes=2))[-1]
    pods = pod_specs(job)
    assert pods, kind
    for pod in pods:  # an MPIJob's launcher too
        assert pod["imagePullSecrets"] == [{"name": SECRET}], kind


def test_acceptance_sweep_and_storage_pods_name_the_pull_secret() -> None:
    plan = plan_of(authenticated_air_gap())
    acceptance = acceptance_job(plan, "eval", 2)
    sweep = acceptance_job(plan, "eval", 2, name="s", pin_nodes=("a", "b"), tolerate=("q",))
    for job in (acceptance, sweep):
        for pod in pod_specs(job):
            assert pod["imagePullSecrets"] == [{"name": SECRET}]
    target = next(iter(targets_from_plan(plan)))
    opts = storage_run.Options("img", StorageJudge(None, "x"), (), plan.facts.pull_secrets)
    for pod in storage_run.dry_run_pods(target, opts, 60):
        assert pod["spec"]["imagePullSecrets"] == [{"name": SECRET}]


def test_without_pull_secrets_no_pod_names_one() -> None:
    plan = plan_of(example_config("prod-ib"))
    job = job_objects(plan, JobRequest(tenant="eval", kind="mpijob", nodes=2))[-1]
    assert all("imagePullSecrets" not in pod for pod in pod_specs(job))


def test_the_runbook_creates_and_checks_the_secret_where_every_pod_pulls() -> None:
    config = authenticated_air_gap()
    text = runbook_of(config)
    plan = plan_of(config)
    section = text.split("### Registry credentials", 1)[1].split("\n### ", 1)[0]
    namespaces = {
        *plan.facts.tenants,  # jobs, acceptance, sweep, re-certification, storage checks
        "monitoring",  # the health runner's CronJob
        "kube-system",
        "csi-nfs",
        "gpu-operator",
    }
    for ns in namespaces:
        assert (
            f"kubectl -n {ns} create secret docker-registry {SECRET} "
            '--from-file=.dockerconfigjson="$HOME/.docker/config.json"'
        ) in section, ns
        assert f"kubectl -n {ns} get secret {SECRET}" in section, ns
    assert "Volcano" not in section  # a Kueue stack, one secret


@pytest.mark.skipif(not (SHARED / "upstream" / "bin" / "kubectl").is_file(), reason="no kubectl")
def test_the_runbooks_secret_commands_run_with_the_real_kubectl(tmp_path: Path) -> None:
    """Each create line, as printed, through the real kubectl (client side: the fake API
    server speaks JSON, kubectl creates a Secret in protobuf), makes a dockerconfigjson
    Secret of the Docker config in its namespace; each check line then finds it on the fake
    API server."""
    import json

    from fake_kube import FakeKube

    text = runbook_of(authenticated_air_gap())
    section = text.split("### Registry credentials", 1)[1].split("\n### ", 1)[0]
    lines = [ln for ln in section.splitlines() if ln.startswith("kubectl ")]
    creates = [ln for ln in lines if " create secret " in ln]
    checks = [ln for ln in lines if " get secret " in ln]
    assert len(creates) == len(checks) >= 13
    home = tmp_path / "home"
    (home / ".docker").mkdir(parents=True)
    config = json.dumps({"auths": {MIRROR: {"auth": "dTpw"}}})
    (home / ".docker" / "config.json").write_text(config)
    env = {"HOME": str(home), "PATH": f"{SHARED / 'upstream' / 'bin'}:/usr/bin:/bin"}
    secrets = []
    for line in creates:
        cmd = line + " --dry-run=client -o json"
        done = subprocess.run(["bash", "-c", cmd], env=env, capture_output=True, text=True)
        assert done.returncode == 0, f"{line}: {done.stderr}"
        secret = json.loads(done.stdout)
        assert secret["type"] == "kubernetes.io/dockerconfigjson"
        assert secret["metadata"]["namespace"] == line.split()[2]
        secrets.append(secret)
    with FakeKube() as fake:
        fake.anonymous = True
        fake.add(*secrets)
        env["KUBECONFIG"] = str(fake.kubeconfig(tmp_path))
        for line in checks:
            done = subprocess.run(["bash", "-c", line], env=env, capture_output=True, text=True)
            assert done.returncode == 0, f"{line}: {done.stderr}"


# ------------------------------------------------------------------------- item 5: day one


def test_verify_storage_dry_run_prints_its_pods_without_a_cluster(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["verify", "storage", "--stack", "prod-ib", "--tenant", "eval", "--dry-run"])
    out, err = capsys.readouterr()
    assert code == 0, err
    pods = [d for d in yaml.safe_load_all(out) if d]
    assert [p["kind"] for p in pods] == ["Pod"] * 4  # write and read-back on two nodes
    assert {p["metadata"]["namespace"] for p in pods} == {"eval"}
    assert "nothing created" in err


def test_a_dry_run_refuses_the_sweep_the_real_run_refuses(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [
        "verify",
        "nccl",
        "--stack",
        "prod-ib",
        "--tenant",
        "eval",
        "--sweep",
        "--timeout",
        "60",
    ]
    assert main([*argv, "--dry-run"]) == 2
    assert "--timeout: 60 s bounds each job of a sweep" in capsys.readouterr().err


def test_a_job_without_storage_says_its_checkpoints_will_not_persist() -> None:
    plan = plan_of(example_config("kind-dev"))
    notes = checkpoint_notes(plan, JobRequest(tenant="dev", kind="mpijob", nodes=1))
    assert len(notes) == 1
    assert "checkpoints will not persist" in notes[0]
    assert "no storage section" in notes[0]


def test_the_resume_example_without_storage_says_what_to_add(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["job", "--stack", "kind-dev", "--tenant", "dev", "--kind", "mpijob", "--nodes", "1"]
    argv += ["--entrypoint", "examples/train", "--command", "python ddp_resume.py"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "checkpoints will not persist" in err
    assert "ddp_resume.py reads GPUFABRIC_CHECKPOINT_DIR" in err
    assert "claims: [{name: checkpoints, size: 10Ti}]" in err


def test_a_tenant_without_a_checkpoints_claim_is_told_which_claim_to_add() -> None:
    config = example_config("prod-ib")
    config["gpufabric:tenants"][3]["claims"] = [{"name": "datasets", "size": "1Ti"}]
    plan = plan_of(config)
    files = read_entrypoint([Path(__file__).parents[1] / "examples" / "train"])
    notes = checkpoint_notes(
        plan, JobRequest(tenant="eval", kind="mpijob", nodes=1, entrypoint=files)
    )
    assert "tenant 'eval' has no 'checkpoints' claim" in notes[0]
    assert "{name: checkpoints, size: <size>} to the tenant's claims" in notes[1]
    assert checkpoint_notes(plan, JobRequest(tenant="research", kind="mpijob", nodes=1)) == []


def test_acceptance_and_health_run_in_the_platform_tenant_the_stack_names() -> None:
    config = example_config("roce-sriov-volcano")
    assert config["gpufabric:tenants"][0]["namespace"] != "ml-batch"  # not the first tenant
    text = runbook_of(config)
    assert "verify nccl --stack t --tenant ml-batch --nodes 2" in text
    assert "gpufabric health --stack t --tenant ml-batch --dry-run" in text
    assert "--tenant ml-platform --nodes 2" not in text


def test_a_stack_without_the_trainer_has_no_trainjob_text() -> None:
    for name in ("dgx-h100", "kind-dev", "routed-b200"):
        text = runbook_of(example_config(name), name)
        assert "TrainJob" not in text, name
        assert "JobSet" not in text, name
    assert "TrainJob" in runbook_of(example_config("roce-sriov-volcano"))


def test_only_a_volcano_stack_says_its_chart_takes_one_secret() -> None:
    kueue = example_config("lab-roce")
    volcano = example_config("roce-sriov-volcano")
    for config in (kueue, volcano):
        config.setdefault("gpufabric:sources", {})["pullSecrets"] = ["a", "b"]
        config["gpufabric:sources"].setdefault("registries", {"docker.io": "m.example.org/d"})
    assert "takes only the first" not in runbook_of(kueue)
    assert "The `volcano` chart takes only the first." in runbook_of(volcano)


def test_diff_names_a_new_partition_as_a_subnet_manager_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = example_config("prod-ib")
    base["gpufabric:fabric"]["nadScope"] = "tenant"
    # a tenant's own partition is kept apart only by UFM through ib-kubernetes
    base["gpufabric:fabric"]["infiniband"].update(
        pkeyManagement="ufm",
        ufm={
            "address": "ufm.example.internal",
            "username": "k8s",
            "password": {"secure": "v1:AAAAAAAAAAAAAAAA:BBBBBBBBBBBB"},
        },
    )
    head = copy.deepcopy(base)
    head["gpufabric:tenants"][2]["pkey"] = "0x8010"
    for name, config in (("base", base), ("head", head)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "Pulumi.lab.yaml").write_text(yaml.safe_dump({"config": config}))
    assert main(["render", "--stack", str(tmp_path / "base" / "Pulumi.lab.yaml"), "--out", str(tmp_path / "out")]) == 0  # fmt: skip
    capsys.readouterr()
    head_file = str(tmp_path / "head" / "Pulumi.lab.yaml")
    assert main(["diff", "--stack", head_file, "--base", str(tmp_path / "out")]) == 0
    summary = capsys.readouterr().out.split("<details>", 1)[0]
    first = summary.splitlines()[2]
    assert "before apply: partition 0x8010 in the subnet manager" in first
    assert "**partition 0x8010 is new** (the networks of `research`)" in summary
    fmt = ["--format", "json"]
    assert main(["diff", "--stack", head_file, "--base", str(tmp_path / "out"), *fmt]) == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    assert doc["partitionsAdded"] == [{"pkey": "0x8010", "namespaces": ["research"]}]
    # a change that adds no partition says nothing of the subnet manager
    assert main(["diff", "--stack", str(tmp_path / "base" / "Pulumi.lab.yaml"), "--base", str(tmp_path / "out")]) == 0  # fmt: skip
    assert "subnet manager" not in capsys.readouterr().out


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_the_air_gapped_runbook_commands_parse() -> None:
    text = runbook_of(authenticated_air_gap())
    section = text.split("### Registry credentials", 1)[1].split("\n### ", 1)[0]
    for line in (ln for ln in section.splitlines() if ln.startswith("kubectl ")):
        assert subprocess.run(["bash", "-n", "-c", line]).returncode == 0
