"""``gpufabric job``: print a training job wired for a stack and tenant (queue, rails, NCCL,
GPUs), validated against the upstream CRDs when --crd-dir is given."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpufabric.cli.files import crd_dir_ok
from gpufabric.cli.options import directory_arg
from gpufabric.exitcodes import ExitCode
from gpufabric.model.stackfile import Stack
from gpufabric.outputs.jobs import (
    JOB_KINDS,
    JobRequest,
    apply_notes,
    borrowing_notes,
    checkpoint_notes,
    job_objects,
    plan_for_pool,
    read_entrypoint,
)
from gpufabric.outputs.render import to_yaml


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tenant", required=True, help="tenant namespace the job runs in")
    p.add_argument("--kind", required=True, choices=JOB_KINDS, help="job kind")
    p.add_argument("--nodes", type=int, default=2, help="GPU nodes (pods) the job spans (2)")
    p.add_argument(
        "--pool",
        help="the node pool the job runs on (gpuNodes[].name; default: the only pool, "
        "required on a stack with several): its nodes, rails, RDMA resources and NCCL "
        "settings; a job never mixes pools",
    )
    p.add_argument("--image", help="container image (default: the pinned training image)")
    p.add_argument(
        "--command",
        dest="program",
        metavar="COMMAND",
        help="program the job runs, one shell-quoted string (default: an NCCL all-reduce test); "
        "MPIJobs run it under mpirun on every GPU",
    )
    p.add_argument("--name", help="job name (default: <tenant>-<kind>)")
    p.add_argument(
        "--entrypoint",
        action="append",
        type=Path,
        metavar="PATH",
        help="a file, or a directory's top-level files, shipped in the ConfigMap "
        "<name>-entrypoint and mounted read-only as the GPU pods' working directory (repeat "
        "for more); --command then names the program, e.g. 'torchrun ddp_resume.py'",
    )
    p.add_argument("--runtime", help="TrainJob runtime (default: the stack's first)")
    p.add_argument(
        "--leaf",
        help="the leaf switch the job runs under, where the stack's rails are routed per "
        "leaf (fabric.rails[].blocks): its pods attach that leaf's networks and are "
        "placed under it (optional with fabric.ipam.routing: spanLeaves, where the "
        "networks span leaves)",
    )
    p.add_argument(
        "--crd-dir",
        type=directory_arg,
        help="directory of upstream CRDs to validate the job against before printing it",
    )
    p.add_argument(
        "--max-restarts",
        type=int,
        help="gang restarts before the job fails (default: training.failurePolicy.maxRestarts;"
        " mpijob and pytorchjob only: a TrainJob restarts as its runtime says)",
    )
    p.add_argument(
        "--active-deadline",
        metavar="DURATION",
        help="wall-clock backstop of the job, restarts included, e.g. 3d or 36h "
        "(default: training.failurePolicy.activeDeadline)",
    )
    p.add_argument(
        "--elastic",
        metavar="MIN:MAX",
        help="an elastic PyTorchJob: starts on MAX (= --nodes) nodes and keeps training down "
        "to MIN, torchrun restarting its workers over a c10d rendezvous",
    )


def cmd_job(stack: Stack, args: argparse.Namespace) -> int:
    plan = plan_for_pool(stack.plan, args.pool)
    request = JobRequest(
        tenant=args.tenant,
        kind=args.kind,
        nodes=args.nodes,
        image=args.image,
        command=args.program,
        name=args.name,
        runtime=args.runtime,
        leaf=args.leaf,
        max_restarts=args.max_restarts,
        active_deadline=args.active_deadline,
        elastic=args.elastic,
        entrypoint=read_entrypoint(args.entrypoint or ()),
    )
    objects = job_objects(plan, request)
    if args.crd_dir is not None:
        if not crd_dir_ok(args.crd_dir):
            return ExitCode.BAD_INPUT
        from gpufabric.outputs.schema import validate_objects

        report = validate_objects(objects, plan.facts.kubernetes_minor, args.crd_dir)
        if not report.ok or report.unchecked:
            print(f"gpufabric: the {args.kind} did not validate:", file=sys.stderr)
            for err in report.errors:
                print(f"  - {err}", file=sys.stderr)
            for reason in sorted(report.unchecked_reasons):
                print(f"  - not checked: {reason}", file=sys.stderr)
            return ExitCode.INVALID_OBJECTS
    notes = [
        *checkpoint_notes(plan, request),
        *apply_notes(objects),
        *borrowing_notes(plan.facts, args.tenant),
    ]
    for note in notes:
        print(f"gpufabric: note: {note}", file=sys.stderr)
    print("---\n".join(to_yaml(o) for o in objects), end="")
    return ExitCode.OK
