"""``gpufabric report``: one self-contained HTML acceptance page from the verify commands'
JSON (:mod:`gpufabric.outputs.report`, loaded when the command runs)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpufabric.cli.files import write_out
from gpufabric.model.stackfile import Stack


def arguments(p: argparse.ArgumentParser) -> None:
    for option, title, command in (
        ("--nodes", "node checks", "verify nodes --json"),
        ("--cluster", "cluster checks", "verify cluster --json"),
        ("--nccl", "NCCL acceptance", "nccl-report --json or verify nccl --json"),
        ("--sweep", "NCCL sweep", "verify nccl --sweep --json"),
        (
            "--storage",
            "shared storage checks, where the stack has storage",
            "verify storage --json",
        ),
    ):
        p.add_argument(
            option, action="append", type=Path, metavar="FILE", help=f"{title}: `{command}`"
        )
    p.add_argument("--title", help="the page's title (default: GPU cluster acceptance)")
    p.add_argument("--out", type=Path, help="write the HTML page here instead of printing it")


def cmd_report(args: argparse.Namespace, _stack: Stack | None = None) -> int:
    from gpufabric.outputs import report

    every = report.INPUTS + report.OPTIONAL_INPUTS
    given = {opt: getattr(args, opt[2:]) or [] for opt, _t, _c in every}
    inputs = report.load(given, args.title)
    page = report.render_html(inputs)
    verdict = report.overall(inputs)
    if args.out is None:
        sys.stdout.write(page)
    else:
        write_out(args.out, page, "report")
        print(f"wrote {args.out}: {verdict}", file=sys.stderr)
    return verdict.exit_code
