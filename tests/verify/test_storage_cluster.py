"""``verify storage`` end to end against the fake API server. The fake plays the kubelet: on
create it runs the pod's own shell program for real (``/bin/sh``, the real ``dd``) with the
claim's mount path pointed at a local directory (one directory for every node: a shared
RWX volume; one per node: a volume that is not shared) and ``/proc/self/mountstats`` at a
fixture written from the kernel's printers, then marks the pod Succeeded or Failed with the
program's output as its log."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_kube import FakeKube
from test_hostile_api import _kubectl
from test_storage import fixture

from gpufabric.cli import main
from gpufabric.verify import kube as kube_module
from gpufabric.verify.storage import judge as storage
from gpufabric.verify.storage.judge import ClaimTarget, StorageTarget
from gpufabric.verify.storage.run import delete_command

NS = "team-vision"
NODES = [f"gpu-node-{i}" for i in range(3)]
GPU_LABEL = {"feature.node.kubernetes.io/pci-10de.present": "true"}
SLOW_DD = (
    'dd() { command dd "$@" >/dev/null 2>&1 || return $?; '
    "echo '1+0 records in'; echo '1+0 records out'; "
    "echo '1048576 bytes (1.0 MB, 1.0 MiB) copied, 2.0 s, 524 kB/s'; }\n"
)


def targets(transport: str | None = "rdma") -> tuple[StorageTarget, ...]:
    return (
        StorageTarget(
            NS,
            NS,
            (
                ClaimTarget(
                    name="checkpoints",
                    namespace=NS,
                    mount_path="/checkpoints",
                    read_only=False,
                    transport=transport,
                    storage_class="nfs",
                    size="1Ti",
                ),
                ClaimTarget(
                    name="datasets",
                    namespace=NS,
                    mount_path="/data",
                    read_only=True,
                    transport=transport,
                    storage_class="nfs",
                    size="1Ti",
                ),
            ),
        ),
    )


class Kubelet:
    """Runs each storage pod's program on its node, as the fake's on_create hook."""

    def __init__(self, root: Path, shared: bool = True) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.shared = shared
        self.mounts: dict[str, str] = {}
        """node -> mountstats fixture (default nfs-rdma.mountstats)."""
        self.slow: set[str] = set()
        self.pending: set[str] = set()
        self.ran: list[tuple[str, str]] = []

    def volume(self, node: str, claim: str) -> Path:
        path = self.root / ("shared" if self.shared else node) / claim
        path.mkdir(parents=True, exist_ok=True)
        return path

    def __call__(self, fake: FakeKube, obj: dict[str, Any]) -> None:
        if obj["kind"] != "Pod":
            return
        spec = obj["spec"]
        terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        node = terms["nodeSelectorTerms"][0]["matchFields"][0]["values"][0]
        if node in self.pending:
            obj["status"] = {"phase": "Pending"}
            return
        container = spec["containers"][0]
        script = container["command"][2]
        stats = self.root / f"{node}.mountstats"
        stats.write_text(fixture(self.mounts.get(node, "nfs-rdma.mountstats")))
        script = script.replace("/proc/self/mountstats", shlex.quote(str(stats)))
        for mount in container["volumeMounts"]:
            if mount["readOnly"]:
                continue  # the program never touches a read-only claim
            work = shlex.quote(f"{mount['mountPath']}/{storage.WORK_DIR}")
            assert work in script, "the program must reach the claim only through its path"
            local = self.volume(node, mount["name"]) / storage.WORK_DIR
            script = script.replace(work, shlex.quote(str(local)))
        if node in self.slow:
            script = SLOW_DD + script
        env = {e["name"]: e["value"] for e in container["env"]}
        done = subprocess.run(
            ["/bin/sh", "-c", script],
            capture_output=True,
            text=True,
            env={**env, "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            timeout=60,
        )
        self.ran.append((obj["metadata"]["name"], node))
        obj["status"] = {"phase": "Succeeded" if done.returncode == 0 else "Failed"}
        path = f"/api/v1/namespaces/{NS}/pods/{obj['metadata']['name']}"
        fake.logs[path] = done.stdout + done.stderr


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    with FakeKube() as f:
        for name in NODES:
            f.add(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {"name": name, "labels": dict(GPU_LABEL)},
                    "spec": {},
                    "status": {"conditions": [{"type": "Ready", "status": "True"}]},
                }
            )
        yield f


@pytest.fixture
def kubelet(fake: FakeKube, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Kubelet:
    if shutil.which("dd") is None or not Path("/bin/sh").exists():
        pytest.skip("the fake kubelet runs the pods' program with /bin/sh and dd")
    probe = tmp_path / "direct"
    probe.write_bytes(b"\0" * 4096)
    tried = subprocess.run(
        ["dd", f"if={probe}", "of=/dev/null", "bs=4096", "iflag=direct"], capture_output=True
    )
    if tried.returncode != 0:
        pytest.skip("this file system refuses O_DIRECT reads (dd iflag=direct)")
    monkeypatch.setattr(storage, "targets_from_plan", lambda _plan: targets())
    k = Kubelet(tmp_path / "volumes")
    fake.on_create.append(k)
    return k


def argv(fake: FakeKube, tmp_path: Path, *extra: str) -> list[str]:
    return [
        "verify",
        "storage",
        "--stack",
        "lab-roce",
        "--kubeconfig",
        str(fake.kubeconfig(tmp_path)),
        "--context",
        "fake",
        "--poll",
        "0.02",
        "--size-mib",
        "1",
        "--min-throughput",
        "1",
        *extra,
    ]


def run(
    fake: FakeKube, tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[int, dict[str, Any], str]:
    code = main(argv(fake, tmp_path, "--json", *extra))
    out = capsys.readouterr()
    return code, json.loads(out.out), out.err


def by_node(doc: dict[str, Any], aspect: str) -> dict[str, str]:
    return {c["target"]: c["status"] for c in doc["checks"] if c["check"].endswith(f".{aspect}")}


def no_pods_left(fake: FakeKube) -> bool:
    return not [p for p in fake.objects if "/pods/" in p]


def test_every_node_proves_rdma_rwx_and_throughput(
    fake: FakeKube, kubelet: Kubelet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, doc, err = run(fake, tmp_path, capsys)
    assert code == 0, [c["message"] for c in doc["checks"] if c["status"] != "PASS"][:2]
    assert doc["verdict"] == "PASS"
    for aspect in ("checkpoints.transport", "datasets.transport", "write", "read", "readback"):
        assert by_node(doc, aspect) == dict.fromkeys(NODES, "PASS"), aspect
    readback = [c for c in doc["checks"] if c["check"].endswith(".readback")]
    assert readback[0]["message"] == "written here, read back on gpu-node-1"
    assert len(kubelet.ran) == 6  # a write and a read-back pod per node
    assert no_pods_left(fake)
    deletes = [path for method, path in fake.requests if method == "DELETE"]
    assert len(deletes) == 6  # each pod once: a confirmed deletion is not asked again
    shared = tmp_path / "volumes" / "shared" / "claim-0"
    assert list(shared.iterdir()) == []  # the read-back round removed the run's files
    assert "team-vision: write round on 3 GPU nodes" in err


def test_the_table_is_per_node(
    fake: FakeKube, kubelet: Kubelet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv(fake, tmp_path)) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split() == ["TARGET", "CHECK", "STATUS", "DETAIL"]
    targets_seen = [line.split()[0] for line in lines[1:-1]]
    assert targets_seen == sorted(targets_seen)  # grouped by node
    assert lines[-1].startswith("storage (lab-roce, threshold 1 MB/s from --min-throughput): PASS")


def test_a_node_that_fell_back_to_tcp_is_named_fail(
    fake: FakeKube, kubelet: Kubelet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubelet.mounts["gpu-node-1"] = "nfs-rdma-fell-back-to-tcp.mountstats"
    code, doc, _ = run(fake, tmp_path, capsys)
    assert code == 4
    assert by_node(doc, "checkpoints.transport") == {
        "gpu-node-0": "PASS",
        "gpu-node-1": "FAIL",
        "gpu-node-2": "PASS",
    }
    (bad,) = [c for c in doc["checks"] if c["status"] == "FAIL"]
    assert bad["message"].endswith("runs over tcp, not rdma (fell back)")
    assert no_pods_left(fake)


def test_tcp_stacks_pass_over_tcp(
    fake: FakeKube,
    kubelet: Kubelet,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(storage, "targets_from_plan", lambda _plan: targets("tcp"))
    kubelet.mounts.update(dict.fromkeys(NODES, "nfs-tcp.mountstats"))
    code, doc, _ = run(fake, tmp_path, capsys)
    assert code == 0
    assert set(by_node(doc, "checkpoints.transport").values()) == {"PASS"}


def test_a_slow_node_fails_alone(
    fake: FakeKube, kubelet: Kubelet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubelet.slow.add("gpu-node-2")
    code, doc, _ = run(fake, tmp_path, capsys)
    assert code == 4
    assert by_node(doc, "write") == {
        "gpu-node-0": "PASS",
        "gpu-node-1": "PASS",
        "gpu-node-2": "FAIL",
    }
    slow = next(c for c in doc["checks"] if c["status"] == "FAIL")
    assert slow["details"]["mbps"] == 0.5


def test_a_volume_that_is_not_shared_fails_the_read_back(
    fake: FakeKube, kubelet: Kubelet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubelet.shared = False
    code, doc, _ = run(fake, tmp_path, capsys)
    assert code == 4
    assert by_node(doc, "readback") == dict.fromkeys(NODES, "FAIL")
    first = next(c for c in doc["checks"] if c["check"].endswith(".readback"))
    assert "written on gpu-node-0 is not found on gpu-node-1" in first["message"]


def test_a_pod_that_never_starts_is_an_error_and_is_deleted(
    fake: FakeKube, kubelet: Kubelet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubelet.pending.add("gpu-node-1")
    code, doc, _ = run(fake, tmp_path, capsys, "--timeout", "3")
    assert code == 5
    statuses = {c["status"] for c in doc["checks"] if c["target"] == "gpu-node-1"}
    assert statuses == {"ERROR"}
    assert "timed out after 3s" in next(
        c["message"] for c in doc["checks"] if c["target"] == "gpu-node-1"
    )
    assert no_pods_left(fake)


def test_a_refused_create_is_an_error_not_a_failure(
    fake: FakeKube, kubelet: Kubelet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.faults.append(("POST", f"/namespaces/{NS}/pods", 403))
    code, doc, _ = run(fake, tmp_path, capsys, "--parallel", "1")
    assert code == 5
    assert "FAIL" not in {c["status"] for c in doc["checks"]}
    assert no_pods_left(fake)


def test_an_unreachable_api_is_not_a_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(storage, "targets_from_plan", lambda _plan: targets())
    with FakeKube() as gone:
        cfg = gone.kubeconfig(tmp_path)
    argv = ["verify", "storage", "--stack", "lab-roce", "--kubeconfig", str(cfg)]
    code = main([*argv, "--context", "fake", "--timeout", "3"])  # its context: the API is gone
    out = capsys.readouterr()
    assert code == 3
    assert "gpufabric verify storage:" in out.err
    assert "FAIL" not in out.out
    assert "Traceback" not in out.err


def test_a_stack_without_storage_and_an_unknown_tenant_are_input_errors(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["verify", "storage", "--stack", "kind-dev"]) == 2
    assert "storage: the stack gives its tenants no storage claims" in capsys.readouterr().err
    monkeypatch.setattr(storage, "targets_from_plan", lambda _plan: targets())
    assert main(["verify", "storage", "--stack", "lab-roce", "--tenant", "team-x"]) == 2
    err = capsys.readouterr().err
    assert "--tenant: 'team-x' has no storage claims; accepted: team-vision" in err
    with pytest.raises(SystemExit) as info:
        main(["verify", "storage", "--stack", "lab-roce", "--sample", "0"])
    assert info.value.code == 2
    assert "--sample: '0': expected a whole number >= 1" in capsys.readouterr().err


def test_sample_checks_that_many_nodes(
    fake: FakeKube, kubelet: Kubelet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, doc, _ = run(fake, tmp_path, capsys, "--sample", "2")
    assert code == 0
    assert len(by_node(doc, "write")) == 2


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_run_deletes_every_pod(
    fake: FakeKube,
    kubelet: Kubelet,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    signum: int,
) -> None:
    kubelet.pending.update(NODES)  # pods wait: the signal comes while they run
    sent = threading.Event()

    def interrupt(fake_: FakeKube, path: str) -> None:
        if "/pods/" in path and not sent.is_set():
            sent.set()
            threading.Timer(0.1, os.kill, (os.getpid(), signum)).start()

    fake.on_get.append(interrupt)
    code = main(argv(fake, tmp_path, "--timeout", "30"))
    assert code == 128 + (2 if signum == signal.SIGINT else signum)
    assert no_pods_left(fake)
    assert "cleaned up" in capsys.readouterr().err


def test_a_pod_whose_deletion_fails_is_named_with_a_command_that_deletes_it(
    fake: FakeKube,
    kubelet: Kubelet,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kube_module, "CLEANUP_GRACE", 2.0)  # cleanup gives up after 2 s

    def refuse_deletes(fake_: FakeKube, obj: dict[str, Any]) -> None:
        path = f"/api/v1/namespaces/{NS}/pods/{obj['metadata']['name']}"
        fake_.faults.extend([("DELETE", path, 403)] * 1000)

    fake.on_create.append(refuse_deletes)
    code = main(argv(fake, tmp_path, "--sample", "1", "--timeout", "3"))
    err = capsys.readouterr().err
    assert code == 5  # one node: nothing reads its file back
    left = [p for p in fake.objects if "/pods/" in p]
    assert len(left) == 1
    command = delete_command(NS, left[0].rsplit("/", 1)[1])
    assert f"delete it with `{command}`" in err
    kubectl = _kubectl()
    if kubectl is None:
        pytest.skip("no kubectl to run the printed command with")
    fake.faults.clear()
    fake.anonymous = True
    done = subprocess.run(
        [
            kubectl,
            f"--kubeconfig={fake.kubeconfig(tmp_path)}",
            f"--cache-dir={tmp_path / 'cache'}",
            *shlex.split(command)[1:],
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert no_pods_left(fake)


def test_a_malformed_pod_answer_is_an_error_not_a_verdict(
    fake: FakeKube, kubelet: Kubelet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A GET of a pod answered with another object (or a phase that is not a string) is
    never read as that pod's outcome."""

    def another_object(method: str, raw: str, code: int, body: Any) -> tuple[int, Any] | None:
        ours = method == "GET" and "/pods/gpufabric-storage-" in raw and code == 200
        if ours and not raw.endswith("/log") and isinstance(body, dict):
            return 200, {**body, "metadata": {**body["metadata"], "name": "someone-else"}}
        return None

    fake.mutators.append(another_object)
    code, doc, _ = run(fake, tmp_path, capsys, "--sample", "2")
    assert code == 5
    assert {c["status"] for c in doc["checks"]} == {"ERROR"}
    assert "another object" in doc["checks"][0]["message"]
    assert no_pods_left(fake)
