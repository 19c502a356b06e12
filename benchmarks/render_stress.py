"""Render a generated stress stack (8 rails, 1,024 nodes, N tenants) and print timings.

Targets (issue "Foundation"): under 2 s for 200 tenants on a 2-core machine, time growing
linearly with tenants. Run: `make bench` or `.venv/bin/python benchmarks/render_stress.py`.

Each size is measured two ways:
- cold: `gpufabric render` in a fresh process, as a user runs it (includes interpreter start,
  imports and loading the Kubernetes schemas);
- warm: model + plan + schema validation + files, in-process, best of several runs.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from gpufabric.plan import build_plan
from gpufabric.render import render_files, write_tree
from gpufabric.schema import validate_objects
from gpufabric.stackfile import model_from_config

RAILS = 8
NODES = 1024


def stress_config(tenants: int) -> dict[str, Any]:
    return {
        "cluster": {"name": "stress", "kubernetesVersion": "1.33"},
        "gpuNodes": {"count": NODES, "gpusPerNode": 8},
        "fabric": {
            "type": "infiniband",
            "rdma": "shared",
            "mtu": 4092,
            "rails": [
                {
                    "name": f"rail{i}",
                    "netdev": f"ibp{i}s0",
                    "hca": f"mlx5_{i}",
                    "subnet": f"10.{100 + i}.0.0/16",
                }
                for i in range(RAILS)
            ],
        },
        "scheduling": {"gang": "kueue"},
        "tenants": [{"namespace": f"tenant-{i:04d}", "gpuQuota": 8} for i in range(tenants)],
    }


def warm_run(tenants: int, out: Path) -> tuple[float, int]:
    start = time.perf_counter()
    model = model_from_config(stress_config(tenants), "stress", from_file=False)
    plan = build_plan("stress", model)
    report = validate_objects((o.body for _, o in plan.objects()), "1.33")
    assert report.ok, report.errors[:3]
    write_tree(render_files(plan), out)
    return time.perf_counter() - start, sum(1 for _ in plan.objects())


def cold_run(tenants: int, workdir: Path) -> float:
    stack = workdir / f"Pulumi.stress-{tenants}.yaml"
    stack.write_text(
        yaml.safe_dump({"config": {f"gpufabric:{k}": v for k, v in stress_config(tenants).items()}})
    )
    start = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "gpufabric.cli",
            "render",
            "--stack",
            str(stack),
            "--out",
            str(workdir / "out"),
        ],
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tenants", type=int, nargs="+", default=[200, 400])
    args = ap.parse_args()
    print(f"stress stack: {RAILS} rails, {NODES} nodes; best of {args.repeat} runs")
    print(f"{'tenants':>8} {'objects':>8} {'warm s':>8} {'obj/s':>9} {'cold s':>8}")
    results: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        warm_run(10, work / "warmup")  # load schemas and templates once
        for n in args.tenants:
            warm = [warm_run(n, work / f"w{n}") for _ in range(args.repeat)]
            best = min(t for t, _ in warm)
            objects = warm[0][1]
            cold = min(cold_run(n, work) for _ in range(args.repeat))
            results[n] = cold
            print(f"{n:>8} {objects:>8} {best:>8.3f} {objects / best:>9.0f} {cold:>8.3f}")
    sizes = sorted(results)
    if len(sizes) >= 2:
        a, b = sizes[0], sizes[-1]
        print(
            f"cold time ratio {b}/{a} tenants: {results[b] / results[a]:.2f} (tenants ratio {b / a:.1f})"
        )
    target = results.get(200)
    if target is not None:
        verdict = "meets" if target < 2.0 else "MISSES"
        print(f"200 tenants cold render: {target:.3f} s, {verdict} the 2 s target")
    print(f"median of all cold runs: {statistics.median(results.values()):.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
