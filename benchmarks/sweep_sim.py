"""The bad-node sweep over simulated fleets: false drains, misses, flaky reports, rounds, jobs
and wall time, per fault class and fleet size.

    .venv/bin/python benchmarks/sweep_sim.py [--sizes 16,64,256,1024 | --full] [--fleets 2]
        [--seed 1] [--job-seconds 90] [--run-seconds 15] [--pairs-only | --group 16]
        [--classes bad,flaky,partner,uplink,rail,mixed]

Each fleet (tests/sweepfleet.py) puts its nodes 16 to a leaf (fewer on small fleets), four
leaves to a spine from 256 nodes, and k = max(1, N / 32) faults of the class (uplink: degraded
leaf uplinks, at most a quarter of the leaves; mixed: k bad, k flaky and k partner-dependent
nodes and the uplinks). The sweep gets the topology, as `verify nccl --sweep` reads it from the
node labels. The quota admits 8 two-node jobs at once (16 nodes); with groups allowed (up to
--group nodes) the planner picks pairs or the group size by its own estimate of the screening
wall time (sweep_plan.choose_mode; --pairs-only: two-node jobs, C partners), printed per N
before the table as `verify nccl --sweep` prints it. Wall time: "wall x8" admits each round's
jobs as the sweep's runner does (largest first, as the 16 nodes free), a pair taking
--job-seconds (90) and a group of g that plus 2 x --run-seconds (15) for each of its
ceil(g/2) rank orders past the first; "x8 flat" is every job 90 s; "wall x1" one job at a
time. Rail rounds (each bad node's rails alone) are included. Columns add up over the fleets
of a row. "misses" counts faulty nodes not drained (UNKNOWN and FLAKY ones included) and
uplinks not named; "GOOD bad" counts the faulty nodes among them reported GOOD; "flaky GOOD"
the flaky nodes GOOD after a job with healthy partners failed.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import sweepfleet

from gpufabric.verify.sweep import localize_rails, sweep
from gpufabric.verify.sweep_plan import Cost, estimate

BOUNDS = """bounds (not zero by construction):
- partner-dependent: a node slow with half of its partners is GOOD only if it passed with all
  of them: 2^-p for p distinct partners; with groups p = max(8, ceil(log2 N) + 5)
  (sweep_plan.partners_needed: 15 at N = 1,024, 17 at 4,096), so even if every node of the
  fleet were such a node, one escapes in a fleet with probability <= N x 2^-p <= 1/32 (k =
  N / 32 of them: <= 1/1,024); with --pairs-only, C partners: 2^-C per node;
- mixed, cut-off leaves: a leaf cut off by its uplink has only its own nodes as partners; a
  bad node in a leaf of 4 leaves the others 2 clean partners, fewer than the witness rule's
  C = 3, and two or three partner-dependent nodes in one cut-off leaf of 16 fail with the same
  partners, so none of those is a witness: those nodes stay UNKNOWN (or FLAKY when a flaky
  partner changed a result), never GOOD, never drained (exit 5 / 4).
"""


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h"


def run(
    n: int, kind: str, seed: int, group: int, pair_s: float, run_s: float
) -> tuple[sweepfleet.Score, float]:
    fleet = sweepfleet.build(n, kind, max(1, n // 32), seed)
    started = time.perf_counter()
    report = sweep(
        fleet.nodes, fleet.run_pair, 8, topology=fleet.topology, levels=fleet.levels,
        run_group=None if group <= 2 else fleet.run_group, group=group,
        cost=Cost(pair_s, run_s),
    )  # fmt: skip
    if report.bad:
        localize_rails(report, sweepfleet.RAILS, fleet.run_rail_pair, 8)
    return sweepfleet.score(
        fleet, report, pair_s=pair_s, run_s=run_s
    ), time.perf_counter() - started


def _row(kind: str, n: int, scores: list[sweepfleet.Score], spent: float, flat_s: float) -> str:
    def total(f: Callable[[sweepfleet.Score], int]) -> int:
        return sum(f(s) for s in scores)

    fleets = len(scores)
    return (
        f"{kind:<8} {n:>5} {max(1, n // 32):>4} {fleets:>6} "
        f"{total(lambda s: s.false_drains):>12} {total(lambda s: s.misses):>6} "
        f"{total(lambda s: s.escapes):>8} "
        f"{total(lambda s: s.flaky_reported):>11} "
        f"{total(lambda s: s.flaky_good_after_failure):>10} "
        f"{total(lambda s: s.false_paths):>11} {total(lambda s: s.unknown):>7} "
        f"{max(s.rounds for s in scores):>6} {total(lambda s: s.jobs) // fleets:>7} "
        f"{_hours(sum(s.seconds[1] for s in scores) / fleets):>8} "
        f"{_hours(sum(s.seconds[8] for s in scores) / fleets):>8} "
        f"{_hours(sum(s.waves[8] for s in scores) / fleets * flat_s):>9} "
        f"{spent:>6.1f}"
    )


def _plan_line(n: int, group: int, cost: Cost) -> str:
    fleet = sweepfleet.build(n, "bad", 0, 0)
    return f"N={n}: " + estimate(fleet.topology, 8, None, 3, group=group, cost=cost).words()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="16,64,256,1024")
    ap.add_argument("--full", action="store_true", help="sizes 16 to 4,096 (minutes more)")
    ap.add_argument("--fleets", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--job-seconds", type=float, default=sweepfleet.PAIR_S)
    ap.add_argument("--run-seconds", type=float, default=sweepfleet.RUN_S)
    ap.add_argument("--classes", default=",".join(sweepfleet.CLASSES))
    ap.add_argument("--pairs-only", action="store_true", help="two-node jobs only (no groups)")
    ap.add_argument("--group", type=int, default=16, help="nodes per group job at most")
    args = ap.parse_args()
    sizes = [16, 64, 256, 1024, 4096] if args.full else [int(x) for x in args.sizes.split(",")]
    group = 2 if args.pairs_only else args.group
    cost = Cost(args.job_seconds, args.run_seconds)
    for n in sizes:
        print(_plan_line(n, group, cost))
    head = (
        f"{'scenario':<8} {'N':>5} {'k':>4} {'fleets':>6} {'false drains':>12} {'misses':>6} {'GOOD bad':>8} "
        f"{'flaky FLAKY':>11} {'flaky GOOD':>10} {'false paths':>11} {'unknown':>7} "
        f"{'rounds':>6} {'jobs':>7} {'wall x1':>8} {'wall x8':>8} {'x8 flat':>9} {'sim s':>6}"
    )
    print(head)
    for kind in args.classes.split(","):
        for n in sizes:
            scores, spent = [], 0.0
            for i in range(args.fleets):
                got, took = run(
                    n, kind, args.seed * 1000 + i, group, args.job_seconds, args.run_seconds
                )
                scores.append(got)
                spent += took
            print(_row(kind, n, scores, spent, args.job_seconds), flush=True)
    print(BOUNDS, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
