"""verify against an API server that misbehaves: answers that trickle in, creates still in
flight when Ctrl-C lands, repeated pages, null or mistyped fields, another object than the
one asked for. Whatever it answers, verify ends within its deadline, never passes on an
answer it cannot read, never shows a traceback, and leaves no MPIJob behind unless it says
so with the command that deletes it."""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from conftest import SHARED
from fake_kube import TOKEN, FakeKube
from test_cluster import healthy
from test_cluster import readiness as cluster_readiness
from test_nccl import MPIJOB, _install, argv, launcher_log

from gpufabric.cli import main
from gpufabric.verify import kube as kube_module
from gpufabric.verify.sweep import run as sweep_module

SLACK = 4.0
"""Seconds a command may take beyond its deadline (start-up, the last poll, cleanup)."""


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    with FakeKube() as f:
        yield f


@pytest.fixture
def short_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cleanup may take 2 s beyond the deadline instead of 30 (keeps the tests quick)."""
    monkeypatch.setattr(kube_module, "CLEANUP_GRACE", 2.0)


def timed(args: list[str]) -> tuple[int, float]:
    start = time.monotonic()
    code = main(args)
    return code, time.monotonic() - start


# ------------------------------------------------------------ 1. wall-clock deadlines


def test_a_trickling_server_cannot_hold_verify_cluster_past_its_timeout(
    fake: FakeKube, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    healthy(fake, "lab-roce")
    fake.slow.append(("GET", "", 0.05))  # every answer, one byte per 50 ms
    cfg = str(fake.kubeconfig(tmp_path))
    args = ["verify", "cluster", "--stack", "lab-roce", "--kubeconfig", cfg, "--context", "fake"]
    code, took = timed([*args, "--timeout", "3"])
    err = capsys.readouterr().err
    assert code == 3, err
    assert "Traceback" not in err
    assert took < 3 + SLACK


def test_a_trickling_server_cannot_hold_verify_nccl_past_its_timeout(
    fake: FakeKube, tmp_path: Path, short_grace: None, capsys: pytest.CaptureFixture[str]
) -> None:
    _install(fake, launcher_log(), outcome="never")
    fake.slow.append(("GET", "/mpijobs/gpufabric-nccl", 0.05))  # the job's status trickles
    code, took = timed(argv(fake, tmp_path, "--timeout", "3"))
    err = capsys.readouterr().err
    assert code in (3, 5), err
    assert "Traceback" not in err
    assert took < 3 + kube_module.CLEANUP_GRACE + SLACK


def test_a_trickling_log_is_cut_at_the_deadline(
    fake: FakeKube, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _install(fake, launcher_log())
    fake.slow.append(("GET", "/log", 0.01))  # a 20 KB log over minutes
    code, took = timed(argv(fake, tmp_path, "--timeout", "4"))
    assert code == 5, capsys.readouterr().err  # no log to judge within the time
    assert MPIJOB not in fake.objects
    assert took < 4 + SLACK


# --------------------------------------------------- 2. a create in flight at Ctrl-C


def _interrupt_the_create(fake: FakeKube, after: float) -> None:
    def on_request(method: str, path: str) -> None:
        if method == "POST" and path.endswith("/mpijobs"):
            threading.Timer(after, os.kill, (os.getpid(), signal.SIGINT)).start()

    fake.on_request.append(on_request)


def test_a_job_whose_create_was_in_flight_at_ctrl_c_is_deleted_once_it_lands(
    fake: FakeKube, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _install(fake, launcher_log(), outcome="never")
    fake.faults.append(("POST", "/mpijobs", 1.5))  # the server creates it 1.5 s later
    _interrupt_the_create(fake, 0.3)
    landed = threading.Event()
    fake.on_create.append(lambda _fake, _obj: landed.set())
    code = main(argv(fake, tmp_path, "--timeout", "20"))
    err = capsys.readouterr().err
    assert code == 130
    assert landed.wait(5)
    time.sleep(0.2)  # whatever the command does with a create that lands, it has done it
    assert MPIJOB not in fake.objects
    assert ("POST", "/apis/kubeflow.org/v2beta1/namespaces/team-vision/mpijobs") in fake.requests
    assert err.rstrip().endswith("interrupted; cleaned up"), err


def _kubectl() -> str | None:
    found = shutil.which("kubectl")
    shared = SHARED / "upstream" / "bin" / "kubectl"
    return found or (str(shared) if shared.is_file() else None)


def test_a_deletion_that_cannot_be_confirmed_is_said_with_its_command(
    fake: FakeKube, tmp_path: Path, short_grace: None, capsys: pytest.CaptureFixture[str]
) -> None:
    _install(fake, launcher_log(), outcome="never")
    fake.faults.append(("POST", "/mpijobs", 5.0))  # lands after --timeout and the grace
    _interrupt_the_create(fake, 0.3)
    code = main(argv(fake, tmp_path, "--timeout", "1"))
    err = capsys.readouterr().err
    assert code == 130
    command = "kubectl -n team-vision delete mpijob gpufabric-nccl --ignore-not-found"
    assert "cleaned up" not in err.replace("NOT cleaned up", ""), err
    assert f"NOT cleaned up, run: {command}" in err
    deadline = time.monotonic() + 5
    while MPIJOB not in fake.objects and time.monotonic() < deadline:
        time.sleep(0.05)  # the late create lands
    assert MPIJOB in fake.objects
    kubectl = _kubectl()
    if kubectl is None:
        pytest.skip("no kubectl to run the printed command with")
    fake.mutators.append(_as_kubectl_sees_it(fake))
    cfg = fake.kubeconfig(tmp_path)
    words = shlex.split(command)
    done = subprocess.run(
        [kubectl, f"--kubeconfig={cfg}", f"--cache-dir={tmp_path / 'cache'}", *words[1:]],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert MPIJOB not in fake.objects


_DISCOVERY: dict[str, dict[str, Any]] = {
    "/api": {"kind": "APIVersions", "versions": ["v1"]},
    "/api/v1": {"kind": "APIResourceList", "groupVersion": "v1", "resources": []},
    "/apis": {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [
            {
                "name": "kubeflow.org",
                "versions": [{"groupVersion": "kubeflow.org/v2beta1", "version": "v2beta1"}],
                "preferredVersion": {"groupVersion": "kubeflow.org/v2beta1", "version": "v2beta1"},
            }
        ],
    },
    "/apis/kubeflow.org/v2beta1": {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": "kubeflow.org/v2beta1",
        "resources": [
            {
                "name": "mpijobs",
                "singularName": "mpijob",
                "namespaced": True,
                "kind": "MPIJob",
                "verbs": ["create", "delete", "get", "list"],
            }
        ],
    },
}


def _as_kubectl_sees_it(fake: FakeKube) -> Callable[[str, str, int, Any], tuple[int, Any] | None]:
    """Discovery for the MPIJob resource, and the fake's objects to a client sending no
    token (kubectl sends none over plain HTTP)."""

    def mutate(method: str, raw: str, code: int, body: Any) -> tuple[int, Any] | None:
        path = urlparse(raw).path.rstrip("/")
        if method == "GET" and path in _DISCOVERY:
            return 200, _DISCOVERY[path]
        if code == 401:
            return fake.handle(method, raw, b"", f"Bearer {TOKEN}")
        return None

    return mutate


# ------------------------------------------------------------ 4. malformed answers


def _repeat_first_page(method: str, raw: str, code: int, body: Any) -> tuple[int, Any] | None:
    """Node lists: the first page holds gpu-node-0 and -1, the second again the same."""
    url = urlparse(raw)
    if method != "GET" or url.path != "/api/v1/nodes" or not isinstance(body, dict):
        return None
    gpu = [json.loads(json.dumps(NODE_PAGE[n])) for n in sorted(NODE_PAGE)]
    if parse_qs(url.query).get("continue"):
        return code, {"kind": "NodeList", "metadata": {}, "items": gpu}
    return code, {"kind": "NodeList", "metadata": {"continue": "2"}, "items": gpu}


NODE_PAGE: dict[str, dict[str, Any]] = {}


def test_a_repeated_page_does_not_count_nodes_twice(fake: FakeKube, tmp_path: Path) -> None:
    healthy(fake, "lab-roce")  # four GPU nodes; the API shows two of them, twice
    NODE_PAGE.clear()
    NODE_PAGE.update({n: fake.objects[f"/api/v1/nodes/{n}"] for n in ("gpu-node-0", "gpu-node-1")})
    fake.mutators.append(_repeat_first_page)
    results = cluster_readiness(fake, tmp_path)
    count = results[("nodes.count", "cluster")]
    assert count.status == "FAIL"
    assert count.message.startswith("2 Ready GPU nodes")
    assert sum(k[0] == "node.resources" for k in results) == 2


def test_a_continue_token_that_repeats_is_an_error_not_a_loop(
    fake: FakeKube, tmp_path: Path
) -> None:
    healthy(fake, "lab-roce")

    def loop(method: str, raw: str, code: int, body: Any) -> tuple[int, Any] | None:
        if method == "GET" and urlparse(raw).path == "/api/v1/nodes":
            return code, {"metadata": {"continue": "1"}, "items": body["items"][:1]}
        return None

    fake.mutators.append(loop)
    results = cluster_readiness(fake, tmp_path)
    nodes = [c for k, c in results.items() if k[0].startswith("node")]
    assert [(c.check, c.status) for c in nodes] == [("nodes", "ERROR")]
    assert "repeated continue token" in nodes[0].message
    assert fake.requests.count(("GET", "/api/v1/nodes")) == 2


def test_a_deployment_scaled_to_zero_is_not_ready(fake: FakeKube, tmp_path: Path) -> None:
    healthy(fake, "lab-roce")
    dep = fake.objects["/apis/apps/v1/namespaces/mpi-operator/deployments/mpi-operator"]
    dep["spec"]["replicas"] = 0
    dep["status"] = {"replicas": 0}
    c = cluster_readiness(fake, tmp_path)[("workloads.training/mpi-operator", "mpi-operator")]
    assert c.status == "FAIL"
    assert "Deployment mpi-operator scaled to 0 replicas" in c.message


def test_a_get_answered_with_another_object_is_not_present(fake: FakeKube, tmp_path: Path) -> None:
    healthy(fake, "lab-roce")
    nad = "/apis/k8s.cni.cncf.io/v1/namespaces/gpufabric-networks/network-attachment-definitions/rail1"
    other = copy.deepcopy(fake.objects[nad.replace("rail1", "rail0")])

    def swap(method: str, raw: str, code: int, body: Any) -> tuple[int, Any] | None:
        return (200, other) if method == "GET" and urlparse(raw).path == nad else None

    fake.mutators.append(swap)
    del fake.objects[nad]  # the real one is missing; the server answers with rail0
    c = cluster_readiness(fake, tmp_path)[("object.network/nad/rail1", "gpufabric-networks/rail1")]
    assert c.status == "ERROR"
    assert "another object" in c.message
    assert "rail0" in c.message


def test_succeeded_and_failed_both_true_is_not_a_pass(
    fake: FakeKube, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _install(fake, launcher_log())

    def also_failed(method: str, raw: str, code: int, body: Any) -> tuple[int, Any] | None:
        if method == "GET" and urlparse(raw).path == MPIJOB and code == 200:
            conds = body.get("status", {}).get("conditions", [])
            if any(c["type"] == "Succeeded" for c in conds):
                body = copy.deepcopy(body)
                body["status"]["conditions"].append({"type": "Failed", "status": "True"})
                return code, body
        return None

    fake.mutators.append(also_failed)
    code = main(argv(fake, tmp_path, "--json"))
    out, err = capsys.readouterr()
    assert code == 4, err
    doc = json.loads(out)
    assert doc["verdict"] == "FAIL"
    assert "both Succeeded and Failed" in doc["job"]["message"]


def test_a_node_listed_twice_is_never_paired_with_itself() -> None:
    pairs: list[tuple[int, tuple[str, str]]] = []

    def run_pair(pair: tuple[str, str], round_: int, _index: int) -> Any:
        pairs.append((round_, pair))
        from types import SimpleNamespace

        return SimpleNamespace(verdict="PASS", runs=())

    report = sweep_module.sweep(["a", "a", "b", "c", "c", "d"], run_pair, concurrency=1)
    assert all(a != b for _, (a, b) in pairs)
    for round_ in {r for r, _ in pairs}:  # each node once a round, never twice
        members = [n for r, pair in pairs if r == round_ for n in pair]
        assert sorted(members) == ["a", "b", "c", "d"]
    assert sorted(report.nodes) == ["a", "b", "c", "d"]


# The shapes of a broken object: each a function changing a copy in place.
def _set(path: tuple[str, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def change(obj: dict[str, Any]) -> None:
        cur: Any = obj
        for key in path[:-1]:
            if not isinstance(cur.get(key), dict):
                cur[key] = {}
            cur = cur[key]
        cur[path[-1]] = value

    return change


SHAPES: dict[str, Callable[[dict[str, Any]], None]] = {
    "status null": _set(("status",), None),
    "status a list": _set(("status",), ["ready"]),
    "spec a string": _set(("spec",), "x"),
    "conditions a string": _set(("status", "conditions"), "Ready"),
    "conditions of numbers": _set(("status", "conditions"), [1, 2]),
    "condition status a bool": _set(("status", "conditions"), [{"type": "Ready", "status": True}]),
    "metadata null": _set(("metadata",), None),
    "name missing": _set(("metadata", "name"), None),
    "labels a list": _set(("metadata", "labels"), ["a"]),
    "replicas a string": _set(("spec", "replicas"), "1"),
    "ready count negative": _set(("status", "readyReplicas"), -1),
    "state a number": _set(("status", "state"), 1),
    "allocatable a list": _set(("status", "allocatable"), ["nvidia.com/gpu"]),
}


def _mutating(path: str, shape: str) -> Callable[[str, str, int, Any], tuple[int, Any] | None]:
    def mutate(method: str, raw: str, code: int, body: Any) -> tuple[int, Any] | None:
        if method != "GET" or urlparse(raw).path != path or not isinstance(body, dict):
            return None
        body = copy.deepcopy(body)
        for obj in body["items"] if isinstance(body.get("items"), list) else [body]:
            SHAPES[shape](obj)
        return code, body

    return mutate


# Answers whose every shape above matters: what each check reads.
READ_PATHS = {
    "workloads": "/apis/apps/v1/namespaces/mpi-operator/deployments",
    "daemonsets": "/apis/apps/v1/namespaces/gpu-operator/daemonsets",
    "policy": "/apis/nvidia.com/v1/clusterpolicies",
    "nodes": "/api/v1/nodes",
    "queue": "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/team-vision",
    "nic-policy": "/apis/mellanox.com/v1alpha1/nicclusterpolicies/nic-cluster-policy",
}
_CONDITIONS = ("conditions a string", "conditions of numbers", "condition status a bool")
_COUNTS = ("replicas a string", "ready count negative")
_ELSEWHERE = ("labels a list", "state a number", "allocatable a list")
IRRELEVANT: dict[str, tuple[str, ...]] = {
    "workloads": (*_CONDITIONS, *_ELSEWHERE),
    "daemonsets": ("spec a string", *_CONDITIONS, *_COUNTS, *_ELSEWHERE),
    "policy": ("spec a string", *_CONDITIONS, *_COUNTS, "labels a list", "allocatable a list"),
    "nodes": (*_COUNTS, "state a number"),
    "queue": ("spec a string", *_COUNTS, *_ELSEWHERE),
    "nic-policy": ("spec a string", *_CONDITIONS, *_COUNTS, "labels a list", "allocatable a list"),
}
"""Shapes of fields a check never reads on that answer: nothing is wrong for it, it may pass."""
NCCL_IRRELEVANT = (*_COUNTS, *_ELSEWHERE)
"""verify nccl reads the MPIJob's conditions and runPolicy, and the launcher pods' names."""


def test_the_fuzz_targets_are_answers_verify_cluster_reads(fake: FakeKube, tmp_path: Path) -> None:
    healthy(fake, "lab-roce")
    cluster_readiness(fake, tmp_path)
    asked = {p for m, p in fake.requests if m == "GET"}
    assert set(READ_PATHS.values()) <= asked


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("where", sorted(READ_PATHS))
def test_hostile_answers_to_verify_cluster(
    fake: FakeKube, tmp_path: Path, where: str, shape: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each broken shape of each answer verify cluster reads: an ERROR or FAIL naming the
    object, never a traceback, never PASS for a shape the check reads."""
    healthy(fake, "lab-roce")
    fake.mutators.append(_mutating(READ_PATHS[where], shape))
    cfg = str(fake.kubeconfig(tmp_path))
    args = ["verify", "cluster", "--stack", "lab-roce", "--kubeconfig", cfg, "--context", "fake"]
    code, took = timed([*args, "--timeout", "20", "--json"])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    assert code in (0, 3, 4, 5), err
    if shape not in IRRELEVANT[where]:
        assert code != 0, f"{where} with {shape} passed"
    if code in (4, 5):
        doc = json.loads(out)
        bad = [c for c in doc["checks"] if c["status"] in ("FAIL", "ERROR")]
        assert bad, doc
    assert took < 20


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_hostile_answers_to_verify_nccl(
    fake: FakeKube,
    tmp_path: Path,
    shape: str,
    short_grace: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The MPIJob's status and the launcher pod list answered broken: never PASS, never a
    traceback, and the job is gone afterwards."""
    _install(fake, launcher_log())
    fake.mutators.append(_mutating(MPIJOB, shape))
    pods = "/api/v1/namespaces/team-vision/pods"
    fake.mutators.append(_mutating(pods, shape))
    code, took = timed(argv(fake, tmp_path, "--timeout", "4"))
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert code in (0, 3, 4, 5), err
    if shape not in NCCL_IRRELEVANT:
        assert code != 0, f"{shape} passed"
    assert took < 4 + kube_module.CLEANUP_GRACE + SLACK
    assert MPIJOB not in fake.objects


# ------------------------------------------------- 3. --timeout per job, --sweep-timeout


def _sweep_cluster(fake: FakeKube, nodes: int, quick: set[str], last_round: int = 99) -> list[str]:
    """``nodes`` Ready GPU nodes; a pinned job whose pair is within ``quick`` succeeds at
    once with a passing log (up to round ``last_round``), any other never finishes. Returns
    the jobs created, in order."""
    from nccllogs import Log, text

    from gpufabric.verify.nccl import job as nccl

    created: list[str] = []
    for i in range(nodes):
        fake.add(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": f"gpu-node-{i}",
                    "labels": {"feature.node.kubernetes.io/pci-10de.present": "true"},
                },
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
            }
        )

    def on_create(fake_: FakeKube, obj: dict[str, Any]) -> None:
        if obj["kind"] != "MPIJob":
            return
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        created.append(name)
        term = obj["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["affinity"]
        terms = term["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        pair = tuple(terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"])
        if not set(pair) <= quick or int(name.split("-r")[-1].split("-")[0]) > last_round:
            obj["status"] = {"conditions": [{"type": "Running", "status": "True"}]}
            return
        obj["status"] = {"conditions": [{"type": "Succeeded", "status": "True"}]}
        pod = f"{name}-launcher"
        labels = {nccl.JOB_LABEL: name, nccl.ROLE_LABEL: "launcher"}
        fake_.add(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": pod, "namespace": ns, "labels": labels},
            }
        )
        fake_.logs[f"/api/v1/namespaces/{ns}/pods/{pod}"] = "".join(
            nccl.MARKER.format(test=t)
            + "\n"
            + text(Log(test=t, hosts=pair, busbw=95.0, layer="RoCE", hcas=2))
            for t in nccl.TESTS
        )

    fake.on_create.append(on_create)
    return created


def sweep_argv(fake: FakeKube, tmp_path: Path, *extra: str) -> list[str]:
    return [*argv(fake, tmp_path, "--sweep"), *extra]


@pytest.mark.usefixtures("quick_jobs")
def test_timeout_bounds_each_job_of_a_sweep_not_the_sweep(
    fake: FakeKube, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    created = _sweep_cluster(fake, 4, quick=set())  # no job ever finishes
    code = main(sweep_argv(fake, tmp_path, "--timeout", "2", "--json"))
    out, err = capsys.readouterr()
    assert code == 5, err  # every pair timed out: nothing localized, but every pair ran
    assert created == ["gpufabric-nccl-r1-0", "gpufabric-nccl-r1-1"]
    doc = json.loads(out)
    assert doc["notLocalized"] == [f"gpu-node-{i}" for i in range(4)]
    assert doc["stopped"] is None
    assert not [p for p in fake.objects if "/mpijobs/" in p]


@pytest.mark.usefixtures("quick_jobs")
def test_sweep_timeout_reports_what_was_proved(
    fake: FakeKube, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _sweep_cluster(fake, 4, quick={f"gpu-node-{i}" for i in range(4)}, last_round=1)
    code, took = timed(sweep_argv(fake, tmp_path, "--timeout", "60", "--sweep-timeout", "3"))
    out, err = capsys.readouterr()
    assert code == 5, err
    assert took < 3 + kube_module.CLEANUP_GRACE + SLACK
    assert "stopped early: --sweep-timeout reached" in out
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()[2:6]}
    # Round 1 passed, round 2 never ends: what round 1 proved is reported; one passing job
    # proves no node GOOD (that takes 3 distinct GOOD partners), so every node is UNKNOWN.
    assert {n: r[0] for n, r in rows.items()} == {f"gpu-node-{i}": "UNKNOWN" for i in range(4)}
    assert all(r[-3] == "r1" and r[-1] == "PASS" for r in rows.values()), out
    assert not [p for p in fake.objects if "/mpijobs/" in p]


@pytest.mark.usefixtures("quick_jobs")
def test_an_interrupted_sweep_prints_what_it_proved(
    fake: FakeKube, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    created = _sweep_cluster(fake, 4, quick={f"gpu-node-{i}" for i in range(4)}, last_round=1)

    def interrupt(method: str, path: str) -> None:
        if method == "POST" and len(created) == 1:  # the second pair's create
            threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()

    fake.on_request.append(interrupt)
    code = main(sweep_argv(fake, tmp_path, "--timeout", "60"))
    err = capsys.readouterr().err
    assert code == 130
    assert "stopped early: interrupted" in err
    assert "gpu-node-0               UNKNOWN" in err
    assert re.search(r"r1 gpu-node-\d PASS", err)  # what it proved: round 1's pairs passed
    assert err.rstrip().endswith("interrupted; cleaned up"), err
    assert not [p for p in fake.objects if "/mpijobs/" in p]


def test_sweep_timeout_without_sweep_is_refused(
    fake: FakeKube, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv(fake, tmp_path, "--sweep-timeout", "60")) == 2
    err = capsys.readouterr().err
    assert "--sweep-timeout" in err
    assert "only with --sweep" in err
    assert not fake.requests


# ------------------------------------------- whole answers: garbage, doubled, another one

ANSWERS: dict[str, Callable[[Any], Any]] = {
    "not JSON": lambda _body: "<html>502 Bad Gateway</html>",
    "a JSON list": lambda _body: [1, 2],
    "items null": lambda body: {**body, "items": None},
    "another object": lambda body: {
        **body,
        "kind": "ConfigMap",
        "metadata": {"name": "intruder", "namespace": "default"},
        "items": [{"kind": "ConfigMap", "metadata": None}],
    },
}


@pytest.mark.parametrize(
    ("where", "answer"),
    [
        (where, answer)
        for where in sorted(READ_PATHS)
        for answer in sorted(ANSWERS)
        # a GET answers one object: an extra items key changes nothing
        if not (answer == "items null" and where in ("queue", "nic-policy"))
    ],
)
def test_garbage_answers_to_verify_cluster_are_errors(
    fake: FakeKube, tmp_path: Path, where: str, answer: str
) -> None:
    healthy(fake, "lab-roce")

    def mutate(method: str, raw: str, code: int, body: Any) -> tuple[int, Any] | None:
        if method == "GET" and urlparse(raw).path == READ_PATHS[where]:
            return 200, ANSWERS[answer](body)
        return None

    fake.mutators.append(mutate)
    results = cluster_readiness(fake, tmp_path)
    errors = [c for c in results.values() if c.status == "ERROR"]
    assert errors, f"{where} answered {answer}: no ERROR"
    assert all("cannot be read" in c.message for c in errors)


@pytest.mark.parametrize("where", ["workloads", "daemonsets", "policy", "nodes"])
def test_every_item_twice_reads_as_every_item_once(
    fake: FakeKube, tmp_path: Path, where: str
) -> None:
    healthy(fake, "lab-roce")
    baseline = {k: (c.status, c.message) for k, c in cluster_readiness(fake, tmp_path).items()}

    def double(method: str, raw: str, code: int, body: Any) -> tuple[int, Any] | None:
        if method == "GET" and urlparse(raw).path == READ_PATHS[where]:
            return code, {**body, "items": body["items"] * 2}
        return None

    fake.mutators.append(double)
    again = {k: (c.status, c.message) for k, c in cluster_readiness(fake, tmp_path).items()}
    assert again == baseline


@pytest.mark.usefixtures("quick_jobs")
def test_a_sweep_without_sweep_timeout_still_bounds_its_cleanup(
    fake: FakeKube, tmp_path: Path, short_grace: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """A create that never answers: the sweep ends (exit 3), its cleanup gives up after the
    grace and names the command that deletes the job, though the sweep has no overall limit."""
    _sweep_cluster(fake, 2, quick=set())
    fake.faults.append(("POST", "/mpijobs", 8.0))
    code, took = timed(sweep_argv(fake, tmp_path, "--timeout", "1"))
    err = capsys.readouterr().err
    assert code == 3, err
    assert "kubectl -n team-vision delete mpijob gpufabric-nccl-r1-0 --ignore-not-found" in err
    assert took < 1 + 2 * kube_module.CLEANUP_GRACE + SLACK
