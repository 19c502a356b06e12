"""`verify nodes` over a simulated fleet: wall time, hosts per second and CPU time.

    .venv/bin/python benchmarks/verify_fleet.py [--hosts 1024,10000] [--latency 0.05]
        [--parallel 256] [--judges N]

Each host is a node fixture tree (the kernel's sysfs/procfs formats, tests/nodefs.py), one
in --bad-every degraded (rail 3 down); the transport answers every round trip after
--latency seconds, as ssh or kubectl exec would. The gather script really runs (/bin/sh
over the tree) once per tree and script; every host's answer then goes through the real
path: framing checked, facts parsed, the shipped node checks judged (in --judges worker
processes, default one per CPU). Goal: 10,000 hosts at 50 ms in under 5 minutes.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import nodefs
from fleetfake import LatencyTransport

from gpufabric.model.stackfile import load_stack
from gpufabric.plan.build import build_plan
from gpufabric.verify import expect, fleet

STACK = "prod-ib"


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _roots(tmp: Path, exp: expect.Expectation) -> tuple[Path, Path]:
    node = {
        "fabric": exp.fabric,
        "rails": [(r.hca or f"mlx5_{i}", r.netdev) for i, r in enumerate(exp.rails)],
        "rate": exp.link_rate_gbps,
        "mtu": exp.mtu or 4092,
        "pfc_priority": exp.pfc_priority,
        "peermem": exp.gpudirect == "peermem",
        "gpus": exp.gpus,
        "pkeys": ("0xffff", *(exp.pkeys or ())),
    }
    healthy = nodefs.build(tmp / "healthy", nodefs.Node(**node))  # type: ignore[arg-type]
    down = {exp.rails[3].hca or "mlx5_3": ("1: DOWN", "3: Disabled")}
    bad = nodefs.build(tmp / "bad", nodefs.Node(**node, degraded=down))  # type: ignore[arg-type]
    return healthy, bad


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--hosts", default="1024,10000")
    ap.add_argument("--latency", type=float, default=0.05)
    ap.add_argument("--parallel", type=int, default=256)
    ap.add_argument("--judges", type=int, default=None, help="worker processes (0: none)")
    ap.add_argument("--bad-every", type=int, default=50)
    args = ap.parse_args()
    exp = expect.from_facts(build_plan(STACK, load_stack(STACK, None).model).facts)
    judges = fleet._judges(10**9, args.judges)
    print(
        f"{STACK} node checks, {args.latency * 1000:g} ms a round trip, {args.parallel} hosts "
        f"at once, {judges} judging processes, {os.cpu_count()} CPUs, 1 host in "
        f"{args.bad_every} bad"
    )
    print(
        f"{'hosts':>6} {'parallel':>8} {'wall s':>8} {'hosts/s':>8} {'CPU s':>7} "
        f"{'trips':>6} {'FAIL hosts':>10} {'latency bound s':>15}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        healthy, bad = _roots(Path(tmp), exp)
        for count in (int(h) for h in args.hosts.split(",")):
            hosts = [f"gpu-{i:05d}" for i in range(count)]
            roots = {h: bad if i % args.bad_every == 1 else healthy for i, h in enumerate(hosts)}
            transport = LatencyTransport(roots, latency=args.latency)
            fleet.run_fleet(hosts[:2], exp, transport, judges=0)  # the trees' answers, once
            transport.round_trips = 0
            cpu, start = _cpu(), time.perf_counter()
            results = fleet.run_fleet(
                hosts, exp, transport, parallel=args.parallel, judges=args.judges
            )
            wall, cpu = time.perf_counter() - start, _cpu() - cpu
            failing = {c.target for c in results if c.status == "FAIL"}
            assert failing == {h for h, r in roots.items() if r == bad}, "verdicts changed"
            assert {c.status for c in results if c.target not in failing} <= {"PASS", "SKIP"}
            bound = transport.round_trips * args.latency / args.parallel
            print(
                f"{count:>6} {args.parallel:>8} {wall:>8.1f} {count / wall:>8.0f} {cpu:>7.1f} "
                f"{transport.round_trips:>6} {len(failing):>10} {bound:>15.1f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
