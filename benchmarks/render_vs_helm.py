"""`gpufabric render` of the stress stack against `helm template` of the charts it configures.

    .venv/bin/python benchmarks/render_vs_helm.py [--tenants 200] [--repeat 7] [--workdir DIR]

Issue 25 asks that rendering the stress stack (8 rails, 1,024 nodes, 200 tenants) take no
longer than `helm template` of the same charts with the values gpufabric rendered for them:
the review step of a pull request should not wait on gpufabric more than on Helm. Measured
as a user runs each, in fresh processes:

- render: `gpufabric render --stack S --out NEW_DIR` (every object schema-validated, one file
  per object written);
- helm: `helm template RELEASE CHART.tgz -n NS -f values.yaml --kube-version V --include-crds`
  of every chart the render wrote (charts/<release>/), one after the other, output to a file.

The two are run in pairs, interleaved (the order alternates), so neighbours' load hits both
alike; the ratio reported is the median of the pairs' ratios. Also printed: the interpreter
start and the import of the command (the fixed cost of every render); what no render in
this runtime avoids (the interpreter, pydantic, jinja2 and PyYAML, the stack's pydantic
models, and creating one file per object on the file system); the render's phases
one after the other in one process (import, stack file, plan, schema validation, formatting
the files, writing them); where /dev/shm exists, the render into memory (tmpfs) against the
render onto the file system --workdir is on, which shows what creating the files costs
there; and with the upstream CRDs present (--crd-dir) a render with a cold CRD cache
against one with a warm cache.

helm and the pinned charts are looked for in $GPUFABRIC_SHARED/upstream (default: ../shared
beside the checkout), else helm on PATH and charts in $GPUFABRIC_CHARTS; when either is
missing the helm part is skipped with a line saying so. Times are wall-clock seconds.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from render_stress import PHASE_NAMES, file_system, phases, stress_config, write_stack

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("GPUFABRIC_SHARED", REPO.parent / "shared"))
UPSTREAM = SHARED / "upstream"


def find_helm() -> str | None:
    local = UPSTREAM / "bin" / "helm"
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    return shutil.which("helm")


def chart_archive(chart: str, version: str) -> Path | None:
    charts = Path(os.environ.get("GPUFABRIC_CHARTS", UPSTREAM / "charts"))
    bare = version.lstrip("v")
    for name in (f"{chart}-{version}.tgz", f"{chart}-v{bare}.tgz", f"{chart}-{bare}.tgz"):
        if (charts / name).is_file():
            return charts / name
    return None


# Python's own modules are compiled once and kept (__pycache__), as in a user's install,
# even where the environment says not to write bytecode.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


class Time(NamedTuple):
    """Wall-clock seconds, and CPU seconds (user + system, the command's processes)."""

    wall: float
    cpu: float

    def __add__(self, other: object) -> Time:
        assert isinstance(other, Time)
        return Time(self.wall + other.wall, self.cpu + other.cpu)


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(argv: list[str], env: dict[str, str] | None = None, stdout: Path | None = None) -> Time:
    cpu, start = _cpu(), time.perf_counter()
    if stdout is None:
        subprocess.run(argv, check=True, capture_output=True, env=env or ENV)
    else:
        with stdout.open("wb") as f:
            subprocess.run(argv, check=True, stdout=f, stderr=subprocess.PIPE, env=env or ENV)
    return Time(time.perf_counter() - start, _cpu() - cpu)


def render_argv(stack: Path, out: Path, crd_dir: Path | None = None) -> list[str]:
    argv = [sys.executable, "-m", "gpufabric", "render", "--stack", str(stack)]
    argv += ["--out", str(out)]
    return argv + (["--crd-dir", str(crd_dir)] if crd_dir else [])


def helm_commands(helm: str, rendered: Path, kube: str) -> tuple[list[list[str]], list[str]]:
    """`helm template` of every chart the render wrote, and the charts not found."""
    commands, missing = [], []
    for meta_file in sorted((rendered / "charts").glob("*/chart.yaml")):
        meta = yaml.safe_load(meta_file.read_text())
        archive = chart_archive(meta["chart"], str(meta["version"]))
        if archive is None:
            missing.append(f"{meta['chart']} {meta['version']}")
            continue
        values = meta_file.parent / "values.yaml"
        release, namespace = meta["release"], meta["namespace"]
        command = [helm, "template", release, str(archive), "-n", namespace, "-f", str(values)]
        commands.append([*command, "--kube-version", f"{kube}.0", "--include-crds"])
    return commands, missing


def paired(
    repeat: int, first: Callable[[int], Time], second: Callable[[int], Time]
) -> list[tuple[Time, Time]]:
    """``repeat`` pairs of runs, the order alternating so that load hits both alike."""
    pairs = []
    for i in range(repeat):
        if i % 2 == 0:
            a = first(i)
            b = second(i)
        else:
            b = second(i)
            a = first(i)
        pairs.append((a, b))
        print(
            f"  pair {i + 1}: wall {a.wall:7.3f} {b.wall:7.3f} ratio {a.wall / b.wall:5.2f}"
            f"   cpu {a.cpu:7.3f} {b.cpu:7.3f} ratio {a.cpu / b.cpu:5.2f}   {load()}",
            flush=True,
        )
    return pairs


def summary(label_a: str, label_b: str, pairs: list[tuple[Time, Time]]) -> dict[str, float]:
    """Print medians and the median of the pairs' ratios; return the ratios by kind."""
    ratios: dict[str, float] = {}
    for kind in ("wall", "cpu"):
        a = statistics.median(getattr(p[0], kind) for p in pairs)
        b = statistics.median(getattr(p[1], kind) for p in pairs)
        ratios[kind] = statistics.median(getattr(p[0], kind) / getattr(p[1], kind) for p in pairs)
        print(
            f"  median {kind:>4}: {label_a} {a:.3f} s, {label_b} {b:.3f} s; "
            f"median ratio {ratios[kind]:.2f}"
        )
    return ratios


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.2f}/{five:.2f} (1/5 min)"


def import_cost(repeat: int) -> Time:
    """The fixed cost of a render: interpreter start, then the command's imports (what
    `render` imports beyond the CLI is added when it runs; --phases in render_stress.py
    splits the rest). Returns the medians of interpreter start + imports."""
    pairs = paired(
        repeat,
        lambda _: timed([sys.executable, "-m", "gpufabric", "--version"]),
        lambda _: timed([sys.executable, "-c", "pass"]),
    )
    medians = []
    for kind in ("wall", "cpu"):
        full = statistics.median(getattr(p[0], kind) for p in pairs)
        start = statistics.median(getattr(p[1], kind) for p in pairs)
        medians.append(full)
        print(
            f"  median {kind:>4}: interpreter start {start:.3f} s, "
            f"+ the program's imports (`gpufabric --version`) {full - start:.3f} s"
        )
    return Time(*medians)


def helm_part(
    args: argparse.Namespace, stack: Path, work: Path, rendered: Path, fixed: Time
) -> None:
    helm = find_helm()
    if helm is None:
        print("helm: SKIPPED, no helm (neither ../shared/upstream/bin nor PATH)")
        return
    kube = stress_config(args.tenants)["cluster"]["kubernetesVersion"]
    commands, missing = helm_commands(helm, rendered, kube)
    if missing or not commands:
        print(f"helm: SKIPPED, charts not found: {', '.join(missing) or 'none rendered'}")
        return
    charts = ", ".join(c[2] for c in commands)
    print(f"render vs helm template of {len(commands)} charts ({charts}); render | helm")

    def render(i: int) -> Time:
        return timed(render_argv(stack, work / f"render-{i}"))

    def templates(i: int) -> Time:
        total = Time(0.0, 0.0)
        for c in commands:
            total = total + timed(c, stdout=work / f"helm-{i}-{c[2]}.yaml")
        return total

    pairs = paired(args.repeat, render, templates)
    ratios = summary("render", "helm", pairs)
    for kind in ("wall", "cpu"):
        verdict = "meets" if ratios[kind] <= 1.0 else "MISSES"
        print(
            f"  render/helm median ratio ({kind}) {ratios[kind]:.2f}: {verdict} the target (<= 1.0)"
        )
    for kind in ("wall", "cpu"):
        render_median = statistics.median(getattr(p[0], kind) for p in pairs)
        helm_median = statistics.median(getattr(p[1], kind) for p in pairs)
        start = getattr(fixed, kind)
        print(
            f"  {kind:>4}: interpreter start + imports {start:.3f} s = "
            f"{100 * start / render_median:.0f}% of the render, {100 * start / helm_median:.0f}% of helm"
        )


# Creates the files of a rendered tree anew (contents read first), as the render's staging
# does: exclusive create, one write, close; prints the seconds the creation took.
CREATE = r"""
import os, sys, time
src, dst = sys.argv[1], sys.argv[2]
files = []
for root, _, names in os.walk(src):
    for name in names:
        path = os.path.join(root, name)
        with open(path, "rb") as f:
            files.append((os.path.relpath(path, src), f.read()))
start = time.perf_counter()
made = set()
for rel, data in files:
    directory = os.path.join(dst, os.path.dirname(rel))
    if directory not in made:
        os.makedirs(directory, exist_ok=True)
        made.add(directory)
    with open(os.path.join(dst, rel), "xb") as f:
        f.write(data)
print(time.perf_counter() - start, len(files))
"""

FLOOR_IMPORTS = (
    ("interpreter start", "pass"),
    ("+ pydantic, jinja2, PyYAML", "import pydantic, jinja2, yaml"),
    ("+ the stack's pydantic models", "import gpufabric.model.config"),
)


def floor_part(args: argparse.Namespace, work: Path, rendered: Path) -> None:
    """What any render in this runtime pays before its own work: the interpreter, the
    libraries the stack model and templates are built on, the stack's pydantic models, and
    the kernel's cost of creating one file per object on this file system. Medians of
    --repeat fresh processes."""
    print("what a render cannot avoid here (median seconds of wall clock):")
    cells, previous = [], 0.0
    for label, code in FLOOR_IMPORTS:
        runs = [timed([sys.executable, "-c", code]).wall for _ in range(args.repeat)]
        median = statistics.median(runs)
        cells.append(f"{label} {median - previous:.3f}")
        previous = median
    create = []
    for i in range(args.repeat):
        out = subprocess.run(
            [sys.executable, "-c", CREATE, str(rendered), str(work / f"create-{i}")],
            check=True, capture_output=True, text=True,
        ).stdout.split()  # fmt: skip
        create.append(float(out[0]))
    files = int(out[1])
    created = statistics.median(create)
    print("  " + "; ".join(cells))
    print(f"  creating the render's {files} files on {file_system(work)}: {created:.3f} s")
    print(f"  sum: {previous + created:.3f} s")


def phase_part(args: argparse.Namespace, stack: Path, work: Path) -> None:
    """The render's steps, one after the other in one fresh process, as render runs them."""
    runs = [phases(stack, work / f"phases-{i}")["phases"] for i in range(args.repeat)]
    print("phases of a render, one after the other (median seconds of wall clock):")
    cells = "  ".join(f"{n} {statistics.median(r[n] for r in runs):.3f}" for n in PHASE_NAMES)
    total = statistics.median(sum(r.values()) for r in runs)
    print(f"  {cells}  (sum {total:.3f})")


def tmpfs_part(args: argparse.Namespace, stack: Path, work: Path) -> None:
    """The same render into memory and onto the output's file system, paired."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or not os.access(shm, os.W_OK):
        print("tmpfs: SKIPPED, no writable /dev/shm")
        return
    memory = Path(tempfile.mkdtemp(prefix="gpufabric-bench-", dir=shm))
    print(f"render onto {file_system(work)} | into tmpfs (/dev/shm)")
    try:
        pairs = paired(
            args.repeat,
            lambda i: timed(render_argv(stack, work / f"disk-{i}")),
            lambda i: timed(render_argv(stack, memory / f"shm-{i}")),
        )
    finally:
        shutil.rmtree(memory, ignore_errors=True)
    ratios = summary("disk", "tmpfs", pairs)
    extra = statistics.median(p[0].wall - p[1].wall for p in pairs)
    print(
        f"  creating the files on this disk costs {extra:+.3f} s of wall clock over memory "
        f"(ratio {ratios['wall']:.2f})"
    )


def crd_part(args: argparse.Namespace, stack: Path, work: Path) -> None:
    crd_dir = SHARED / "crds"
    if not crd_dir.is_dir():
        print(f"CRD cache: SKIPPED, no CRD directory at {crd_dir}")
        return
    warm_home = work / "cache-warm"
    env = {**ENV, "XDG_CACHE_HOME": str(warm_home)}
    timed(render_argv(stack, work / "crd-prime", crd_dir), env=env)  # fills the warm cache
    print(f"render --crd-dir, cold CRD cache | warm CRD cache ({crd_dir.name}/)")

    def cold(i: int) -> Time:
        fresh = {**ENV, "XDG_CACHE_HOME": str(work / f"cache-cold-{i}")}
        return timed(render_argv(stack, work / f"crd-cold-{i}", crd_dir), env=fresh)

    def warm(i: int) -> Time:
        return timed(render_argv(stack, work / f"crd-warm-{i}", crd_dir), env=env)

    ratios = summary("cold", "warm", paired(args.repeat, cold, warm))
    print(f"  a cold CRD cache costs {ratios['wall']:.2f}x a warm one ({ratios['cpu']:.2f}x CPU)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--tenants", type=int, default=200)
    ap.add_argument("--workdir", type=Path, help="where stacks and outputs go (default: temp)")
    ap.add_argument("--no-crds", action="store_true", help="skip the cold/warm CRD cache part")
    args = ap.parse_args()
    base = args.workdir or Path(tempfile.mkdtemp(prefix="gpufabric-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="render-vs-helm-", dir=base))
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"stress stack: 8 rails, 1,024 nodes, {args.tenants} tenants; {cpus} CPUs; {load()}")
    print(
        f"output on {file_system(work)}; {args.repeat} pairs each, the order alternating; "
        "seconds of wall clock and of CPU (user + system)"
    )
    try:
        stack = write_stack(args.tenants, work)
        rendered = work / "rendered"
        timed(render_argv(stack, rendered))  # also compiles and keeps gpufabric's bytecode
        print("imports: `python -m gpufabric --version` | `python -c pass`")
        fixed = import_cost(args.repeat)
        helm_part(args, stack, work, rendered, fixed)
        floor_part(args, work, rendered)
        phase_part(args, stack, work)
        tmpfs_part(args, stack, work)
        if not args.no_crds:
            crd_part(args, stack, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if args.workdir is None:
            shutil.rmtree(base, ignore_errors=True)
    print(f"after: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
