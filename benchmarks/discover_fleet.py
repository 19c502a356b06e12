"""`gpufabric discover` of a large cluster: read, infer, render and compare seconds, peak memory.

    .venv/bin/python benchmarks/discover_fleet.py [--nodes 10000] [--stack dgx-h100]
        [--target 30]

The fake API server (tests/fake_kube.py, real HTTP on localhost, 500 items a page) is
seeded with a shipped one-pool stack grown to --nodes GPU nodes (tests/builders.py
fleet_config: each rail a /16, so the rails can address them) and the objects its Plan
renders. The command then runs end to end, as a user runs it (`gpufabric discover
--kubeconfig K --out stacks/Pulumi.<name>.yaml`), and once more phase by phase through the
same functions to split the time: read (every collection, paged), infer (the stack),
render (the stack file parsed, validated and planned), compare (the round-trip gate).
Printed: each phase's seconds, the end-to-end wall seconds, peak resident memory of this
process (the fake server runs in it: an upper bound) and whether the round trip was clean.
Exits 1 when the end-to-end run takes longer than --target seconds (the issue's 30 s for
10,000 nodes) or the round trip is not clean. Figures, never asserted in a test.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from builders import fleet_config, model_of
from discoverseed import nodes, objects
from fake_kube import FakeKube

from gpufabric.cli import main
from gpufabric.discover import roundtrip, snapshot, stackwrite
from gpufabric.discover.compose import infer
from gpufabric.model.stackfile import parse_stack_text
from gpufabric.plan.build import build_plan
from gpufabric.verify.kube import Kube


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run(stack: str, count: int, target: float) -> int:
    plan = build_plan("fleet", model_of(fleet_config(stack, count)))
    seeded = nodes(plan, per_pool=count)
    live = objects(plan)
    with FakeKube() as fake, tempfile.TemporaryDirectory() as tmp:
        for obj in seeded + live:
            fake.add(obj)
        kubeconfig = fake.kubeconfig(Path(tmp))
        out = Path(tmp) / "stacks" / "Pulumi.fleet.yaml"
        argv = ["discover", "--kubeconfig", str(kubeconfig), "--out", str(out)]
        text = io.StringIO()
        start = time.perf_counter()
        with contextlib.redirect_stdout(text), contextlib.redirect_stderr(io.StringIO()):
            code = main(argv)
        total = time.perf_counter() - start
        # the same work, phase by phase
        t0 = time.perf_counter()
        snap = snapshot.read(Kube(str(kubeconfig), None), 120.0)
        t1 = time.perf_counter()
        name, config, notes = infer(snap, "fleet")
        t2 = time.perf_counter()
        stack_text = stackwrite.text(name, "bench", config, notes)
        rendered = build_plan(name, parse_stack_text(stack_text, "fleet"))
        t3 = time.perf_counter()
        gate = roundtrip.compare(rendered, snap.all())
        t4 = time.perf_counter()
    read_nodes = len(snap.nodes)
    clean = code == 0 and not gate.differences and read_nodes == len(seeded)
    print(
        f"{stack} grown to {count} GPU nodes: {read_nodes} nodes and "
        f"{len(snap.all()) - read_nodes} objects read"
    )
    print(f"  read     {t1 - t0:7.2f} s")
    print(f"  infer    {t2 - t1:7.2f} s")
    print(f"  render   {t3 - t2:7.2f} s")
    print(f"  compare  {t4 - t3:7.2f} s")
    print(f"  end to end (gpufabric discover, exit {code}): {total:.2f} s (target {target:g} s)")
    print(f"  peak memory {_peak_mib():.0f} MiB (this process, the fake API server included)")
    print(f"  round trip: {gate.matched} identical, {len(gate.differences)} difference(s)")
    if not clean:
        print("FAIL: the round trip is not clean", file=sys.stderr)
        return 1
    if total > target:
        print(f"FAIL: {total:.1f} s is above the {target:g} s target", file=sys.stderr)
        return 1
    return 0


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--nodes", type=int, default=10_000, help="GPU nodes (default 10000)")
    p.add_argument("--stack", default="dgx-h100", help="a shipped one-pool stack to grow")
    p.add_argument("--target", type=float, default=30.0, help="seconds allowed end to end")
    return p.parse_args(argv)


if __name__ == "__main__":
    args = parse(sys.argv[1:])
    sys.exit(run(args.stack, args.nodes, args.target))
