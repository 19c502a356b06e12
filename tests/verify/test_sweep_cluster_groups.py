"""``verify nccl --sweep`` runs group jobs on the cluster: each group job is the tenant's
acceptance job pinned to its nodes, whose launcher runs both tests once per ring order of
``sweep.rounds.ring_orders`` from a reordered hostfile (``NCCL_ALGO=Ring``), each run preceded
by a marker naming the order; the log is judged per order, and one report per group job goes
back to the sweep. The fake plays the API server, a scheduler and the MPI Operator
(tests/sweepfleet.py MPIOperator): the launcher scripts run under bash over a stand-in
mpirun whose nccl-tests output follows the ring's slowest link."""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import example_config, gpu_pods, plan_of
from fake_kube import FakeKube

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sweepfleet

from gpufabric.cli import main
from gpufabric.exitcodes import Verdict
from gpufabric.outputs.schema import validate_objects
from gpufabric.verify.kube import Kube
from gpufabric.verify.nccl import job as nccl
from gpufabric.verify.nccl import report as nccl_report
from gpufabric.verify.nccl import rules as nccl_rules
from gpufabric.verify.sweep import rounds as sweep_rounds

NS = "team-vision"
LEAF = sweepfleet.LEAF_LABEL
SLOW, FAST = 40.0, 95.0
"""Bus bandwidth of a slow and a healthy link (lab-roce: 2 x 400G RoCE, threshold 90)."""


def config(
    nodes: int = 12, quota: int | None = None, training: dict[str, Any] | None = None
) -> dict[str, Any]:
    """lab-roce with ``nodes`` GPU nodes, one tenant whose quota is ``quota`` GPUs (default:
    every GPU, so group jobs as large as a leaf) and leaves read from the nodes' labels."""
    cfg = example_config("lab-roce")
    cfg["gpufabric:gpuNodes"]["count"] = nodes
    cfg["gpufabric:tenants"] = cfg["gpufabric:tenants"][:1]
    cfg["gpufabric:tenants"][0]["gpuQuota"] = quota or 8 * nodes
    cfg["gpufabric:scheduling"]["topologyLevels"] = [LEAF, "kubernetes.io/hostname"]
    if training is not None:
        cfg["gpufabric:training"] = training
    cfg.pop("gpufabric:storage", None)
    return cfg


def gpu_node(name: str, leaf: str) -> dict[str, Any]:
    labels = {"feature.node.kubernetes.io/pci-10de.present": "true", LEAF: leaf}
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


def sweep_argv(fake: FakeKube, tmp_path: Path, stack: Path, *extra: str) -> list[str]:
    return [
        "verify", "nccl", "--stack", str(stack), "--tenant", NS, "--sweep",
        "--kubeconfig", str(fake.kubeconfig(tmp_path)), "--context", "fake",
        "--poll", "0.01", *extra,
    ]  # fmt: skip


def links_of(nodes: tuple[str, ...]) -> set[frozenset[str]]:
    """The links the ring of ``nodes`` (in rank order) loads."""
    return {frozenset((a, b)) for a, b in zip(nodes, nodes[1:] + nodes[:1], strict=True)}


# ------------------------------------------------------------ a partner-dependent fault


@pytest.fixture
def partner_fleet() -> sweepfleet.Fleet:
    """12 nodes under 3 leaves, one slow with a fixed half of its partners: a fleet where
    the two-node sweep at C = 3 reports that node GOOD (tests/sweepfleet.py, seed 2)."""
    fleet = sweepfleet.build(12, "partner", 1, 2)
    assert len(fleet.partner) == 1
    assert not fleet.bad | fleet.flaky | fleet.uplinks
    return fleet


def run_fleet(
    fake: FakeKube,
    tmp_path: Path,
    write_stack: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
    fleet: sweepfleet.Fleet,
    *extra: str,
) -> tuple[int, dict[str, Any], str, sweepfleet.MPIOperator]:
    stack = write_stack(config(len(fleet.nodes)), "groups")
    for node in fleet.nodes:
        fake.add(gpu_node(node, fleet.leaf(node)))
    link = lambda a, b: SLOW if fleet.slow_link(a, b) else FAST  # noqa: E731
    op = sweepfleet.MPIOperator(tmp_path / "op", link).install(fake)
    code = main(sweep_argv(fake, tmp_path, stack, "--json", *extra))
    out, err = capsys.readouterr()
    assert not [p for p in fake.objects if "/mpijobs/" in p]  # every job deleted
    return code, json.loads(out), err, op


def test_group_jobs_drain_a_partner_dependent_node_the_pairs_sweep_calls_good(
    fake: FakeKube,
    tmp_path: Path,
    write_stack: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
    partner_fleet: sweepfleet.Fleet,
) -> None:
    [culprit] = partner_fleet.partner
    code, doc, err, op = run_fleet(fake, tmp_path, write_stack, capsys, partner_fleet)
    assert code == 4, err
    assert doc["drain"] == [culprit]
    assert doc["notLocalized"] == []
    assert doc["flaky"] == []
    assert doc["pathFaults"] == []
    # the estimate names the mode it runs in, before the first job
    assert "with group jobs of up to 4 nodes" in err
    # and the confidence it asks of a fleet of 12: ceil(log2 12) + 5 distinct partners
    assert "GOOD after 9 distinct partners: a node slow with half of its partners escapes with probability <= 2^-9, the fleet's 12 nodes together <= 2.3%" in err  # fmt: skip
    # the failing group job is said at once, each failing order by its nodes (where the
    # job's pods ran) and its figure
    said = re.search(rf"group job \S+ \([^)]*{culprit}[^)]*\): FAIL: (order .*)", err)
    assert said is not None
    orders = re.findall(r"order \d/2 \(([^)]*)\): FAIL; best bus bandwidth 40 GB/s", said[1])
    assert orders
    assert all(culprit in ring.split() for ring in orders)
    groups = [j for j in op.jobs if len(sweepfleet._pinned_nodes(j)) > 2]
    assert groups
    for job in groups:
        pinned = sweepfleet._pinned_nodes(job)
        runs = [r for r in op.runs if r.job == job["metadata"]["name"]]
        # once per ring order, both tests, every rank on its own GPU, rings only
        assert len(runs) == 2 * len(sweep_rounds.ring_orders(len(pinned)))
        assert {r.algo for r in runs} == {"Ring"}
        assert all(r.np == 8 * len(pinned) and set(r.slots) == {8} for r in runs)
        assert all(sorted(r.nodes) == sorted(pinned) for r in runs)
        # whichever worker landed on which node, the orders' rings load every pair
        loaded = set().union(*(links_of(r.nodes) for r in runs))
        assert loaded == {frozenset(p) for p in itertools.combinations(pinned, 2)}


def test_the_same_fleet_swept_with_pairs_only_lets_that_node_through(
    fake: FakeKube,
    tmp_path: Path,
    write_stack: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
    partner_fleet: sweepfleet.Fleet,
) -> None:
    [culprit] = partner_fleet.partner
    code, doc, err, op = run_fleet(
        fake, tmp_path, write_stack, capsys, partner_fleet, "--sweep-group", "2"
    )
    assert doc["nodes"][culprit]["verdict"] == "GOOD"  # the miss group jobs exist for
    assert culprit not in doc["drain"]
    assert all(len(sweepfleet._pinned_nodes(j)) == 2 for j in op.jobs)
    assert "two-node jobs" in err
    assert "group jobs" not in err
    assert code in (0, 4)


# ------------------------------------------------------------ one group job, judged


def run_group_job(
    fake: FakeKube,
    tmp_path: Path,
    nodes: tuple[str, ...],
    slow: set[frozenset[str]],
    keep_orders: int | None = None,
) -> tuple[nccl_report.NcclReport, sweepfleet.MPIOperator]:
    """One group job of ``nodes`` through run_job and judge, as the sweep runs it."""
    plan = plan_of(config(len(nodes)))
    orders = sweep_rounds.ring_orders(len(nodes))
    job = nccl.acceptance_job(plan, NS, len(nodes), name="g-r1-0", pin_nodes=nodes, orders=orders)
    link = lambda a, b: SLOW if frozenset((a, b)) in slow else FAST  # noqa: E731
    op = sweepfleet.MPIOperator(tmp_path / "op", link, cut=lambda _j: keep_orders).install(fake)
    kube = Kube(str(fake.kubeconfig(tmp_path)), "fake")
    outcome = nccl.run_job(kube, job, timeout=60, poll=0.01, placement=True)
    exp = nccl_rules.expectation(plan.facts, None, 0.9)
    return nccl.judge(outcome, exp, len(orders)), op


def test_a_failing_order_is_named_by_its_nodes_and_its_slowest_figure(
    fake: FakeKube, tmp_path: Path
) -> None:
    nodes = ("gpu-a", "gpu-b", "gpu-c", "gpu-d", "gpu-e")
    bad = frozenset(("gpu-a", "gpu-c"))
    report, op = run_group_job(fake, tmp_path, nodes, {bad})
    assert report.verdict == Verdict.FAIL
    failing = [r for r in op.runs if bad in links_of(r.nodes)]
    passing = [r for r in op.runs if bad not in links_of(r.nodes)]
    assert failing
    assert passing
    named = [r for r in report.reasons if re.match(r"order \d+/\d+ \(", r)]
    assert named == [
        f"order {i}/3 ({' '.join(run.nodes)}): FAIL; best bus bandwidth 40 GB/s (threshold 90 GB/s)"
        for i, run in enumerate(op.runs[::2], 1)
        if run in failing
    ]
    # the analyzer judged every order's every test
    assert len(report.runs) == 3 * len(nccl.TESTS)


def test_a_group_job_whose_last_order_is_cut_off_is_not_pass(
    fake: FakeKube, tmp_path: Path
) -> None:
    """The job reports Succeeded and every order that ran passed, but the log ends after
    order 1 of 2: the rings of order 2 were never proven."""
    report, _ = run_group_job(fake, tmp_path, ("gpu-a", "gpu-b", "gpu-c", "gpu-d"), set(), 1)
    assert report.verdict == Verdict.INCONCLUSIVE
    assert report.job is not None
    assert report.job.state == "Succeeded"
    assert "order 2/2 (its marker is missing: it did not run to the end): INCONCLUSIVE" in (
        report.reasons
    )


def test_every_order_passing_is_a_pass(fake: FakeKube, tmp_path: Path) -> None:
    report, op = run_group_job(fake, tmp_path, ("gpu-a", "gpu-b", "gpu-c", "gpu-d"), set())
    assert report.verdict == Verdict.PASS, report.reasons
    assert not [r for r in report.reasons if re.match(r"order \d+/\d+ \(", r)]
    assert len(op.runs) == 2 * 2


def test_a_marker_forged_in_the_log_does_not_count_for_a_missing_order() -> None:
    """Order markers of another count, or out of range, are not orders of this job."""
    log = "\n".join(
        [
            "==> gpufabric order 1/3: h0 h1 h2 <==",  # another job's count
            "==> gpufabric order 3/2: h0 h1 h2 <==",  # out of range
        ]
    )
    files, hosts = nccl.split_orders(log, 2)
    assert hosts == {}
    assert set(files) == {f"order {i}/2 {t}" for i in (1, 2) for t in nccl.TESTS}
    assert all(not text.strip() for text in files.values())


# ------------------------------------------------------------ the launcher script


def run_script(tmp_path: Path, script: str, hosts: list[str]) -> subprocess.CompletedProcess[str]:
    op = sweepfleet.MPIOperator(tmp_path, lambda a, b: FAST)
    op.install(FakeKube())
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("".join(f"{h} slots=8\n" for h in hosts))
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "OMPI_MCA_orte_default_hostfile": str(hostfile)}  # fmt: skip
    script = script.replace(nccl.ORDER_HOSTFILE, str(tmp_path / "order"))
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, cwd=tmp_path)  # fmt: skip


def test_each_order_runs_from_a_hostfile_in_that_order_starting_at_host_0(tmp_path: Path) -> None:
    plan = plan_of(config(5))
    w = nccl.wiring_for(plan, nccl.JobRequest(tenant=NS, kind="mpijob", nodes=5))
    orders = sweep_rounds.ring_orders(5)
    hosts = [f"h{i}" for i in range(5)]
    done = run_script(tmp_path, nccl.group_launcher_script(w, 5, orders), hosts)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    markers = [line for line in lines if line.startswith("==> gpufabric order")]
    runs = [line.split() for line in lines if line.startswith(sweepfleet.STANDIN)]
    assert len(markers) == len(orders)
    assert len(runs) == 2 * len(orders)
    for i, (order, marker) in enumerate(zip(orders, markers, strict=True)):
        ring = [hosts[r] for r in order]
        ring = ring[ring.index("h0") :] + ring[: ring.index("h0")]  # the same ring
        assert marker == f"==> gpufabric order {i + 1}/{len(orders)}: {' '.join(ring)} <=="
        for run in runs[2 * i : 2 * i + 2]:
            assert [h.split(":")[0] for h in run[4:]] == ring
            assert run[2:4] == ["np=40", "algo=Ring"]
    assert [r[1] for r in runs[:2]] == list(nccl.TESTS)


def test_host_names_never_run_as_shell(tmp_path: Path) -> None:
    """Only indices reach the script; a hostfile entry with shell in it stays a word."""
    plan = plan_of(config(3))
    w = nccl.wiring_for(plan, nccl.JobRequest(tenant=NS, kind="mpijob", nodes=3))
    hostile = ["$(touch${IFS}pwned)", "`touch${IFS}pwned`", "a;touch${IFS}pwned"]
    done = run_script(tmp_path, nccl.group_launcher_script(w, 3, sweep_rounds.ring_orders(3)), hostile)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "pwned").exists()
    marker = (
        "==> gpufabric order 1/2: $(touch${IFS}pwned) `touch${IFS}pwned` a;touch${IFS}pwned <=="
    )
    assert marker in done.stdout.splitlines()


def test_a_hostfile_with_another_number_of_hosts_fails_before_any_run(tmp_path: Path) -> None:
    plan = plan_of(config(4))
    w = nccl.wiring_for(plan, nccl.JobRequest(tenant=NS, kind="mpijob", nodes=4))
    done = run_script(tmp_path, nccl.group_launcher_script(w, 4, sweep_rounds.ring_orders(4)), ["a", "b", "c"])  # fmt: skip
    assert done.returncode == 1
    assert "gpufabric: the hostfile lists 3 hosts, expected 4" in done.stderr
    assert sweepfleet.STANDIN not in done.stdout


# ------------------------------------------------------------ every kind


KINDS = {
    "mpijob": None,
    "trainjob": {"mpiOperator": False, "trainer": {"enabled": True, "runtimes": ["torch-distributed"]}},
    "pytorchjob": {"mpiOperator": False, "trainingOperator": {"schemes": ["pytorchjob"]}},
}  # fmt: skip


def launcher_of(job: dict[str, Any]) -> str:
    if job["kind"] == "MPIJob":
        return str(job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"][2])  # fmt: skip
    if job["kind"] == "TrainJob":
        return str(job["spec"]["trainer"]["command"][2])
    return str(job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["command"][2])  # fmt: skip


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_kind_runs_a_group_job_pinned_to_its_nodes(kind: str, tmp_path: Path) -> None:
    plan = plan_of(config(6, training=KINDS[kind]))
    assert plan.facts.operators.acceptance_kind == kind
    nodes = tuple(f"gpu-{i}" for i in range(6))
    orders = sweep_rounds.ring_orders(6)
    job = nccl.acceptance_job(plan, NS, 6, name="s-r1-2", pin_nodes=nodes, orders=orders)
    w = nccl.wiring_for(plan, nccl.JobRequest(tenant=NS, kind=kind, nodes=6))  # type: ignore[arg-type]
    assert launcher_of(job).endswith(nccl.group_launcher_script(w, 6, orders))
    for pod in gpu_pods(job):
        term = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]  # fmt: skip
        assert term["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == list(nodes)
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed")
    path = tmp_path / "launcher.sh"
    path.write_text("#!/bin/bash\n" + launcher_of(job) + "\n")
    done = subprocess.run(["shellcheck", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


@pytest.mark.shared
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_kind_group_job_validates_against_its_crd(kind: str, crd_dir: Path) -> None:
    plan = plan_of(config(6, training=KINDS[kind]))
    nodes = tuple(f"gpu-{i}" for i in range(6))
    job = nccl.acceptance_job(
        plan, NS, 6, name="s-r1-2", pin_nodes=nodes, orders=sweep_rounds.ring_orders(6)
    )
    report = validate_objects([job], plan.facts.kubernetes_minor, crd_dir)
    assert report.ok, report.errors
    assert report.checked_custom == 1


# ------------------------------------------------------------ the command


def test_the_dry_run_prints_a_group_job_when_the_quota_runs_more_than_two_nodes(
    write_stack: Callable[..., Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    stack = write_stack(config(12, quota=64), "groups")  # four pairs at once: 8 nodes
    argv = ["verify", "nccl", "--stack", str(stack), "--tenant", NS, "--sweep", "--dry-run"]
    assert main([*argv, "--kubeconfig", str(tmp_path / "absent")]) == 0
    out, err = capsys.readouterr()
    pair, group, _rail = yaml.safe_load_all(out)
    assert pair["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 2
    assert group["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 8
    assert "==> gpufabric order 4/4:" in launcher_of(group)
    assert "group jobs of up to 8 nodes" in err
    assert "4 orders" in err
    assert main([*argv, "--sweep-group", "3"]) == 0
    _, group, _ = yaml.safe_load_all(capsys.readouterr().out)
    assert group["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 3
    assert main([*argv, "--sweep-group", "2"]) == 0
    assert len(list(yaml.safe_load_all(capsys.readouterr().out))) == 2  # pair and rail


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--sweep", "--sweep-group", "1"], "argument --sweep-group: '1': expected a whole number of nodes 2 to 1024"),
        (["--sweep", "--sweep-group", "four"], "argument --sweep-group: 'four': expected"),
        (["--sweep", "--sweep-group", "-3"], "argument --sweep-group: '-3': expected"),
        (["--sweep-group", "4"], "--sweep-group: 4: applies only with --sweep"),
    ],
)  # fmt: skip
def test_sweep_group_errors_name_the_flag_and_exit_2(
    extra: list[str], words: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["verify", "nccl", "--stack", "lab-roce", "--tenant", NS, "--dry-run", *extra]
    try:
        code = main([*argv, "--kubeconfig", str(tmp_path / "absent")])
    except SystemExit as exc:  # argparse refuses the value itself
        code = int(exc.code or 0)
    err = capsys.readouterr().err
    assert code == 2
    assert words in err
    assert "Traceback" not in err


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.usefixtures("quick_jobs")
def test_a_signal_during_group_jobs_deletes_every_job(
    fake: FakeKube,
    tmp_path: Path,
    write_stack: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
    signum: int,
) -> None:
    stack = write_stack(config(8), "groups")
    for i in range(8):
        fake.add(gpu_node(f"gpu-{i}", "leaf-a"))
    op = sweepfleet.MPIOperator(tmp_path / "op", lambda a, b: FAST, hold=lambda _j: True)
    op.install(fake)
    sent = {"done": False}

    def send(fake_: FakeKube, path: str) -> None:
        if "/mpijobs/" in path and op.jobs and not sent["done"]:
            sent["done"] = True
            threading.Timer(0.05, os.kill, (os.getpid(), signum)).start()

    fake.on_get.append(send)
    code = main(sweep_argv(fake, tmp_path, stack, "--timeout", "30"))
    err = capsys.readouterr().err
    assert sent["done"]
    assert code in (130, 128 + signum)
    assert [len(sweepfleet._pinned_nodes(j)) for j in op.jobs] == [8]  # one group of 8
    assert not [p for p in fake.objects if "/mpijobs/" in p]
    assert "stopped early: interrupted" in err or "stopped early" in err


@pytest.mark.usefixtures("quick_jobs")
def test_a_group_job_that_times_out_is_deleted_and_proves_nothing(
    fake: FakeKube,
    tmp_path: Path,
    write_stack: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    stack = write_stack(config(8), "groups")
    for i in range(8):
        fake.add(gpu_node(f"gpu-{i}", "leaf-a"))
    op = sweepfleet.MPIOperator(tmp_path / "op", lambda a, b: FAST, hold=lambda _j: True)
    op.install(fake)
    code = main(sweep_argv(fake, tmp_path, stack, "--timeout", "2", "--json"))
    doc = json.loads(capsys.readouterr().out)
    assert code == 5  # nothing could be judged: INCONCLUSIVE, never PASS
    assert doc["notLocalized"] == [f"gpu-{i}" for i in range(8)]
    assert [len(sweepfleet._pinned_nodes(j)) for j in op.jobs] == [8]
    assert not [p for p in fake.objects if "/mpijobs/" in p]


def test_pytorchjob_group_jobs_leave_no_job_and_no_ssh_secret(
    fake: FakeKube,
    tmp_path: Path,
    write_stack: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The Training Operator stand-in answers with a two-node log without order markers:
    the group job is not PASS, and its job and its SSH keys Secret are deleted."""
    from fake_kube import PyTorchJobOperator
    from test_nccl import launcher_log

    stack = write_stack(config(4, training=KINDS["pytorchjob"]), "pytorch-groups")
    for i in range(4):
        fake.add(gpu_node(f"gpu-{i}", "leaf-a"))
    op = PyTorchJobOperator(launcher_log()).install(fake)
    code = main(sweep_argv(fake, tmp_path, stack, "--json"))
    doc = json.loads(capsys.readouterr().out)
    assert code == 5
    assert doc["nodes"]["gpu-0"]["pairs"][0][2] == "INCONCLUSIVE in a group of 4"
    [job] = op.jobs
    assert job.endswith("-r1-0")
    assert len(op.secrets_seen) == 1
    assert not [p for p in fake.objects if "/pytorchjobs/" in p or "/secrets/" in p]


def test_the_estimate_printed_first_is_what_a_healthy_fleet_takes(
    fake: FakeKube,
    tmp_path: Path,
    write_stack: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    fleet = sweepfleet.build(12, "bad", 0, 1)  # no fault: every job passes
    code, doc, err, op = run_fleet(fake, tmp_path, write_stack, capsys, fleet)
    assert code == 0, err
    said = re.search(r"(\d+) rounds, (\d+) group jobs and (\d+) two-node jobs when all pass", err)
    assert said is not None, err
    groups = sum(1 for j in op.jobs if len(sweepfleet._pinned_nodes(j)) > 2)
    assert (int(said[1]), int(said[2]), int(said[3])) == (
        doc["rounds"],
        groups,
        doc["jobs"] - groups,
    )
    assert "12 nodes at a time as the quota admits" in err
