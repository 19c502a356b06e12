"""Each node's acceptance result recorded as its NodeAcceptance object, against the fake API
server: ``verify nccl`` (the nodes its job ran on), ``verify nccl --sweep`` (every node it
judged) and ``gpufabric health`` (its re-certification candidates) create-or-update them
through the status subresource with the values a dashboard graphs; writing the same result
again changes nothing; a cluster without the CRD, or a user who may not write them, gets a
warning naming the command that fixes it, and the check's verdict and exit code stand. The
printed commands are run, with the real kubectl where it is present."""

from __future__ import annotations

import datetime as dt
import json
import os
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from builders import REPO, body, gpu_node
from fake_kube import FakeKube
from nccllogs import Log, text

from gpufabric.cli import main
from gpufabric.model.stackfile import load_stack
from gpufabric.outputs.schema import validate_objects
from gpufabric.plan import ids
from gpufabric.plan import node_acceptance as na
from gpufabric.plan.build import Plan
from gpufabric.plan.resolve import DEFAULT_FRACTION
from gpufabric.verify.kube import Kube
from gpufabric.verify.nccl import job as nccl
from gpufabric.verify.nccl import record as acceptance_record
from gpufabric.verify.nccl import rules as nccl_rules
from gpufabric.verify.nccl.record import Result

STACK = "labmon"  # lab-roce with the monitoring layer
TENANT = "team-vision"
AT = dt.datetime(2026, 11, 25, 1, 0, tzinfo=dt.UTC)
RESULTS = "/apis/gpufabric.io/v1alpha1/nodeacceptances"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project directory (cwd) whose stacks/ holds lab-roce with monitoring enabled."""
    (tmp_path / "stacks").mkdir()
    (tmp_path / "Pulumi.yaml").write_text("name: gpufabric\nruntime: python\nstackConfigDir: stacks\n")  # fmt: skip
    lab = (REPO / "stacks" / "Pulumi.lab-roce.yaml").read_text().rstrip("\n")
    (tmp_path / "stacks" / f"Pulumi.{STACK}.yaml").write_text(f"{lab}\n  gpufabric:monitoring:\n    enabled: true\n")  # fmt: skip
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def plan(project: Path) -> Plan:
    return load_stack(STACK, project / "stacks").plan


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    with FakeKube() as f:
        f.status_subresources.add(na.PLURAL)
        f.known_only = True  # no CRD, no gpufabric.io API
        f.register("kubeflow.org", "v2beta1", "MPIJob", "mpijobs", True)
        yield f


def install_crd(fake: FakeKube, plan: Plan) -> dict[str, Any]:
    crd = body(plan, ids.NODE_ACCEPTANCE_CRD)
    fake.add(crd)
    fake.register_crd(crd)
    return crd


def recorded(fake: FakeKube) -> dict[str, dict[str, Any]]:
    return {p.rsplit("/", 1)[1]: o for p, o in fake.objects.items() if p.startswith(f"{RESULTS}/")}


def writes(fake: FakeKube) -> list[tuple[str, str]]:
    return [(m, p) for m, p in fake.requests if m in ("POST", "PUT", "PATCH", "DELETE")]


def kube_of(fake: FakeKube, tmp_path: Path) -> Kube:
    return Kube(str(fake.kubeconfig(tmp_path)), "fake")


def record(kube: Kube, plan: Plan, results: list[Result], warned: list[str] | None = None, at: dt.datetime = AT) -> int:  # fmt: skip
    sink = warned if warned is not None else []
    return acceptance_record.record(kube, plan, results, "sweep", "gpufabric-nccl", 90.0, at, sink.append)  # fmt: skip


SWEPT = [
    Result("gpu-a", "GOOD", 95.5, ""),
    Result("gpu-b", "BAD", 40.0, "failed with 3 GOOD partners"),
    Result("gpu-c", "UNKNOWN", None, "not localized"),
]


def test_results_are_written_through_the_status_subresource_and_fit_the_crd(fake: FakeKube, tmp_path: Path, plan: Plan) -> None:  # fmt: skip
    crd = install_crd(fake, plan)
    assert record(kube_of(fake, tmp_path), plan, SWEPT) == 3
    got = recorded(fake)
    assert got["gpu-a"]["status"] == {
        "verdict": "GOOD",
        "busbwGbps": 95.5,
        "thresholdGbps": 90.0,
        "source": "sweep",
        "jobName": "gpufabric-nccl",
        "stack": STACK,
        "lastRunTime": "2026-11-25T01:00:00Z",
    }
    assert got["gpu-b"]["status"]["message"] == "failed with 3 GOOD partners"
    assert "busbwGbps" not in got["gpu-c"]["status"]  # no series rather than a false 0
    assert got["gpu-a"]["metadata"]["labels"]["gpufabric.io/stack"] == STACK
    # created, then the status written on its own (a create's status is dropped by the API)
    assert ("PUT", f"{RESULTS}/gpu-a/status") in writes(fake)
    report = validate_objects([crd, *got.values()], plan.facts.kubernetes_minor)
    assert report.ok, [str(e) for e in report.errors]
    assert report.checked_custom == 3


def test_writing_the_same_result_again_changes_nothing(fake: FakeKube, tmp_path: Path, plan: Plan) -> None:  # fmt: skip
    install_crd(fake, plan)
    kube = kube_of(fake, tmp_path)
    record(kube, plan, SWEPT)
    before = json.dumps(recorded(fake), sort_keys=True)
    fake.requests.clear()
    assert record(kube, plan, SWEPT) == 0
    assert writes(fake) == []
    assert json.dumps(recorded(fake), sort_keys=True) == before


def test_a_new_result_replaces_the_status_under_the_version_read(fake: FakeKube, tmp_path: Path, plan: Plan) -> None:  # fmt: skip
    install_crd(fake, plan)
    kube = kube_of(fake, tmp_path)
    record(kube, plan, SWEPT)
    version = recorded(fake)["gpu-b"]["metadata"]["resourceVersion"]
    fake.requests.clear()
    fake.faults.append(("PUT", "/gpu-b/status", 409))  # another writer got there first
    later = AT + dt.timedelta(hours=2)
    assert record(kube, plan, [Result("gpu-b", "GOOD", 96.0, "")], at=later) == 1
    status = recorded(fake)["gpu-b"]["status"]
    assert (status["verdict"], status["busbwGbps"], status["lastRunTime"]) == ("GOOD", 96.0, "2026-11-25T03:00:00Z")  # fmt: skip
    assert "message" not in status
    assert int(recorded(fake)["gpu-b"]["metadata"]["resourceVersion"]) > int(version)
    assert [m for m, _ in writes(fake)] == ["PUT", "PUT"]  # read again after the conflict


def _kubectl() -> str:
    local = REPO.parent / "shared" / "upstream" / "bin" / "kubectl"
    found = str(local) if os.access(local, os.X_OK) else shutil.which("kubectl")
    if found is None:
        pytest.skip("kubectl is not available (../shared/upstream/bin or PATH)")
    return found


def _run(command: str, fake: FakeKube, tmp_path: Path, *extra: str, **subst: str) -> str:
    """Run a command a warning printed, as the person would (USER etc. filled in); its
    output."""
    argv = shlex.split(command)
    for key, value in subst.items():
        argv = [a.replace(key, value) for a in argv]
    if argv[0] == "gpufabric":
        assert main(argv[1:]) == 0
        return ""
    assert argv[0] == "kubectl"
    cfg = str(fake.kubeconfig(tmp_path))
    done = subprocess.run([_kubectl(), "--kubeconfig", cfg, *argv[1:], *extra], capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_without_the_crd_a_warning_names_the_commands_that_install_it(fake: FakeKube, tmp_path: Path, plan: Plan) -> None:  # fmt: skip
    kube, warned = kube_of(fake, tmp_path), []
    assert record(kube, plan, SWEPT, warned) == 0
    (warning,) = warned
    assert warning.startswith("gpufabric: warning: 3 node acceptance results not recorded")
    assert "nodeacceptances.gpufabric.io CRD is not installed" in warning
    commands = warning.split(", or: ", 1)[1].split(" && ")
    assert [shlex.split(c)[:2] for c in commands] == [["gpufabric", "render"], ["kubectl", "create"]]  # fmt: skip
    # the commands, as printed, install the CRD; the next run records the results
    fake.anonymous = True  # kubectl sends no token over plain HTTP
    fake.on_create.append(lambda f, o: f.register_crd(o) if o["kind"] == "CustomResourceDefinition" else None)  # fmt: skip
    for command in commands:
        # the fake's OpenAPI documents are not complete enough for kubectl's client-side
        # check (as in tests/test_runbook_commands.py); the server side is the fake's own
        _run(command, fake, tmp_path, *(["--validate=false"] if "kubectl" in command else []))
    assert na.CRD_NAME in {o["metadata"]["name"] for o in fake.objects.values()}
    assert record(kube, plan, SWEPT, warned) == 3
    assert len(warned) == 1


def test_a_user_who_may_not_write_gets_the_binding_to_ask_for(fake: FakeKube, tmp_path: Path, plan: Plan) -> None:  # fmt: skip
    install_crd(fake, plan)
    fake.faults.append(("GET", "/nodeacceptances/gpu-a", 403))
    warned: list[str] = []
    assert record(kube_of(fake, tmp_path), plan, SWEPT, warned) == 0
    (warning,) = warned
    assert "403 Forbidden" in warning
    command = warning.rsplit("(USER): ", 1)[1]
    assert command.startswith("kubectl create clusterrolebinding")
    fake.anonymous = True
    # kubectl sends a ClusterRoleBinding as protobuf, which the fake does not read: the
    # real kubectl builds it from the printed flags, client-side
    out = _run(command, fake, tmp_path, "--dry-run=client", "-o", "json", USER="alice")
    binding = json.loads(out)
    assert binding["metadata"]["name"] == "gpufabric-node-acceptance-writer-alice"
    assert binding["roleRef"]["name"] == body(plan, ids.NODE_ACCEPTANCE_WRITER)["metadata"]["name"]
    assert binding["subjects"][0]["name"] == "alice"


def test_a_stack_without_monitoring_records_nothing(fake: FakeKube, tmp_path: Path) -> None:
    plan = load_stack("lab-roce", None).plan
    warned: list[str] = []
    assert record(kube_of(fake, tmp_path), plan, SWEPT, warned) == 0
    assert warned == []
    assert writes(fake) == []


# ----------------------------------------------------------------- through the commands


def _mpijob_operator(fake: FakeKube, busbw: dict[str, float]) -> None:
    """The MPI Operator's part: each MPIJob succeeds at once, its workers placed on the
    nodes it is pinned to (else gpu-a, gpu-b), its launcher log an nccl-tests run."""

    def on_create(fake_: FakeKube, obj: dict[str, Any]) -> None:
        if obj["kind"] != "MPIJob":
            return
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        worker = obj["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
        affinity = worker.get("affinity", {}).get("nodeAffinity")
        pair = ("gpu-a", "gpu-b")
        if affinity:
            term = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]  # fmt: skip
            pair = tuple(term["matchExpressions"][0]["values"])
        obj["status"] = {"conditions": [{"type": "Succeeded", "status": "True", "message": "done"}]}  # fmt: skip
        labels = {nccl.JOB_LABEL: name}
        launcher = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{name}-launcher", "namespace": ns, "labels": {**labels, nccl.ROLE_LABEL: "launcher"}}, "spec": {"nodeName": "cpu-0", "containers": [{"name": "l"}]}}  # fmt: skip
        fake_.add(launcher)
        for i, node in enumerate(pair):
            gpu = {"name": "w", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
            fake_.add({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{name}-worker-{i}", "namespace": ns, "labels": {**labels, nccl.ROLE_LABEL: "worker"}}, "spec": {"nodeName": node, "containers": [gpu]}})  # fmt: skip
        bw = min(busbw.get(n, 95.0) for n in pair)
        log = "".join(nccl.MARKER.format(test=t) + "\n" + text(Log(test=t, hosts=pair, busbw=bw, layer="RoCE", hcas=2)) for t in nccl.TESTS)  # fmt: skip
        fake_.logs[f"/api/v1/namespaces/{ns}/pods/{name}-launcher"] = log

    fake.on_create.append(on_create)


def _cleaning_pods_at_the_end(fake: FakeKube, gone: tuple[str, ...] = ("worker-0", "worker-1")) -> None:  # fmt: skip
    """After ``_mpijob_operator``: each MPIJob runs for two polls, then succeeds, and
    ``cleanPodPolicy: Running`` deletes its still-running pods (the workers' sshd) in the
    same moment, as the MPI Operator does; the finished launcher stays."""
    jobs: dict[str, int] = {}

    def on_create(fake_: FakeKube, obj: dict[str, Any]) -> None:
        if obj["kind"] == "MPIJob":
            obj["status"] = {"conditions": [{"type": "Running", "status": "True", "message": "running"}]}  # fmt: skip
            jobs[f"/apis/kubeflow.org/v2beta1/namespaces/{obj['metadata']['namespace']}/mpijobs/{obj['metadata']['name']}"] = 0  # fmt: skip

    def on_get(fake_: FakeKube, path: str) -> None:
        if path not in jobs or path not in fake_.objects:
            return
        jobs[path] += 1
        if jobs[path] == 3:
            job = fake_.objects[path]
            job["status"] = {"conditions": [{"type": "Succeeded", "status": "True", "message": "done"}]}  # fmt: skip
            ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
            for pod in gone:
                fake_.objects.pop(f"/api/v1/namespaces/{ns}/pods/{name}-{pod}", None)

    fake.on_create.append(on_create)
    fake.on_get.append(on_get)


def test_the_nodes_recorded_are_those_the_run_placed_its_gpu_pods_on(fake: FakeKube, tmp_path: Path, plan: Plan, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """The GPU pods' nodes were read in a second listing after the job ended, when
    cleanPodPolicy had already deleted the workers: a passing run recorded no node."""
    install_crd(fake, plan)
    _mpijob_operator(fake, {})
    _cleaning_pods_at_the_end(fake)
    assert _verify(fake, tmp_path) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "PASS"
    got = recorded(fake)
    assert sorted(got) == ["gpu-a", "gpu-b"]
    assert {o["status"]["verdict"] for o in got.values()} == {"GOOD"}


def test_placement_and_the_nodes_come_from_one_listing(fake: FakeKube, tmp_path: Path, plan: Plan) -> None:  # fmt: skip
    """A job's placement (host -> node) and its GPU nodes (what NodeAcceptance records) are
    read from the same listings: with one worker cleaned up before the job's end was seen,
    placement named both workers' nodes and the recorded nodes only one."""
    _mpijob_operator(fake, {})
    _cleaning_pods_at_the_end(fake, gone=("worker-1",))
    job = nccl.acceptance_job(plan, TENANT, 2, None, "gpufabric-nccl")
    outcome = nccl.run_job(kube_of(fake, tmp_path), job, timeout=60, poll=0.01, placement=True, find_nodes=True)  # fmt: skip
    assert outcome.state == "Succeeded"
    assert outcome.placed == {
        "gpufabric-nccl-launcher": "cpu-0",
        "gpufabric-nccl-worker-0": "gpu-a",
        "gpufabric-nccl-worker-1": "gpu-b",
    }
    assert outcome.nodes == ("gpu-a", "gpu-b")


def _verify(fake: FakeKube, tmp_path: Path, *extra: str) -> int:
    cfg = str(fake.kubeconfig(tmp_path))
    return main(["verify", "nccl", "--stack", STACK, "--tenant", TENANT, "--kubeconfig", cfg, "--context", "fake", "--poll", "0.01", "--json", *extra])  # fmt: skip


def test_verify_nccl_records_the_nodes_its_job_ran_on(fake: FakeKube, tmp_path: Path, plan: Plan, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    install_crd(fake, plan)
    _mpijob_operator(fake, {})
    assert _verify(fake, tmp_path) == 0
    doc = json.loads(capsys.readouterr().out)
    got = recorded(fake)
    assert sorted(got) == ["gpu-a", "gpu-b"]  # the launcher's node is no GPU node of the run
    for status in (o["status"] for o in got.values()):
        assert status["verdict"] == "GOOD"
        assert status["source"] == "acceptance"
        assert status["jobName"] == "gpufabric-nccl"
        assert status["thresholdGbps"] == doc["threshold_gbps"]
        assert status["busbwGbps"] == max(r["busbw_max_gbps"] for r in doc["runs"])


@pytest.mark.parametrize("fault", ["no crd", "forbidden"])
def test_a_failed_write_is_a_warning_and_the_verdict_stands(fake: FakeKube, tmp_path: Path, plan: Plan, capsys: pytest.CaptureFixture[str], fault: str) -> None:  # fmt: skip
    if fault == "forbidden":
        install_crd(fake, plan)
        fake.faults.append(("GET", "/nodeacceptances/gpu-a", 403))
    _mpijob_operator(fake, {})
    assert _verify(fake, tmp_path) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["verdict"] == "PASS"
    assert "gpufabric: warning: 2 node acceptance results not recorded" in err
    assert ("kubectl create -f" if fault == "no crd" else "kubectl create clusterrolebinding") in err  # fmt: skip
    assert "Traceback" not in err
    assert recorded(fake) == {}


def test_verify_nccl_sweep_records_every_node_it_judged(fake: FakeKube, tmp_path: Path, plan: Plan, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    install_crd(fake, plan)
    for i in range(5):
        name = f"gpu-{i}"
        fake.add({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"feature.node.kubernetes.io/pci-10de.present": "true"}}, "spec": {}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}})  # fmt: skip
    _mpijob_operator(fake, {"gpu-3": 40.0})
    assert _verify(fake, tmp_path, "--sweep") == 4
    doc = json.loads(capsys.readouterr().out)
    got = {n: o["status"] for n, o in recorded(fake).items()}
    assert sorted(got) == sorted(doc["nodes"])
    for node, status in got.items():
        assert status["verdict"] == doc["nodes"][node]["verdict"]
        assert status["busbwGbps"] == doc["nodes"][node]["busbw"]
        assert status["source"] == "sweep"
    assert got["gpu-3"]["verdict"] == "BAD"
    assert got["gpu-3"]["busbwGbps"] == 40.0
    assert {got[n]["verdict"] for n in got if n != "gpu-3"} == {"GOOD"}
    threshold = nccl_rules.expectation(plan.facts, None, DEFAULT_FRACTION).threshold_gbps
    assert {s["thresholdGbps"] for s in got.values()} == {threshold}


def test_health_records_its_recertification_candidates(tmp_path: Path) -> None:
    """gpufabric health (prod-ib, 16 nodes): two nodes quarantined for Xid 79, cleared, then
    re-certified with a sweep in which one is slow: the returned node is GOOD, the kept one
    BAD, both with their bus bandwidth; the partners' results are no candidates'."""
    from test_health import NODES, NOW, Fleet, one_pass, set_condition, xid79

    plan = load_stack("prod-ib", None).plan
    with FakeKube() as fake:
        fake.status_subresources.add(na.PLURAL)
        fake.add(*(gpu_node(n) for n in NODES))
        install_crd(fake, plan)
        for name in ("gpu-03", "gpu-11"):
            xid79(fake, name)
        one_pass(fake, tmp_path, plan)
        assert recorded(fake) == {}  # quarantine alone proves nothing
        for name in ("gpu-03", "gpu-11"):
            set_condition(fake, name, "GpuFatalXid", "False")
        later = NOW + dt.timedelta(hours=1)
        report = one_pass(fake, tmp_path, plan, fleet=Fleet(slow={"gpu-11"}), at=later)
        assert {r["action"] for r in report.rows} == {"return", "keep"}
        got = {n: o["status"] for n, o in recorded(fake).items()}
    assert sorted(got) == ["gpu-03", "gpu-11"]
    assert (got["gpu-03"]["verdict"], got["gpu-03"]["busbwGbps"]) == ("GOOD", 370.0)
    assert got["gpu-11"]["verdict"] == "BAD"
    assert got["gpu-11"]["busbwGbps"] == 180.0
    assert {s["source"] for s in got.values()} == {"recertification"}
    assert got["gpu-11"]["message"].startswith("sweep: BAD")
