"""``gpufabric diff``: what changes against a git ref or an earlier render, disruptive
changes first (:mod:`gpufabric.outputs.diff`, loaded when the command runs)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpufabric.exitcodes import ExitCode
from gpufabric.model.stackfile import Stack, project_root
from gpufabric.outputs.render import render_files


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--base",
        required=True,
        help="git ref (rendered with that ref's code) or a directory from `gpufabric render`",
    )
    p.add_argument("--format", choices=("md", "json"), default="md", help="output (md)")
    p.add_argument(
        "--fail-on-disruptive",
        action="store_true",
        help="exit 4 when any change is disruptive (for CI gates)",
    )


def cmd_diff(stack: Stack, args: argparse.Namespace) -> int:
    from gpufabric.outputs import diff as semantic_diff

    base_dir = Path(args.base)
    try:
        if base_dir.is_dir():
            base = semantic_diff.side_from_dir(base_dir)
        else:
            repo = project_root() or Path.cwd()
            _inside_repository(stack, repo, args.base)
            base = semantic_diff.render_ref(repo, args.base, args.stack)
    except ValueError as exc:
        print(f"gpufabric diff: --base {args.base}: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    head = semantic_diff.side_from_files(render_files(stack.plan))
    diffs = semantic_diff.diff(base, head)
    pools = semantic_diff.pools_changed(base, head)
    partitions = semantic_diff.partitions_added(base, head)
    if args.format == "json":
        sys.stdout.write(semantic_diff.to_json(stack.name, args.base, diffs, pools, partitions))
    else:
        out = semantic_diff.to_markdown(stack.name, args.base, diffs, pools, partitions)
        sys.stdout.write(out)
    if args.fail_on_disruptive and any(d.klass == "disruptive" for d in diffs):
        return ExitCode.FAIL
    return ExitCode.OK


def _inside_repository(stack: Stack, repo: Path, base: str) -> None:
    """``diff --base REF`` renders the stack file as committed at REF: one outside the
    repository has no such commit (ValueError saying what to give instead)."""
    source = Path(stack.source)
    if source.suffix not in (".yaml", ".yml") or not source.exists():
        return
    if not source.resolve().is_relative_to(repo.resolve()):
        raise ValueError(
            f"the stack file {source} is outside the repository {repo}, so it has no version "
            f"at {base}; give a stack file inside the repository, or an earlier render "
            "directory as --base"
        )
