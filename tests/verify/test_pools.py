"""Jobs and checks on a fleet (issue 37): ``gpufabric job --pool``, ``verify nccl --pool``,
the sweep pool by pool on the fake API server, ``verify nodes`` judging each host by its own
pool's layout, and ``verify cluster`` counting each pool's nodes.

The fleets: stacks/Pulumi.fleet-mixed.yaml (h100: 16 x 8 GPUs on 8 x 400G InfiniBand; l40s:
8 x 4 GPUs on 2 x 100G RoCE), and a two-pool lab-roce for the fake cluster (big: 8 GPUs on
the stack's 2 x 400G RoCE; small: 4 GPUs on its own 2 x 100G RoCE rails)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nodefs
import pytest
import yaml
from builders import example_config, gpu_pods, plan_of
from fake_kube import FakeKube
from msgspec.structs import replace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sweepfleet
from test_nodes import node_for

from gpufabric.cli import main
from gpufabric.model.problems import StackError
from gpufabric.model.stackfile import load_stack
from gpufabric.outputs.jobs import JobRequest, job_manifest, plan_for_pool
from gpufabric.plan.build import Plan, build_plan
from gpufabric.plan.items import Layer
from gpufabric.verify import cluster, expect
from gpufabric.verify.kube import Kube
from gpufabric.verify.nccl import rules as nccl_rules
from gpufabric.verify.nodes import fleet as node_fleet
from gpufabric.verify.nodes import pools as node_pools

POOL = "gpufabric.test/pool"
NS = "team-vision"


def fleet_mixed() -> Plan:
    return build_plan("fleet-mixed", load_stack("fleet-mixed", None).model)


def job_of(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["job", "--stack", "fleet-mixed", *argv]) == 0
    (job,) = yaml.safe_load_all(capsys.readouterr().out)
    assert isinstance(job, dict)
    return job


# ------------------------------------------------------------------------ gpufabric job


@pytest.mark.parametrize("kind", ["mpijob", "pytorchjob"])
def test_a_job_per_pool_gets_that_pools_wiring(
    kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each pool's job: its networks, RDMA resources, GPUs per node, nccl-env-<pool>, /dev/shm
    and a nodeSelector on its pool's selector only (never another pool's nodes)."""
    base = ["--tenant", "inference-eval", "--kind", kind]
    plan = fleet_mixed()
    for pool, rails, gpus in (("h100", 8, 8), ("l40s", 2, 4)):
        job = job_of([*base, "--pool", pool], capsys)
        facts = plan.for_pool(pool).facts
        for template in gpu_pods(job):
            spec = template["spec"]
            assert spec["nodeSelector"] == dict(facts.nodes.selector)
            networks = json.loads(template["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"])  # fmt: skip
            assert [n["name"] for n in networks] == [r.name for r in facts.fabric.rails]
            assert len(networks) == rails
            (container,) = spec["containers"]
            limits = container["resources"]["limits"]
            assert limits == {"nvidia.com/gpu": gpus, **dict(facts.fabric.rdma_resources)}
            assert container["envFrom"] == [{"configMapRef": {"name": f"nccl-env-{pool}"}}]
            (shm,) = [v for v in spec["volumes"] if v["name"] == "dshm"]
            assert shm["emptyDir"]["sizeLimit"] == f"{facts.nodes.shm_gib}Gi"
    l40s = job_of([*base, "--pool", "l40s"], capsys)
    assert "rdma/ib0" not in json.dumps(l40s)
    assert "NVIDIA-H100" not in json.dumps(l40s)


def test_an_mpijob_exports_the_pools_nccl_variables(capsys: pytest.CaptureFixture[str]) -> None:
    job = job_of(["--tenant", "inference-eval", "--kind", "mpijob", "--pool", "l40s"], capsys)
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert launcher["envFrom"] == [{"configMapRef": {"name": "nccl-env-l40s"}}]
    exported = {launcher["command"][i + 1] for i, a in enumerate(launcher["command"]) if a == "-x"}
    assert "NCCL_IB_TC" in exported  # the RoCE pool's traffic class; h100 (InfiniBand) has none
    assert launcher["command"][launcher["command"].index("-np") + 1] == "8"  # 2 nodes x 4 GPUs


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (
            [],
            "--pool: the stack has 2 node pools and a job never mixes them: name one; accepted: h100, l40s",
        ),
        (
            ["--pool", "a100"],
            "--pool: 'a100' is not a node pool of this stack (gpuNodes[].name); did you mean 'h100'?; accepted: h100, l40s",
        ),
        (
            ["--pool", "l40s", "--nodes", "9"],
            "--nodes: 9 is not between 1 and pool l40s's 8 GPU nodes",
        ),
    ],
)
def test_pool_errors_name_the_flag_and_exit_2(
    argv: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["job", "--stack", "fleet-mixed", "--tenant", "inference-eval", "--kind", "mpijob"]
    assert main([*base, *argv]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert words in err
    assert "Traceback" not in err


def test_the_nodes_of_the_pool_bound_a_job_not_the_fleets(capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """16 nodes fit h100 (16 nodes) but not l40s (8), though the fleet has 24."""
    base = ["job", "--stack", "fleet-mixed", "--tenant", "inference-eval", "--kind", "mpijob"]
    assert main([*base, "--pool", "h100", "--nodes", "4"]) == 0
    capsys.readouterr()
    assert main([*base, "--pool", "l40s", "--nodes", "16"]) == 2
    assert "pool l40s's 8 GPU nodes" in capsys.readouterr().err


def test_a_one_pool_stack_takes_its_pool_by_name_and_is_unchanged(
    capsys: pytest.CaptureFixture[str],
) -> None:
    base = ["job", "--stack", "lab-roce", "--tenant", NS, "--kind", "mpijob"]
    assert main(base) == 0
    plain = capsys.readouterr().out
    assert main([*base, "--pool", "default"]) == 0
    assert capsys.readouterr().out == plain
    assert "name: nccl-env\n" in plain
    assert main([*base, "--pool", "h100"]) == 2
    assert "accepted: default" in capsys.readouterr().err


def test_plan_for_pool_refuses_without_a_pool_on_a_fleet() -> None:
    with pytest.raises(StackError) as caught:
        plan_for_pool(fleet_mixed(), None)
    assert caught.value.problems[0].path == "--pool"


# ------------------------------------------------------------------ verify nccl --pool


def test_the_acceptance_threshold_is_the_pools() -> None:
    """Rails x link rate of the pool: 8 x 400G for h100, 2 x 100G for l40s."""
    plan = fleet_mixed()
    h100 = nccl_rules.expectation(plan.for_pool("h100").facts, None, 0.9)
    l40s = nccl_rules.expectation(plan.for_pool("l40s").facts, None, 0.9)
    assert (h100.threshold_gbps, h100.link_layer) == (360.0, "IB")
    assert (l40s.threshold_gbps, l40s.link_layer) == (22.5, "RoCE")
    assert "2 rails x 100 Gb/s" in l40s.threshold_source


def test_verify_nccl_runs_on_the_named_pool(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["verify", "nccl", "--stack", "fleet-mixed", "--tenant", "inference-eval", "--dry-run"]
    assert main(base) == 2
    assert "--pool: the stack has 2 node pools" in capsys.readouterr().err
    assert main([*base, "--pool", "l40s", "--nodes", "3"]) == 0
    (job,) = yaml.safe_load_all(capsys.readouterr().out)
    (worker,) = gpu_pods(job)
    assert worker["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-L40S"}
    assert job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 3
    assert main([*base, "--pool", "l40s", "--nodes", "9"]) == 2
    assert "pool l40s's 8 GPU nodes" in capsys.readouterr().err


# -------------------------------------------------------- the sweep, pool by pool (fake API)


def two_pools(big: int = 4, small: int = 4) -> dict[str, Any]:
    """lab-roce as a fleet: pool big (the stack's 2 x 400G RoCE, 8 GPUs), pool small (its
    own 2 x 100G RoCE rails, 4 GPUs); one tenant with GPUs in both."""
    cfg = example_config("lab-roce")
    cfg["gpufabric:gpuNodes"] = [
        {"name": "big", "count": big, "gpusPerNode": 8, "nodeSelector": {POOL: "big"}},
        {
            "name": "small",
            "count": small,
            "gpusPerNode": 4,
            "nodeSelector": {POOL: "small"},
            "fabric": {
                "linkRateGbps": 100,
                "rails": [
                    {
                        "name": "sm0",
                        "netdev": "ens3f0np0",
                        "hca": "mlx5_2",
                        "subnet": "192.168.20.0/24",
                    },
                    {
                        "name": "sm1",
                        "netdev": "ens4f0np0",
                        "hca": "mlx5_3",
                        "subnet": "192.168.21.0/24",
                    },
                ],
            },
        },
    ]
    cfg["gpufabric:versions"] = {"network-operator": "26.4.1"}
    cfg["gpufabric:tenants"] = [{"namespace": NS, "gpuQuota": {"big": 8 * big, "small": 4 * small}}]  # fmt: skip
    cfg.pop("gpufabric:storage", None)
    return cfg


def pool_node(name: str, pool: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, POOL: pool}},
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    with FakeKube() as f:
        yield f


BIG = [f"big-{i}" for i in range(4)]
SMALL = [f"small-{i}" for i in range(6)]


def sweep_fleet(
    fake: FakeKube, tmp_path: Path, write_stack: Any, link: Any, *extra: str
) -> tuple[int, str, sweepfleet.MPIOperator]:
    stack = write_stack(two_pools(len(BIG), len(SMALL)), "pools")
    for name in BIG:
        fake.add(pool_node(name, "big"))
    for name in SMALL:
        fake.add(pool_node(name, "small"))
    op = sweepfleet.MPIOperator(tmp_path / "op", link).install(fake)
    argv = [
        "verify", "nccl", "--stack", str(stack), "--tenant", NS, "--sweep", "--sweep-group", "2",
        "--kubeconfig", str(fake.kubeconfig(tmp_path)), "--context", "fake", "--poll", "0.01",
        *extra,
    ]  # fmt: skip
    code = main(argv)
    assert not [p for p in fake.objects if "/mpijobs/" in p]  # every job deleted
    return code, "", op


def _pool(node: str) -> str:
    return node.split("-")[0]


def test_the_sweep_sweeps_each_pool_apart_by_its_own_threshold(
    fake: FakeKube,
    tmp_path: Path,
    write_stack: Any,
    capsys: pytest.CaptureFixture[str],
    quick_jobs: None,
) -> None:
    """Every node of both pools is judged, no job pairs a big node with a small one, and
    each pool is judged by its own threshold: 24 GB/s passes small (2 x 100G: 22.5) and
    would fail big (2 x 400G: 90), where 95 GB/s passes."""

    def link(a: str, b: str) -> float:
        assert _pool(a) == _pool(b), f"a job paired {a} with {b}"
        return 95.0 if _pool(a) == "big" else 24.0

    code, _, op = sweep_fleet(fake, tmp_path, write_stack, link, "--json")
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert code == 0, err
    assert doc["verdict"] == "PASS"
    assert set(doc["pools"]) == {"big", "small"}
    assert set(doc["pools"]["big"]["nodes"]) == set(BIG)
    assert set(doc["pools"]["small"]["nodes"]) == set(SMALL)
    for pool in ("big", "small"):
        assert {n["verdict"] for n in doc["pools"][pool]["nodes"].values()} == {"GOOD"}
    assert op.jobs
    for job in op.jobs:
        pinned = sweepfleet._pinned_nodes(job)
        assert len({_pool(n) for n in pinned}) == 1, pinned
        (worker,) = gpu_pods(job)
        pool = _pool(pinned[0])
        assert worker["spec"]["nodeSelector"] == {POOL: pool}
        limits = worker["spec"]["containers"][0]["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == (8 if pool == "big" else 4)
        assert ("rdma/sm0" in limits) == (pool == "small")
    assert "sweeping pool big" in err
    assert "sweeping pool small" in err


def test_a_slow_small_pool_fails_by_its_threshold_and_names_its_pool(
    fake: FakeKube,
    tmp_path: Path,
    write_stack: Any,
    capsys: pytest.CaptureFixture[str],
    quick_jobs: None,
) -> None:
    """small-2 is slow (15 GB/s, under small's 22.5): drained there; big stays GOOD; the
    table says which pool each node is of."""

    def link(a: str, b: str) -> float:
        if _pool(a) == "big":
            return 95.0
        return 15.0 if "small-2" in (a, b) else 24.0

    code, _, _ = sweep_fleet(fake, tmp_path, write_stack, link)
    out, err = capsys.readouterr()
    assert code == 4, err
    big, small = out.split("pool small:")
    assert big.startswith("pool big:")
    assert "small-2" not in big
    assert "small-2" in small
    assert all(name in big for name in BIG)


def test_sweep_pool_sweeps_only_that_pool(
    fake: FakeKube,
    tmp_path: Path,
    write_stack: Any,
    capsys: pytest.CaptureFixture[str],
    quick_jobs: None,
) -> None:
    def link(a: str, b: str) -> float:
        assert _pool(a) == _pool(b) == "small"
        return 24.0

    code, _, op = sweep_fleet(fake, tmp_path, write_stack, link, "--pool", "small", "--json")
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    assert set(doc["nodes"]) == set(SMALL)  # one pool: the one-pool document
    assert op.jobs


def test_a_tenant_without_gpus_in_a_pool_is_refused_before_any_api_call(
    write_stack: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = two_pools()
    cfg["gpufabric:tenants"][0]["gpuQuota"] = {"big": 32}
    stack = write_stack(cfg, "pools")
    argv = ["verify", "nccl", "--stack", str(stack), "--tenant", NS, "--sweep"]
    assert main([*argv, "--kubeconfig", "/nonexistent", "--context", "x"]) == 2
    err = capsys.readouterr().err
    assert "pool small:" in err
    assert "--pool big sweeps a pool without it" in err


def test_a_fleet_dry_run_refuses_before_it_prints_any_pool(
    write_stack: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dry run refuses what the real run refuses, and prints nothing then (a new user got
    the first pool's jobs on stdout, then exit 2 for the second)."""
    cfg = two_pools()
    cfg["gpufabric:tenants"][0]["gpuQuota"] = {"big": 32}
    stack = write_stack(cfg, "pools")
    argv = ["verify", "nccl", "--stack", str(stack), "--tenant", NS, "--sweep", "--dry-run"]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "pool small:" in err


# ------------------------------------------------------ verify nodes: each pool's layout


@pytest.fixture
def qos_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"{tmp_path / 'node/usr/bin'}:/usr/bin:/bin")


def fleet_exp(pool: str) -> expect.Expectation:
    return expect.from_facts(fleet_mixed().for_pool(pool).facts)


def test_verify_nodes_fails_a_host_with_the_other_pools_layout(
    tmp_path: Path, qos_path: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """A host built as an h100 node (8 InfiniBand rails, 8 GPUs) passes as h100 and fails
    as l40s (RoCE rails, 4 GPUs), and the other way round."""
    h100 = nodefs.build(tmp_path / "h100", node_for(fleet_exp("h100")))
    argv = ["verify", "nodes", "--stack", "fleet-mixed", "--hosts", "local://", "--root"]
    assert main([*argv, str(h100), "--pool", "h100", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "PASS"
    assert main([*argv, str(h100), "--pool", "l40s", "--json"]) == 4
    doc = json.loads(capsys.readouterr().out)
    failing = {c["check"] for c in doc["checks"] if c["status"] == "FAIL"}
    assert {"gpu.count", "rail.roce0.port", "rail.roce1.port"} <= failing

    l40s = nodefs.build(tmp_path / "node", node_for(fleet_exp("l40s")))  # mlnx_qos on PATH
    assert main([*argv, str(l40s), "--pool", "l40s", "--json"]) == 0
    capsys.readouterr()
    assert main([*argv, str(l40s), "--pool", "h100", "--json"]) == 4
    doc = json.loads(capsys.readouterr().out)
    failing = {c["check"] for c in doc["checks"] if c["status"] == "FAIL"}
    assert {"gpu.count", "rail.ib0.hca", "rail.ib7.hca"} <= failing


def test_verify_nodes_hosts_on_a_fleet_need_the_pool(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["verify", "nodes", "--stack", "fleet-mixed", "--hosts", "local://"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--pool:" in err
    assert "accepted: h100, l40s" in err
    assert "Traceback" not in err


def test_each_labelled_node_is_judged_by_the_pool_its_labels_select(tmp_path: Path) -> None:
    """What --via-cluster does: each node's pool from its labels, then that pool's checks.
    An l40s-labelled host with the h100 layout fails; so does an h100-labelled host with
    the l40s layout; each with its own layout passes."""
    from fleetfake import LatencyTransport

    plan = fleet_mixed()
    h100_tree = nodefs.build(tmp_path / "h100", node_for(fleet_exp("h100")))
    l40s_tree = nodefs.build(tmp_path / "l40s", node_for(fleet_exp("l40s")))
    label = "nvidia.com/gpu.product"
    hosts = {  # node -> (its labels, the tree it shows)
        "gpu-a": ({label: "NVIDIA-H100-80GB-HBM3"}, h100_tree),
        "gpu-b": ({label: "NVIDIA-L40S"}, l40s_tree),
        "gpu-c": ({label: "NVIDIA-L40S"}, h100_tree),  # an L40S host with the H100 rails
        "gpu-d": ({label: "NVIDIA-H100-80GB-HBM3"}, l40s_tree),
    }
    transport = LatencyTransport({n: tree for n, (_, tree) in hosts.items()})
    verdicts = {}
    for node, (labels, _) in hosts.items():
        (pool,) = node_pools.pools_of(labels, plan.facts)
        checks = node_fleet.run_fleet([node], fleet_exp(pool), transport)
        verdicts[node] = (pool, "FAIL" if any(c.status == "FAIL" for c in checks) else "PASS")
        if verdicts[node][1] == "PASS":
            assert {c.status for c in checks} == {"PASS"}, node
    assert verdicts == {
        "gpu-a": ("h100", "PASS"),
        "gpu-b": ("l40s", "PASS"),
        "gpu-c": ("l40s", "FAIL"),
        "gpu-d": ("h100", "FAIL"),
    }


def test_a_gpu_node_no_pool_or_two_pools_select_is_reported() -> None:
    plan = fleet_mixed()

    def node(name: str, labels: dict[str, str], gpus: str | None = None) -> dict[str, Any]:
        status: dict[str, Any] = {"conditions": [{"type": "Ready", "status": "True"}]}
        if gpus is not None:
            status["allocatable"] = {"nvidia.com/gpu": gpus}
        return {"metadata": {"name": name, "labels": labels}, "status": status, "spec": {}}

    checks = node_pools.membership(
        [
            node("h100-0", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}),
            node("a100-0", {"nvidia.com/gpu.product": "NVIDIA-A100"}, gpus="8"),
            node("nfd-0", {"feature.node.kubernetes.io/pci-10de.present": "true"}),
            node("cpu-0", {"kubernetes.io/os": "linux"}),
        ],
        plan.facts,
    )
    by_node = {c.target: c for c in checks}
    assert set(by_node) == {"a100-0", "h100-0", "nfd-0"}  # the CPU node belongs to no pool
    assert by_node["h100-0"].status == "PASS"
    assert by_node["h100-0"].details == {"pool": "h100"}
    for name in ("a100-0", "nfd-0"):
        assert by_node[name].status == "FAIL"
        assert "no pool selects" in by_node[name].message
        assert "l40s: nvidia.com/gpu.product=NVIDIA-L40S" in by_node[name].message

    # validation refuses selectors that can meet; a node's labels may still match two
    # pools' selectors when they name different keys (say, a node labelled by hand)
    h100, l40s = plan.facts.pools
    other = replace(l40s, nodes=replace(l40s.nodes, selector={"gpufabric.test/l40s": "true"}))
    facts = replace(plan.facts, pools=(h100, other))
    labels = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "gpufabric.test/l40s": "true"}
    (twice,) = node_pools.membership([node("x", labels)], facts)
    assert twice.status == "FAIL"
    assert "pools h100, l40s all select it" in twice.message


# -------------------------------------------------------------- verify cluster per pool


def test_verify_cluster_counts_and_checks_each_pools_nodes(fake: FakeKube, tmp_path: Path) -> None:
    plan = plan_of(two_pools(big=2, small=3))
    big_rdma = dict.fromkeys(plan.for_pool("big").facts.fabric.rdma_resources, "63")
    small_rdma = dict.fromkeys(plan.for_pool("small").facts.fabric.rdma_resources, "63")

    def add(name: str, pool: str, gpus: str, rdma: dict[str, str]) -> None:
        node = pool_node(name, pool)
        node["status"]["allocatable"] = {"nvidia.com/gpu": gpus, **rdma}
        fake.add(node)

    add("big-0", "big", "8", big_rdma)
    add("big-1", "big", "8", big_rdma)
    add("small-0", "small", "4", small_rdma)
    add("small-1", "small", "4", big_rdma)  # the other pool's resources: not its rails
    stray = pool_node("stray-0", "other")
    stray["status"]["allocatable"] = {"nvidia.com/gpu": "8"}
    fake.add(stray)
    kube = Kube(str(fake.kubeconfig(tmp_path)), "fake")
    checks = cluster.readiness(kube, plan, frozenset({Layer.GPU, Layer.NETWORK}))
    by = {(c.check, c.target): c for c in checks}
    assert by[("nodes.count", "pool big")].status == "PASS"
    small = by[("nodes.count", "pool small")]
    assert small.status == "FAIL"
    assert "2 Ready GPU nodes match gpufabric.test/pool=small, pool small" in small.message
    assert "expects 3" in small.message
    assert by[("node.resources", "big-0")].status == "PASS"
    assert by[("node.resources", "small-0")].status == "PASS"
    assert "nvidia.com/gpu 4" in by[("node.resources", "small-0")].message
    wrong = by[("node.resources", "small-1")]
    assert wrong.status == "FAIL"
    assert "rdma/sm0" in wrong.message
    assert by[("node.pool", "stray-0")].status == "FAIL"
    assert ("node.pool", "big-0") not in by  # a node of one pool is checked under it


@pytest.mark.parametrize("pool", ["h100", "l40s"])
@pytest.mark.parametrize("kind", ["mpijob", "pytorchjob"])
def test_each_pools_job_validates_against_the_crds(pool: str, kind: str, crd_dir: Path) -> None:
    from gpufabric.outputs.schema import validate_objects

    plan = fleet_mixed().for_pool(pool)
    job = job_manifest(plan, JobRequest(tenant="inference-eval", kind=kind, nodes=2))
    report = validate_objects([job], plan.facts.kubernetes_minor, crd_dir)
    assert report.ok, report.errors
    assert not report.unchecked


class _ProbeTrees(dict[str, Path]):
    """Probe pod host specs (kubectl://probe-<node>?...) -> the tree of the pod's node."""

    def __init__(self, trees: dict[str, Path]) -> None:
        super().__init__()
        self.trees = trees

    def __missing__(self, spec: str) -> Path:
        pod = spec.removeprefix("kubectl://").split("?", 1)[0]
        return self.trees[pod.removeprefix("probe-")]


def test_via_cluster_judges_each_node_by_the_pool_its_labels_select(
    fake: FakeKube,
    tmp_path: Path,
    qos_path: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``verify nodes --via-cluster`` on fleet-mixed, the probe pods played by the fake
    (a pod on each node its pool's selector matches) and each node's files by a tree: an
    L40S-labelled node showing the H100 pool's layout fails, a GPU node no pool selects
    fails node.pool, the others pass; --pool checks that pool only."""
    from fleetfake import LatencyTransport

    from gpufabric.verify.nodes import daemonset

    trees = {
        "h100-a": nodefs.build(tmp_path / "h100", node_for(fleet_exp("h100"))),
        "l40s-a": nodefs.build(tmp_path / "node", node_for(fleet_exp("l40s"))),
    }
    trees["l40s-b"] = trees["h100-a"]  # an L40S-labelled host with the H100 rails
    product = "nvidia.com/gpu.product"
    labels = {
        "h100-a": {product: "NVIDIA-H100-80GB-HBM3"},
        "l40s-a": {product: "NVIDIA-L40S"},
        "l40s-b": {product: "NVIDIA-L40S"},
        "a100-x": {"feature.node.kubernetes.io/pci-10de.present": "true"},
        "cpu-0": {"kubernetes.io/os": "linux"},
    }
    for name, own in labels.items():
        fake.add(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **own}},
                "spec": {},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
            }
        )
    probed: list[str] = []

    def start(kube: Kube, nodes: Any, image: str, **_: Any) -> dict[str, str]:
        probed.append(nodes.selector_text)
        found = kube.list("/api/v1/nodes", nodes.selector_text)
        return {f"probe-{n['metadata']['name']}": n["metadata"]["name"] for n in found}

    monkeypatch.setattr(daemonset, "require_kubectl", lambda: None)
    monkeypatch.setattr(daemonset, "start", start)
    monkeypatch.setattr(daemonset, "stop", lambda *_a, **_k: None)
    transport = LatencyTransport(_ProbeTrees(trees))
    monkeypatch.setattr(node_fleet, "testinfra_transport", lambda _root: transport)
    argv = [
        "verify", "nodes", "--stack", "fleet-mixed", "--via-cluster", "--json",
        "--kubeconfig", str(fake.kubeconfig(tmp_path)), "--context", "fake",
    ]  # fmt: skip
    assert main(argv) == 4
    doc = json.loads(capsys.readouterr().out)
    assert probed == ["nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.product=NVIDIA-L40S"]  # fmt: skip
    failing: dict[str, set[str]] = {}
    for c in doc["checks"]:
        if c["status"] == "FAIL":
            failing.setdefault(c["target"], set()).add(c["check"])
    assert set(failing) == {"l40s-b", "a100-x"}
    assert failing["a100-x"] == {"node.pool"}
    assert {"gpu.count", "rail.roce0.port"} <= failing["l40s-b"]
    passing = {c["target"] for c in doc["checks"] if c["check"] == "node.pool"}
    assert passing == {"h100-a", "l40s-a", "l40s-b", "a100-x"}  # cpu-0 is no GPU node
    assert {c["target"] for c in doc["checks"] if c["check"] == "fleet.driver-version"} == {
        "pool h100",
        "pool l40s",
    }

    probed.clear()
    assert main([*argv, "--pool", "h100"]) == 4  # a100-x still fails: no pool selects it
    doc = json.loads(capsys.readouterr().out)
    assert probed == ["nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3"]
    targets = {c["target"] for c in doc["checks"]}
    assert "l40s-a" not in targets
    assert {"h100-a", "a100-x"} <= targets


def test_a_job_on_borrowed_gpus_only_says_so(
    write_stack: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tenant with no quota in a pool, only a borrowing limit there: the job is printed,
    with a note on stderr that it runs only while others' quota is idle."""
    cfg = example_config("fleet-mixed")
    cfg["gpufabric:tenants"][0]["gpuBorrowingLimit"] = {"l40s": 8}
    stack = write_stack(cfg, "borrow")
    base = ["job", "--stack", str(stack), "--kind", "mpijob", "--nodes", "2"]
    assert main([*base, "--tenant", "llm-pretrain", "--pool", "l40s"]) == 0
    out, err = capsys.readouterr()
    assert "kind: MPIJob" in out
    assert "llm-pretrain has no gpuQuota in pool l40s, only a gpuBorrowingLimit of 8" in err
    assert main([*base, "--tenant", "inference-eval", "--pool", "l40s"]) == 0
    assert "gpuBorrowingLimit" not in capsys.readouterr().err
