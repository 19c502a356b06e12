"""``gpufabric verify nodes|pods|cluster|nccl|storage``: the arguments of each check, and
the command that runs the chosen one.

Parsing them (and ``--help``, and any other command) never imports the checks (pytest, the
Kubernetes client code, the NCCL parser): :func:`run` loads :mod:`gpufabric.cli.verify_run`
when a check runs. The defaults the checks use are :mod:`gpufabric.verify.defaults`', so
the help text and the code agree.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from gpufabric.cli.options import (
    RULES,
    THRESHOLD_RULES,
    AppliesOnly,
    add_threshold_args,
    confirm,
    kube_args,
    number,
    seconds,
    stack_arg,
    whole,
)
from gpufabric.model.stackfile import Stack
from gpufabric.plan.items import LAYER_ORDER, Layer
from gpufabric.verify.defaults import (
    DEFAULT_HOST_TIMEOUT,
    DEFAULT_PARALLEL,
    NCCL_JOB_NAME,
    NCCL_TIMEOUT,
    STORAGE_MIB,
    STORAGE_PARALLEL,
    STORAGE_TIMEOUT,
)

_VERIFY_HELP = """\
Prove a cluster built from the stack works: node preflight, checks inside training pods,
readiness of everything the stack installs, the NCCL acceptance test, and the tenants'
shared storage.

exit codes: 0 PASS, 4 FAIL, 5 INCONCLUSIVE (something could not be decided, or the NCCL
run timed out), 2 bad input, 3 the cluster or the hosts could not be asked at all.
"""


def _outputs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the JSON document instead")
    p.add_argument("--junit", type=Path, metavar="FILE", help="also write JUnit XML for CI")


def _timeout_arg(p: argparse.ArgumentParser, default: float, note: str = "") -> None:
    p.add_argument(
        "--timeout",
        type=seconds,
        default=default,
        help=f"seconds the whole command may take (default {default:g}{note}); deleting what "
        "it created may take 30 s more",
    )


def _group(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or not 2 <= int(text) <= 1024:
        raise argparse.ArgumentTypeError(
            f"{text[:20]!r}: expected a whole number of nodes 2 to 1024 (2: two-node jobs only)"
        )
    return int(text)


def add_parser(sub: Any, summary: str) -> None:
    """``verify`` and its checks, each with --stack, on the command's subparsers ``sub``."""
    verify = sub.add_parser(
        "verify",
        help=summary,
        description=_VERIFY_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    vsub = verify.add_subparsers(dest="verify_command", required=True, metavar="CHECK")
    for add in (_nodes_parser, _pods_parser, _cluster_parser, _nccl_parser, _storage_parser):
        add(vsub)


def _nodes_parser(vsub: Any) -> None:
    p = vsub.add_parser("nodes", help="node preflight (testinfra) over ssh or probe pods")
    stack_arg(p)
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--hosts", help="testinfra hosts, comma-separated: ssh://gpu-a,ssh://gpu-b, local://"
    )
    where.add_argument(
        "--via-cluster",
        action="store_true",
        help="run a privileged probe DaemonSet on the GPU nodes and check through kubectl exec",
    )
    p.add_argument(
        "--pool",
        help="the node pool to check (gpuNodes[].name), by its layout (GPUs, rails, link, "
        "rate, MTU); default: the only pool; on a stack with several, --via-cluster checks "
        "every pool, each node by the pool its labels select, and --hosts needs --pool",
    )
    p.add_argument(
        "--root",
        default="/",
        help="where the node's root file system is seen (default /; --via-cluster uses /host)",
    )
    p.add_argument(
        "--probe-image", help="with --via-cluster: image of the probe pods (default: pinned)"
    )
    p.add_argument(
        "--keep-probe",
        action="store_true",
        help="with --via-cluster: leave the probe DaemonSet running",
    )
    p.add_argument(
        "--parallel",
        type=int,
        default=DEFAULT_PARALLEL,
        help=f"hosts checked at once (default {DEFAULT_PARALLEL})",
    )
    p.add_argument(
        "--host-timeout",
        type=seconds,
        default=DEFAULT_HOST_TIMEOUT,
        help=f"seconds one host's checks may take (default {DEFAULT_HOST_TIMEOUT:g})",
    )
    _timeout_arg(p, 1800)
    p.add_argument(
        "--write-expect",
        type=Path,
        metavar="FILE",
        help="write the stack's expectations for running the suite with pytest directly, and exit",
    )
    kube_args(p)
    _outputs(p)
    p.set_defaults(**{RULES: NODES_RULES})


def _via_cluster_only(flag: str, dest: str) -> AppliesOnly:
    return AppliesOnly(
        flag, dest, lambda a: bool(a.via_cluster), "applies only with --via-cluster (--hosts "
        "reach the hosts themselves, each within --host-timeout)",
    )  # fmt: skip


def _without_write_expect(flag: str, dest: str) -> AppliesOnly:
    return AppliesOnly(
        flag, dest, lambda a: a.write_expect is None,
        "is ignored with --write-expect, which writes the expectations and exits: drop one",
    )  # fmt: skip


NODES_RULES = (
    AppliesOnly(
        "--root",
        "root",
        lambda a: bool(a.hosts),
        "applies only with --hosts (--via-cluster sees the node's root at /host)",
    ),
    *(
        _via_cluster_only(flag, dest)
        for flag, dest in (
            ("--probe-image", "probe_image"),
            ("--keep-probe", "keep_probe"),
            ("--timeout", "timeout"),
            ("--kubeconfig", "kubeconfig"),
            ("--context", "context"),
        )
    ),
    _without_write_expect("--hosts", "hosts"),
    _without_write_expect("--via-cluster", "via_cluster"),
)
"""``verify nodes``: the flags of one way of reaching the nodes given with the other."""


def _pods_parser(vsub: Any) -> None:
    p = vsub.add_parser("pods", help="checks inside running training pods (testinfra)")
    stack_arg(p)
    p.add_argument(
        "--hosts",
        required=True,
        help="pods as testinfra hosts: kubectl://POD?namespace=NS&container=C,...",
    )
    p.add_argument("--netns", default="", help="run the network checks in this netns instead")
    _outputs(p)


def _cluster_parser(vsub: Any) -> None:
    p = vsub.add_parser("cluster", help="readiness of everything the stack installs (API)")
    stack_arg(p)
    p.add_argument(
        "--layers",
        type=_layers,
        metavar="LAYER,...",
        help="only these layers (" + ",".join(layer.value for layer in LAYER_ORDER) + "), as "
        "after a phase of a bring-up; node GPUs are checked with gpu, RDMA with network",
    )
    _timeout_arg(p, 300)
    kube_args(p)
    _outputs(p)


def _nccl_parser(vsub: Any) -> None:
    p = vsub.add_parser(
        "nccl", help="run the NCCL acceptance job (MPIJob, TrainJob or PyTorchJob) and judge it"
    )
    stack_arg(p)
    p.add_argument(
        "--tenant",
        required=True,
        help="tenant namespace the job runs in (its members can alter the job and its log: "
        "name a tenant you trust with node verdicts)",
    )
    p.add_argument(
        "--nodes",
        type=int,
        default=2,
        help="GPU nodes the test spans, at least 2 (default 2; a sweep sizes its own jobs)",
    )
    p.add_argument(
        "--pool",
        help="the node pool the test runs on (gpuNodes[].name; default: the only pool, "
        "required on a stack with several): its rails, NCCL settings and threshold; with "
        "--sweep: sweep only this pool (default: every pool, each apart)",
    )
    p.add_argument("--image", help="image with nccl-tests' *_perf_mpi (default: pinned)")
    p.add_argument(
        "--name",
        default=NCCL_JOB_NAME,
        help="the acceptance job's name, whatever its kind (gpufabric-nccl)",
    )
    p.add_argument(
        "--leaf",
        help="where rails are routed per leaf (fabric.rails[].blocks): the leaf the test runs "
        "under, attaching that leaf's networks (a sweep then covers that leaf's nodes); "
        "optional with fabric.ipam.routing: spanLeaves",
    )
    _timeout_arg(
        p,
        NCCL_TIMEOUT,
        "; with --sweep, each of its jobs: a group job of g nodes runs both tests once per rank "
        "order, ceil(g/2) orders, so allow for admission plus ceil(g/2) x 2 test runs",
    )
    p.add_argument("--poll", type=float, default=10.0, help=argparse.SUPPRESS)
    p.add_argument(
        "--keep", action="store_true", help="do not delete the acceptance job afterwards"
    )
    add_threshold_args(p)
    _nvlink_arg(p)
    _sweep_args(p)
    p.add_argument(
        "--dry-run", action="store_true", help="print the job(s) that would run, and exit"
    )
    kube_args(p)
    _outputs(p)
    p.set_defaults(**{RULES: NCCL_RULES + THRESHOLD_RULES})


def _nvlink_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--nvlink-min-busbw",
        type=_gbps,
        metavar="GBPS",
        help="on an NVL72 pool (gpuNodes.nvlink), a run inside one NVLink domain (--nodes at "
        "most 18 trays): the all_reduce bus bandwidth at 8 GiB it must reach, in GB/s, instead "
        "of the system's bar (GB200 750, GB300 800); any test kind is then held to it",
    )


def _sweep_only(flag: str, dest: str) -> AppliesOnly:
    return AppliesOnly(flag, dest, lambda a: bool(a.sweep), "applies only with --sweep")


NCCL_RULES = (
    AppliesOnly(
        "--nodes",
        "nodes",
        lambda a: not a.sweep,
        "applies only without --sweep: a sweep sizes its own jobs (two-node jobs, and group "
        "jobs of at most --sweep-group nodes)",
    ),
    _sweep_only("--sweep-timeout", "sweep_timeout"),
    _sweep_only("--sweep-confirm", "sweep_confirm"),
    _sweep_only("--sweep-group", "sweep_group"),
    AppliesOnly(
        "--nvlink-min-busbw",
        "nvlink_min_busbw",
        lambda a: not a.sweep,
        "applies only without --sweep: the sweep judges its jobs inside a rack by the system's bar",
    ),
)
"""``verify nccl``: one acceptance job's flags with --sweep, and the sweep's without it."""


def _sweep_args(p: argparse.ArgumentParser) -> None:
    """--sweep and the options that apply only with it."""
    p.add_argument(
        "--sweep",
        action="store_true",
        help="find the bad nodes and uplinks: group jobs of as many nodes as the quota runs at "
        "once under each leaf (each runs the tests once per rank order so its rings load every "
        "pair; a failing group splits down to pairs), then rounds of two-node jobs over every "
        "GPU node, within and across the leaf/spine levels of the topology; a node is GOOD after passing "
        "C jobs with distinct GOOD partners (C = --sweep-confirm with two-node jobs; with group jobs "
        "max(8, C, ceil(log2 N) + 5) for N nodes, printed before it starts), FLAKY when it failed and passed (never "
        "drained on one result); prints the jobs and expected time first, then a table per node, "
        "the uplinks at fault and the nodes to drain",
    )
    p.add_argument(
        "--sweep-confirm",
        type=confirm,
        metavar="C",
        help="with --sweep: jobs a node must pass, with distinct GOOD partners, to be GOOD (default 3; "
        "with group jobs it must also pass with max(8, C, ceil(log2 N) + 5) distinct partners; "
        "a node failing a fraction f of its jobs and never caught escapes with probability at "
        "most (1-f)^C)",
    )
    p.add_argument(
        "--sweep-group",
        type=_group,
        metavar="N",
        help="with --sweep: at most N nodes per group job (default: the nodes the tenant's GPU "
        "quota runs at once, at most a leaf's; 2: two-node jobs only)",
    )
    p.add_argument(
        "--sweep-timeout",
        type=seconds,
        metavar="SECONDS",
        help="with --sweep: seconds the whole sweep may take (default: no limit beyond each "
        "job's --timeout); when reached, or on Ctrl-C, the nodes judged so far are reported",
    )


def _gbps(text: str) -> float:
    return number(text, repr(text[:40]), "a number of GB/s", lambda v: 0 < v < 1e5, "expected GB/s > 0")  # fmt: skip


def _positive(text: str) -> int:
    return whole(text, 1)


def _throughput(text: str) -> float:
    return number(text, repr(text[:40]), "a number of MB/s", lambda v: 0 < v < 1e7, "expected MB/s > 0")  # fmt: skip


def _storage_parser(vsub: Any) -> None:
    p = vsub.add_parser(
        "storage",
        help="each tenant's claims from pods on the GPU nodes: transport, RWX, throughput",
    )
    stack_arg(p)
    p.add_argument("--tenant", help="only this tenant namespace (default: every tenant)")
    p.add_argument(
        "--sample",
        type=_positive,
        metavar="N",
        help="N GPU nodes per tenant, chosen at random (default: every Ready GPU node)",
    )
    p.add_argument(
        "--min-throughput",
        type=_throughput,
        metavar="MBPS",
        help="sequential write and read threshold per node in MB/s (default: 5%% of one "
        "rail's line rate, e.g. 2500 for 400 Gb/s)",
    )
    p.add_argument(
        "--timeout",
        type=seconds,
        default=STORAGE_TIMEOUT,
        help=f"seconds each pod may take (default {STORAGE_TIMEOUT:g}); deleting it may "
        "take 30 s more",
    )
    p.add_argument(
        "--parallel",
        type=_positive,
        default=STORAGE_PARALLEL,
        help=f"pods at once (default {STORAGE_PARALLEL}); they share the storage server",
    )
    p.add_argument(
        "--size-mib",
        type=_positive,
        default=STORAGE_MIB,
        metavar="MIB",
        help=f"MiB each node writes and reads per writable claim (default {STORAGE_MIB})",
    )
    p.add_argument("--image", help="image with sh, cat and dd (default: the pinned probe image)")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the pods each tenant's run creates (on two placeholder nodes), and exit",
    )
    p.add_argument("--poll", type=float, default=2.0, help=argparse.SUPPRESS)
    kube_args(p)
    _outputs(p)


def _layers(text: str) -> frozenset[Layer]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    known = [layer.value for layer in LAYER_ORDER]
    bad = [n for n in names if n not in known]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"unknown layer {', '.join(bad) or repr(text)}; accepted: {', '.join(known)}"
        )
    return frozenset(Layer(n) for n in names)


def run(stack: Stack, args: argparse.Namespace) -> int:
    """Run the chosen check (:func:`gpufabric.cli.verify_run.run`)."""
    from gpufabric.cli import verify_run

    return verify_run.run(stack, args)
