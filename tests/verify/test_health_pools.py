"""``gpufabric health`` on a fleet (stacks/Pulumi.fleet-mixed.yaml with monitoring): every
pool's GPU nodes are watched, and a quarantined node is re-certified by its own pool's
acceptance: node checks against its pool's GPUs, partners from its pool only, its pool's
job and threshold, and the bus-bandwidth median of its own pool's GOOD nodes."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from builders import example_config, gpu_node, sections
from fake_kube import FakeKube
from nccllogs import IB_8X400, Log, text
from test_health import live, set_condition, xid79

from gpufabric.cli import parser
from gpufabric.health import passes
from gpufabric.model.stackfile import model_from_config
from gpufabric.plan.build import Plan, build_plan
from gpufabric.verify.kube import Kube
from gpufabric.verify.nccl import report as nccl_report

NOW = dt.datetime(2026, 11, 24, 22, 0, tzinfo=dt.UTC)
POOLS = {
    "h100": ("NVIDIA-H100-80GB-HBM3", 8, 370.0),
    "l40s": ("NVIDIA-L40S", 4, 30.0),
}
NODES = {f"{pool}-{i}": pool for pool in POOLS for i in range(5)}


@pytest.fixture(scope="module")
def plan() -> Plan:
    config = example_config("fleet-mixed")
    config["gpufabric:monitoring"] = {"enabled": True}
    return build_plan("fleet-mixed", model_from_config(sections(config), "fleet-mixed", from_file=True))  # fmt: skip


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    with FakeKube() as f:
        for name, pool in NODES.items():
            product, gpus, _bw = POOLS[pool]
            node = gpu_node(name)
            node["metadata"]["labels"]["nvidia.com/gpu.product"] = product
            node["status"]["allocatable"] = {"nvidia.com/gpu": str(gpus)}
            f.add(node)
        yield f


class PoolFleet:
    """The sweep's two-node jobs: each pool's nodes at their pool's bus bandwidth."""

    def __init__(self) -> None:
        self.pairs: list[tuple[str, str]] = []

    def __call__(self, pair: tuple[str, str], round_: int, index: int) -> nccl_report.NcclReport:
        self.pairs.append(pair)
        busbw = min(POOLS[NODES[n]][2] for n in pair)
        logs = {f"{pair[0]}+{pair[1]}": text(Log(hosts=pair, busbw=busbw))}
        return nccl_report.report(logs, replace(IB_8X400, threshold_gbps=20.0))


def _pass(fake: FakeKube, tmp_path: Path, plan: Plan, run: PoolFleet, at: dt.datetime) -> passes.PassReport:  # fmt: skip
    cfg = str(fake.kubeconfig(tmp_path))
    argv = ["health", "--stack", "fleet-mixed", "--tenant", "llm-pretrain", "--kubeconfig", cfg, "--context", "fake", "--node-checks", "api", "--max-fraction", "0.5"]  # fmt: skip
    args = parser().parse_args(argv)
    return passes.one_pass(plan, args, Kube(args.kubeconfig, "fake"), run_pair=run, clock=lambda: at)  # fmt: skip


def test_each_pool_recertifies_its_nodes_with_its_own_partners_gpus_and_median(
    fake: FakeKube, tmp_path: Path, plan: Plan
) -> None:
    xid79(fake, "h100-1")
    xid79(fake, "l40s-1")
    first = _pass(fake, tmp_path, plan, PoolFleet(), NOW)
    assert first.gpu_nodes == 10  # both pools' nodes are watched
    assert {r["node"] for r in first.rows if r["action"] == "quarantine"} == {"h100-1", "l40s-1"}
    for name in ("h100-1", "l40s-1"):
        set_condition(fake, name, "GpuFatalXid", "False")
    run = PoolFleet()
    report = _pass(fake, tmp_path, plan, run, NOW + dt.timedelta(hours=1))
    actions = {r["node"]: (r["action"], r["reason"]) for r in report.rows}
    # an L40S node holds 4 GPUs, its pool's count (the H100 pool's 8 would keep it), and its
    # 30 GB/s is judged against the L40S pool's median, not the H100s' 370
    assert actions["l40s-1"][0] == "return", actions
    assert "median 30" in actions["l40s-1"][1]
    assert actions["h100-1"][0] == "return", actions
    assert "median 370" in actions["h100-1"][1]
    assert run.pairs
    assert all(NODES[a] == NODES[b] for a, b in run.pairs)  # never across pools
    assert not live(fake, "l40s-1")["spec"].get("unschedulable")
