"""``gpufabric health`` against the fake API server: the "Must show" of issue 28 item 5.

Sixteen GPU nodes of the prod-ib stack; node-problem-detector's conditions and gpufabric's
alerts (a fake Prometheus answering ALERTS) mark faults; the re-certification sweep's jobs
are answered by a fake fleet whose slow nodes halve the bus bandwidth (nccl-tests' own log
format, judged by the analyzer)."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from builders import gpu_node
from fake_kube import FakeKube
from nccllogs import IB_8X400, Log, text

from gpufabric.cli import main, parser
from gpufabric.health import lease, passes, record
from gpufabric.model.stackfile import load_stack
from gpufabric.plan.build import Plan
from gpufabric.verify.kube import Kube
from gpufabric.verify.nccl import report as nccl_report

STACK = "prod-ib"
TENANT = "llm-pretrain"
TAINT = "gpufabric.io/quarantine"
NODES = [f"gpu-{i:02d}" for i in range(16)]
NOW = dt.datetime(2026, 11, 24, 22, 0, tzinfo=dt.UTC)


def set_condition(fake: FakeKube, name: str, ctype: str, status: str, message: str = "") -> None:
    obj = fake.objects[f"/api/v1/nodes/{name}"]
    for cond in obj["status"]["conditions"]:
        if cond["type"] == ctype:
            cond["status"], cond["message"] = status, message


def xid79(fake: FakeKube, name: str) -> None:
    set_condition(fake, name, "GpuFatalXid", "True", "NVRM: Xid (PCI:0000:1b:00): 79, GPU has fallen off the bus")  # fmt: skip


def live(fake: FakeKube, name: str) -> dict[str, Any]:
    return fake.objects[f"/api/v1/nodes/{name}"]


def tainted(fake: FakeKube, name: str) -> bool:
    return any(t["key"] == TAINT for t in live(fake, name)["spec"].get("taints", []))


def rec(fake: FakeKube, name: str) -> record.Record | None:
    return record.read(live(fake, name)["metadata"].get("annotations"))


def events(fake: FakeKube) -> list[dict[str, Any]]:
    return [o for o in fake.objects.values() if o.get("kind") == "Event"]


def writes(fake: FakeKube) -> list[tuple[str, str]]:
    return [(m, p) for m, p in fake.requests if m in ("PUT", "POST", "PATCH", "DELETE")]


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    with FakeKube() as f:
        f.add(*(gpu_node(n) for n in NODES))
        yield f


@pytest.fixture(scope="module")
def plan() -> Plan:
    return load_stack(STACK, None).plan


class Fleet:
    """The sweep's two-node jobs as the fleet answers them: a slow node halves the pair's
    bus bandwidth; ``answer`` overrides (e.g. no log: INCONCLUSIVE)."""

    def __init__(self, slow: set[str] = frozenset(), answer: str | None = None) -> None:  # type: ignore[assignment]
        self.slow, self.answer = set(slow), answer
        self.jobs: list[tuple[tuple[str, str], str]] = []

    def __call__(self, pair: tuple[str, str], round_: int, index: int) -> nccl_report.NcclReport:
        if self.answer == "interrupt":
            raise KeyboardInterrupt
        busbw = 180.0 if set(pair) & self.slow else 370.0
        logs = {} if self.answer == "nolog" else {f"{pair[0]}+{pair[1]}": text(Log(hosts=pair, busbw=busbw))}  # fmt: skip
        doc = nccl_report.report(logs, IB_8X400) if logs else _inconclusive()
        self.jobs.append((pair, doc.verdict))
        return doc


def _inconclusive() -> nccl_report.NcclReport:
    return nccl_report.NcclReport(
        verdict=nccl_report.Verdict.INCONCLUSIVE, reasons=("no launcher log to judge",),
        threshold_gbps=360.0, threshold_source="test", runs=(),
    )  # fmt: skip


def args_for(fake: FakeKube, tmp_path: Path, *extra: str) -> list[str]:
    cfg = str(fake.kubeconfig(tmp_path))
    # the API-status node checks: the probe has its own tests (tests/health/)
    return ["health", "--stack", STACK, "--tenant", TENANT, "--kubeconfig", cfg, "--context", "fake", "--node-checks", "api", *extra]  # fmt: skip


def one_pass(fake: FakeKube, tmp_path: Path, plan: Plan, *extra: str, fleet: Fleet | None = None, at: dt.datetime = NOW) -> passes.PassReport:  # fmt: skip
    args = parser().parse_args(args_for(fake, tmp_path, "--max-fraction", "0.5", *extra))
    kube = Kube(args.kubeconfig, "fake")
    return passes.one_pass(plan, args, kube, run_pair=fleet or Fleet(), clock=lambda: at)


def actions_of(report: passes.PassReport) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for row in report.rows:
        out.setdefault(row["action"], []).append(row["node"])
    return out


def test_fatal_xid_on_two_of_sixteen_nodes_quarantines_both(fake: FakeKube, tmp_path: Path, plan: Plan) -> None:  # fmt: skip
    xid79(fake, "gpu-03")
    xid79(fake, "gpu-11")
    report = one_pass(fake, tmp_path, plan)
    assert actions_of(report) == {"quarantine": ["gpu-03", "gpu-11"]}
    for name in ("gpu-03", "gpu-11"):
        obj = live(fake, name)
        assert obj["spec"]["unschedulable"] is True
        assert {"key": TAINT, "value": "GpuFatalXid", "effect": "NoSchedule"} in obj["spec"][
            "taints"
        ]
        r = rec(fake, name)
        assert r is not None
        assert r.state == "quarantined"
        assert r.source == "condition"
        assert "Xid" in r.reason
        assert "79" in r.reason
        assert r.since == "2026-11-24T22:00:00Z"
    assert not any(tainted(fake, n) for n in NODES if n not in ("gpu-03", "gpu-11"))
    got = sorted((e["involvedObject"]["name"], e["reason"], e["type"]) for e in events(fake))
    assert got == [("gpu-03", "Quarantined", "Warning"), ("gpu-11", "Quarantined", "Warning")]


def test_a_third_and_fourth_fault_with_a_breaker_of_two_are_held_and_reported(fake: FakeKube, tmp_path: Path, plan: Plan, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    xid79(fake, "gpu-03")
    xid79(fake, "gpu-11")
    one_pass(fake, tmp_path, plan, "--max-quarantined", "2")
    set_condition(fake, "gpu-05", "NicFatalError", "True", "mlx5_core 0000:3b:00.0: health compromised")  # fmt: skip
    xid79(fake, "gpu-07")
    before = writes(fake)
    code = main(args_for(fake, tmp_path, "--max-quarantined", "2", "--max-fraction", "0.5"))
    out = capsys.readouterr().out
    assert code == 4
    # nothing quarantined beyond the breaker: its only writes are the QuarantineHeld Events
    # (and the Lease a pass holds while it runs)
    assert [w for w in writes(fake)[len(before) :] if not w[1].endswith(("/events", "/leases", f"/leases/{lease.NAME}"))] == []  # fmt: skip
    assert not tainted(fake, "gpu-05")
    assert not tainted(fake, "gpu-07")
    assert "held by the circuit breaker" in out
    assert "gpu-05, gpu-07" in out
    assert "condition NicFatalError" in out
    assert "2 of 2 quarantined" in out


def test_the_fraction_limit_holds_as_well_as_the_count(fake: FakeKube, tmp_path: Path, plan: Plan) -> None:  # fmt: skip
    for name in ("gpu-01", "gpu-02", "gpu-03"):
        xid79(fake, name)
    args = parser().parse_args(args_for(fake, tmp_path, "--max-quarantined", "10"))
    report = passes.one_pass(plan, args, Kube(args.kubeconfig, "fake"), clock=lambda: NOW)
    # prod-ib's default fraction 0.1 of 16 nodes: one node
    assert actions_of(report) == {"quarantine": ["gpu-01"], "held": ["gpu-02", "gpu-03"]}
    assert report.exit_code == 4


def test_one_node_recertified_and_returned_one_kept_with_its_reason(fake: FakeKube, tmp_path: Path, plan: Plan) -> None:  # fmt: skip
    xid79(fake, "gpu-03")
    xid79(fake, "gpu-11")
    live(fake, "gpu-11")["spec"]["unschedulable"] = True  # a person cordoned it before
    one_pass(fake, tmp_path, plan)
    set_condition(fake, "gpu-03", "GpuFatalXid", "False")  # rebooted: cleared
    set_condition(fake, "gpu-11", "GpuFatalXid", "False")
    fleet = Fleet(slow={"gpu-11"})
    report = one_pass(fake, tmp_path, plan, fleet=fleet, at=NOW + dt.timedelta(hours=1))
    assert actions_of(report) == {"return": ["gpu-03"], "keep": ["gpu-11"]}
    back = live(fake, "gpu-03")
    assert not tainted(fake, "gpu-03")
    assert not back["spec"].get("unschedulable")
    r = rec(fake, "gpu-03")
    assert r is not None
    assert r.state == "returned"
    assert "sweep: GOOD with" in r.returned
    kept = rec(fake, "gpu-11")
    assert kept is not None
    assert kept.state == "quarantined"
    assert kept.check.startswith("sweep: BAD")
    assert tainted(fake, "gpu-11")
    reasons = {(e["involvedObject"]["name"], e["reason"]) for e in events(fake)}
    assert {("gpu-03", "Returned"), ("gpu-11", "RecertificationFailed")} <= reasons
    # the returned node passed with C distinct partners, every job pinned to a pair with it
    passed = {b if a == "gpu-03" else a for (a, b), v in fleet.jobs if "gpu-03" in (a, b) and v == "PASS"}  # fmt: skip
    assert len(passed) >= 3


def test_a_returned_node_someone_else_cordoned_stays_cordoned(fake: FakeKube, tmp_path: Path, plan: Plan) -> None:  # fmt: skip
    xid79(fake, "gpu-04")
    live(fake, "gpu-04")["spec"]["unschedulable"] = True
    one_pass(fake, tmp_path, plan)
    set_condition(fake, "gpu-04", "GpuFatalXid", "False")
    report = one_pass(fake, tmp_path, plan, at=NOW + dt.timedelta(hours=1))
    assert actions_of(report) == {"return": ["gpu-04"]}
    assert not tainted(fake, "gpu-04")
    assert live(fake, "gpu-04")["spec"]["unschedulable"] is True


@pytest.mark.parametrize("answer", ["nolog", "slow", "interrupt"])
def test_no_node_returns_without_a_passing_sweep(fake: FakeKube, tmp_path: Path, plan: Plan, answer: str) -> None:  # fmt: skip
    xid79(fake, "gpu-06")
    one_pass(fake, tmp_path, plan)
    set_condition(fake, "gpu-06", "GpuFatalXid", "False")
    fleet = Fleet(slow={"gpu-06"} if answer == "slow" else set(), answer=None if answer == "slow" else answer)  # fmt: skip
    if answer == "interrupt":
        with pytest.raises(KeyboardInterrupt):
            one_pass(fake, tmp_path, plan, fleet=fleet)
    else:
        report = one_pass(fake, tmp_path, plan, fleet=fleet)
        assert actions_of(report) == {"keep": ["gpu-06"]}
    assert tainted(fake, "gpu-06")
    assert live(fake, "gpu-06")["spec"]["unschedulable"] is True
    r = rec(fake, "gpu-06")
    assert r is not None
    assert r.state == "quarantined"


def test_an_interrupted_recertification_resumes_on_the_next_pass(fake: FakeKube, tmp_path: Path, plan: Plan) -> None:  # fmt: skip
    xid79(fake, "gpu-06")
    one_pass(fake, tmp_path, plan)
    set_condition(fake, "gpu-06", "GpuFatalXid", "False")
    with pytest.raises(KeyboardInterrupt):
        one_pass(fake, tmp_path, plan, fleet=Fleet(answer="interrupt"))
    report = one_pass(fake, tmp_path, plan)
    assert actions_of(report) == {"return": ["gpu-06"]}


def test_a_flaky_node_stays_quarantined(fake: FakeKube, tmp_path: Path, plan: Plan) -> None:  # fmt: skip
    xid79(fake, "gpu-06")
    one_pass(fake, tmp_path, plan)
    set_condition(fake, "gpu-06", "GpuFatalXid", "False")

    class Flaky(Fleet):
        def __call__(
            self, pair: tuple[str, str], round_: int, index: int
        ) -> nccl_report.NcclReport:
            self.slow = {"gpu-06"} if round_ % 2 else set()  # fails every other round
            return super().__call__(pair, round_, index)

    report = one_pass(fake, tmp_path, plan, fleet=Flaky())
    assert actions_of(report) == {"keep": ["gpu-06"]}
    r = rec(fake, "gpu-06")
    assert r is not None
    assert r.check.startswith(("sweep: FLAKY", "sweep: BAD"))
    assert tainted(fake, "gpu-06")


def test_node_checks_fail_before_any_sweep_job(fake: FakeKube, tmp_path: Path, plan: Plan) -> None:  # fmt: skip
    xid79(fake, "gpu-08")
    one_pass(fake, tmp_path, plan)
    set_condition(fake, "gpu-08", "GpuFatalXid", "False")
    live(fake, "gpu-08")["status"]["allocatable"]["nvidia.com/gpu"] = "7"  # a GPU lost
    fleet = Fleet()
    report = one_pass(fake, tmp_path, plan, fleet=fleet)
    assert actions_of(report) == {"keep": ["gpu-08"]}
    assert fleet.jobs == []
    r = rec(fake, "gpu-08")
    assert r is not None
    assert r.check == "node checks: 7 of 8 GPUs allocatable"


def test_a_kept_node_is_retried_only_after_the_interval(fake: FakeKube, tmp_path: Path, plan: Plan) -> None:  # fmt: skip
    xid79(fake, "gpu-08")
    one_pass(fake, tmp_path, plan)
    set_condition(fake, "gpu-08", "GpuFatalXid", "False")
    one_pass(fake, tmp_path, plan, fleet=Fleet(slow={"gpu-08"}))
    fleet = Fleet()
    report = one_pass(fake, tmp_path, plan, fleet=fleet, at=NOW + dt.timedelta(minutes=10))
    assert actions_of(report) == {"wait": ["gpu-08"]}
    assert fleet.jobs == []
    report = one_pass(fake, tmp_path, plan, fleet=fleet, at=NOW + dt.timedelta(hours=2))
    assert actions_of(report) == {"return": ["gpu-08"]}


def test_a_cause_not_cleared_waits(fake: FakeKube, tmp_path: Path, plan: Plan) -> None:
    xid79(fake, "gpu-02")
    one_pass(fake, tmp_path, plan)
    fleet = Fleet()
    report = one_pass(fake, tmp_path, plan, fleet=fleet)
    assert actions_of(report) == {"wait": ["gpu-02"]}
    assert fleet.jobs == []
    assert "cause not cleared: condition GpuFatalXid" in report.rows[0]["reason"]


def test_dry_run_changes_nothing(fake: FakeKube, tmp_path: Path, plan: Plan, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    xid79(fake, "gpu-03")
    xid79(fake, "gpu-11")
    before = json.dumps(fake.objects, sort_keys=True)
    code = main(args_for(fake, tmp_path, "--dry-run", "--max-fraction", "0.5"))
    out = capsys.readouterr().out
    assert code == 0
    assert writes(fake) == []
    assert json.dumps(fake.objects, sort_keys=True) == before
    assert "quarantine   gpu-03" in out
    assert "quarantine   gpu-11" in out
    assert "would take" in out
    # and a quarantined node whose cause cleared: the re-certification it would run
    one_pass(fake, tmp_path, plan)
    set_condition(fake, "gpu-03", "GpuFatalXid", "False")
    before = json.dumps(fake.objects, sort_keys=True)
    fleet = Fleet()
    report = one_pass(fake, tmp_path, plan, "--dry-run", fleet=fleet)
    assert actions_of(report)["re-certify"] == ["gpu-03"]
    assert fleet.jobs == []
    assert json.dumps(fake.objects, sort_keys=True) == before


def test_a_second_run_is_a_no_op(fake: FakeKube, tmp_path: Path, plan: Plan) -> None:
    xid79(fake, "gpu-03")
    xid79(fake, "gpu-11")
    one_pass(fake, tmp_path, plan)
    fake.requests.clear()
    report = one_pass(fake, tmp_path, plan, fleet=Fleet())
    assert writes(fake) == []
    assert set(actions_of(report)) == {"wait"}


def test_a_node_changed_under_the_update_is_read_again(fake: FakeKube, tmp_path: Path, plan: Plan) -> None:  # fmt: skip
    xid79(fake, "gpu-03")
    fake.faults.append(("PUT", "/nodes/gpu-03", 409))
    one_pass(fake, tmp_path, plan)
    assert tainted(fake, "gpu-03")
    assert [m for m, p in fake.requests if p.endswith("/nodes/gpu-03")].count("PUT") == 2


class _Prometheus:
    """Answers /api/v1/query with the given ALERTS series (or ``raw`` bytes), a byte every
    ``trickle`` seconds when given."""

    def __init__(self, series: list[dict[str, str]], raw: bytes | None = None, trickle: float = 0.0) -> None:  # fmt: skip
        body = raw if raw is not None else json.dumps({"status": "success", "data": {"resultType": "vector", "result": [{"metric": m, "value": [0, "1"]} for m in series]}}).encode()  # fmt: skip
        self.queries: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.queries.append(self.path)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    for i in range(0, len(body), 1 if trickle else len(body)):
                        self.wfile.write(body[i : i + (1 if trickle else len(body))])
                        self.wfile.flush()
                        time.sleep(trickle)
                except OSError:
                    pass  # the client gave up

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def alert(name: str, node: str, quarantine: str) -> dict[str, str]:
    return {"__name__": "ALERTS", "alertname": name, "alertstate": "firing", "node": node, "quarantine": quarantine}  # fmt: skip


def test_an_application_xid_leads_to_no_action_a_fatal_alert_quarantines(fake: FakeKube, tmp_path: Path, plan: Plan) -> None:  # fmt: skip
    prom = _Prometheus([alert("GpuNonFatalXid", "gpu-05", "false"), alert("GpuFatalXid", "gpu-09", "true")])  # fmt: skip
    try:
        report = one_pass(fake, tmp_path, plan, "--prometheus", prom.url)
    finally:
        prom.close()
    assert actions_of(report) == {"quarantine": ["gpu-09"], "no action": ["gpu-05"]}
    assert not tainted(fake, "gpu-05")
    assert "annotations" not in live(fake, "gpu-05")["metadata"]
    r = rec(fake, "gpu-09")
    assert r is not None
    assert r.source == "alert"
    assert r.reason == "alert GpuFatalXid"
    assert "ALERTS" in prom.queries[0]
    assert "quarantine" in prom.queries[0]


def test_alerts_unreadable_acts_on_conditions_and_recertifies_nothing(fake: FakeKube, tmp_path: Path, plan: Plan) -> None:  # fmt: skip
    xid79(fake, "gpu-02")
    one_pass(fake, tmp_path, plan)
    set_condition(fake, "gpu-02", "GpuFatalXid", "False")
    xid79(fake, "gpu-04")
    fleet = Fleet()
    report = one_pass(fake, tmp_path, plan, "--prometheus", "http://127.0.0.1:9", fleet=fleet)
    assert actions_of(report) == {"quarantine": ["gpu-04"], "wait": ["gpu-02"]}
    assert fleet.jobs == []
    assert report.exit_code == 5
    assert report.alerts.startswith("unavailable")


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--prometheus", "file:///etc/passwd"], "--prometheus"),
        (["--tenant", "nobody"], "--tenant"),
    ],
)
def test_bad_input_exits_2_naming_the_flag(fake: FakeKube, tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], words: str) -> None:  # fmt: skip
    assert main([*args_for(fake, tmp_path), *extra]) == 2
    assert words in capsys.readouterr().err
    assert fake.requests == []


def test_a_stack_without_monitoring_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    assert main(["health", "--stack", "lab-roce", "--tenant", "team-vision"]) == 2
    assert "monitoring.enabled" in capsys.readouterr().err


def test_unreachable_cluster_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with FakeKube() as f:
        argv = args_for(f, tmp_path)
    assert main(argv) == 3
    err = capsys.readouterr().err
    assert err.startswith("gpufabric health:")
    assert "Traceback" not in err


def test_json_document(fake: FakeKube, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    xid79(fake, "gpu-03")
    assert main(args_for(fake, tmp_path, "--json", "--max-fraction", "0.5")) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["actions"] == [{"action": "quarantine", "node": "gpu-03", "reason": doc["actions"][0]["reason"]}]  # fmt: skip
    assert doc["gpuNodes"] == 16
    assert doc["maxQuarantined"] == 2
    assert doc["held"] == []


# ------------------------------------------------- the real job path: MPIJobs through the fake


def mpi_operator(fake: FakeKube, slow: set[str], interrupt: bool = False) -> list[dict[str, Any]]:
    """The fake plays the MPI Operator: each MPIJob finishes at once with a launcher log of
    nccl-tests between the two nodes it is pinned to (a slow node halves the bandwidth).
    ``interrupt``: the first create sends this process SIGINT (Ctrl-C mid-sweep)."""
    from gpufabric.verify.nccl import job as nccl

    created: list[dict[str, Any]] = []

    def on_create(f: FakeKube, obj: dict[str, Any]) -> None:
        if obj["kind"] != "MPIJob":
            return
        created.append(json.loads(json.dumps(obj)))
        if interrupt:
            if len(created) == 1:  # one Ctrl-C, however many jobs were submitted at once
                os.kill(os.getpid(), signal.SIGINT)
            return
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        worker = obj["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
        terms = worker["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        pair = tuple(terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"])
        busbw = 180.0 if set(pair) & slow else 370.0
        log = "\n".join(
            part
            for test in nccl.TESTS
            for part in (
                nccl.MARKER.format(test=test),
                text(Log(test=test, hosts=pair, busbw=busbw)),
            )
        )
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{name}-launcher",
                "namespace": ns,
                "labels": {nccl.JOB_LABEL: name, nccl.ROLE_LABEL: "launcher"},
            },
            "status": {"phase": "Succeeded"},
        }
        f.objects[f"/api/v1/namespaces/{ns}/pods/{name}-launcher"] = pod
        f.logs[f"/api/v1/namespaces/{ns}/pods/{name}-launcher"] = log
        obj["status"] = {"conditions": [{"type": "Succeeded", "status": "True", "reason": "MPIJobSucceeded", "message": "done"}]}  # fmt: skip

    fake.on_create.append(on_create)
    return created


def test_recertification_jobs_are_pinned_tolerate_the_taint_and_are_deleted(fake: FakeKube, tmp_path: Path, plan: Plan, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    xid79(fake, "gpu-03")
    xid79(fake, "gpu-11")
    one_pass(fake, tmp_path, plan)
    set_condition(fake, "gpu-03", "GpuFatalXid", "False")
    set_condition(fake, "gpu-11", "GpuFatalXid", "False")
    created = mpi_operator(fake, slow={"gpu-11"})
    code = main(args_for(fake, tmp_path, "--max-fraction", "0.5", "--poll", "0.01"))
    out = capsys.readouterr().out
    assert code == 0
    assert "return       gpu-03" in out
    assert "keep         gpu-11" in out
    assert not tainted(fake, "gpu-03")
    assert tainted(fake, "gpu-11")
    assert created
    assert not [p for p in fake.objects if "/mpijobs/" in p]  # every job deleted
    for job in created:
        assert job["metadata"]["namespace"] == TENANT
        assert job["metadata"]["name"].startswith("gpufabric-health-r")
        for role in ("Launcher", "Worker"):
            spec = job["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]
            assert {"key": TAINT, "operator": "Exists", "effect": "NoSchedule"} in spec[
                "tolerations"
            ]


def test_ctrl_c_mid_sweep_deletes_its_jobs_and_leaves_the_node_quarantined(fake: FakeKube, tmp_path: Path, plan: Plan, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    xid79(fake, "gpu-03")
    one_pass(fake, tmp_path, plan)
    set_condition(fake, "gpu-03", "GpuFatalXid", "False")
    created = mpi_operator(fake, slow=set(), interrupt=True)
    code = main(args_for(fake, tmp_path, "--max-fraction", "0.5", "--poll", "0.05"))
    err = capsys.readouterr().err
    assert code == 130
    assert created
    assert not [p for p in fake.objects if "/mpijobs/" in p]
    assert "gpufabric health: interrupted; cleaned up" in err
    assert tainted(fake, "gpu-03")


def _request_rule(method: str, path: str) -> tuple[str, str, str | None, str]:
    """(API group, resource, namespace or None, verb) of one request."""
    parts = path.strip("/").split("/")
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
    namespace = None
    if rest[0] == "namespaces" and len(rest) > 2:
        namespace, rest = rest[1], rest[2:]
    resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
    named = len(rest) > 1
    verb = {"GET": "get" if named else "list", "PUT": "update", "POST": "create", "DELETE": "delete", "PATCH": "patch"}[method]  # fmt: skip
    return group, resource, namespace, verb


def test_the_rendered_rbac_allows_every_request_the_command_makes(fake: FakeKube, tmp_path: Path, plan: Plan, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """Run quarantine, re-certification (real MPIJob path) and return, then check every API
    request against the in-cluster form's ClusterRole (cluster-wide) and Role (in the tenant
    namespace): the least privilege is enough."""
    text_ = Path("stacks/Pulumi.prod-ib.yaml").read_text()
    marker = "  gpufabric:monitoring:\n    enabled: true\n"
    stack = tmp_path / "Pulumi.hc.yaml"
    stack.write_text(text_.replace(marker, f"{marker}    health:\n      inCluster: {{enabled: true, image: nvcr.io/x/gpufabric:1, tenant: {TENANT}}}\n"))  # fmt: skip
    objs = {
        it.id: it.payload.body
        for it in load_stack(str(stack), None).plan.items
        if it.id.startswith("monitoring/health/")
    }  # type: ignore[union-attr]
    cluster_rules = objs["monitoring/health/cluster-role"]["rules"]
    role_rules = objs["monitoring/health/role"]["rules"]
    lease_rules = objs["monitoring/health/lease-role"]["rules"]
    lease_ns = objs["monitoring/health/lease-role"]["metadata"]["namespace"]
    xid79(fake, "gpu-03")
    fake.requests.clear()
    one_pass(fake, tmp_path, plan)
    set_condition(fake, "gpu-03", "GpuFatalXid", "False")
    mpi_operator(fake, slow=set())
    assert main(args_for(fake, tmp_path, "--max-fraction", "0.5", "--poll", "0.01")) == 0
    assert not tainted(fake, "gpu-03")

    def grants(rules: Any, group: str, resource: str, verb: str) -> bool:
        return any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"] for r in rules)  # fmt: skip

    seen = {_request_rule(m, p) for m, p in fake.requests}
    assert ("", "nodes", None, "update") in seen
    assert ("kubeflow.org", "mpijobs", TENANT, "create") in seen
    denied = [
        (g, r, ns, v)
        for g, r, ns, v in seen
        if not grants(cluster_rules, g, r, v)
        and not (ns == TENANT and grants(role_rules, g, r, v))
        and not (ns == lease_ns and grants(lease_rules, g, r, v))
    ]
    assert ("coordination.k8s.io", "leases", lease_ns, "update") in seen
    assert denied == []


@pytest.mark.parametrize(
    ("raw", "trickle"),
    [
        (b"not json", 0.0),
        (b'{"status": "error"}', 0.0),
        (b'{"status": "success", "data": {"result": []}}' * 50, 0.05),
    ],
)
def test_a_broken_or_trickling_prometheus_is_unavailable_within_the_timeout(fake: FakeKube, tmp_path: Path, plan: Plan, raw: bytes, trickle: float) -> None:  # fmt: skip
    prom = _Prometheus([], raw=raw, trickle=trickle)
    xid79(fake, "gpu-04")
    start = time.monotonic()
    try:
        report = one_pass(fake, tmp_path, plan, "--prometheus", prom.url, "--timeout", "2")
    finally:
        prom.close()
    assert time.monotonic() - start < 10
    assert report.alerts.startswith("unavailable")
    assert actions_of(report) == {"quarantine": ["gpu-04"]}  # the conditions still count
    assert report.exit_code == 5


def test_watch_runs_pass_after_pass_until_interrupted(fake: FakeKube, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    xid79(fake, "gpu-03")
    timer = threading.Timer(3.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        code = main(args_for(fake, tmp_path, "--watch", "--interval", "0.5", "--max-fraction", "0.5"))  # fmt: skip
    finally:
        timer.cancel()
    captured = capsys.readouterr()
    assert code == 130
    passes = captured.out.count("gpufabric health (prod-ib)")
    assert passes >= 2
    assert captured.out.count("quarantine   gpu-03") == 1  # the later passes change nothing
    assert "gpufabric health: interrupted" in captured.err
