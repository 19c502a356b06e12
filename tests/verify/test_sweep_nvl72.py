"""``verify nccl --sweep`` on GB200 NVL72 trays: nodes carry GPU Feature Discovery's clique
label (``nvidia.com/gpu.clique``), so the sweep's unit is a tray inside its NVLink domain. The
fake plays the API server and the MPI Operator (tests/sweepfleet.py); a job of trays of one
rack prints NCCL's multi-node NVLink lines (tests/ncclmnnvl.py, written from NCCL's source)
and is judged by the NVLink-domain verdict, a job across racks prints an InfiniBand run
(tests/nccllogs.py) judged as today."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from builders import example_config
from fake_kube import FakeKube

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sweepfleet
from nccllogs import Log
from ncclmnnvl import MnnvlLog

from gpufabric.cli import main
from gpufabric.verify.sweep import domains
from gpufabric.verify.sweep.job import Job
from gpufabric.verify.sweep.ledger import ledger_of

NS = "team-vision"
LEAF = sweepfleet.LEAF_LABEL
CLIQUE = domains.CLIQUE_LABEL
UUID = "4357d722-c440-6edc-7812-4d46dd9126ba"
RACKS = {"r01": f"{UUID}.1", "r02": f"{UUID}.2"}
TRAYS = [f"gb200-{r}-t{t:02d}" for r in RACKS for t in range(6)]
NVLINK, NVLINK_SLOW = 834.57, 410.0
"""An NVL72 rack's all_reduce busbw (coreweave/nccl-tests #43) and a degraded one."""
IB = 95.0
"""Across racks: lab-roce's 2 x 400G, threshold 90."""


def rack_of(tray: str) -> str:
    return tray.split("-")[1]


def config() -> dict[str, Any]:
    cfg = example_config("lab-roce")
    cfg["gpufabric:gpuNodes"]["count"] = len(TRAYS)
    cfg["gpufabric:gpuNodes"]["gpusPerNode"] = 4
    cfg["gpufabric:tenants"] = cfg["gpufabric:tenants"][:1]
    cfg["gpufabric:tenants"][0]["gpuQuota"] = 4 * len(TRAYS)
    cfg["gpufabric:scheduling"]["topologyLevels"] = [LEAF, "kubernetes.io/hostname"]
    cfg.pop("gpufabric:storage", None)
    return cfg


def tray_node(name: str, clique: str | None = None) -> dict[str, Any]:
    labels = {
        "kubernetes.io/hostname": name,
        "feature.node.kubernetes.io/pci-10de.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-GB200",
        LEAF: f"leaf-{rack_of(name)}",
    }
    if clique is not None:
        labels[CLIQUE] = clique
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def log_of(test: str, nodes: tuple[str, ...], busbw: float) -> Log:
    """One run as NCCL and nccl-tests print it: inside a rack with the MNNVL lines (its
    clique id), across racks over the NICs."""
    racks = {rack_of(n) for n in nodes}
    if len(racks) == 1:
        clique = int(RACKS[racks.pop()].rsplit(".", 1)[1])
        return MnnvlLog(test=test, hosts=nodes, busbw=busbw, cliques=((clique, len(nodes)),))
    return Log(test=test, hosts=nodes, gpus_per_host=4, busbw=busbw, layer="RoCE", hcas=2)


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    with FakeKube() as f:
        yield f


def sweep(
    fake: FakeKube,
    tmp_path: Path,
    write_stack: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
    slow: Callable[[str, str], bool],
    labelled: bool = True,
) -> tuple[int, dict[str, Any], str, sweepfleet.MPIOperator]:
    stack = write_stack(config(), "nvl72")
    for tray in TRAYS:
        fake.add(tray_node(tray, RACKS[rack_of(tray)] if labelled else None))

    def link(a: str, b: str) -> float:
        inside = rack_of(a) == rack_of(b)
        if slow(a, b):
            return NVLINK_SLOW if inside else IB / 2
        return NVLINK if inside else IB

    op = sweepfleet.MPIOperator(tmp_path / "op", link, hcas=2, log=log_of).install(fake)
    argv = [
        "verify", "nccl", "--stack", str(stack), "--tenant", NS, "--sweep", "--json",
        "--kubeconfig", str(fake.kubeconfig(tmp_path)), "--context", "fake", "--poll", "0.01",
    ]  # fmt: skip
    code = main(argv)
    out, err = capsys.readouterr()
    assert not [p for p in fake.objects if "/mpijobs/" in p]  # every job deleted
    return code, json.loads(out), err, op


def pinned(op: sweepfleet.MPIOperator) -> list[list[str]]:
    return [sweepfleet._pinned_nodes(j) for j in op.jobs]


def test_a_bad_tray_is_found_by_splitting_within_its_rack(
    fake: FakeKube,
    tmp_path: Path,
    write_stack: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    bad = "gb200-r02-t03"  # its NVLink is degraded: slow with its rack, fine over the NICs
    code, doc, err, op = sweep(
        fake, tmp_path, write_stack, capsys, lambda a, b: bad in (a, b) and rack_of(a) == rack_of(b)
    )
    assert code == 4, err
    assert doc["drain"] == [bad]
    assert doc["domainFaults"] == []
    assert doc["topologyLevels"] == [LEAF, CLIQUE]
    assert doc["nodes"][bad]["clique"] == RACKS["r02"]
    assert doc["domains"][RACKS["r01"]]["verdict"] == "PASS"
    assert doc["domains"][RACKS["r02"]]["verdict"] == "FAIL"
    assert "NVLink domains: 12 trays in 2 cliques" in err
    jobs = pinned(op)
    # the first jobs are whole racks (group jobs inside one NVLink domain), and the failing
    # one splits within its rack: every job of more than two trays holds trays of one rack
    assert {rack_of(n) for n in jobs[0]} == {"r01"} or {rack_of(n) for n in jobs[0]} == {"r02"}
    groups = [j for j in jobs if len(j) > 2]
    assert groups
    assert all(len({rack_of(n) for n in j}) == 1 for j in groups)
    split = [j for j in groups if bad in j and len(j) < 6]
    assert split, "the failing rack's group was split"
    # the NVLink-domain verdict judged the jobs inside a rack: its bar, not the NICs'
    assert "best bus bandwidth 410 GB/s (threshold 750 GB/s)" in err


def test_a_rack_wide_nvlink_fault_is_named_as_the_rack(
    fake: FakeKube,
    tmp_path: Path,
    write_stack: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, doc, err, _op = sweep(
        fake, tmp_path, write_stack, capsys,
        lambda a, b: rack_of(a) == rack_of(b) == "r02",
    )  # fmt: skip
    assert code == 4, err
    assert doc["drain"] == []
    assert doc["flaky"] == []
    [fault] = doc["domainFaults"]
    assert fault["clique"] == RACKS["r02"]
    assert fault["trays"] == [t for t in TRAYS if rack_of(t) == "r02"]
    assert len(fault["passedAcross"]) >= 2
    assert doc["domains"][RACKS["r02"]]["verdict"] == "FAIL"
    assert doc["domains"][RACKS["r01"]]["verdict"] == "PASS"
    assert fault["words"].startswith(f"NVLink domain {CLIQUE}={RACKS['r02']}: all ")
    assert "no tray drained for it" in fault["words"]
    # its trays are not drained: none is BAD, and once the rack is named no job pairs two
    # of its trays again
    assert all(doc["nodes"][t]["verdict"] != "BAD" for t in fault["trays"])
    assert doc["pathFaults"] == []


def test_without_clique_labels_the_sweep_is_as_before(
    fake: FakeKube,
    tmp_path: Path,
    write_stack: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    _code, doc, err, _ = sweep(fake, tmp_path, write_stack, capsys, lambda a, b: False, False)
    assert "domains" not in doc
    assert "domainFaults" not in doc
    assert all("clique" not in n for n in doc["nodes"].values())
    assert doc["topologyLevels"] == [LEAF]
    assert "NVLink domains" not in err


# ------------------------------------------------------------ the pure parts


def test_the_clique_is_the_innermost_level_and_a_rack_spanning_leaves_drops_them() -> None:
    names = ["a", "b", "c", "d"]
    cliques = {"a": "u.1", "b": "u.1", "c": "u.2", "d": "u.2"}
    nested = {"a": ("s1", "l1"), "b": ("s1", "l1"), "c": ("s1", "l2"), "d": ("s1", "l2")}
    topo, levels, dropped = domains.nvlink_topology(names, nested, ("spine", "leaf"), cliques)
    assert levels == ("spine", "leaf", CLIQUE)
    assert dropped == ()
    assert topo["a"] == ("s1", "l1", "u.1")
    spanning = {**nested, "b": ("s1", "l2")}  # rack u.1 hangs off two leaves
    topo, levels, dropped = domains.nvlink_topology(names, spanning, ("spine", "leaf"), cliques)
    assert levels == ("spine", CLIQUE)
    assert dropped == ("leaf",)
    assert topo["b"] == ("s1", "u.1")
    topo, levels, dropped = domains.nvlink_topology(names, dict.fromkeys(names, ()), (), cliques)
    assert levels == (CLIQUE,)
    assert topo["c"] == ("u.2",)


def test_cliques_only_when_every_tray_carries_the_label() -> None:
    assert domains.cliques_of(["a", "b"], {"a": {CLIQUE: "u.1"}, "b": {CLIQUE: "u.1"}}) == (
        {"a": "u.1", "b": "u.1"},
        [],
    )
    assert domains.cliques_of(["a", "b"], {"a": {CLIQUE: "u.1"}, "b": {}}) == ({}, ["b"])
    assert domains.cliques_of(["a", "b"], {}) == ({}, [])


def test_two_bad_trays_in_a_rack_of_six_are_not_a_rack_fault() -> None:
    """Trays a, b bad in rack R (c-f good): a pair of two good trays passes inside."""
    topo = dict.fromkeys("abcdef", ("R",)) | dict.fromkeys("uvwxyz", ("S",))
    levels = (CLIQUE,)
    jobs = [
        Job(1, ("a", "b"), "FAIL", tuple("abcdef")),
        Job(2, ("a", "b"), "FAIL", ("a", "b", "c")),
        Job(2, ("d", "a"), "FAIL", ("d", "a", "f")),
        Job(3, ("a", "c"), "FAIL"),
        Job(3, ("b", "d"), "FAIL"),
        Job(3, ("e", "f"), "PASS"),
        *(Job(4, (x, y), "PASS") for x, y in zip("abcdef", "uvwxyz", strict=True)),
    ]
    pairs = ledger_of(jobs).pairs()
    faults, _ = domains.domain_faults(list(topo), topo, levels, pairs, jobs, set())
    assert faults == []
    # e and f failing together too: every tray failed a pair inside, none passed inside
    every = [j for j in jobs if j.pair != ("e", "f")] + [Job(3, ("e", "f"), "FAIL")]
    pairs = ledger_of(every).pairs()
    faults, inside = domains.domain_faults(list(topo), topo, levels, pairs, every, set())
    assert [(f.clique, f.failed, f.trays) for f in faults] == [("R", 6, tuple("abcdef"))]
    assert {pairs[i].pair for i in inside} == {("a", "c"), ("b", "d"), ("e", "f")}
