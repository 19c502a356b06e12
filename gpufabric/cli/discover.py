"""``gpufabric discover``: read a running cluster (get/list only) into a stack file, then
render it and diff the render against the live objects (:mod:`gpufabric.discover`, loaded
when the command runs)."""

from __future__ import annotations

import argparse
import math
import re
import sys
import tempfile
from pathlib import Path

from gpufabric.cli.options import RULES, AppliesOnly
from gpufabric.exitcodes import ExitCode
from gpufabric.model.problems import Problem, StackError

_OUT = re.compile(r"^Pulumi\.([A-Za-z0-9][A-Za-z0-9_.-]{0,61}[A-Za-z0-9]?)\.yaml$")
DEFAULT_TIMEOUT_S = 120.0
_CLUSTER = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
"""What cluster.name accepts (a DNS label), checked before the cluster is read."""


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kubeconfig", help="kubeconfig file (default: KUBECONFIG, ~/.kube/config)")
    p.add_argument("--context", help="kubeconfig context (default: its current context)")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--out",
        type=Path,
        metavar="stacks/Pulumi.<name>.yaml",
        help="the stack file to write (required unless --print-rbac); the import map "
        "Pulumi.<name>.import.json is written beside it",
    )
    what.add_argument(
        "--print-rbac",
        action="store_true",
        help="print the ClusterRole discovery needs (get/list only) and exit",
    )
    p.add_argument(
        "--cluster-name",
        metavar="NAME",
        help="cluster.name to write (default: the stack's name): the name the cluster was "
        "deployed with, where it has Pulumi state (the provider's cluster identifier)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="overwrite an --out file that gpufabric discover did not write",
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
    p.set_defaults(**{RULES: _RULES})


_RULES = tuple(
    AppliesOnly(
        flag,
        flag[2:].replace("-", "_"),
        lambda a: not a.print_rbac,
        "applies only with --out (--print-rbac reads no cluster)",
    )
    for flag in (
        "--kubeconfig",
        "--context",
        "--cluster-name",
        "--force",
        "--allow-diff",
        "--timeout",
    )
)
"""--print-rbac prints the ClusterRole and reads nothing: every flag of the read is refused
beside it rather than ignored."""


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


def _check_writable(out: Path, force: bool) -> None:
    """Before the cluster is read: ``out`` (and the import map beside it) can be written,
    and an existing ``out`` is one discover wrote (its header) unless ``force``; StackError
    naming --out otherwise."""
    from gpufabric.discover.stackwrite import written_by_discover
    from gpufabric.outputs.importmap import path_beside

    def refuse(why: str) -> StackError:
        return StackError("gpufabric discover", [Problem("--out", f"{out}: {why}")])

    beside = path_beside(out)
    if beside.exists() and not beside.is_file():
        raise refuse(f"the import map beside it, {beside}, is not a regular file")
    if out.is_file() and not force:
        try:
            with out.open(encoding="utf-8", errors="replace") as f:
                first = f.readline()
        except OSError as exc:
            raise refuse(f"exists and cannot be read ({exc.strerror or exc})") from exc
        if not written_by_discover(first):
            raise refuse(
                "exists and was not written by gpufabric discover (its first line is not "
                "discover's header); --force overwrites it"
            )
    parent = out.parent.absolute()
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise refuse(f"cannot be written: {parent} is not a directory")
    try:
        tempfile.TemporaryFile(dir=parent).close()
    except OSError as exc:
        raise refuse(f"cannot be written in {parent} ({exc.strerror or exc})") from exc


def cmd_discover(args: argparse.Namespace, _stack: object) -> int:
    from gpufabric.discover import sources

    if args.print_rbac:
        sys.stdout.write(sources.cluster_role())
        return ExitCode.OK
    if not math.isfinite(args.timeout) or args.timeout <= 0:
        why = f"{args.timeout}: expected a positive, finite number of seconds"
        raise StackError("gpufabric discover", [Problem("--timeout", why)])
    if args.cluster_name is not None and not _CLUSTER.match(args.cluster_name):
        raise StackError(
            "gpufabric discover",
            [
                Problem(
                    "--cluster-name",
                    f"{args.cluster_name!r}: expected lowercase letters, digits and '-', "
                    "starting and ending with a letter or digit, at most 63 characters",
                )
            ],
        )
    name = _out_name(args.out)
    _check_writable(args.out, args.force)
    from gpufabric.discover.run import discover

    return discover(args, name)
