"""The bad-node sweep over simulated fleets: false drains, misses, flaky reports, rounds, jobs
and wall time, per fault class and fleet size.

    .venv/bin/python benchmarks/sweep_sim.py [--sizes 16,64,256,1024,4096] [--fleets 3]
        [--seed 1] [--job-seconds 90] [--run-seconds 15] [--pairs-only | --group 16]
        [--classes bad,flaky,partner,uplink,rail,mixed]

Each fleet (tests/sweepfleet.py) puts its nodes 16 to a leaf (fewer on small fleets), four
leaves to a spine from 256 nodes, and k = max(1, N / 32) faults of the class (uplink: degraded
leaf uplinks, at most a quarter of the leaves; mixed: k bad, k flaky and k partner-dependent
nodes and the uplinks). The sweep gets the topology, as `verify nccl --sweep` reads it from the
node labels. The quota admits 8 two-node jobs at once (16 nodes); the sweep screens with
group jobs of up to 16 nodes under a leaf (--pairs-only: two-node jobs only). Wall time
counts waves: "wall x1" runs the same jobs one at a time; "wall x8" runs each round's jobs
of g nodes 16 // g at a time (at least one), a pair taking
--job-seconds (90) and a group of g that plus 2 x --run-seconds (15) for each of its
ceil(g/2) rank orders past the first ("x8 flat": every job 90 s). Columns add up over the
fleets of a row; the partner-dependent escape bound is 2^-(g-1) per node per group round.
"misses" counts faulty nodes not drained (UNKNOWN and FLAKY ones included) and uplinks not
named; "GOOD bad" counts the faulty nodes among them reported GOOD.
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
from gpufabric.verify.sweep_plan import Cost


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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="16,64,256,1024,4096")
    ap.add_argument("--fleets", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--job-seconds", type=float, default=sweepfleet.PAIR_S)
    ap.add_argument("--run-seconds", type=float, default=sweepfleet.RUN_S)
    ap.add_argument("--classes", default=",".join(sweepfleet.CLASSES))
    ap.add_argument("--pairs-only", action="store_true", help="two-node jobs only (no groups)")
    ap.add_argument("--group", type=int, default=16, help="nodes per group job (at most 16)")
    args = ap.parse_args()
    head = (
        f"{'scenario':<8} {'N':>5} {'k':>4} {'fleets':>6} {'false drains':>12} {'misses':>6} {'GOOD bad':>8} "
        f"{'flaky FLAKY':>11} {'flaky GOOD':>10} {'false paths':>11} {'unknown':>7} "
        f"{'rounds':>6} {'jobs':>7} {'wall x1':>8} {'wall x8':>8} {'x8 flat':>9} {'sim s':>6}"
    )
    print(head)
    for kind in args.classes.split(","):
        for n in (int(x) for x in args.sizes.split(",")):
            scores, spent = [], 0.0
            for i in range(args.fleets):
                got, took = run(
                    n, kind, args.seed * 1000 + i, 2 if args.pairs_only else args.group,
                    args.job_seconds,
                    args.run_seconds,
                )  # fmt: skip
                scores.append(got)
                spent += took
            print(_row(kind, n, scores, spent, args.job_seconds), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
