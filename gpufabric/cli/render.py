"""``gpufabric render``: write the stack's manifests to files, validated.

Its start is what every render pays: this module imports only what rendering uses (the
schema check, :mod:`gpufabric.outputs.schema`, loads when it runs).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from gpufabric.cli.files import crd_dir_ok
from gpufabric.cli.options import directory_arg
from gpufabric.exitcodes import ExitCode
from gpufabric.model.stackfile import Stack
from gpufabric.outputs import ownfile
from gpufabric.outputs.render import check_output_dir, render_files, write_tree
from gpufabric.plan.build import Plan
from gpufabric.plan.items import LAYER_ORDER, HelmChart, KustomizeOverlay
from gpufabric.support.counts import counted

if TYPE_CHECKING:
    from gpufabric.outputs.schema import Report


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, help="output directory (default: out/<stack>)")
    p.add_argument(
        "--crd-dir",
        type=directory_arg,
        help="directory of upstream CRDs to validate custom resources against",
    )


def _validate(plan: Plan, crd_dir: Path | None) -> Report:
    from gpufabric.outputs.schema import validate_objects

    objects = (obj.body for _, obj in plan.objects())
    return validate_objects(objects, plan.facts.kubernetes_minor, crd_dir)


def cmd_render(stack: Stack, args: argparse.Namespace) -> int:
    plan = stack.plan
    out: Path = args.out or Path("out") / stack.name
    crd_dir: Path | None = args.crd_dir
    if not crd_dir_ok(crd_dir):
        return ExitCode.BAD_INPUT
    check_output_dir(out)  # refuse before any work: the user's files are never at risk
    created = ownfile.creatable(out)
    report = _validate(plan, crd_dir)
    if not report.ok:
        errors = counted(len(report.errors), "schema error")
        print(f"{stack.name}: {errors} in rendered objects", file=sys.stderr)
        for err in report.errors:
            print(f"  - {err}", file=sys.stderr)
        print("nothing was written", file=sys.stderr)
        return ExitCode.INVALID_OBJECTS
    files = render_files(plan)
    write_tree(files, out, stack.name)
    _print_summary(plan, out, len(files), report)
    for directory in created:
        print(f"created directory {directory}", file=sys.stderr)
    return ExitCode.OK


def _print_summary(plan: Plan, out: Path, nfiles: int, report: Report) -> None:
    per_layer = Counter(it.layer for it, _ in plan.objects())
    items, files = counted(len(plan.items), "item"), counted(nfiles, "file")
    print(f"rendered stack {plan.stack}: {items}, {files} in {out}/")
    for layer in LAYER_ORDER:
        if per_layer[layer]:
            noun = "object" if per_layer[layer] == 1 else "objects"
            print(f"  {layer.value:<11} {per_layer[layer]:5d} {noun}")
    for it in plan.items:
        p = it.payload
        if isinstance(p, HelmChart):
            print(f"  chart       {p.chart} {p.version} ({p.repository}) -> {p.namespace}")
    for it in plan.items:
        p = it.payload
        if isinstance(p, KustomizeOverlay):
            print(f"  kustomize   {p.directory} -> {p.namespace}")
    checked = f"schema-validated {counted(report.checked_core, 'built-in object')}"
    if report.checked_custom:
        checked += f" and {counted(report.checked_custom, 'custom resource')}"
    print(f"  {checked}")
    if report.unchecked:
        reasons = "; ".join(sorted(report.unchecked_reasons))
        print(f"  not checked: {counted(len(report.unchecked), 'custom resource')} ({reasons})")
    print(f"  plan: {out}/plan.json")
