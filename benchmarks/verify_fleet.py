"""`verify nodes` over a simulated fleet: wall time and commands per second.

    .venv/bin/python benchmarks/verify_fleet.py [--hosts 64,256,1024] [--latency 0.05] [--parallel 64]

Each host is a node fixture tree (the kernel's sysfs/procfs formats, tests/nodefs.py) reached
through a probe that answers every command after --latency seconds, as ssh or kubectl exec
would; the checks are the shipped node checks. Goal: 1,024 hosts in under 5 minutes.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import nodefs
from fleetfake import LatencyProbe

from gpufabric.model.stackfile import load_stack
from gpufabric.plan.build import build_plan
from gpufabric.verify import expect, fleet


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", default="64,256,1024")
    ap.add_argument("--latency", type=float, default=0.05)
    ap.add_argument("--parallel", type=int, default=64)
    args = ap.parse_args()
    exp = expect.from_facts(build_plan("prod-ib", load_stack("prod-ib", None).model).facts)
    node = nodefs.Node(
        fabric=exp.fabric,
        rails=[(r.hca or f"mlx5_{i}", r.netdev) for i, r in enumerate(exp.rails)],
        rate=exp.link_rate_gbps,
        mtu=exp.mtu or 4092,
        pfc_priority=exp.pfc_priority,
        gpus=exp.gpus,
    )
    with tempfile.TemporaryDirectory() as tmp:
        root = nodefs.build(Path(tmp) / "node", node)
        print(
            f"prod-ib node checks, {args.latency * 1000:g} ms per command, {args.parallel} hosts at once"
        )
        print(f"{'hosts':>6} {'wall s':>8} {'commands':>9} {'cmd/s':>8} {'serial est. s':>14}")
        for count in (int(h) for h in args.hosts.split(",")):
            probes: list[LatencyProbe] = []

            def factory(spec: str, probes: list[LatencyProbe] = probes) -> LatencyProbe:
                probe = LatencyProbe(spec, root, latency=args.latency)
                probes.append(probe)
                return probe

            hosts = [f"gpu-{i:05d}" for i in range(count)]
            start = time.perf_counter()
            results = fleet.run_fleet(hosts, exp, factory, parallel=args.parallel)
            wall = time.perf_counter() - start
            commands = sum(p.commands for p in probes)
            assert {c.target for c in results} == set(hosts)
            print(
                f"{count:>6} {wall:>8.1f} {commands:>9} {commands / wall:>8.0f} "
                f"{commands * args.latency:>14.0f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
