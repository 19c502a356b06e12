"""One discovery: read, infer, write the stack, render it and gate on the difference."""

from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path
from typing import Any

from gpufabric.discover import roundtrip, snapshot, stackwrite
from gpufabric.discover.compose import infer
from gpufabric.discover.infer import Notes
from gpufabric.exitcodes import ExitCode
from gpufabric.model.problems import Problem, StackError
from gpufabric.model.stackfile import parse_stack_text
from gpufabric.outputs import importmap
from gpufabric.plan.build import Plan, build_plan
from gpufabric.verify.interrupts import check_running
from gpufabric.verify.kube import Kube, Malformed

SHOWN = 200
"""Differences printed at most (the count is always printed)."""


def discover(args: argparse.Namespace, fallback: str) -> int:
    with check_running():
        kube = Kube(args.kubeconfig, args.context)
        snap = snapshot.read(kube, args.timeout)
    applied, config, notes = _inferred(snap, fallback, args.context, args.cluster_name)
    name = fallback  # the Pulumi stack is the file's: its name labels every object
    if applied != name:
        notes.hints.append(
            f"the cluster's objects carry gpufabric.io/stack={applied}: as stack {name} every "
            f"one would be relabelled (the differences below); --out "
            f"{args.out.with_name(f'Pulumi.{applied}.yaml')} keeps them"
        )
    where = f"context {args.context}" if args.context else "the kubeconfig's current context"
    text = stackwrite.text(name, where, config, notes)
    write(args.out, args.out, text)
    nodes = len(snap.nodes)
    print(
        f"read {nodes} nodes and {len(snap.all()) - nodes} objects in {snap.seconds:.1f} s; "
        f"wrote {args.out} (stack {name})"
    )
    if snap.unserved_unknown:
        print(
            f"not served: not known ({snap.unserved_unknown}): an empty collection may be "
            "one the API does not serve",
            file=sys.stderr,
        )
    if snap.unserved:
        print(
            f"not served: {', '.join(snap.unserved)}: read as none (the operator is not "
            "installed, or serves another version than discovery reads)",
            file=sys.stderr,
        )
    report_notes(notes, foreign=False)
    try:
        model = parse_stack_text(text, str(args.out))
    except StackError as err:
        report_notes(notes, unmapped=False)
        print(err.message("gpufabric discover"), file=sys.stderr)
        print(
            "the discovered stack does not validate: edit it, then run discover again",
            file=sys.stderr,
        )
        return ExitCode.BAD_INPUT
    plan = build_plan(name, model)
    write_import_map(args.out, fallback, plan, snap)
    gate = roundtrip.compare(plan, snap.all())
    report_notes(notes, unmapped=False, adopted=gate.adopted)
    return report_gate(gate, args.allow_diff)


def write_import_map(out: Path, stack: str, plan: Plan, snap: snapshot.Snapshot) -> None:
    """Beside the stack file, the live objects its first `pulumi up` would adopt (Pulumi's
    import file; URNs of ``stack``, the Pulumi stack the file is)."""
    path = importmap.path_beside(out)
    found = importmap.entries(plan, snap.all())
    write(out, path, importmap.text(stack, plan, found))
    count = len(found)
    charts = len(importmap.adopted_by_charts(plan))
    print(
        f"wrote {path}: {count} live object(s) to import before the first `pulumi up`; "
        f"{charts} chart(s) and overlay(s) adopt their own objects"
    )


def write(out: Path, path: Path, text: str) -> None:
    """``text`` to ``path`` (the --out file ``out`` or the import map beside it), its
    directory made; StackError naming --out when it cannot be written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        what = "" if path == out else f"the import map beside it, {path}, "
        why = f"{out}: {what}cannot be written ({exc.strerror or exc})"
        raise StackError("gpufabric discover", [Problem("--out", why)]) from exc


def _inferred(
    snap: snapshot.Snapshot, fallback: str, context: str | None, cluster: str | None
) -> tuple[str, dict[str, Any], Notes]:
    """The stack the snapshot gives; an object whose fields hold values of types their own
    API's schema forbids (a real API server validates them: a proxy or a broken aggregated
    API served it) ends discovery with exit 3, nothing written, instead of a traceback."""
    try:
        return infer(snap, fallback, context, cluster)
    except (TypeError, AttributeError, ValueError, KeyError) as err:
        _malformed(err)
        raise


def _malformed(err: Exception) -> None:
    """Raise :class:`Malformed` for ``err`` as the cluster's answer (exit 3)."""
    with check_running():
        where = traceback.extract_tb(err.__traceback__)[-1]
        raise Malformed(
            f"the cluster served an object whose fields discovery cannot read ({type(err).__name__}: "
            f"{err}; in {Path(where.filename).name}:{where.lineno}); a real API server validates "
            "objects against their schema: check what answers for it; nothing was written"
        ) from err


def report_notes(
    notes: Notes, unmapped: bool = True, foreign: bool = True, adopted: list[str] | None = None
) -> None:
    """``not mapped:`` and ``hint:`` lines, then ``foreign`` ones and the secrets to set; an
    object of the fabric's kinds that gpufabric did not make but renders too (the singleton
    NicClusterPolicy, a network of the same name) is ``adopted``: compared field by field,
    its differences printed."""
    for line in notes.unmapped if unmapped else []:
        print(f"not mapped: {line}", file=sys.stderr)
    for line in notes.hints if unmapped else []:
        print(f"hint: {line}", file=sys.stderr)
    for line in notes.foreign if foreign else []:
        if line in (adopted or []):
            print(f"adopted (compared field by field): {line}", file=sys.stderr)
        else:
            print(f"foreign (left alone): {line}", file=sys.stderr)
    for path, command in notes.secrets if foreign else []:
        print(f"set before pulumi up: {path}: {command}", file=sys.stderr)


def report_gate(gate: roundtrip.Gate, allow: bool) -> int:
    for diff in gate.differences[:SHOWN]:
        print(f"diff: {diff}", file=sys.stderr)
    if len(gate.differences) > SHOWN:
        print(f"diff: ... and {len(gate.differences) - SHOWN} more", file=sys.stderr)
    n = len(gate.differences)
    print(
        f"round trip: {gate.matched} objects identical, {n} field difference(s), "
        f"{len(gate.foreign)} foreign"
    )
    if n and not allow:
        print(
            "the render differs from the cluster (exit 4); --allow-diff accepts it", file=sys.stderr
        )
        return ExitCode.FAIL
    return ExitCode.OK
