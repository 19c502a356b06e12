"""``gpufabric health`` re-certification runs ``verify nodes``' own node checks in a probe
pinned to the quarantined nodes, and a node the circuit breaker holds gets one Event.

The fake API server plays the DaemonSet controller: it creates a probe pod on each node the
DaemonSet's node selector and required node affinity select and whose NoSchedule/NoExecute
taints its tolerations tolerate (as the real controller does; a cordon alone does not keep
a DaemonSet's pod away). Each probe pod is a fixture tree of the node (tests/nodefs.py) that
the real gather script reads through /bin/sh, judged as ``verify nodes`` judges it."""

from __future__ import annotations

import datetime as dt
import json
import os
import shlex
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import nodefs
import pytest
from builders import gpu_node
from fake_kube import FakeKube
from fleetfake import LatencyTransport, gather_checks
from nccllogs import IB_8X400, Log, text

from gpufabric.cli import main, parser
from gpufabric.health import passes, record
from gpufabric.model.stackfile import load_stack
from gpufabric.plan.build import Plan
from gpufabric.verify import expect
from gpufabric.verify.kube import Kube
from gpufabric.verify.nccl import report as nccl_report

STACK = "prod-ib"
TENANT = "llm-pretrain"
TAINT = "gpufabric.io/quarantine"
PROBE_NS = "gpufabric-health-probe"
NODES = [f"gpu-{i:02d}" for i in range(16)]
NOW = dt.datetime(2026, 11, 24, 22, 0, tzinfo=dt.UTC)
LATER = NOW + dt.timedelta(hours=1)


def live(fake: FakeKube, name: str) -> dict[str, Any]:
    return fake.objects[f"/api/v1/nodes/{name}"]


def set_xid(fake: FakeKube, name: str, status: str) -> None:
    for cond in live(fake, name)["status"]["conditions"]:
        if cond["type"] == "GpuFatalXid":
            cond["status"], cond["message"] = status, "NVRM: Xid (PCI:0000:1b:00): 79"


def tainted(fake: FakeKube, name: str) -> bool:
    return any(t["key"] == TAINT for t in live(fake, name)["spec"].get("taints", []))


def rec(fake: FakeKube, name: str) -> record.Record:
    found = record.read(live(fake, name)["metadata"].get("annotations"))
    assert found is not None
    return found


def probe_objects(fake: FakeKube) -> list[str]:
    return [p for p in fake.objects if PROBE_NS in p and "/pods/" not in p]


class DaemonSets:
    """The DaemonSet controller and kubelet, as far as the probe needs them: a pod per
    selected, tolerated node, Running unless the node is in ``pending``."""

    def __init__(self, fake: FakeKube, pending: frozenset[str] = frozenset()) -> None:
        self.pending = pending
        self.created: list[dict[str, Any]] = []
        fake.on_create.append(self.on_create)

    @staticmethod
    def _selects(spec: dict[str, Any], n: dict[str, Any]) -> bool:
        labels = n["metadata"].get("labels", {})
        if any(labels.get(k) != v for k, v in spec.get("nodeSelector", {}).items()):
            return False
        terms = (
            spec.get("affinity", {})
            .get("nodeAffinity", {})
            .get("requiredDuringSchedulingIgnoredDuringExecution", {})
            .get("nodeSelectorTerms")
        )
        if terms is not None and not any(
            all(labels.get(e["key"]) in e["values"] for e in t["matchExpressions"]) for t in terms
        ):
            return False
        tolerated = {t.get("key") for t in spec.get("tolerations", []) if t.get("operator") == "Exists"}  # fmt: skip
        return all(
            t["key"] in tolerated
            for t in n["spec"].get("taints", [])
            if t["effect"] in ("NoSchedule", "NoExecute")
        )

    def on_create(self, fake: FakeKube, obj: dict[str, Any]) -> None:
        if obj["kind"] != "DaemonSet":
            return
        self.created.append(json.loads(json.dumps(obj)))
        spec, ns = obj["spec"]["template"]["spec"], obj["metadata"]["namespace"]
        template = obj["spec"]["template"]["metadata"]
        chosen = [
            n["metadata"]["name"]
            for p, n in sorted(fake.objects.items())
            if p.startswith("/api/v1/nodes/") and self._selects(spec, n)
        ]
        for name in chosen:
            pod = f"{obj['metadata']['name']}-{name}"
            fake.objects[f"/api/v1/namespaces/{ns}/pods/{pod}"] = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": pod, "namespace": ns, "labels": dict(template["labels"])},
                "spec": {**spec, "nodeName": name},
                "status": {"phase": "Pending" if name in self.pending else "Running"},
            }
        running = sum(1 for n in chosen if n not in self.pending)
        obj["status"] = {"desiredNumberScheduled": len(chosen), "numberReady": running}


class Trees(dict[str, Path]):
    """kubectl:// spec of a probe pod -> the fixture tree of its node."""

    def __init__(self, trees: dict[str, Path]) -> None:
        super().__init__()
        self.trees = trees

    def __missing__(self, spec: str) -> Path:
        pod = urlsplit(spec).netloc or urlsplit(spec).path.lstrip("/")
        return self.trees[pod.removeprefix("gpufabric-health-probe-")]


@pytest.fixture(scope="module")
def plan() -> Plan:
    return load_stack(STACK, None).plan


def tree(tmp_path: Path, plan: Plan, name: str, **broken: object) -> Path:
    """A node of the stack as the probe sees it (its HCAs, rate, GPUs), healthy unless told."""
    exp = expect.from_facts(plan.facts)
    base: dict[str, object] = {
        "fabric": exp.fabric,
        "rails": [(r.hca or f"mlx5_{i}", r.netdev) for i, r in enumerate(exp.rails)],
        "rate": exp.link_rate_gbps,
        "mtu": exp.mtu or 4092,
        "peermem": exp.gpudirect == "peermem",
        "gpus": exp.gpus,
        "pkeys": ("0xffff", *(exp.pkeys or ())),
        **broken,
    }
    return nodefs.build(tmp_path / name, nodefs.Node(**base))  # type: ignore[arg-type]


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    with FakeKube() as f:
        f.add(*(gpu_node(n, hostname=f"h-{n}") for n in NODES))
        yield f


def fleet(pair: tuple[str, str], round_: int, index: int) -> nccl_report.NcclReport:
    """Every sweep job passes at full bandwidth; the jobs run are recorded on the function."""
    JOBS.append(pair)
    return nccl_report.report({"+".join(pair): text(Log(hosts=pair, busbw=370.0))}, IB_8X400)


JOBS: list[tuple[str, str]] = []


def argv(fake: FakeKube, tmp_path: Path, *extra: str) -> list[str]:
    cfg = str(fake.kubeconfig(tmp_path))
    return ["health", "--stack", STACK, "--tenant", TENANT, "--kubeconfig", cfg, "--context", "fake", "--max-fraction", "0.5", "--poll", "0.01", *extra]  # fmt: skip


def one_pass(fake: FakeKube, tmp_path: Path, plan: Plan, trees: dict[str, Path] | None = None, *extra: str, at: dt.datetime = NOW) -> passes.PassReport:  # fmt: skip
    args = parser().parse_args(argv(fake, tmp_path, *extra))
    transport = LatencyTransport(Trees(trees or {}))
    kube = Kube(args.kubeconfig, "fake")
    return passes.one_pass(plan, args, kube, run_pair=fleet, clock=lambda: at, transport=transport)  # fmt: skip


def quarantined_and_cleared(fake: FakeKube, tmp_path: Path, plan: Plan, *names: str) -> None:
    for name in names:
        set_xid(fake, name, "True")
    one_pass(fake, tmp_path, plan)
    for name in names:
        assert tainted(fake, name)
        set_xid(fake, name, "False")  # rebooted: the cause is cleared
    JOBS.clear()


def acts(report: passes.PassReport) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for row in report.rows:
        out.setdefault(row["action"], []).append(row["node"])
    return out


def test_a_failing_probe_check_keeps_the_node_with_the_check_named(fake: FakeKube, tmp_path: Path, plan: Plan) -> None:  # fmt: skip
    DaemonSets(fake)
    quarantined_and_cleared(fake, tmp_path, plan, "gpu-03")
    down = tree(tmp_path, plan, "gpu-03", degraded={"mlx5_2": ("1: DOWN", "3: Disabled")})
    report = one_pass(fake, tmp_path, plan, {"gpu-03": down}, at=LATER)
    assert acts(report) == {"keep": ["gpu-03"]}
    check = rec(fake, "gpu-03").check
    assert check.startswith("node checks: rail.")
    assert ".port: " in check
    assert "DOWN" in check
    # the verdict verify nodes gives the same node, word for word
    gathered, _ = gather_checks(expect.from_facts(plan.facts), down)
    first = next(c for c in gathered if c.status == "FAIL")
    assert check == f"node checks: {first.check}: {first.message}"
    assert JOBS == []  # no sweep job for a node whose node checks fail
    assert tainted(fake, "gpu-03")
    assert probe_objects(fake) == []  # the probe is gone


def test_a_passing_probe_proceeds_to_the_sweep_and_returns_the_node(fake: FakeKube, tmp_path: Path, plan: Plan) -> None:  # fmt: skip
    DaemonSets(fake)
    quarantined_and_cleared(fake, tmp_path, plan, "gpu-03")
    report = one_pass(fake, tmp_path, plan, {"gpu-03": tree(tmp_path, plan, "gpu-03")}, at=LATER)
    assert acts(report) == {"return": ["gpu-03"]}
    assert any("gpu-03" in pair for pair in JOBS)
    assert not tainted(fake, "gpu-03")
    assert probe_objects(fake) == []


def test_a_probe_that_cannot_run_on_the_node_keeps_it_could_not_run(fake: FakeKube, tmp_path: Path, plan: Plan) -> None:  # fmt: skip
    DaemonSets(fake, pending=frozenset({"gpu-03"}))  # e.g. its image cannot be pulled there
    quarantined_and_cleared(fake, tmp_path, plan, "gpu-03", "gpu-11")
    trees = {n: tree(tmp_path, plan, n) for n in ("gpu-03", "gpu-11")}
    report = one_pass(fake, tmp_path, plan, trees, "--probe-timeout", "0.3", at=LATER)
    assert acts(report) == {"keep": ["gpu-03"], "return": ["gpu-11"]}
    check = rec(fake, "gpu-03").check
    assert check.startswith("node checks could not run: no probe pod Running on the node")
    assert tainted(fake, "gpu-03")
    assert not any("gpu-03" in pair for pair in JOBS)
    assert probe_objects(fake) == []


def test_an_unreachable_probe_pod_is_could_not_run_never_a_pass(fake: FakeKube, tmp_path: Path, plan: Plan) -> None:  # fmt: skip
    DaemonSets(fake)
    quarantined_and_cleared(fake, tmp_path, plan, "gpu-03")
    args = parser().parse_args(argv(fake, tmp_path))
    trees = Trees({"gpu-03": tree(tmp_path, plan, "gpu-03")})
    dead = LatencyTransport(trees, dead=_Everything())  # kubectl exec fails every time
    report = passes.one_pass(plan, args, Kube(args.kubeconfig, "fake"), run_pair=fleet, clock=lambda: LATER, transport=dead)  # fmt: skip
    assert acts(report) == {"keep": ["gpu-03"]}
    assert rec(fake, "gpu-03").check.startswith("node checks could not run: ")
    assert "cannot reach the host" in rec(fake, "gpu-03").check
    assert tainted(fake, "gpu-03")


class _Everything(frozenset[str]):
    def __contains__(self, item: object) -> bool:
        return True


def test_the_probe_tolerates_the_taint_and_is_pinned_to_the_candidates(fake: FakeKube, tmp_path: Path, plan: Plan) -> None:  # fmt: skip
    ds = DaemonSets(fake)
    quarantined_and_cleared(fake, tmp_path, plan, "gpu-03", "gpu-11")
    trees = {n: tree(tmp_path, plan, n) for n in ("gpu-03", "gpu-11")}
    report = one_pass(fake, tmp_path, plan, trees, at=LATER)
    assert acts(report) == {"return": ["gpu-03", "gpu-11"]}
    (created,) = ds.created
    assert created["metadata"]["namespace"] == PROBE_NS
    spec = created["spec"]["template"]["spec"]
    assert {"key": TAINT, "operator": "Exists"} in spec["tolerations"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    pinned = {"key": "kubernetes.io/hostname", "operator": "In", "values": ["h-gpu-03", "h-gpu-11"]}
    assert terms["nodeSelectorTerms"] == [{"matchExpressions": [pinned]}]
    pods = [o for p, o in fake.objects.items() if f"/namespaces/{PROBE_NS}/pods/" in p]
    assert sorted(p["spec"]["nodeName"] for p in pods) == ["gpu-03", "gpu-11"]  # no other node


def test_a_probe_left_by_another_run_elsewhere_is_never_judged(fake: FakeKube, tmp_path: Path, plan: Plan) -> None:  # fmt: skip
    DaemonSets(fake)
    quarantined_and_cleared(fake, tmp_path, plan, "gpu-03")
    from gpufabric.health import nodechecks
    from gpufabric.verify.nodes import daemonset as probe_daemonset

    other = probe_daemonset.manifests(plan.facts.nodes, "x", nodechecks.placement(["h-gpu-07"], TAINT))  # fmt: skip
    for body in other:
        fake.objects[f"/api/v1/namespaces/{PROBE_NS}" if body["kind"] == "Namespace" else f"/apis/apps/v1/namespaces/{PROBE_NS}/daemonsets/gpufabric-health-probe"] = body  # fmt: skip
    report = one_pass(fake, tmp_path, plan, {"gpu-03": tree(tmp_path, plan, "gpu-03")}, at=LATER)
    assert acts(report) == {"keep": ["gpu-03"]}
    assert "of another run is in place" in rec(fake, "gpu-03").check
    assert rec(fake, "gpu-03").check.startswith("node checks could not run: ")


def test_dry_run_says_the_probe_it_would_start(fake: FakeKube, tmp_path: Path, plan: Plan) -> None:  # fmt: skip
    ds = DaemonSets(fake)
    quarantined_and_cleared(fake, tmp_path, plan, "gpu-03")
    before = json.dumps(fake.objects, sort_keys=True)
    report = one_pass(fake, tmp_path, plan, None, "--dry-run", "--probe-image", "harbor.prod-ib.example.internal/probe:1", at=LATER)  # fmt: skip
    assert acts(report) == {"re-certify": ["gpu-03"]}
    words = report.rows[0]["reason"]
    assert (
        "would start the probe DaemonSet gpufabric-health-probe/gpufabric-health-probe "
        "(harbor.prod-ib.example.internal/probe:1) pinned to h-gpu-03, tolerating gpufabric.io/quarantine; "
        "compare the driver it reads with the fleet's 575.57.08; then sweep with"
    ) in words
    assert ds.created == []
    assert json.dumps(fake.objects, sort_keys=True) == before


def test_ctrl_c_while_the_probe_runs_deletes_it_and_keeps_the_node(fake: FakeKube, tmp_path: Path, plan: Plan, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    DaemonSets(fake)
    quarantined_and_cleared(fake, tmp_path, plan, "gpu-03")

    class CtrlC(LatencyTransport):
        def run(self, spec: str, script: str) -> bytes:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while the gather script runs
            return super().run(spec, script)

    real = passes.one_pass

    def with_transport(*a: Any, **k: Any) -> passes.PassReport:
        k["transport"] = CtrlC(Trees({"gpu-03": tree(tmp_path, plan, "gpu-03")}), latency=0.5)
        k["run_pair"] = fleet
        return real(*a, **k)

    monkeypatch.setattr(passes, "one_pass", with_transport)
    code = main(argv(fake, tmp_path))
    err = capsys.readouterr().err
    assert code == 130
    assert "gpufabric health: interrupted; cleaned up" in err
    assert probe_objects(fake) == []
    assert tainted(fake, "gpu-03")
    assert rec(fake, "gpu-03").state == "quarantined"
    assert JOBS == []


# --------------------------------------------------------- the circuit breaker's Event


def held_events(fake: FakeKube) -> list[dict[str, Any]]:
    return [o for o in fake.objects.values() if o.get("kind") == "Event" and o["reason"] == "QuarantineHeld"]  # fmt: skip


def test_a_held_node_gets_one_event_across_passes(fake: FakeKube, tmp_path: Path, plan: Plan) -> None:  # fmt: skip
    set_xid(fake, "gpu-03", "True")
    set_xid(fake, "gpu-05", "True")
    first = one_pass(fake, tmp_path, plan, None, "--max-quarantined", "1")
    assert acts(first) == {"quarantine": ["gpu-03"], "held": ["gpu-05"]}
    assert "Event QuarantineHeld" in first.rows[1]["reason"]
    second = one_pass(fake, tmp_path, plan, None, "--max-quarantined", "1", at=LATER)
    assert acts(second)["held"] == ["gpu-05"]
    (event,) = held_events(fake)
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": "gpu-05", "uid": "uid-gpu-05"}  # fmt: skip
    assert event["type"] == "Warning"
    assert event["count"] == 2
    assert event["firstTimestamp"] == "2026-11-24T22:00:00Z"
    assert event["lastTimestamp"] == "2026-11-24T23:00:00Z"
    assert "held by the circuit breaker, not quarantined: condition GpuFatalXid" in event["message"]
    assert "1 of 1 quarantined; the limit is min(1, 0.5 x 16 GPU nodes)" in event["message"]
    assert not tainted(fake, "gpu-05")
    # the same pass repeated (resumed) counts once
    one_pass(fake, tmp_path, plan, None, "--max-quarantined", "1", at=LATER)
    assert held_events(fake)[0]["count"] == 2


def test_dry_run_shows_the_held_event_and_creates_none(fake: FakeKube, tmp_path: Path, plan: Plan) -> None:  # fmt: skip
    set_xid(fake, "gpu-03", "True")
    set_xid(fake, "gpu-05", "True")
    report = one_pass(fake, tmp_path, plan, None, "--max-quarantined", "0", "--dry-run")
    assert acts(report) == {"held": ["gpu-03", "gpu-05"]}
    assert all(r["reason"].endswith("Event QuarantineHeld") for r in report.rows)
    assert held_events(fake) == []


def _request_rule(method: str, path: str) -> tuple[str, str, str | None, str]:
    parts = path.strip("/").split("/")
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
    namespace = None
    if rest[0] == "namespaces" and len(rest) > 2:
        namespace, rest = rest[1], rest[2:]
    resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
    verb = {"GET": "get" if len(rest) > 1 else "list", "PUT": "update", "POST": "create", "DELETE": "delete", "PATCH": "patch"}[method]  # fmt: skip
    return group, resource, namespace, verb


def test_the_rendered_loop_runs_api_node_checks_and_its_rbac_covers_the_held_event(fake: FakeKube, tmp_path: Path, plan: Plan) -> None:  # fmt: skip
    text_ = Path("stacks/Pulumi.prod-ib.yaml").read_text()
    marker = "  gpufabric:monitoring:\n    enabled: true\n"
    stack = tmp_path / "Pulumi.hc.yaml"
    stack.write_text(text_.replace(marker, f"{marker}    health:\n      inCluster: {{enabled: true, image: nvcr.io/x/gpufabric:1, tenant: {TENANT}}}\n"))  # fmt: skip
    objs = {it.id: it.payload.body for it in load_stack(str(stack), None).plan.items if it.id.startswith("monitoring/health/")}  # type: ignore[union-attr]  # fmt: skip
    pod = objs["monitoring/health/runner"]["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    rendered = parser().parse_args(pod["containers"][0]["command"][1:])
    assert rendered.node_checks == "api"
    rules = objs["monitoring/health/cluster-role"]["rules"]
    set_xid(fake, "gpu-03", "True")
    set_xid(fake, "gpu-05", "True")
    fake.requests.clear()
    for at in (NOW, LATER):
        one_pass(fake, tmp_path, plan, None, "--max-quarantined", "1", "--node-checks", "api", at=at)  # fmt: skip
    seen = {_request_rule(m, p) for m, p in fake.requests}
    assert ("", "events", "default", "update") in seen  # the held Event's count
    denied = [
        (g, r, v)
        for g, r, _ns, v in seen
        if not any(g in x["apiGroups"] and r in x["resources"] and v in x["verbs"] for x in rules)
    ]
    assert denied == []


def _kubectl() -> str | None:
    shared = Path(__file__).resolve().parents[2].parent / "shared" / "upstream" / "bin" / "kubectl"
    return shutil.which("kubectl") or (str(shared) if shared.is_file() else None)


def test_a_probe_that_could_not_be_deleted_is_said_with_its_command(fake: FakeKube, tmp_path: Path, plan: Plan, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    DaemonSets(fake)
    quarantined_and_cleared(fake, tmp_path, plan, "gpu-03")
    fake.faults.append(("DELETE", f"/namespaces/{PROBE_NS}", 403))  # RBAC refuses it once
    real = passes.one_pass

    def failing_probe(*a: Any, **k: Any) -> passes.PassReport:
        k["transport"] = LatencyTransport(Trees({}), dead=_Everything())
        k["run_pair"] = fleet
        return real(*a, **k)

    monkeypatch.setattr(passes, "one_pass", failing_probe)
    code = main(argv(fake, tmp_path))
    out = capsys.readouterr()
    assert code == 0
    assert "could not delete" in out.err
    line = f"kubectl delete namespace {PROBE_NS} --ignore-not-found"
    assert line in out.err
    assert f"/api/v1/namespaces/{PROBE_NS}" in fake.objects
    assert "node checks could not run" in rec(fake, "gpu-03").check
    kubectl = _kubectl()
    if kubectl is None:
        pytest.skip("no kubectl to run the printed command with")
    fake.anonymous = True
    cfg = fake.kubeconfig(tmp_path)
    flags = [f"--kubeconfig={cfg}", f"--cache-dir={tmp_path / 'cache'}"]
    done = subprocess.run(
        [kubectl, *flags, *shlex.split(line)[1:]],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert f"/api/v1/namespaces/{PROBE_NS}" not in fake.objects


# ------------------------------------------- the fleet's driver version (verify nodes' rule)

FLEET_DRIVER = "575.57.08"
OTHER_DRIVER = "580.65.06"
GFD_FULL = "nvidia.com/cuda.driver-version.full"


def label_driver(fake: FakeKube, name: str, version: str | None) -> None:
    """GPU Feature Discovery's labels on the node say ``version`` (none when None)."""
    labels = live(fake, name)["metadata"]["labels"]
    for key in [k for k in labels if k.startswith("nvidia.com/cuda.driver")]:
        del labels[key]
    if version is not None:
        labels[GFD_FULL] = version


def test_a_node_back_with_another_driver_than_the_fleet_is_kept(fake: FakeKube, tmp_path: Path, plan: Plan) -> None:  # fmt: skip
    """verify nodes fails a fleet with two driver versions; re-certification probed only the
    candidates, so a node that came back with a different driver passed and returned. Its
    GFD label still says the old version (not relabelled yet): the loaded driver decides."""
    DaemonSets(fake)
    quarantined_and_cleared(fake, tmp_path, plan, "gpu-03", "gpu-11")
    trees = {
        "gpu-03": tree(tmp_path, plan, "gpu-03", driver=OTHER_DRIVER),
        "gpu-11": tree(tmp_path, plan, "gpu-11"),
    }
    report = one_pass(fake, tmp_path, plan, trees, at=LATER)
    assert acts(report) == {"keep": ["gpu-03"], "return": ["gpu-11"]}
    assert rec(fake, "gpu-03").check == (
        f"node checks: fleet.driver-version: driver {OTHER_DRIVER} (loaded, read by the probe), "
        f"the fleet runs {FLEET_DRIVER} (the 14 GPU nodes outside quarantine)"
    )
    assert tainted(fake, "gpu-03")
    assert not any("gpu-03" in pair for pair in JOBS)  # no sweep job for it
    assert probe_objects(fake) == []


def test_with_api_node_checks_the_nodes_label_is_compared(fake: FakeKube, tmp_path: Path, plan: Plan) -> None:  # fmt: skip
    quarantined_and_cleared(fake, tmp_path, plan, "gpu-03", "gpu-11")
    label_driver(fake, "gpu-03", OTHER_DRIVER)
    report = one_pass(fake, tmp_path, plan, None, "--node-checks", "api", at=LATER)
    assert acts(report) == {"keep": ["gpu-03"], "return": ["gpu-11"]}
    check = rec(fake, "gpu-03").check
    assert check.startswith(f"node checks: fleet.driver-version: driver {OTHER_DRIVER} (its label {GFD_FULL})")  # fmt: skip
    assert f"the fleet runs {FLEET_DRIVER}" in check
    # a candidate without the label is not compared, so not passed
    set_xid(fake, "gpu-03", "True")
    label_driver(fake, "gpu-11", None)
    quarantined_and_cleared(fake, tmp_path, plan, "gpu-11")
    set_xid(fake, "gpu-03", "False")
    later = one_pass(fake, tmp_path, plan, None, "--node-checks", "api", at=LATER + dt.timedelta(hours=2))  # fmt: skip
    assert acts(later)["keep"] == ["gpu-03", "gpu-11"]
    assert rec(fake, "gpu-11").check == (
        "node checks could not run: fleet.driver-version: the node's driver version is not "
        f"known (its label {GFD_FULL})"
    )


@pytest.mark.parametrize("node_checks", ["probe", "api"])
def test_without_one_fleet_version_the_comparison_is_could_not_run_never_a_pass(fake: FakeKube, tmp_path: Path, plan: Plan, node_checks: str) -> None:  # fmt: skip
    ds = DaemonSets(fake)
    quarantined_and_cleared(fake, tmp_path, plan, "gpu-03")
    for name in ("gpu-00", "gpu-01"):  # a rolling driver upgrade half done
        label_driver(fake, name, OTHER_DRIVER)
    trees = {"gpu-03": tree(tmp_path, plan, "gpu-03")}
    report = one_pass(fake, tmp_path, plan, trees, "--node-checks", node_checks, at=LATER)
    assert acts(report) == {"keep": ["gpu-03"]}
    assert rec(fake, "gpu-03").check == (
        "node checks could not run: fleet.driver-version: the fleet's driver version is not "
        f"known: the GPU nodes outside quarantine run 2 driver versions: {FLEET_DRIVER} on 13 "
        f"(gpu-02, gpu-04, gpu-05, ...); {OTHER_DRIVER} on 2 (gpu-00, gpu-01)"
    )
    assert ds.created == []  # decided before any probe
    assert JOBS == []
    # no GFD label anywhere (GPU Feature Discovery off): still no pass
    for name in NODES:
        label_driver(fake, name, None)
    again = one_pass(fake, tmp_path, plan, trees, "--node-checks", node_checks, at=LATER + dt.timedelta(hours=2))  # fmt: skip
    assert acts(again) == {"keep": ["gpu-03"]}
    assert rec(fake, "gpu-03").check.endswith(
        f"none of the 15 GPU nodes outside quarantine carries GPU Feature Discovery's label {GFD_FULL}"
    )
    assert tainted(fake, "gpu-03")


def test_the_fleet_version_from_older_gfd_labels_and_in_the_dry_run(fake: FakeKube, tmp_path: Path, plan: Plan) -> None:  # fmt: skip
    """Older GPU Feature Discovery releases set only nvidia.com/cuda.driver.major/minor/rev."""
    for name in NODES:
        labels = live(fake, name)["metadata"]["labels"]
        del labels[GFD_FULL]
        assert labels["nvidia.com/cuda.driver.rev"] == "08"
    quarantined_and_cleared(fake, tmp_path, plan, "gpu-03")
    dry = one_pass(fake, tmp_path, plan, None, "--node-checks", "api", "--dry-run", at=LATER)
    assert acts(dry) == {"re-certify": ["gpu-03"]}
    assert dry.rows[0]["reason"].startswith(
        f"node checks (API status, driver {FLEET_DRIVER} as the fleet) pass; sweep with"
    )
    report = one_pass(fake, tmp_path, plan, None, "--node-checks", "api", at=LATER)
    assert acts(report) == {"return": ["gpu-03"]}


def test_gfd_driver_labels_read() -> None:
    from gpufabric.health.decide import driver_label

    assert driver_label({GFD_FULL: "570.86.15", "nvidia.com/cuda.driver.major": "1"}) == "570.86.15"
    parts = {"nvidia.com/cuda.driver.major": "570", "nvidia.com/cuda.driver.minor": "86"}
    assert driver_label({**parts, "nvidia.com/cuda.driver.rev": ""}) == "570.86"
    assert driver_label({**parts, "nvidia.com/cuda.driver.rev": "15"}) == "570.86.15"
    assert driver_label({"nvidia.com/cuda.driver.major": "570"}) == ""
    assert driver_label(None) == ""
