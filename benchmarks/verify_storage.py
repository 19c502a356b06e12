"""`verify storage` over a simulated fleet: wall time and API requests per pod.

    .venv/bin/python benchmarks/verify_storage.py [--nodes 16,64] [--parallel 4,16]

The fake API server (tests/fake_kube.py) holds N Ready GPU nodes; its kubelet answers each
storage pod at once with the log its program prints on a healthy node (the NFS-over-RDMA
mountstats fixture, dd summaries, the token the previous node wrote), so the figures are the
command's own cost: pod rounds, polling, log reads and confirmed deletions.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fake_kube import FakeKube

from gpufabric.cli import main as cli
from gpufabric.verify.storage import judge as storage

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "mountstats"
MOUNTS = "".join(
    line
    for line in (FIXTURE / "nfs-rdma.mountstats").read_text().splitlines(True)
    if not line.startswith("#")
)
NS = "team-vision"
DD = "1+0 records in\n1+0 records out\n1048576 bytes (1.0 MB, 1.0 MiB) copied, 0.001 s, 1 GB/s"


def _log(env: dict[str, str], tokens: dict[str, str]) -> str:
    m = storage.MARKER.format
    if "GF_PARTNER" in env:
        return "\n".join([m(step="readback 0"), tokens[env["GF_PARTNER"]], m(step="rc 0")])
    tokens[env["GF_NODE"]] = env["GF_TOKEN"]
    steps = [m(step="mountstats"), MOUNTS, m(step="rc 0"), m(step="token 0"), m(step="rc 0")]
    for step in ("write 0", "read 0"):
        steps += [m(step=step), DD, m(step="rc 0")]
    return "\n".join(steps)


def kubelet(tokens: dict[str, str]) -> Any:
    def on_create(fake: FakeKube, obj: dict[str, Any]) -> None:
        if obj["kind"] != "Pod":
            return
        env = {e["name"]: e["value"] for e in obj["spec"]["containers"][0]["env"]}
        obj["status"] = {"phase": "Succeeded"}
        fake.logs[f"/api/v1/namespaces/{NS}/pods/{obj['metadata']['name']}"] = _log(env, tokens)

    return on_create


def run(nodes: int, parallel: int) -> tuple[int, float, int]:
    with FakeKube() as fake, tempfile.TemporaryDirectory() as tmp:
        for i in range(nodes):
            fake.add(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": f"gpu-{i:05d}",
                        "labels": {"feature.node.kubernetes.io/pci-10de.present": "true"},
                    },
                    "status": {"conditions": [{"type": "Ready", "status": "True"}]},
                }
            )
        fake.on_create.append(kubelet({}))
        argv = ["verify", "storage", "--stack", "lab-roce", "--json", "--poll", "0.05"]
        argv += ["--kubeconfig", str(fake.kubeconfig(Path(tmp))), "--context", "fake"]
        argv += ["--parallel", str(parallel), "--size-mib", "1", "--min-throughput", "1"]
        start = time.monotonic()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            code = cli(argv)
        took = time.monotonic() - start
        pod_requests = sum(1 for _m, path in fake.requests if "/pods" in path)
        return code, took, pod_requests


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="16,64")
    ap.add_argument("--parallel", default="4,16")
    args = ap.parse_args()
    claims = (
        storage.ClaimTarget(
            name="checkpoints",
            namespace=NS,
            mount_path="/checkpoints",
            read_only=False,
            transport="rdma",
        ),
        storage.ClaimTarget(
            name="datasets", namespace=NS, mount_path="/data", read_only=True, transport="rdma"
        ),
    )
    storage.targets_from_plan = lambda _plan: (storage.StorageTarget(NS, NS, claims),)  # type: ignore[assignment]
    print(f"{'nodes':>6} {'parallel':>8} {'exit':>4} {'seconds':>8} {'pods':>5} {'req/pod':>7}")
    for n in (int(x) for x in args.nodes.split(",")):
        for p in (int(x) for x in args.parallel.split(",")):
            code, took, requests = run(n, p)
            pods = 2 * n
            print(f"{n:>6} {p:>8} {code:>4} {took:>8.2f} {pods:>5} {requests / pods:>7.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
