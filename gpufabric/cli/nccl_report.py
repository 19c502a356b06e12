"""``gpufabric nccl-report``: judge nccl-tests output, PASS (0), FAIL (4) or INCONCLUSIVE
(5), against a stack's fabric or an explicit threshold (the analyzer,
:mod:`gpufabric.verify.nccl.report`, loads when the command runs)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from gpufabric.cli.options import RULES, AppliesOnly, add_threshold_args
from gpufabric.exitcodes import ExitCode
from gpufabric.model.stackfile import Stack, load_stack

MAX_LOG_BYTES = 512 << 20
"""nccl-tests logs are megabytes; a larger input is not one."""


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", type=Path, metavar="FILE", help="nccl-tests log or -J JSON")
    p.add_argument("--stack", help="stack whose fabric sets the expected transport and line rate")
    add_threshold_args(p)
    p.add_argument("--json", action="store_true", help="print the stable JSON document")
    p.set_defaults(**{RULES: _NCCL_REPORT_RULES})


_NCCL_REPORT_RULES = (
    AppliesOnly(
        "--fraction",
        "fraction",
        lambda a: a.stack is not None and a.min_busbw is None,
        "applies only with --stack (a fraction of its line rate) and without --min-busbw",
    ),
)


def cmd_nccl_report(args: argparse.Namespace, _stack: Stack | None = None) -> int:
    from gpufabric.verify.nccl import report as nccl_report
    from gpufabric.verify.nccl import rules as nccl_rules

    if not (math.isfinite(args.fraction) and 0 < args.fraction <= 1):
        print(
            f"gpufabric: --fraction {args.fraction}: expected a number in (0, 1]", file=sys.stderr
        )
        return ExitCode.BAD_INPUT
    if args.min_busbw is not None and not (math.isfinite(args.min_busbw) and args.min_busbw > 0):
        print(f"gpufabric: --min-busbw {args.min_busbw}: expected GB/s > 0", file=sys.stderr)
        return ExitCode.BAD_INPUT
    facts = None
    if args.stack:
        stack = load_stack(args.stack, args.stacks_dir)
        facts = stack.plan.facts
    files: dict[str, str] = {}
    for path in args.files:
        if not path.is_file():
            why = "no such file" if not path.exists() else "not a regular file (a log or -J JSON)"
            print(f"gpufabric: {path}: {why}", file=sys.stderr)
            return ExitCode.BAD_INPUT
        try:
            with path.open("rb") as f:
                data = f.read(MAX_LOG_BYTES + 1)
            if len(data) > MAX_LOG_BYTES:
                print(f"gpufabric: {path}: larger than {MAX_LOG_BYTES} bytes", file=sys.stderr)
                return ExitCode.BAD_INPUT
            files[str(path)] = data.decode("utf-8", errors="replace")
        except OSError as err:
            print(f"gpufabric: {path}: {err.strerror or err}", file=sys.stderr)
            return ExitCode.BAD_INPUT
    doc = nccl_report.report(files, nccl_rules.expectation(facts, args.min_busbw, args.fraction))
    if args.json:
        print(json.dumps(doc.to_dict(), indent=2, sort_keys=True))
    else:
        print(nccl_report.format_text(doc), end="")
    return doc.exit_code
