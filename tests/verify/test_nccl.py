"""``verify nccl`` end to end against the fake API server: the MPIJob it submits (CRD-valid,
wired like ``gpufabric job``), the wait, the launcher log, the verdict, the cleanup, the
timeout. The fake plays the MPI Operator: on create it starts a launcher pod whose log is a
realistic nccl-tests run, and after a few polls marks the job Succeeded or Failed."""

from __future__ import annotations

import json
import os
import shlex
import signal
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from builders import REPO
from conftest import EXAMPLE_STACKS, example_config, sections
from fake_kube import FakeKube

from gpufabric.cli import main
from gpufabric.model.stackfile import load_stack, model_from_config
from gpufabric.outputs.jobs import JobRequest, job_manifest
from gpufabric.outputs.schema import validate_objects
from gpufabric.plan.build import build_plan
from gpufabric.verify.kube import Kube, KubeError
from gpufabric.verify.nccl import job as nccl
from gpufabric.verify.nodes import daemonset as probe_daemonset

FIXTURES = REPO / "tests" / "fixtures" / "nccl"
MPIJOB = "/apis/kubeflow.org/v2beta1/namespaces/team-vision/mpijobs/gpufabric-nccl"


def launcher_log(
    all_reduce: str = "roce-pass.log", all_gather: str = "roce-all-gather-pass.log"
) -> str:
    parts = []
    for test, fixture in zip(nccl.TESTS, (all_reduce, all_gather), strict=True):
        parts.append(nccl.MARKER.format(test=test))
        parts.append((FIXTURES / fixture).read_text())
    return "\n".join(parts)


def operator(log: str, outcome: str = "Succeeded", after_polls: int = 2) -> Any:
    """Hooks making the fake behave like the MPI Operator for one job."""
    polls = {"n": 0}

    def on_create(fake: FakeKube, obj: dict[str, Any]) -> None:
        if obj["kind"] != "MPIJob":
            return
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        obj["status"] = {
            "conditions": [{"type": "Created", "status": "True", "reason": "MPIJobCreated"}]
        }
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{name}-launcher-x7k2p",
                "namespace": ns,
                "creationTimestamp": "2026-11-21T10:00:00Z",
                "labels": {nccl.JOB_LABEL: name, nccl.ROLE_LABEL: "launcher"},
            },
            "status": {"phase": "Running"},
        }
        fake.add(pod)
        fake.logs[f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}"] = log

    def on_get(fake: FakeKube, path: str) -> None:
        if path != MPIJOB or path not in fake.objects:
            return
        polls["n"] += 1
        conds = fake.objects[path]["status"]["conditions"]
        if polls["n"] == 1:
            conds.append(
                {
                    "type": "Running",
                    "status": "True",
                    "reason": "MPIJobRunning",
                    "message": "MPIJob team-vision/gpufabric-nccl is running.",
                }
            )
        if polls["n"] >= after_polls and outcome != "never":
            message = (
                "MPIJob team-vision/gpufabric-nccl successfully completed."
                if outcome == "Succeeded"
                else "launcher exited with code 1"
            )
            conds.append(
                {
                    "type": outcome,
                    "status": "True",
                    "reason": f"MPIJob{outcome}",
                    "message": message,
                }
            )

    return on_create, on_get


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    with FakeKube() as f:
        yield f


def argv(fake: FakeKube, tmp_path: Path, *extra: str) -> list[str]:
    cfg = str(fake.kubeconfig(tmp_path))
    return [
        "verify",
        "nccl",
        "--stack",
        "lab-roce",
        "--tenant",
        "team-vision",
        "--kubeconfig",
        cfg,
        "--context",
        "fake",
        "--poll",
        "0.01",
        *extra,
    ]


def job(stack: str = "lab-roce", tenant: str = "team-vision", nodes: int = 2) -> dict[str, Any]:
    config = example_config(stack)
    if stack == "lab-roce":
        # team-vision (16 GPUs) borrows team-speech's idle 16: jobs of up to 4 nodes admitted
        config["gpufabric:tenants"][0]["gpuBorrowingLimit"] = 16
    model = model_from_config(sections(config), stack, from_file=True)
    return nccl.acceptance_job(build_plan(stack, model), tenant, nodes)


# ----------------------------------------------------------------------- the MPIJob


@pytest.mark.shared
@pytest.mark.parametrize("stack", EXAMPLE_STACKS)
def test_acceptance_mpijob_validates_against_the_crd(stack: str, crd_dir: Path) -> None:
    model = load_stack(stack, None).model
    if not model.training.mpiOperator or not model.tenants:
        pytest.skip("stack runs no MPIJobs")
    plan = build_plan(stack, model)
    tenant = model.tenants[0].namespace
    leaf = next(iter(plan.facts.tenants[tenant].leaf_networks), None)  # routed per leaf
    body = nccl.acceptance_job(plan, tenant, 2, leaf=leaf)
    report = validate_objects([body], model.cluster.kubernetes_minor, crd_dir)
    assert report.ok, report.errors
    assert report.checked_custom == 1


def test_acceptance_job_is_the_tenants_wired_mpijob() -> None:
    """Same wiring as `gpufabric job --kind mpijob`; only the launcher's program differs."""
    model = load_stack("lab-roce", None).model
    plan = build_plan("lab-roce", model)
    acc = nccl.acceptance_job(plan, "team-vision", 2)
    # the tenant's wiring, less the storage claims the acceptance job does not mount
    bare = build_plan("lab-roce", model.model_copy(update={"storage": None}))
    ref = job_manifest(
        bare, JobRequest(tenant="team-vision", kind="mpijob", nodes=2, name="gpufabric-nccl")
    )
    acc_spec, ref_spec = acc["spec"], ref["spec"]
    assert acc_spec["mpiReplicaSpecs"]["Worker"] == ref_spec["mpiReplicaSpecs"]["Worker"]
    assert acc["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "training"
    launcher = acc_spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert launcher["command"][:2] == ["/bin/bash", "-c"]


def test_launcher_runs_all_reduce_ring_then_all_gather_with_transport_logging() -> None:
    script = job()["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0][
        "command"
    ][2]
    lines = script.splitlines()
    runs = [
        shlex.split(line.removesuffix(" || rc=1")) for line in lines if line.startswith("mpirun")
    ]
    assert [r[-9:] for r in runs] == [[test, *nccl.SIZES] for test in nccl.TESTS]
    reduce, gather = runs
    assert "NCCL_ALGO=Ring" in reduce
    assert "NCCL_ALGO=Ring" not in gather
    for r in runs:
        assert {"NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=INIT,NET", "NCCL_IB_HCA"} <= set(r)
        assert r[r.index("-np") + 1] == "16"
    assert lines[-1] == "exit $rc"


def test_more_than_two_nodes_keep_nccls_algorithm_choice() -> None:
    script = job(nodes=4)["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][
        0
    ]["command"][2]
    assert "NCCL_ALGO" not in script
    assert "-np 32" in script


def test_split_log_by_markers() -> None:
    parts = nccl.split_log(launcher_log())
    assert list(parts) == list(nccl.TESTS)
    assert "all_reduce_perf_mpi" in parts["all_reduce_perf_mpi"]
    assert "all_gather_perf_mpi" in parts["all_gather_perf_mpi"]
    assert nccl.split_log("no markers") == {"launcher": "no markers"}


# ----------------------------------------------------------------- against the fake


def test_passing_run_prints_verdict_and_cleans_up(
    fake: FakeKube, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    on_create, on_get = operator(launcher_log())
    fake.on_create.append(on_create)
    fake.on_get.append(on_get)
    junit = tmp_path / "nccl.xml"
    assert main(argv(fake, tmp_path, "--junit", str(junit))) == 0
    out = capsys.readouterr()
    assert out.out.startswith("NCCL acceptance: PASS")
    assert "all_gather_perf_mpi: PASS" in out.out
    assert "created MPIJob team-vision/gpufabric-nccl" in out.err
    assert "deleted MPIJob team-vision/gpufabric-nccl" in out.err
    assert MPIJOB not in fake.objects
    assert ("POST", "/apis/kubeflow.org/v2beta1/namespaces/team-vision/mpijobs") in fake.requests
    cases = ET.parse(junit).getroot().findall("testsuite/testcase")
    assert [c.get("name") for c in cases] == [
        "nccl.all_reduce_perf_mpi",
        "nccl.all_gather_perf_mpi",
    ]


def test_submitted_job_is_the_acceptance_job(fake: FakeKube, tmp_path: Path) -> None:
    submitted: list[dict[str, Any]] = []
    fake.on_create.append(lambda _f, obj: submitted.append(json.loads(json.dumps(obj))))
    on_create, on_get = operator(launcher_log())
    fake.on_create.append(on_create)
    fake.on_get.append(on_get)
    assert main(argv(fake, tmp_path, "--json")) == 0
    mpijob = next(o for o in submitted if o["kind"] == "MPIJob")
    mpijob["metadata"].pop("uid")
    assert mpijob == job()


def test_poor_bandwidth_fails(
    fake: FakeKube, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    on_create, on_get = operator(launcher_log(all_reduce="healthy-average-poor-large.log"))
    fake.on_create.append(on_create)
    fake.on_get.append(on_get)
    assert main(argv(fake, tmp_path, "--json")) == 4
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"] == "FAIL"
    assert doc["job"]["state"] == "Succeeded"
    assert [r["verdict"] for r in doc["runs"]] == ["FAIL", "PASS"]


def test_failed_job_fails_with_its_message(
    fake: FakeKube, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    on_create, on_get = operator(launcher_log(all_reduce="socket-fallback.log"), outcome="Failed")
    fake.on_create.append(on_create)
    fake.on_get.append(on_get)
    assert main(argv(fake, tmp_path, "--json")) == 4
    doc = json.loads(capsys.readouterr().out)
    assert doc["reasons"][0] == "the MPIJob failed: launcher exited with code 1"
    assert any("socket fallback" in r for r in doc["reasons"])


def test_timeout_ends_the_run_clearly_and_deletes_the_job(
    fake: FakeKube, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    on_create, on_get = operator("", outcome="never")
    fake.on_create.append(on_create)
    fake.on_get.append(on_get)
    # The wait keeps a fifth of --timeout for its last poll and the log: at 1 s, a poll the
    # fake answers slowly (a loaded machine, parallel test workers) still ends in the wait's
    # timeout (5), not in the client's own deadline mid-request (3), as 0.2 s could.
    assert main(argv(fake, tmp_path, "--timeout", "1")) == 5
    out = capsys.readouterr()
    assert (
        "NCCL acceptance: timed out after 1s; last state: Running: MPIJob team-vision/gpufabric-nccl is running."
        in out.out
    )
    assert "kubectl -n team-vision describe mpijob gpufabric-nccl" in out.out
    assert MPIJOB not in fake.objects


def test_existing_job_is_not_overwritten(
    fake: FakeKube, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.add(job())
    assert main(argv(fake, tmp_path)) == 3
    assert "already exists" in capsys.readouterr().err
    assert MPIJOB in fake.objects


def test_keep_leaves_the_job(fake: FakeKube, tmp_path: Path) -> None:
    on_create, on_get = operator(launcher_log())
    fake.on_create.append(on_create)
    fake.on_get.append(on_get)
    assert main(argv(fake, tmp_path, "--keep")) == 0
    assert MPIJOB in fake.objects


def test_bad_tenant_and_nodes_are_input_errors(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["verify", "nccl", "--stack", "lab-roce", "--dry-run"]
    assert main([*base, "--tenant", "nobody"]) == 2
    assert "--tenant: 'nobody' is not a tenant of this stack" in capsys.readouterr().err
    assert main([*base, "--tenant", "team-vision", "--nodes", "9"]) == 2
    assert "--nodes: 9 is not between 1 and the stack's 4 GPU nodes" in capsys.readouterr().err


def test_dry_run_prints_the_job(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["verify", "nccl", "--stack", "lab-roce", "--tenant", "team-vision", "--dry-run"]) == 0
    )
    assert "all_gather_perf_mpi -b 1G -e 8G -f 2 -g 1" in capsys.readouterr().out


# ------------------------------------------------------------- probe DaemonSet


def test_probe_daemonset_is_a_valid_privileged_host_reader() -> None:
    model = load_stack("prod-ib", None).model
    ns, ds = probe_daemonset.manifests(
        build_plan("t", model).facts.nodes, "docker.io/nicolaka/netshoot:v0.13"
    )
    report = validate_objects([ns, ds], model.cluster.kubernetes_minor)
    assert report.ok, report.errors
    spec = ds["spec"]["template"]["spec"]
    assert spec["hostNetwork"]
    assert spec["hostPID"]
    assert spec["nodeSelector"] == dict(model.gpuNodes.nodeSelector)
    mount = spec["containers"][0]["volumeMounts"][0]
    assert (mount["mountPath"], mount["readOnly"]) == ("/host", True)
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


def test_probe_lifecycle_against_the_fake(fake: FakeKube, tmp_path: Path) -> None:
    def schedule(f: FakeKube, obj: dict[str, Any]) -> None:
        if obj["kind"] != "DaemonSet":
            return
        obj["status"] = {"desiredNumberScheduled": 2, "numberReady": 2}
        for i in range(2):
            f.add(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"gpufabric-probe-{'ab'[i]}x9",
                        "namespace": "gpufabric-probe",
                        "labels": dict(probe_daemonset.LABELS),
                    },
                    "spec": {"nodeName": f"gpu-node-{i}"},
                    "status": {"phase": "Running"},
                }
            )

    fake.on_create.append(schedule)
    kube = Kube(str(fake.kubeconfig(tmp_path)), "fake")
    model = load_stack("lab-roce", None).model
    pods = probe_daemonset.start(kube, build_plan("t", model).facts.nodes, "img", poll=0.01)
    assert pods == {"gpufabric-probe-ax9": "gpu-node-0", "gpufabric-probe-bx9": "gpu-node-1"}
    spec = probe_daemonset.host_spec("gpufabric-probe-ax9", "/k/config", "lab")
    assert (
        spec
        == "kubectl://gpufabric-probe-ax9?namespace=gpufabric-probe&container=probe&context=lab&kubeconfig=%2Fk%2Fconfig"
    )
    probe_daemonset.stop(kube)
    assert not [p for p in fake.objects if "gpufabric-probe" in p and "/pods/" not in p]


def _schedule_probe(f: FakeKube, obj: dict[str, Any]) -> None:
    if obj["kind"] == "DaemonSet":
        obj["status"] = {"desiredNumberScheduled": 1, "numberReady": 1}
        pod = {"name": "gpufabric-probe-ax9", "namespace": "gpufabric-probe"}
        f.add(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": pod | {"labels": dict(probe_daemonset.LABELS)},
                "spec": {"nodeName": "gpu-node-0"},
                "status": {"phase": "Running"},
            }
        )


def _probe_parts(fake: FakeKube) -> list[str]:
    return sorted(p for p in fake.objects if "gpufabric-probe" in p and "/pods/" not in p)


@pytest.mark.parametrize("image", ["img", "other-img"])
def test_a_probe_in_place_is_never_deleted_by_a_run_that_did_not_create_it(
    fake: FakeKube, tmp_path: Path, image: str
) -> None:
    """A second `verify nodes --via-cluster` (or a probe kept with --keep-probe) found the
    first run's DaemonSet, used it whatever its image, then deleted its namespace under the
    first run. Now a probe in place is used only when it runs the same pods, and a run
    deletes only what it created."""
    fake.on_create.append(_schedule_probe)
    kube = Kube(str(fake.kubeconfig(tmp_path)), "fake")
    nodes = build_plan("t", load_stack("lab-roce", None).model).facts.nodes
    first: list[str] = []
    probe_daemonset.start(kube, nodes, "img", poll=0.01, owned=first)
    assert sorted(first) == _probe_parts(fake)
    second: list[str] = []
    if image == "img":
        assert probe_daemonset.start(kube, nodes, image, poll=0.01, owned=second)
    else:
        with pytest.raises(KubeError, match="of another run is in place"):
            probe_daemonset.start(kube, nodes, image, poll=0.01, owned=second)
    assert second == []
    assert probe_daemonset.stop(kube, owned=second) == []
    assert sorted(first) == _probe_parts(fake)  # the first run's probe is untouched
    probe_daemonset.stop(kube, owned=first)
    assert _probe_parts(fake) == []


def test_via_cluster_needs_kubectl(
    fake: FakeKube,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    cfg = str(
        fake.kubeconfig(tmp_path)
    )  # a usable kubeconfig: the missing kubectl is what stops it
    argv = ["verify", "nodes", "--stack", "lab-roce", "--via-cluster", "--kubeconfig", cfg]
    assert main([*argv, "--context", "fake"]) == 3
    assert "install kubectl or use --hosts ssh://" in capsys.readouterr().err


# --------------------------------------------------- whatever the API server and user do


def _install(fake: FakeKube, log: str, outcome: str = "Succeeded", after_polls: int = 2) -> None:
    on_create, on_get = operator(log, outcome, after_polls)
    fake.on_create.append(on_create)
    fake.on_get.append(on_get)


def test_throttled_and_failing_answers_are_retried(fake: FakeKube, tmp_path: Path) -> None:
    _install(fake, launcher_log())
    fake.faults += [("POST", "/mpijobs", 429), ("GET", MPIJOB, 503), ("GET", MPIJOB, 500)]
    assert main(argv(fake, tmp_path)) == 0
    assert MPIJOB not in fake.objects


@pytest.mark.parametrize(
    "fault",
    [("GET", "/pods", "malformed"), ("GET", MPIJOB, 400)],
)
def test_malformed_or_refused_answers_are_errors_and_the_job_goes(
    fake: FakeKube, tmp_path: Path, fault: tuple[str, str, Any], capsys: Any
) -> None:
    _install(fake, launcher_log())
    fake.faults.append(fault)
    code = main(argv(fake, tmp_path))
    err = capsys.readouterr().err
    assert code in (3, 5), err
    assert "Traceback" not in err
    assert MPIJOB not in fake.objects


def test_timeout_bounds_a_hung_log_endpoint(fake: FakeKube, tmp_path: Path) -> None:
    _install(fake, launcher_log())
    fake.faults.append(("GET", "/log", 6.0))
    start = time.monotonic()
    code = main(argv(fake, tmp_path, "--timeout", "3"))
    took = time.monotonic() - start
    assert code == 5  # the log could not be read in time: nothing to judge
    assert MPIJOB not in fake.objects
    assert took < 3 + 30 + 6  # --timeout, then at most the cleanup grace


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_signals_end_the_run_and_the_job_is_deleted(
    fake: FakeKube, tmp_path: Path, signum: int, capsys: Any
) -> None:
    _install(fake, launcher_log(), outcome="never")
    sent = {"done": False}

    def send(fake_: FakeKube, path: str) -> None:
        if path == MPIJOB and not sent["done"]:
            sent["done"] = True
            threading.Timer(0.05, os.kill, (os.getpid(), signum)).start()

    fake.on_get.append(send)
    code = main(argv(fake, tmp_path, "--timeout", "20"))
    assert code in (130, 128 + signum)
    assert MPIJOB not in fake.objects
    assert "cleaned up" in capsys.readouterr().err


def test_a_second_ctrl_c_during_cleanup_does_not_abandon_the_job(
    fake: FakeKube, tmp_path: Path
) -> None:
    _install(fake, launcher_log(), outcome="never")
    fired = {"n": 0}

    def send(fake_: FakeKube, path: str) -> None:
        if path == MPIJOB and fired["n"] == 0:
            fired["n"] = 1
            threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT)).start()

    def interrupt_the_delete(method: str, path: str) -> None:
        if method == "DELETE" and path == MPIJOB:
            os.kill(os.getpid(), signal.SIGINT)  # a second Ctrl-C while the delete is in flight

    fake.on_get.append(send)
    fake.on_request.append(interrupt_the_delete)
    fake.faults.append(("DELETE", MPIJOB, 0.3))  # a slow delete
    code = main(argv(fake, tmp_path, "--timeout", "20"))
    assert code == 130
    assert MPIJOB not in fake.objects


def test_an_existing_job_is_never_touched(fake: FakeKube, tmp_path: Path) -> None:
    existing = job()
    fake.add(existing)
    assert main(argv(fake, tmp_path)) == 3
    assert MPIJOB in fake.objects


def test_a_run_the_tenants_queue_can_never_admit_is_refused_before_any_call(
    fake: FakeKube, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """lab-roce's team-vision holds 16 GPUs and borrows none: a four-node run (32 GPUs)
    would never be admitted and would wait out --timeout. It is refused (exit 2) before
    anything is created, naming the sizes and the tenants that fit."""
    assert main(argv(fake, tmp_path, "--nodes", "4", "--timeout", "5")) == 2
    err = capsys.readouterr().err
    assert "--nodes: 4 nodes ask for 32 GPUs (8 a node)" in err
    assert "tenant 'team-vision' can never be admitted with more than 16" in err
    assert "gpuQuota 16 + gpuBorrowingLimit 0" in err
    assert "accepted: --nodes 2, or the tenant's gpuQuota" in err  # team-speech: 16 too
    assert "Traceback" not in err
    assert fake.requests == []


def test_a_run_that_must_borrow_is_not_refused() -> None:
    """With a borrowing limit, a run beyond the quota waits until the other tenants' quota
    is idle, but it can be admitted: never refused."""
    assert job(nodes=4)["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 4


def test_a_sweep_through_a_tenant_too_small_for_a_pair_is_refused_before_any_call(
    fake: FakeKube, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """dgx-h100's research holds one node's 8 GPUs: none of a sweep's two-node jobs could
    ever be admitted, so the sweep is refused up front, naming the tenant that fits."""
    cfg = str(fake.kubeconfig(tmp_path))
    argv = ["verify", "nccl", "--stack", "dgx-h100", "--tenant", "research", "--sweep"]
    assert main([*argv, "--kubeconfig", cfg, "--context", "fake"]) == 2
    err = capsys.readouterr().err
    assert "2 nodes ask for 16 GPUs (8 a node), but tenant 'research' can never" in err
    assert "accepted: --tenant llm-train (up to 24), or the tenant's gpuQuota" in err
    assert fake.requests == []
