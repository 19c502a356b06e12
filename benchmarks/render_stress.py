"""Render a generated stress stack (8 rails, 1,024 nodes, N tenants) and print timings.

    .venv/bin/python benchmarks/render_stress.py [--tenants 200 400] [--repeat 5] [--workdir DIR]

Target (issue "Fleet scale"): 200 tenants under 1 s cold on a 2-core machine, time growing
linearly with tenants. Each size is measured as a user runs it:

- cold, new: `gpufabric render` in a fresh process into a directory that does not exist;
- cold, again: the same render into the directory the previous one wrote (files a re-render
  leaves unchanged are kept, not written again);
- phases: one more fresh process that times what `render` does step by step (interpreter
  and imports, reading the stack, the plan, schema validation, file contents, writing).

Figures are the best of --repeat runs (the least disturbed by the rest of the machine) and
the median. Writing a thousand files costs what the file system under --workdir makes it
cost: the script says which one it used.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

RAILS = 8
NODES = 1024
TARGET_S = 1.0

# Run in a fresh interpreter: the same steps as `gpufabric render`, timed one by one.
PHASES = r"""
import json, sys, time
start = time.perf_counter()
from gpufabric import cli  # everything `gpufabric render` imports
from gpufabric.plan.build import build_plan
from gpufabric.outputs.render import check_output_dir, render_files, write_tree
from gpufabric.model.stackfile import load_stack
from pathlib import Path
marks = [("imports", time.perf_counter())]
stack = load_stack(sys.argv[1], None); marks.append(("stack", time.perf_counter()))
plan = build_plan(stack.name, stack.model); marks.append(("plan", time.perf_counter()))
out = check_output_dir(Path(sys.argv[2]))
from gpufabric.outputs.schema import validate_objects  # as render does, after the plan
report = validate_objects((o.body for _, o in plan.objects()), plan.facts.kubernetes_minor)
assert report.ok, report.errors[:3]
marks.append(("validate", time.perf_counter()))
files = dict(render_files(plan)); marks.append(("files", time.perf_counter()))  # all formatted
write_tree(files, out, stack.name); marks.append(("write", time.perf_counter()))
prev, phases = start, {}
for name, t in marks:
    phases[name] = t - prev
    prev = t
print(json.dumps({"phases": phases, "files": len(files), "objects": sum(1 for _ in plan.objects())}))
"""
PHASE_NAMES = ("imports", "stack", "plan", "validate", "files", "write")


def stress_config(tenants: int) -> dict[str, Any]:
    return {
        "cluster": {
            "name": "stress",
            "kubernetesVersion": "1.33",
            "podCIDR": "172.16.0.0/16",
            "serviceCIDR": "172.17.0.0/16",
        },
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


def write_stack(tenants: int, workdir: Path) -> Path:
    stack = workdir / f"Pulumi.stress-{tenants}.yaml"
    config = {f"gpufabric:{k}": v for k, v in stress_config(tenants).items()}
    stack.write_text(yaml.safe_dump({"config": config}))
    return stack


def cold_render(stack: Path, out: Path) -> float:
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "gpufabric", "render", "--stack", str(stack), "--out", str(out)],
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - start


def phases(stack: Path, out: Path) -> dict[str, Any]:
    run = subprocess.run(
        [sys.executable, "-c", PHASES, str(stack), str(out)],
        check=True,
        capture_output=True,
        text=True,
    )
    doc: dict[str, Any] = json.loads(run.stdout.splitlines()[-1])
    return doc


def file_system(path: Path) -> str:
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return "unknown file system"
    best, kind = "", "unknown"
    resolved = str(path.resolve())
    for line in mounts:
        fields = line.split()
        if len(fields) > 2 and resolved.startswith(fields[1]) and len(fields[1]) > len(best):
            best, kind = fields[1], fields[2]
    return f"{kind} (mounted at {best})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--tenants", type=int, nargs="+", default=[200, 400])
    ap.add_argument(
        "--workdir", type=Path, help="where stacks and renders go (default: a temp dir)"
    )
    args = ap.parse_args()
    base = args.workdir or Path(tempfile.mkdtemp(prefix="gpufabric-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="render-stress-", dir=base))
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(
        f"stress stack: {RAILS} rails, {NODES} nodes; {cpus} CPUs; best and median of {args.repeat}"
    )
    print(f"output on {file_system(work)}")
    header = f"{'tenants':>7} {'objects':>7} {'files':>5}  {'cold, new':>15}  {'cold, again':>15}"
    print(header + "  " + " ".join(f"{n:>8}" for n in PHASE_NAMES))
    best: dict[int, float] = {}
    work_s: dict[int, float] = {}
    try:
        for n in args.tenants:
            stack = write_stack(n, work)
            new, again, split = [], [], []
            for i in range(args.repeat):
                out = work / f"out-{n}-{i}"
                new.append(cold_render(stack, out))
                again.append(cold_render(stack, out))
                split.append(phases(stack, work / f"phases-{n}-{i}"))
            fastest = min(split, key=lambda d: sum(d["phases"].values()))
            cells = " ".join(f"{fastest['phases'][p]:>8.3f}" for p in PHASE_NAMES)
            print(
                f"{n:>7} {fastest['objects']:>7} {fastest['files']:>5}  "
                f"{min(new):>6.3f} / {statistics.median(new):>6.3f}  "
                f"{min(again):>6.3f} / {statistics.median(again):>6.3f}  {cells}"
            )
            best[n] = min(new)
            work_s[n] = sum(v for k, v in fastest["phases"].items() if k != "imports")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if args.workdir is None:
            shutil.rmtree(base, ignore_errors=True)
    print(
        "(cold columns: best / median seconds; phases: seconds of the fastest run, in the "
        "order render runs them)"
    )
    sizes = sorted(best)
    if len(sizes) >= 2:
        a, b = sizes[0], sizes[-1]
        print(
            f"{b}/{a} tenants ({b / a:.1f}x): cold time {best[b] / best[a]:.2f}x, "
            f"time after imports {work_s[b] / work_s[a]:.2f}x (linear or better: <= {b / a:.1f}x)"
        )
    if 200 in best:
        verdict = "meets" if best[200] < TARGET_S else "MISSES"
        print(
            f"200 tenants, cold, new directory: {best[200]:.3f} s, {verdict} the {TARGET_S:g} s target"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
