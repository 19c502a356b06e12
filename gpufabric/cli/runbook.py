"""``gpufabric runbook``: the stack's bootstrap runbook in Markdown (prerequisites, phases,
checks, triage; :mod:`gpufabric.outputs.runbook`, loaded when the command runs)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpufabric.cli.files import write_out
from gpufabric.exitcodes import ExitCode
from gpufabric.model.stackfile import Stack


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, help="write to this file instead of printing")


def cmd_runbook(stack: Stack, args: argparse.Namespace) -> int:
    from gpufabric.outputs import runbook

    stacks_dir = None if args.stacks_dir is None else str(args.stacks_dir)
    found = runbook.FoundAs(args.stack, stacks_dir)
    text = runbook.render(stack.plan, stack.pulled, found)
    if found.outside_project():
        print(
            f"gpufabric runbook: note: {found.file()} is not in the project's stacks/ "
            f"(Pulumi's stackConfigDir): the runbook's `pulumi up --stack {stack.plan.stack}` "
            f"and `pulumi config set` read stacks/Pulumi.{stack.plan.stack}.yaml, and its "
            "`gpufabric diff --base HEAD~1` needs the file under version control; copy it into "
            "stacks/ of your fork first (docs/user/pulumi.md)",
            file=sys.stderr,
        )
    if args.out:
        write_out(args.out, text, "runbook")
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return ExitCode.OK
