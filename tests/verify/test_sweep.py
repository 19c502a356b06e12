"""Bad-node localization: rounds of disjoint two-node acceptance jobs, judged as
nccl-report judges them, name exactly the slow nodes within the documented rounds."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import pytest
from nccllogs import IB_8X400, Log, text

from gpufabric.exitcodes import Verdict
from gpufabric.verify.nccl import report as nccl_report
from gpufabric.verify.nccl import rules as nccl_rules
from gpufabric.verify.sweep.rounds import CONFIRM, screening_rounds
from gpufabric.verify.sweep.run import (
    NodeResult,
    RailResult,
    diagnosis,
    format_table,
    localize_rails,
    rail_rounds_needed,
    sweep,
    waiting,
)

EXP = IB_8X400
RAILS = [f"rail{i}" for i in range(8)]
RAIL_EXP = nccl_rules.NcclExpectation(
    rdma=True,
    link_layer="IB",
    threshold_gbps=45.0,
    threshold_source="0.9 x line rate 50 GB/s (1 rail x 400 Gb/s)",
    gpus_per_node=8,
    line_rate_gbytes=50.0,
)
"""One of the eight rails alone (what verify nccl --sweep judges a one-rail job by)."""


def rail_operator(slow: set[str], slow_rail: dict[str, str]):  # type: ignore[no-untyped-def]
    """Fake one-rail jobs: a good rail carries 46 GB/s of its 50; the slow rail of a node
    28 GB/s; a slow node (all rails fine alone) still passes each rail alone."""
    calls: list[tuple[int, tuple[str, str], str]] = []

    def run_rail_pair(
        pair: tuple[str, str], rail: str, round_: int, index: int
    ) -> nccl_report.NcclReport:
        calls.append((round_, pair, rail))
        busbw = 28.0 if any(slow_rail.get(n) == rail for n in pair) else 46.0
        log = Log(hosts=pair, busbw=busbw, hcas=1, first_hca=RAILS.index(rail))
        return nccl_report.report({f"{pair[0]}+{pair[1]} {rail}": text(log)}, RAIL_EXP)

    return run_rail_pair, calls


def operator(slow: set[str], slow_rail: set[str] = frozenset()):  # type: ignore[assignment]
    """A fake job runner: the pair's NCCL log as nccl-tests would print it. A slow node
    halves the bus bandwidth; one slow rail of eight limits the ring to that rail's pace."""
    calls: list[tuple[int, tuple[str, str]]] = []

    def run_pair(pair: tuple[str, str], round_: int, index: int) -> nccl_report.NcclReport:
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
    # C screening rounds, then (here) at most a round per slow node for its partners
    assert report.rounds <= screening_rounds({}, CONFIRM) + len(slow)
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
    run_rail_pair, calls = rail_operator(set(), {"n09": "rail5"})
    localize_rails(report, RAILS, run_rail_pair, concurrency=4, threshold_gbps=45.0)
    n09 = report.nodes["n09"]
    assert n09.failing_rails == ["rail5"]
    assert n09.rails["rail5"].busbw == 28.0
    assert n09.rails["rail0"].verdict == "PASS"
    assert sorted(n09.rails) == RAILS
    assert {partner for _, (_, partner), _ in calls} <= {
        n for n, r in report.nodes.items() if r.verdict == "GOOD"
    }
    assert report.rail_rounds == rail_rounds_needed(8, 1, 4, 14) == 8
    table = format_table(report)
    assert "rail5 fails alone" in table
    assert "threshold 45 GB/s" in table
    assert "drain: n09" in table


def test_a_node_slow_only_with_all_rails_together_is_told_apart() -> None:
    nodes = [f"n{i:02d}" for i in range(16)]
    run_pair, _ = operator({"n04"})
    report = sweep(nodes, run_pair, concurrency=8)
    run_rail_pair, _ = rail_operator({"n04"}, {})
    localize_rails(report, RAILS, run_rail_pair, concurrency=8)
    assert report.nodes["n04"].failing_rails == []
    assert "every rail passes alone" in diagnosis(report.nodes["n04"])


@pytest.mark.parametrize(("count", "concurrency"), [(16, 2), (64, 8)])
def test_rails_of_three_bad_nodes_one_job_per_node_at_a_time(count: int, concurrency: int) -> None:
    nodes = [f"n{i:02d}" for i in range(count)]
    slow_rails = {"n01": "rail0", "n06": "rail7", "n11": "rail3"}
    run_pair, _ = operator(set(), slow_rail=set(slow_rails))
    report = sweep(nodes, run_pair, concurrency=concurrency)
    assert report.bad == sorted(slow_rails)
    run_rail_pair, calls = rail_operator(set(), slow_rails)
    localize_rails(report, RAILS, run_rail_pair, concurrency=concurrency)
    for node, rail in slow_rails.items():
        assert report.nodes[node].failing_rails == [rail]
    good = sum(1 for r in report.nodes.values() if r.verdict == "GOOD")
    assert report.rail_rounds == rail_rounds_needed(8, 3, concurrency, good)
    for round_ in {r for r, _, _ in calls}:
        members = [n for r, pair, _ in calls if r == round_ for n in pair]
        assert len(members) == len(set(members))  # a node is in one job at a time
        assert sum(1 for r, _, _ in calls if r == round_) <= concurrency
    assert len(calls) == 3 * 8


def test_no_rail_jobs_without_a_good_partner() -> None:
    nodes = ["a", "b", "c", "d"]
    run_pair, _ = operator({"a", "c"})
    report = sweep(nodes, run_pair, concurrency=2)
    run_rail_pair, calls = rail_operator(set(), {})
    localize_rails(report, RAILS, run_rail_pair, concurrency=2)
    assert calls == []
    assert report.rail_rounds == 0


def test_an_interrupted_sweep_stops_its_running_jobs_and_each_cleans_up() -> None:
    """Ctrl-C while jobs run: they stop waiting at once (not at their timeout), every started
    job runs its cleanup, jobs not yet started never start, and the interrupt propagates."""
    stop = threading.Event()
    sleep = waiting(stop)
    started: list[tuple[str, str]] = []
    cleaned: list[tuple[str, str]] = []
    lock = threading.Lock()

    def run_pair(pair: tuple[str, str], round_: int, index: int) -> nccl_report.NcclReport:
        with lock:
            started.append(pair)
            if len(started) == 2:  # both running jobs are waiting: Ctrl-C arrives
                signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
        try:
            for _ in range(300):  # a job polling its MPIJob for up to half a minute
                sleep(0.1)
            raise AssertionError("the job was never told to stop")
        finally:
            with lock:
                cleaned.append(pair)

    nodes = [f"n{i:02d}" for i in range(8)]
    with pytest.raises(KeyboardInterrupt):
        sweep(nodes, run_pair, concurrency=2, stop=stop)
    assert stop.is_set()
    assert len(started) == 2  # the other two pairs of round 1 never started
    assert sorted(cleaned) == sorted(started)


def test_rail_rounds_for_k_bad_nodes() -> None:
    assert rail_rounds_needed(8, 1, 4, 14) == 8  # one bad node: one rail per round
    assert rail_rounds_needed(8, 3, 2, 10) == 16  # two jobs at a time: two turns per rail
    assert rail_rounds_needed(8, 3, 8, 2) == 16  # two good partners limit it the same way
    assert rail_rounds_needed(8, 0, 8, 16) == 0


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
    import xml.etree.ElementTree as ET

    from fake_kube import FakeKube

    from gpufabric.cli import main
    from gpufabric.outputs.jobs import NETWORKS_ANNOTATION as NETWORKS
    from gpufabric.verify.nccl import job as nccl

    slow = "gpu-node-3"
    one_rail_jobs: list[dict] = []  # type: ignore[type-arg]
    with FakeKube() as fake:
        for i in range(8):
            fake.add(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": f"gpu-node-{i}",
                        "labels": {"feature.node.kubernetes.io/pci-10de.present": "true"},
                    },
                    # gpu-node-6 is cordoned, gpu-node-7 NotReady: neither is swept
                    "spec": {"unschedulable": i == 6},
                    "status": {
                        "conditions": [{"type": "Ready", "status": "False" if i == 7 else "True"}]
                    },
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
            template = obj["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
            networks = json.loads(template["metadata"]["annotations"][NETWORKS])
            if len(networks) == 1:  # a one-rail job: rail1 of the slow node is the bad link
                rail = networks[0]["name"]
                one_rail_jobs.append(obj)
                busbw = 30.0 if slow in pair and rail == "rail1" else 47.0  # of 50 GB/s
                hcas, first = 1, int(rail[-1])
            else:  # lab-roce: 2 x 400G rails, 100 GB/s line
                busbw, hcas, first = (40.0 if slow in pair else 95.0), 2, 0
            logs = [
                nccl.MARKER.format(test=t)
                + "\n"
                + text(
                    Log(test=t, hosts=pair, busbw=busbw, layer="RoCE", hcas=hcas, first_hca=first)
                )
                for t in nccl.TESTS
            ]
            fake_.logs[f"/api/v1/namespaces/{ns}/pods/{pod}"] = "".join(logs)

        fake.on_create.append(on_create)
        cfg = str(fake.kubeconfig(tmp_path))
        junit = tmp_path / "sweep.xml"
        code = main(
            ["verify", "nccl", "--stack", "lab-roce", "--tenant", "team-vision", "--sweep",
             "--kubeconfig", cfg, "--context", "fake", "--poll", "0.01", "--json",
             "--junit", str(junit)]
        )  # fmt: skip
        doc = json.loads(capsys.readouterr().out)
        assert code == 4
        assert doc["drain"] == [slow]
        assert doc["notLocalized"] == []
        # 3 screening rounds (GOOD after 3 distinct GOOD partners), then rounds in which the
        # slow node's partners meet healthy partners they have not met (5 nodes, 4 healthy)
        assert 4 <= doc["rounds"] <= 5
        assert doc["confirm"] == 3
        assert doc["flaky"] == []
        assert doc["pathFaults"] == []
        assert doc["topologyLevels"] == []  # lab-roce names no switch level
        assert doc["railRounds"] == 2
        assert doc["skipped"] == {"cordoned": ["gpu-node-6"], "notReady": ["gpu-node-7"]}
        assert set(doc["nodes"]) == {f"gpu-node-{i}" for i in range(6)}
        assert doc["railThreshold"] == 45.0
        assert doc["nodes"][slow]["failingRails"] == ["rail1"]
        assert doc["nodes"][slow]["rails"]["rail0"]["verdict"] == "PASS"
        assert "rail1 fails alone" in doc["nodes"][slow]["diagnosis"]
        assert not [p for p in fake.objects if "/mpijobs/" in p]  # every job deleted
    suite = ET.parse(junit).getroot()
    cases = {str(c.get("classname")).rpartition(".")[2]: c for c in suite.iter("testcase")}
    assert sorted(cases) == [f"gpu-node-{i}" for i in range(8)]
    failing = [n for n, c in cases.items() if c.find("failure") is not None]
    assert failing == [slow]
    assert "rail1 fails alone" in ET.tostring(cases[slow], encoding="unicode")
    assert [n for n, c in cases.items() if c.find("skipped") is not None] == [
        "gpu-node-6",
        "gpu-node-7",
    ]
    # Each one-rail job is the tenant's MPIJob with only that rail attached and named.
    assert len(one_rail_jobs) == 2
    for job in one_rail_jobs:
        worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
        rail = json.loads(worker["metadata"]["annotations"][NETWORKS])[0]["name"]
        limits = worker["spec"]["containers"][0]["resources"]["limits"]
        assert {k for k in limits if k.startswith("rdma/")} == {f"rdma/{rail}"}
        script = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0][
            "command"
        ][2]
        assert f"-x NCCL_IB_HCA==mlx5_{rail[-1]}" in script
        assert "-x NCCL_IB_HCA " not in script  # never the pods' all-rails value as well


def test_sweep_dry_run_prints_its_jobs_and_asks_no_cluster(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    import yaml

    from gpufabric.cli import main
    from gpufabric.outputs.jobs import NETWORKS_ANNOTATION

    code = main(
        ["verify", "nccl", "--stack", "lab-roce", "--tenant", "team-vision", "--sweep",
         "--dry-run", "--kubeconfig", str(tmp_path / "absent")]
    )  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    pair_job, rail_job = list(yaml.safe_load_all(out))
    attached = [
        yaml.safe_load(job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"][
            "annotations"][NETWORKS_ANNOTATION])
        for job in (pair_job, rail_job)
    ]  # fmt: skip
    assert [len(a) for a in attached] == [2, 1]
    assert "nothing submitted" in err


def test_verify_nccl_sweep_names_a_degraded_leaf_uplink_through_the_api(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """Twelve GPU nodes under three leaves (read from their labels, the stack's leaf level);
    every job leaving leaf-c is slow. The sweep names leaf-c's uplink and drains no node;
    the plan (rounds, jobs, time) is printed before it starts."""
    import json

    import yaml
    from fake_kube import FakeKube

    from gpufabric.cli import main
    from gpufabric.verify.nccl import job as nccl

    leaf_label = "topology.gpufabric.io/leaf"
    repo = Path(__file__).resolve().parents[2]
    stack = yaml.safe_load((repo / "stacks/Pulumi.lab-roce.yaml").read_text(encoding="utf-8"))
    stack["config"]["gpufabric:scheduling"]["topologyLevels"] = [
        leaf_label,
        "kubernetes.io/hostname",
    ]
    stack_file = tmp_path / "Pulumi.lab-leaves.yaml"
    stack_file.write_text(yaml.safe_dump(stack), encoding="utf-8")
    leaf = {f"gpu-node-{i:02d}": f"leaf-{'abc'[i // 4]}" for i in range(12)}
    with FakeKube() as fake:
        for name, switch in leaf.items():
            labels = {"feature.node.kubernetes.io/pci-10de.present": "true", leaf_label: switch}
            fake.add(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {"name": name, "labels": labels},
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
            leaves = {leaf[n] for n in pair}
            busbw = 40.0 if len(leaves) == 2 and "leaf-c" in leaves else 95.0
            fake_.logs[f"/api/v1/namespaces/{ns}/pods/{pod}"] = "".join(
                nccl.MARKER.format(test=t)
                + "\n"
                + text(Log(test=t, hosts=pair, busbw=busbw, layer="RoCE", hcas=2))
                for t in nccl.TESTS
            )

        fake.on_create.append(on_create)
        code = main(
            ["verify", "nccl", "--stack", str(stack_file), "--tenant", "team-vision", "--sweep",
             "--kubeconfig", str(fake.kubeconfig(tmp_path)), "--context", "fake",
             "--poll", "0.01", "--json"]
        )  # fmt: skip
        out, err = capsys.readouterr()
        doc = json.loads(out)
        assert not [p for p in fake.objects if "/mpijobs/" in p]  # every job deleted
    assert code == 4, err
    assert doc["drain"] == []
    assert doc["notLocalized"] == []  # leaf-c's nodes proven among themselves
    assert doc["topologyLevels"] == [leaf_label]
    assert [(f["level"], f["switch"]) for f in doc["pathFaults"]] == [(leaf_label, "leaf-c")]
    assert set(doc["pathFaults"][0]["nodes"]) <= {n for n, s in leaf.items() if s == "leaf-c"}
    assert "no node drained" in doc["pathFaults"][0]["words"]
    assert "sweep over 12 GPU nodes: 3 screening rounds, 18 two-node jobs" in err


def test_a_node_bad_only_with_some_partners_is_not_told_to_look_at_pcie() -> None:
    """A partner-dependent node passes with some partners: its rails passing alone do not
    mean its fault is inside it (PCIe, NUMA); the words name the partners it failed with."""
    result = NodeResult(
        node="n04",
        verdict="BAD",
        pairs=[(1, "n01", "PASS"), (1, "n02", "FAIL in a group of 4"), (2, "n07", "FAIL")],
        rails={r: RailResult(Verdict.PASS, 50.0, r, "n01") for r in RAILS},
    )
    words = diagnosis(result)
    assert "fails only with some partners" in words
    assert "n02, n07" in words
    assert "PCIe" not in words


def test_a_sweep_without_timeout_gives_its_longest_job_the_time_it_needs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The runbook's sweep lines pass no --timeout; on a large pool the default 1800 s cut
    off the group jobs and the printed command exited 2 (a new user's GB200 cluster). The
    default now grows to the longest job; a --timeout typed is still held to."""
    from gpufabric.cli import main

    base = ["verify", "nccl", "--stack", "gb200-nvl72", "--tenant", "frontier-pretrain"]
    assert main([*base, "--sweep", "--dry-run"]) == 0
    assert "each job may take 4380 s" in capsys.readouterr().err
    assert main([*base, "--sweep", "--dry-run", "--timeout", "1800"]) == 2
    assert "pass --timeout 4380 or more" in capsys.readouterr().err
