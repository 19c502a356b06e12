"""``gpufabric discover``: read a running cluster (get/list only) into a stack file, then
render it and diff the render against the live objects (:mod:`gpufabric.discover`, loaded
when the command runs)."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from gpufabric.exitcodes import ExitCode
from gpufabric.model.problems import Problem, StackError

_OUT = re.compile(r"^Pulumi\.([A-Za-z0-9][A-Za-z0-9_.-]{0,61}[A-Za-z0-9]?)\.yaml$")
DEFAULT_TIMEOUT_S = 120.0


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kubeconfig", help="kubeconfig file (default: KUBECONFIG, ~/.kube/config)")
    p.add_argument("--context", help="kubeconfig context (default: its current context)")
    p.add_argument("--out", type=Path, help="the stack file to write: stacks/Pulumi.<name>.yaml")
    p.add_argument(
        "--print-rbac",
        action="store_true",
        help="print the ClusterRole discovery needs (get/list only) and exit",
    )
    p.add_argument(
        "--allow-diff",
        action="store_true",
        help="exit 0 even when the render of the discovered stack differs from the cluster",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help=f"seconds the whole read may take (default {DEFAULT_TIMEOUT_S:.0f})",
    )


def _out_name(out: Path | None) -> str:
    match = _OUT.match(out.name) if out is not None else None
    if out is None or match is None:
        shown = "not given" if out is None else repr(str(out))
        raise StackError(
            "gpufabric discover",
            [Problem("--out", f"{shown}: expected a stack file path, stacks/Pulumi.<name>.yaml")],
        )
    if out.exists() and not out.is_file():
        raise StackError("gpufabric discover", [Problem("--out", f"{out}: not a regular file")])
    return match.group(1)


def cmd_discover(args: argparse.Namespace, _stack: object) -> int:
    from gpufabric.discover import sources

    if args.print_rbac:
        sys.stdout.write(sources.cluster_role())
        return ExitCode.OK
    if args.timeout <= 0:
        why = f"{args.timeout}: expected a positive number of seconds"
        raise StackError("gpufabric discover", [Problem("--timeout", why)])
    name = _out_name(args.out)
    from gpufabric.discover.run import discover

    return discover(args, name)
