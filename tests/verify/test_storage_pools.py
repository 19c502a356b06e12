"""``verify storage`` on a fleet: each pool's GPU nodes are checked as that pool's (its
nodes, its threshold), the read-back ring stays within a pool, and every check names its
pool (``details.pool``), which ``gpufabric report`` groups by."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_kube import FakeKube
from test_storage_cluster import Kubelet, argv
from test_storage_cluster import kubelet as kubelet

from gpufabric.cli import main

POOL_LABEL = "nvidia.com/gpu.product"
NODES = {
    "h100-a": ("h100", "NVIDIA-H100-80GB-HBM3"),
    "h100-b": ("h100", "NVIDIA-H100-80GB-HBM3"),
    "l40s-a": ("l40s", "NVIDIA-L40S"),
    "l40s-b": ("l40s", "NVIDIA-L40S"),
}


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    with FakeKube() as f:
        for name, (_pool, product) in NODES.items():
            f.add(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {"name": name, "labels": {POOL_LABEL: product}},
                    "spec": {},
                    "status": {"conditions": [{"type": "Ready", "status": "True"}]},
                }
            )
        yield f


def test_each_pool_is_checked_on_its_own_nodes_and_every_check_names_it(
    fake: FakeKube, kubelet: Kubelet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    words = argv(fake, tmp_path, "--json")
    words[words.index("lab-roce")] = "fleet-mixed"
    code = main(words)
    doc = json.loads(capsys.readouterr().out)
    assert code == 0, [c["message"] for c in doc["checks"] if c["status"] != "PASS"][:2]
    assert doc["suite"] == (
        "storage (fleet-mixed, threshold h100: 1 MB/s from --min-throughput; "
        "l40s: 1 MB/s from --min-throughput)"
    )
    assert {c["target"] for c in doc["checks"]} == set(NODES)
    for c in doc["checks"]:
        assert c["details"]["pool"] == NODES[c["target"]][0], c
    readback = {
        c["target"]: c["message"] for c in doc["checks"] if c["check"].endswith(".readback")
    }
    # the ring pairs a node with another of its own pool, never across pools
    assert readback == {
        "h100-a": "written here, read back on h100-b",
        "h100-b": "written here, read back on h100-a",
        "l40s-a": "written here, read back on l40s-b",
        "l40s-b": "written here, read back on l40s-a",
    }
