"""The JSON documents ``gpufabric report`` reads, produced by the code that writes them.

One lab-roce cluster of four GPU nodes where gpu-node-2 is sick (a rail port down, the
runtime's locked memory limited, a slow NIC): ``verify nodes`` over nodefs trees through
testinfra, ``verify cluster`` against the fake API server, ``nccl-report`` over
nccl-tests logs in their real format, and the sweep run through sweep.sweep with those
logs, written by session.sweep_document. ``python tests/verify/reportdocs.py DIR`` writes
them (docs/examples/report/ holds its output).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
for path in (HERE, HERE.parent):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import nodefs  # noqa: E402
import testinfra  # noqa: E402
from fake_kube import FakeKube  # noqa: E402
from nccllogs import Log, text  # noqa: E402
from test_cluster import healthy  # noqa: E402

from gpufabric.model.stackfile import load_stack  # noqa: E402
from gpufabric.plan.build import build_plan  # noqa: E402
from gpufabric.verify import cluster, expect  # noqa: E402
from gpufabric.verify.kube import Kube  # noqa: E402
from gpufabric.verify.nccl import report as nccl_report  # noqa: E402
from gpufabric.verify.nccl import rules as nccl_rules  # noqa: E402
from gpufabric.verify.nodes import checks as nodes  # noqa: E402
from gpufabric.verify.nodes.probe import HostProbe  # noqa: E402
from gpufabric.verify.results import document  # noqa: E402
from gpufabric.verify.sweep import run as sweep  # noqa: E402
from gpufabric.verify.sweep import session  # noqa: E402

STACK = "lab-roce"
NODES = [f"gpu-node-{i}" for i in range(4)]
SICK = "gpu-node-2"


def _plan() -> Any:
    return build_plan(STACK, load_stack(STACK, None).model)


def nodes_doc(work: Path, sick: str | None = SICK) -> dict[str, Any]:
    """``verify nodes --json`` over four node trees; gpu-node-2 has mlx5_1 down and an
    8 MiB memlock on containerd."""
    exp = expect.from_facts(_plan().facts)
    checks = []
    for name in NODES:
        node = nodefs.roce_node(
            rate=exp.link_rate_gbps,
            pfc_priority=exp.pfc_priority,
            gpus=exp.gpus,
            peermem=exp.gpudirect == "peermem",
        )
        if name == sick:
            node.degraded = {"mlx5_1": ("1: DOWN", "3: Disabled")}
            node.memlock = "8388608"
        root = nodefs.build(work / name, node)
        old = os.environ.get("PATH", "")
        os.environ["PATH"] = f"{root / 'usr/bin'}:{old}"
        try:
            probe = HostProbe(testinfra.get_host("local://"), root=str(root), name=name)
            checks += list(nodes.run_checks(probe, exp))
        finally:
            os.environ["PATH"] = old
    checks += nodes.fleet_checks(checks)
    return document(f"nodes ({STACK})", checks)


def cluster_doc(work: Path, broken: bool = True) -> dict[str, Any]:
    """``verify cluster --json`` against the fake API server: one DaemonSet short of ready."""
    with FakeKube() as fake:
        healthy(fake, STACK)
        ds = fake.objects[
            "/apis/apps/v1/namespaces/nvidia-network-operator/daemonsets/rdma-shared-dp-ds"
        ]
        ds["status"]["numberReady"] = 3 if broken else 4
        kube = Kube(str(fake.kubeconfig(work)), "fake")
        checks = cluster.readiness(kube, _plan())
    return document(f"cluster ({STACK})", checks)


def _log(pair: tuple[str, ...], sick: str | None, rails: int = 2, first: int = 0) -> str:
    share = 95.0 * rails / 2
    busbw = share * 0.62 if sick in pair else share
    return text(
        Log(
            hosts=pair,
            busbw=busbw,
            hcas=rails,
            first_hca=first,
            layer="RoCE",
            sizes=tuple(1 << s for s in range(20, 34)),
        )
    )


def nccl_doc(sick: str | None = SICK) -> dict[str, Any]:
    """``nccl-report --json`` over a two-node run of healthy nodes and one with the sick."""
    exp = nccl_rules.expectation(_plan().facts, None)
    files = {
        "allreduce-node0-node1.log": _log(("gpu-node-0", "gpu-node-1"), sick),
        "allreduce-node2-node3.log": _log(("gpu-node-2", "gpu-node-3"), sick),
    }
    return nccl_report.report(files, exp).to_dict()


def sweep_doc(sick: str | None = SICK) -> dict[str, Any]:
    """``verify nccl --sweep --json``: the pairs, then each rail of the bad node alone."""
    facts = _plan().facts
    exp = nccl_rules.expectation(facts, None)
    rail_exp = nccl_rules.expectation(facts, None, rails=1)
    rails = [r.name for r in facts.fabric.rails]

    def run_pair(pair: tuple[str, str], round_: int, index: int) -> nccl_report.NcclReport:
        return nccl_report.report({f"{pair[0]}+{pair[1]}": _log(pair, sick)}, exp)

    def run_rail(
        pair: tuple[str, str], rail: str, round_: int, index: int
    ) -> nccl_report.NcclReport:
        first = rails.index(rail)
        log = _log(pair, sick, rails=1, first=first)
        if rail == "rail0" or sick not in pair:
            log = text(Log(hosts=pair, busbw=47.5, hcas=1, first_hca=first, layer="RoCE"))
        return nccl_report.report({f"{pair[0]}+{pair[1]} {rail}": log}, rail_exp)

    # four nodes, one sick: a healthy one has two healthy partners (--sweep-confirm 2)
    report = sweep.sweep(NODES, run_pair, concurrency=2, confirm=2)
    sweep.localize_rails(report, rails, run_rail, 2, rail_exp.threshold_gbps)
    return session.sweep_document(report, {"cordoned": ["gpu-node-4"], "notReady": []})


def write_all(out: Path, sick: str | None = SICK) -> dict[str, Path]:
    """Every document as a file in ``out``; ``sick=None``: a healthy cluster."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        docs = {
            "nodes": nodes_doc(Path(tmp) / "nodes", sick),
            "cluster": cluster_doc(Path(tmp), broken=sick is not None),
            "nccl": nccl_doc(sick),
            "sweep": sweep_doc(sick),
        }
    paths = {}
    for name, doc in docs.items():
        paths[name] = out / f"{name}.json"
        paths[name].write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return paths


if __name__ == "__main__":
    for name, path in write_all(Path(sys.argv[1])).items():
        print(f"{name}: {path}")
