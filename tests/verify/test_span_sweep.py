"""``verify nccl --sweep`` on a routed fabric whose rails span leaves
(fabric.ipam.routing: spanLeaves): with no --leaf it sweeps every leaf's nodes, its screening
rounds pair nodes across leaves (their jobs cross the spine) and every job attaches the one
network per rail; --leaf still narrows it to one leaf. The fake plays the API server, a
scheduler and the MPI Operator (tests/sweepfleet.py)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from builders import SPAN_LEAF_LABEL, routed_span_config
from fake_kube import FakeKube

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sweepfleet

from gpufabric.cli import main

NS = "ml-train"
SLOW, FAST = 60.0, 195.0
"""Bus bandwidth of a slow and a healthy ring (4 x 400G RoCE: threshold 180 GB/s)."""
NODES, LEAVES = 8, 4


def leaf_of(node: str) -> str:
    """Where routed_span_config(NODES, LEAVES) puts a node: two to a leaf."""
    return f"leaf-{int(node.rsplit('-', 1)[1]) // (NODES // LEAVES) + 1:02d}"


def gpu_node(name: str) -> dict[str, Any]:
    labels = {"feature.node.kubernetes.io/pci-10de.present": "true", SPAN_LEAF_LABEL: leaf_of(name)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    with FakeKube() as f:
        yield f


def sweep(
    fake: FakeKube,
    tmp_path: Path,
    write_stack: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
    slow: str | None,
    *extra: str,
) -> tuple[int, dict[str, Any], sweepfleet.MPIOperator]:
    stack = write_stack(routed_span_config(NODES, LEAVES), "span")
    names = [f"gpu-node-{n}" for n in range(NODES)]
    for name in names:
        fake.add(gpu_node(name))
    link = lambda a, b: SLOW if slow in (a, b) else FAST  # noqa: E731
    op = sweepfleet.MPIOperator(tmp_path / "op", link, hcas=4).install(fake)
    argv = [
        "verify", "nccl", "--stack", str(stack), "--tenant", NS, "--sweep", "--json",
        "--kubeconfig", str(fake.kubeconfig(tmp_path)), "--context", "fake", "--poll", "0.01",
        *extra,
    ]  # fmt: skip
    code = main(argv)
    out, _ = capsys.readouterr()
    assert not [p for p in fake.objects if "/mpijobs/" in p]  # every job deleted
    return code, json.loads(out), op


def worker_template(job: dict[str, Any]) -> dict[str, Any]:
    template: dict[str, Any] = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
    return template


def test_a_sweep_spans_leaves_and_finds_the_bad_node(
    fake: FakeKube,
    tmp_path: Path,
    write_stack: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, doc, op = sweep(fake, tmp_path, write_stack, capsys, "gpu-node-5", "--sweep-group", "2")
    verdicts = {name: n["verdict"] for name, n in doc["nodes"].items()}
    assert set(verdicts) == {f"gpu-node-{n}" for n in range(NODES)}  # every leaf's nodes
    assert verdicts.pop("gpu-node-5") == "BAD"
    assert doc["drain"] == ["gpu-node-5"]
    assert set(verdicts.values()) == {"GOOD"}
    assert code == 4
    pinned = [sweepfleet._pinned_nodes(j) for j in op.jobs]
    crossing = [p for p in pinned if len({leaf_of(n) for n in p}) > 1]
    assert any(len(json.loads(worker_template(j)["metadata"]["annotations"][
        "k8s.v1.cni.cncf.io/networks"])) == 4 for j in op.jobs)  # fmt: skip
    assert crossing, "no job paired nodes under different leaves"
    for job in op.jobs:
        template = worker_template(job)
        networks = json.loads(template["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"])
        # every rail's one network (a rail-localising job attaches one), never a leaf's
        assert {n["name"] for n in networks} <= {"rail0", "rail1", "rail2", "rail3"}
        assert SPAN_LEAF_LABEL not in template["spec"].get("nodeSelector", {})


def test_leaf_narrows_the_sweep_to_one_leaf(
    fake: FakeKube,
    tmp_path: Path,
    write_stack: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, doc, op = sweep(fake, tmp_path, write_stack, capsys, None, "--leaf", "leaf-02")
    assert op.jobs
    assert sorted(doc["nodes"]) == ["gpu-node-2", "gpu-node-3"]
    for job in op.jobs:
        assert worker_template(job)["spec"]["nodeSelector"][SPAN_LEAF_LABEL] == "leaf-02"
