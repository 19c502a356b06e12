"""`verify nodes` over a simulated fleet: wall time, CPU, judging cost, hosts/s, peak memory.

    .venv/bin/python benchmarks/verify_fleet.py [--hosts 1024,10000] [--latency 0.05]
        [--parallel 256] [--judges N]

Each host is a node fixture tree (the kernel's sysfs/procfs formats, tests/nodefs.py), one
in --bad-every degraded (rail 3 down); the transport answers every round trip after
--latency seconds, as ssh or kubectl exec would. The gather script really runs (/bin/sh
over the tree) once per tree and script; every host's answer then goes through the real
path: framing checked, facts parsed, the shipped node checks judged (in --judges worker
processes, default as `verify nodes` chooses). Printed per size: wall seconds, CPU seconds
of this process and its judging processes together, the judging cost per host (one host's
answer judged alone, best of 5 rounds), CPU per host, hosts per second and peak resident
memory (this process; the largest judging process). Goal: 10,000 hosts at 50 ms in under
5 minutes (300 s) on 2 CPUs. Linux only (the judging processes are read in /proc).
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
from gpufabric.verify import expect
from gpufabric.verify.nodes import fleet
from gpufabric.verify.nodes import gather as nodes_gather

STACK = "prod-ib"


def _own_cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def _children() -> dict[int, tuple[float, int]]:
    """CPU seconds and peak RSS (KiB) of every live process below this one (the judging
    processes are the forkserver's children, so RUSAGE_CHILDREN never sees them)."""
    stats: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()
        except (OSError, ValueError):
            continue
        if entry.isdigit():
            stats[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK)
    below, found = {os.getpid()}, {}
    while True:
        more = {pid for pid, (ppid, _) in stats.items() if ppid in below and pid not in below}
        if not more:
            return found
        below |= more
        for pid in more:
            found[pid] = (stats[pid][1], _peak_kib(pid))


def _peak_kib(pid: int) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    line = next((ln for ln in status.splitlines() if ln.startswith("VmHWM:")), "VmHWM: 0 kB")
    return int(line.split()[1])


TICK = os.sysconf("SC_CLK_TCK")


def judging_ms(exp: expect.Expectation, answers: list[tuple[str, str, bytes]]) -> float:
    """Milliseconds of CPU one host's judging takes (each answer judged alone, best of 5)."""
    best = float("inf")
    for _ in range(5):
        start = time.process_time()
        for root, boundary, output in answers * 10:
            nodes_gather.judge("gpu-0", root, exp, [(boundary, output)], True)
        best = min(best, (time.process_time() - start) / (10 * len(answers)))
    return best * 1000


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


def _answers(transport: LatencyTransport, exp: expect.Expectation) -> list[tuple[str, str, bytes]]:
    """Each tree's answer to the gather script, as a host sends it."""
    found = []
    for spec in ("gpu-00000", "gpu-00001"):
        script = nodes_gather.gather_script(exp, transport.root(spec))
        found.append((transport.root(spec), script.boundary, transport.run(spec, script.text)))
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--hosts", default="1024,10000")
    ap.add_argument("--latency", type=float, default=0.05)
    ap.add_argument("--parallel", type=int, default=256)
    ap.add_argument("--judges", type=int, default=None, help="worker processes (0: none)")
    ap.add_argument("--bad-every", type=int, default=50)
    args = ap.parse_args()
    exp = expect.from_facts(build_plan(STACK, load_stack(STACK, None).model).facts)
    print(
        f"{STACK} node checks, {args.latency * 1000:g} ms a round trip, {args.parallel} hosts "
        f"at once, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the start, "
        f"1 host in {args.bad_every} bad"
    )
    print(
        f"{'hosts':>6} {'judges':>6} {'wall s':>7} {'CPU s':>7} {'judge ms/host':>13} "
        f"{'CPU ms/host':>11} {'hosts/s':>7} {'peak RSS MiB':>12} {'trips':>6} "
        f"{'FAIL hosts':>10} {'latency bound s':>15}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        healthy, bad = _roots(Path(tmp), exp)
        for count in (int(h) for h in args.hosts.split(",")):
            _run(args, exp, count, healthy, bad)
    return 0


def _run(
    args: argparse.Namespace, exp: expect.Expectation, count: int, healthy: Path, bad: Path
) -> None:
    hosts = [f"gpu-{i:05d}" for i in range(count)]
    roots = {h: bad if i % args.bad_every == 1 else healthy for i, h in enumerate(hosts)}
    transport = LatencyTransport(roots, latency=args.latency)
    judge_ms = judging_ms(exp, _answers(transport, exp))  # runs each tree once
    transport.round_trips = 0
    judges = fleet.judges_for(count, args.judges)
    kids: dict[int, tuple[float, int]] = {}

    def progress(done: int, total: int) -> None:
        if done == total:  # the judging processes are still there: read them
            kids.update(_children())

    cpu, start = _own_cpu(), time.perf_counter()
    results = fleet.run_fleet(
        hosts, exp, transport, parallel=args.parallel, judges=args.judges, progress=progress
    )
    wall, cpu = time.perf_counter() - start, _own_cpu() - cpu
    cpu += sum(c for c, _ in kids.values())
    failing = {c.target for c in results if c.status == "FAIL"}
    assert failing == {h for h, r in roots.items() if r == bad}, "verdicts changed"
    assert {c.status for c in results if c.target not in failing} <= {"PASS", "SKIP"}
    bound = transport.round_trips * args.latency / args.parallel
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    worker_rss = max((k for _, k in kids.values()), default=0) // 1024
    print(
        f"{count:>6} {judges:>6} {wall:>7.1f} {cpu:>7.1f} {judge_ms:>13.2f} "
        f"{cpu / count * 1000:>11.2f} {count / wall:>7.0f} {f'{rss}; {worker_rss}':>12} "
        f"{transport.round_trips:>6} {len(failing):>10} {bound:>15.1f}",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
