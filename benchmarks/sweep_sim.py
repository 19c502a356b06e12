"""The bad-node sweep over simulated fleets: false drains, misses, flaky reports, rounds, jobs
and wall time, per fault class and fleet size.

    .venv/bin/python benchmarks/sweep_sim.py [--sizes 16,64,256,1024 | --full] [--fleets 2]
        [--seed 1] [--job-seconds 90] [--run-seconds 15] [--pairs-only | --group 16]
        [--classes bad,flaky,partner,uplink,rail,mixed] [--forecast-sizes 1024,4096,10000]

Each fleet (tests/sweepfleet.py) puts its nodes 16 to a leaf (fewer on small fleets), four
leaves to a spine from 256 nodes, and k = max(1, N / 32) faults of the class (uplink: degraded
leaf uplinks, at most a quarter of the leaves; mixed: k bad, k flaky and k partner-dependent
nodes and the uplinks). The sweep gets the topology, as `verify nccl --sweep` reads it from the
node labels. The quota admits 8 two-node jobs at once (16 nodes); with groups allowed (up to
--group nodes) the planner picks pairs or the group size by its own estimate of the screening
wall time (sweep.cost.choose_mode; --pairs-only: two-node jobs, C partners), printed per N
before the table as `verify nccl --sweep` prints it. Wall time: "wall x8" admits each round's
jobs as the sweep's runner does (largest first, as the 16 nodes free), a pair taking
--job-seconds (90) and a group of g that plus 2 x --run-seconds (15) for each of its
ceil(g/2) rank orders past the first; "x8 flat" is every job 90 s; "wall x1" one job at a
time. Rail rounds (each bad node's rails alone) are included. Columns add up over the fleets
of a row. "misses" counts faulty nodes not drained (UNKNOWN and FLAKY ones included) and
uplinks not named; "GOOD bad" counts the faulty nodes among them reported GOOD; "flaky GOOD"
the flaky nodes GOOD after a job with healthy partners failed.

The estimate beside what ran: "est jobs" and "est x8" are what the estimate
(gpufabric/verify/sweep/forecast.py: the planner's own sweep against a fleet of the same nodes
whose k bad nodes fail every job, 8 rails) gives for the row's N and k, beside the "jobs" and
"wall x8" the sweeps of the row ran ("jobs" without one-rail jobs, "wall x8" with them); the
bad class differs from it only in which nodes are bad, the others show how far flaky,
partner-dependent, uplink and rail faults are from the bad-node model. Then, per N, each figure
the estimate prints (every job passing, one bad node, 1% bad nodes) beside the mean and range
over --fleets seeded fleets of the bad class with that many bad nodes, placed by the seed.

Last, the time the estimate itself takes before a sweep's first job (the three simulated
sweeps, as `verify nccl --sweep` runs them) on the fleet of issue 25: --forecast-sizes nodes
under leaves of 32, 8 two-node jobs' worth of quota, groups of up to 8, 8 rails (CPU seconds
of this process and wall seconds, with the jobs of each simulated fleet; empty: skipped).
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import sweepfleet

from gpufabric.verify.sweep import forecast as sweep_forecast
from gpufabric.verify.sweep.cost import Cost
from gpufabric.verify.sweep.run import localize_rails, sweep

BOUNDS = """bounds (not zero by construction):
- partner-dependent: a node slow with half of its partners is GOOD only if it passed with all
  of them: 2^-p for p distinct partners; with groups p = max(8, ceil(log2 N) + 5)
  (sweep.rounds.partners_needed: 15 at N = 1,024, 17 at 4,096), so even if every node of the
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


def _row(
    kind: str, n: int, scores: list[sweepfleet.Score], spent: float, flat_s: float,
    est: tuple[int, float],
) -> str:  # fmt: skip
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
        f"{est[0]:>8} {_hours(est[1]):>7} "
        f"{spent:>6.1f}"
    )


def _forecast(n: int, group: int, cost: Cost) -> tuple[sweepfleet.Fleet, sweep_forecast.Forecast]:  # fmt: skip
    """The estimate `verify nccl --sweep` prints for N nodes (8 rails, as the fleets have)."""
    fleet = sweepfleet.build(n, "bad", 0, 0)
    rails = len(sweepfleet.RAILS)
    fc = sweep_forecast.forecast(fleet.nodes, fleet.topology, fleet.levels, 8, 3, group, rails, cost)  # fmt: skip
    return fleet, fc


@functools.cache
def _estimated(n: int, k: int, group: int, cost: Cost) -> tuple[int, float]:
    """The estimate's jobs (without one-rail jobs) and wall time (with them) for ``k`` bad
    nodes of N."""
    fleet = sweepfleet.build(n, "bad", 0, 0)
    bad = sweep_forecast.bad_nodes(fleet.nodes, k)
    got = sweep_forecast.simulate(
        fleet.nodes, fleet.topology, fleet.levels, 8, 3, group, bad, len(sweepfleet.RAILS), cost
    )
    return got.jobs - got.rail_jobs, got.seconds(8, cost)


def _accuracy(n: int, fc: sweep_forecast.Forecast, args: argparse.Namespace, group: int) -> list[str]:  # fmt: skip
    """Each figure the estimate prints beside seeded fleets with that many bad nodes."""
    lines = []
    printed = [("all pass", 0, fc.passing), ("one bad", 1, fc.one)]
    if fc.share_bad > 1:
        printed.append((f"1% bad ({fc.share_bad})", fc.share_bad, fc.share))
    for label, k, outcome in printed:
        jobs, hours = [], []
        for i in range(args.fleets):
            fleet = sweepfleet.build(n, "bad", k, args.seed * 1000 + i)
            report = sweep(
                fleet.nodes, fleet.run_pair, 8, topology=fleet.topology, levels=fleet.levels,
                run_group=None if group <= 2 else fleet.run_group, group=group, cost=fc.cost,
            )  # fmt: skip
            if report.bad:
                localize_rails(report, sweepfleet.RAILS, fleet.run_rail_pair, 8)
            got = sweepfleet.score(fleet, report, pair_s=fc.cost.job_s, run_s=fc.cost.run_s)
            jobs.append(got.jobs + sum(len(report.nodes[b].rails) for b in report.bad))
            hours.append(got.seconds[8] / 3600)
        lines.append(
            f"{n:>5} {label:<14} {outcome.jobs:>8} {sum(jobs) / len(jobs):>9.0f} "
            f"{min(jobs):>6}-{max(jobs):<6} {fc.seconds(outcome) / 3600:>8.2f} "
            f"{sum(hours) / len(hours):>8.2f} {min(hours):>6.2f}-{max(hours):<6.2f}"
        )
    return lines


def _forecast_times(sizes: list[int]) -> list[str]:
    """How long the estimate takes at each size (leaves of 32 nodes, 8 pairs of quota, groups
    of up to 8, 8 rails), and the jobs of its three simulated fleets."""
    lines = [f"{'N':>6} {'leaves':>6} {'cpu s':>7} {'wall s':>7} {'healthy':>8} {'one bad':>8} {'1% bad':>8}"]  # fmt: skip
    for n in sizes:
        names = [f"gpu-{i:05d}" for i in range(n)]
        topo = {x: (f"leaf-{i // 32:04d}",) for i, x in enumerate(names)}
        cpu, wall = time.process_time(), time.perf_counter()
        fc = sweep_forecast.forecast(names, topo, (sweepfleet.LEAF_LABEL,), 8, 3, 8, rails=8)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        lines.append(
            f"{n:>6} {-(-n // 32):>6} {cpu:>7.1f} {wall:>7.1f} {fc.passing.jobs:>8} "
            f"{fc.one.jobs:>8} {fc.share.jobs:>8}"
        )
    return lines


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
    ap.add_argument("--forecast-sizes", default="1024,4096,10000", help="'' to skip")
    args = ap.parse_args()
    sizes = [16, 64, 256, 1024, 4096] if args.full else [int(x) for x in args.sizes.split(",")]
    group = 2 if args.pairs_only else args.group
    cost = Cost(args.job_seconds, args.run_seconds)
    accuracy = []
    for n in sizes:
        started = time.perf_counter()
        fleet, fc = _forecast(n, group, cost)
        took = time.perf_counter() - started
        words = sweep_forecast.words(fc, fleet.nodes, fleet.topology, None, 3, group)
        print(f"N={n} (estimated in {took:.2f} s): {words}")
        accuracy += _accuracy(n, fc, args, group)
    head = (
        f"{'scenario':<8} {'N':>5} {'k':>4} {'fleets':>6} {'false drains':>12} {'misses':>6} {'GOOD bad':>8} "
        f"{'flaky FLAKY':>11} {'flaky GOOD':>10} {'false paths':>11} {'unknown':>7} "
        f"{'rounds':>6} {'jobs':>7} {'wall x1':>8} {'wall x8':>8} {'x8 flat':>9} "
        f"{'est jobs':>8} {'est x8':>7} {'sim s':>6}"
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
            est = _estimated(n, max(1, n // 32), group, cost)
            print(_row(kind, n, scores, spent, args.job_seconds, est), flush=True)
    print(
        "\nthe printed estimate beside sweeps of seeded fleets of the bad class (jobs with the "
        "one-rail jobs; hours at 8 two-node jobs' worth of quota):"
    )
    print(f"{'N':>5} {'fleet':<14} {'est jobs':>8} {'sim jobs':>9} {'range':<13} {'est h':>8} {'sim h':>8} {'range':<13}")  # fmt: skip
    print("\n".join(accuracy))
    print(BOUNDS, end="")
    if args.forecast_sizes:
        print("\nthe estimate's own time (3 simulated sweeps; leaves of 32, quota 16 nodes, groups of 8, 8 rails):")  # fmt: skip
        for line in _forecast_times([int(x) for x in args.forecast_sizes.split(",")]):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
