"""``gpufabric health``: quarantine GPU nodes with a fatal fault (within a circuit
breaker), re-certify them once the cause is cleared, return those that pass; once, or every
--interval with --watch.

Exit codes (:mod:`gpufabric.exitcodes`): 0 every fault acted on; 4 the circuit breaker held
a node with a fatal fault (reported by name and fault); 5 another pass held the Lease, or the
alerts could not be read (what the node conditions say was still acted on; no node
re-certified); 2 bad input; 3 the cluster could not be asked.

Parsing the arguments imports nothing that talks to a cluster: :func:`run` loads the passes
(:mod:`gpufabric.health.passes`) when the command runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading

from gpufabric.cli.options import (
    RULES,
    THRESHOLD_RULES,
    AppliesOnly,
    add_threshold_args,
    confirm,
    kube_args,
    number,
    seconds,
    whole,
)
from gpufabric.health.defaults import (
    API,
    INTERVAL,
    JOB_TIMEOUT,
    NAME,
    PROBE,
    PROBE_TIMEOUT,
    RETRY_AFTER,
)
from gpufabric.model.stackfile import Stack
from gpufabric.verify.interrupts import check_running, leftovers, terminating_signals

HELP = (
    "quarantine GPU nodes with a fatal fault (within a circuit breaker), re-certify them "
    "once the cause is cleared, return those that pass"
)


def _count(text: str) -> int:
    return whole(text, 0)


def _fraction(text: str) -> float:
    return number(text, repr(text[:40]), "a fraction", lambda v: 0 < v <= 1, "expected a fraction > 0 and <= 1")  # fmt: skip


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tenant",
        required=True,
        help="tenant namespace the re-certification sweep jobs run in (its members can alter them: name a tenant you trust with node verdicts)",
    )
    p.add_argument(
        "--prometheus",
        metavar="URL",
        help="Prometheus (or Thanos) base URL: also act on gpufabric's firing alerts "
        '(quarantine="true": quarantine; "false": no action); without it, node conditions only',
    )
    p.add_argument(
        "--max-quarantined",
        type=_count,
        metavar="N",
        help="circuit breaker: at most N GPU nodes quarantined at once, those already "
        "quarantined included (default: monitoring.health.maxQuarantined)",
    )
    p.add_argument(
        "--max-fraction",
        type=_fraction,
        metavar="F",
        help="circuit breaker: and at most F x the GPU nodes (default: "
        "monitoring.health.maxQuarantinedFraction); both limits hold",
    )
    _loop_args(p)
    _node_check_args(p)
    _sweep_args(p)
    kube_args(p)
    p.add_argument(
        "--in-cluster",
        action="store_true",
        help="use the pod's service account (the rendered CronJob/Deployment), not a "
        "kubeconfig or the stack's cluster.kubeContext",
    )
    p.add_argument("--json", action="store_true", help="print the JSON document instead")
    p.set_defaults(**{RULES: FLAG_RULES + THRESHOLD_RULES})


def _probe_only(flag: str, dest: str) -> AppliesOnly:
    return AppliesOnly(
        flag, dest, lambda a: a.node_checks == PROBE,
        f"applies only with --node-checks {PROBE} (--node-checks {API} starts no probe pods)",
    )  # fmt: skip


FLAG_RULES = (
    AppliesOnly(
        "--interval",
        "interval",
        lambda a: bool(a.watch),
        "applies only with --watch (without it, one pass runs and the command ends)",
    ),
    _probe_only("--probe-image", "probe_image"),
    _probe_only("--probe-timeout", "probe_timeout"),
)
"""Flags another flag makes ``health`` ignore: refused (exit 2) rather than ignored."""


def _loop_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--dry-run", action="store_true", help="print the actions it would take; change nothing"
    )
    p.add_argument("--watch", action="store_true", help="run a pass every --interval until stopped")
    p.add_argument(
        "--interval",
        type=seconds,
        default=INTERVAL,
        help=f"with --watch: seconds between passes ({INTERVAL:g})",
    )
    p.add_argument(
        "--retry-after",
        type=seconds,
        default=RETRY_AFTER,
        help=f"seconds before a node that failed re-certification is tried again ({RETRY_AFTER:g})",
    )
    p.add_argument(
        "--timeout",
        type=seconds,
        default=120.0,
        help="seconds reading the nodes and alerts may take (120)",
    )


def _node_check_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--node-checks",
        choices=(PROBE, API),
        default=PROBE,
        help="re-certification's node checks after the API status (Ready, allocatable GPUs): "
        "probe (default) runs verify nodes' checks in a privileged probe pod pinned to the "
        "quarantined nodes; api stops at the API status (the rendered in-cluster loop)",
    )
    p.add_argument(
        "--probe-image",
        help="with --node-checks probe: image of the probe pods (default: the pinned one)",
    )
    p.add_argument(
        "--probe-timeout",
        type=seconds,
        default=PROBE_TIMEOUT,
        help=f"with --node-checks probe: seconds for the probe pods to run ({PROBE_TIMEOUT:g}); "
        "a node without one "
        "stays quarantined (node checks could not run)",
    )


def _sweep_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--job-timeout",
        type=seconds,
        default=JOB_TIMEOUT,
        help=f"seconds each re-certification job may take ({JOB_TIMEOUT:g})",
    )
    p.add_argument("--image", help="image with nccl-tests' *_perf_mpi (default: pinned)")
    p.add_argument("--name", default=NAME, help=f"prefix of the sweep jobs' names ({NAME})")
    p.add_argument(
        "--confirm",
        type=confirm,
        metavar="C",
        help="distinct GOOD partners a re-certified node must pass with (default 3)",
    )
    p.add_argument("--poll", type=float, default=10.0, help=argparse.SUPPRESS)
    add_threshold_args(p)


def run(stack: Stack, args: argparse.Namespace) -> int:
    """``gpufabric health``: once, or every --interval until interrupted (--watch)."""
    from gpufabric.health import lease, passes
    from gpufabric.verify.kube import Kube

    plan = stack.plan
    passes.check(plan, args)
    leftovers(clear=True)
    with check_running(), terminating_signals():
        kube = (
            Kube(in_cluster=True)
            if args.in_cluster
            else Kube(args.kubeconfig, args.context or plan.facts.kube_context)
        )
        stop, me = threading.Event(), lease.identity()
        while True:
            report = passes.guarded_pass(plan, args, kube, me)
            if args.json:
                sys.stdout.write(json.dumps(report.document(), indent=2) + "\n")
            else:
                sys.stdout.write(report.table())
            sys.stdout.flush()
            if not args.watch:
                return report.exit_code
            stop.wait(args.interval)  # Ctrl-C / SIGTERM end the wait (and the command)
