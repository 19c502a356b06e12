"""One ``gpufabric health`` pass at a time: the Lease (gpufabric/health/lease.py) against the
fake API server. Two passes at once (the rendered loop and an operator's run) would each
count the quarantined nodes before the other acted and pass the circuit breaker together."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest
from builders import gpu_node
from fake_kube import FakeKube

from gpufabric.cli import main, parser
from gpufabric.health import lease, passes
from gpufabric.model.stackfile import load_stack
from gpufabric.plan.build import Plan
from gpufabric.verify.kube import Kube

STACK = "prod-ib"
TENANT = "llm-pretrain"
NOW = dt.datetime(2026, 11, 24, 22, 0, tzinfo=dt.UTC)
NODES = [f"gpu-{i:02d}" for i in range(16)]


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    with FakeKube() as f:
        f.add(*(gpu_node(n, xid=n in ("gpu-03", "gpu-05", "gpu-07")) for n in NODES))
        yield f


@pytest.fixture(scope="module")
def plan() -> Plan:
    return load_stack(STACK, None).plan


def run_pass(fake: FakeKube, tmp_path: Path, plan: Plan, me: str, *extra: str) -> passes.PassReport:  # fmt: skip
    cfg = str(fake.kubeconfig(tmp_path))
    argv = ["health", "--stack", STACK, "--tenant", TENANT, "--kubeconfig", cfg, "--context", "fake", "--node-checks", "api", "--max-quarantined", "2", "--max-fraction", "0.5", *extra]  # fmt: skip
    args = parser().parse_args(argv)
    return passes.guarded_pass(plan, args, Kube(args.kubeconfig, "fake"), me, clock=lambda: NOW)


def lease_path(plan: Plan) -> str:
    ns = plan.facts.monitoring.namespace
    return f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{lease.NAME}"


def hold(fake: FakeKube, plan: Plan, holder: str, renewed: dt.datetime) -> None:
    fake.add(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": lease.NAME,
                "namespace": plan.facts.monitoring.namespace,
                "resourceVersion": "7",
            },
            "spec": {
                "holderIdentity": holder,
                "leaseDurationSeconds": lease.DURATION_S,
                "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            },
        }
    )


def quarantined(fake: FakeKube) -> list[str]:
    return [
        n
        for n in NODES
        if any(
            t.get("key") == "gpufabric.io/quarantine"
            for t in fake.objects[f"/api/v1/nodes/{n}"]["spec"].get("taints", [])
        )
    ]


def test_a_pass_while_another_holds_the_lease_changes_nothing_and_says_who(fake: FakeKube, tmp_path: Path, plan: Plan) -> None:  # fmt: skip
    hold(fake, plan, "laptop-1234-abcd", NOW - dt.timedelta(seconds=10))
    report = run_pass(fake, tmp_path, plan, "loop-1-ffff")
    assert quarantined(fake) == []
    assert report.exit_code == 5
    assert "laptop-1234-abcd" in report.busy
    assert "another pass holds the Lease" in report.table()
    assert report.document()["busy"] == report.busy
    assert not [m for m, p in fake.requests if m in ("PUT", "POST") and "/nodes/" in p]


def test_an_expired_lease_of_a_killed_run_is_taken_over(fake: FakeKube, tmp_path: Path, plan: Plan) -> None:  # fmt: skip
    hold(fake, plan, "killed-99-0000", NOW - dt.timedelta(seconds=lease.DURATION_S + 1))
    report = run_pass(fake, tmp_path, plan, "loop-1-ffff")
    assert report.busy == ""
    assert quarantined(fake) == ["gpu-03", "gpu-05"]  # the breaker's two
    spec = fake.objects[lease_path(plan)]["spec"]
    assert spec["holderIdentity"] == ""  # given up at the end of the pass
    assert spec["leaseTransitions"] == 1


def test_a_pass_takes_and_gives_up_the_lease(fake: FakeKube, tmp_path: Path, plan: Plan) -> None:  # fmt: skip
    report = run_pass(fake, tmp_path, plan, "loop-1-ffff")
    assert report.busy == ""
    assert report.exit_code == 4
    writes = [(m, p) for m, p in fake.requests if m in ("PUT", "POST")]
    lease_writes = [i for i, (_, p) in enumerate(writes) if "/leases" in p]
    node_writes = [i for i, (_, p) in enumerate(writes) if "/nodes/" in p]
    assert lease_writes[0] < node_writes[0]
    assert lease_writes[-1] > node_writes[-1]
    assert fake.objects[lease_path(plan)]["spec"]["holderIdentity"] == ""
    # the next pass takes it again at once
    assert run_pass(fake, tmp_path, plan, "loop-2-eeee").busy == ""


def test_dry_run_takes_no_lease(fake: FakeKube, tmp_path: Path, plan: Plan) -> None:
    hold(fake, plan, "laptop-1234-abcd", NOW)
    report = run_pass(fake, tmp_path, plan, "loop-1-ffff", "--dry-run")
    assert report.busy == ""
    assert [r["node"] for r in report.rows if r["action"] == "quarantine"] == ["gpu-03", "gpu-05"]
    assert fake.objects[lease_path(plan)]["spec"]["holderIdentity"] == "laptop-1234-abcd"


def test_a_busy_pass_reports_no_cluster_figures(fake: FakeKube, tmp_path: Path, plan: Plan) -> None:  # fmt: skip
    hold(fake, plan, "laptop-1234-abcd", NOW - dt.timedelta(seconds=10))
    doc = run_pass(fake, tmp_path, plan, "loop-1-ffff").document()
    assert "laptop-1234-abcd" in doc["busy"]
    assert "gpuNodes" not in doc  # nothing was read: no zeros that read as facts
    assert doc["actions"] == []


def test_in_cluster_outside_a_pod_never_falls_back_to_the_kubeconfig(fake: FakeKube, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """The kubeconfig's current context may be another cluster: --in-cluster uses the pod's
    service account or stops (exit 3), and never acts on that cluster."""
    monkeypatch.setenv("KUBECONFIG", str(fake.kubeconfig(tmp_path)))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    fake.requests.clear()
    code = main(["health", "--stack", STACK, "--tenant", TENANT, "--in-cluster", "--node-checks", "api"])  # fmt: skip
    assert code == 3
    assert "--in-cluster: no service account" in capsys.readouterr().err
    assert fake.requests == []


def test_in_cluster_with_a_kubeconfig_is_bad_input(fake: FakeKube, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    cfg = str(fake.kubeconfig(tmp_path))
    code = main(["health", "--stack", STACK, "--tenant", TENANT, "--in-cluster", "--kubeconfig", cfg, "--node-checks", "api"])  # fmt: skip
    assert code == 2
    assert "--in-cluster" in capsys.readouterr().err
