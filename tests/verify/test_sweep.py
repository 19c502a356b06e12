"""Bad-node localization: rounds of disjoint two-node acceptance jobs, judged as
nccl-report judges them, name exactly the slow nodes within the documented rounds."""

from __future__ import annotations

import pytest
from nccllogs import IB_8X400, Log, text

from gpufabric import nccl_report
from gpufabric.verify.sweep import format_table, rounds_needed, sweep

EXP = IB_8X400


def operator(slow: set[str], slow_rail: set[str] = frozenset()):  # type: ignore[assignment]
    """A fake job runner: the pair's NCCL log as nccl-tests would print it. A slow node
    halves the bus bandwidth; one slow rail of eight limits the ring to that rail's pace."""
    calls: list[tuple[int, tuple[str, str]]] = []

    def run_pair(pair: tuple[str, str], round_: int, index: int) -> nccl_report.Report:
        calls.append((round_, pair))
        busbw = 370.0
        if set(pair) & slow:
            busbw = 180.0
        elif set(pair) & slow_rail:
            busbw = 8 * 370.0 / 8 * 0.6
        log = Log(hosts=pair, busbw=busbw)
        return nccl_report.report({f"{pair[0]}+{pair[1]}": text(log)}, EXP)

    return run_pair, calls


@pytest.mark.parametrize(
    ("count", "slow"),
    [
        (16, {"n03"}),
        (16, {"n00", "n07", "n12"}),
        (64, {"n10"}),
        (64, {"n01", "n02", "n40"}),  # two slow nodes in one first-round pair
    ],
)
def test_the_named_nodes_are_exactly_the_slow_ones(count: int, slow: set[str]) -> None:
    nodes = [f"n{i:02d}" for i in range(count)]
    run_pair, calls = operator(slow)
    report = sweep(nodes, run_pair, concurrency=8)
    assert report.bad == sorted(slow)
    assert report.unknown == []
    assert report.rounds <= rounds_needed(count, len(slow))
    # pairs of a round are disjoint: a node is in one job at a time
    for round_ in {r for r, _ in calls}:
        members = [n for r, pair in calls if r == round_ for n in pair]
        assert len(members) == len(set(members))
    assert f"drain: {', '.join(sorted(slow))}" in format_table(report)


def test_one_slow_rail_of_one_node_is_found() -> None:
    nodes = [f"n{i:02d}" for i in range(16)]
    run_pair, _ = operator(set(), slow_rail={"n09"})
    report = sweep(nodes, run_pair, concurrency=4)
    assert report.bad == ["n09"]
    assert report.nodes["n09"].busbw is not None
    assert report.nodes["n09"].busbw < 360


def test_rounds_for_k_bad_nodes_out_of_n() -> None:
    assert rounds_needed(16, 0) == 1
    assert rounds_needed(16, 1) == 2
    assert rounds_needed(16, 4) == 2  # 8 good partner 8 suspects in one round
    assert rounds_needed(16, 6) == 4  # 4 good for 12 suspects: three turns
    assert rounds_needed(4, 2) == 0  # every pair may fail: nothing to compare against


def test_nothing_localized_when_every_first_pair_fails() -> None:
    nodes = ["a", "b", "c", "d"]
    run_pair, _ = operator({"a", "c"})
    report = sweep(nodes, run_pair, concurrency=2)
    assert report.bad == []
    assert report.unknown == ["a", "b", "c", "d"]
    assert "not localized" in format_table(report)


# ---------------------------------------------------- through the API, like a real run


def test_verify_nccl_sweep_against_the_fake_operator(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """Six GPU nodes, one slow: every job is the tenant's pinned MPIJob, all are deleted,
    and the node to drain is named."""
    import json

    from fake_kube import FakeKube

    from gpufabric.cli import main
    from gpufabric.verify import nccl

    slow = "gpu-node-3"
    with FakeKube() as fake:
        for i in range(6):
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

        def on_create(fake_: FakeKube, obj: dict) -> None:  # type: ignore[type-arg]
            if obj["kind"] != "MPIJob":
                return
            worker = obj["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
            term = worker["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"
            ]
            pair = tuple(term["nodeSelectorTerms"][0]["matchExpressions"][0]["values"])
            ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
            obj["status"] = {
                "conditions": [{"type": "Succeeded", "status": "True", "message": "done"}]
            }
            pod = f"{name}-launcher"
            fake_.add(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": pod,
                        "namespace": ns,
                        "labels": {nccl.JOB_LABEL: name, nccl.ROLE_LABEL: "launcher"},
                    },
                }
            )
            busbw = 40.0 if slow in pair else 95.0  # lab-roce: 2 x 400G rails, 100 GB/s line
            logs = [
                nccl.MARKER.format(test=t)
                + "\n"
                + text(Log(test=t, hosts=pair, busbw=busbw, layer="RoCE", hcas=2))
                for t in nccl.TESTS
            ]
            fake_.logs[f"/api/v1/namespaces/{ns}/pods/{pod}"] = "".join(logs)

        fake.on_create.append(on_create)
        cfg = str(fake.kubeconfig(tmp_path))
        code = main(
            ["verify", "nccl", "--stack", "lab-roce", "--tenant", "team-vision", "--sweep",
             "--kubeconfig", cfg, "--context", "fake", "--poll", "0.01", "--json"]
        )  # fmt: skip
        doc = json.loads(capsys.readouterr().out)
        assert code == 4
        assert doc["drain"] == [slow]
        assert doc["notLocalized"] == []
        assert doc["rounds"] == 2
        assert not [p for p in fake.objects if "/mpijobs/" in p]  # every job deleted
