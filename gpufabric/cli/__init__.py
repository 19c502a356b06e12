"""The ``gpufabric`` command: validate, plan and render stacks without a cluster, and
verify a cluster built from one.

One module per command (or group of commands) holds its arguments and its handler:
:mod:`.plan` (``stacks``, ``validate``, ``plan``), :mod:`.render`, :mod:`.nccl_report`,
:mod:`.report`, :mod:`.job`, :mod:`.diff`, :mod:`.images`, :mod:`.runbook`, :mod:`.verify`
(with :mod:`.verify_run`) and :mod:`.health`; :mod:`.options` and :mod:`.files` are what
several share. :data:`COMMANDS` is the one table of them. A command imports what only it
needs when it runs (verify's checks, diff, runbook, images, nccl-report): ``render`` and
``--help`` start quickly.

Exit codes come from the one table in :mod:`gpufabric.exitcodes`; an error that ends a
command carries its own (:class:`gpufabric.errors.GpufabricError`), and
:func:`failure_exit` is the one place that turns it, or a signal, into the exit.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from gpufabric import __version__
from gpufabric.cli import (
    diff,
    discover,
    health,
    images,
    job,
    nccl_report,
    plan,
    render,
    report,
    runbook,
    verify,
)
from gpufabric.cli.options import RULES, ignored_flags, stack_arg
from gpufabric.errors import GpufabricError
from gpufabric.exitcodes import ExitCode
from gpufabric.model.problems import Problem, StackError
from gpufabric.model.stackfile import Stack, load_stack, stack_warnings
from gpufabric.verify.interrupts import (
    Terminated,
    leftovers,
    stopped_check,
    terminating_signals,
)


def _no_args(p: argparse.ArgumentParser) -> None:
    """A command that takes nothing but --stack."""


@dataclass(frozen=True)
class Command:
    """One ``gpufabric`` subcommand: its help, its arguments and its handler."""

    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, Stack | None], int]
    stack: bool = True
    """The handler gets the loaded --stack (required); False: it takes no stack or loads
    its own."""
    subcommands: Callable[[Any, str], None] | None = None
    """Adds the command's own parser, with subcommands that each take --stack, to the
    subparsers (given the help): ``verify``."""


class _Parser(argparse.ArgumentParser):
    """The top-level parser: an option of its own typed after the command is named so."""

    def error(self, message: str) -> NoReturn:
        if "unrecognized arguments" in message and "--stacks-dir" in message:
            message += (
                " (--stacks-dir belongs to gpufabric itself, before the command: "
                "gpufabric --stacks-dir DIR COMMAND ...)"
            )
        super().error(message)


def parser() -> argparse.ArgumentParser:
    ap = _Parser(
        prog="gpufabric",
        description="GPU Operator, RDMA networking, training operators and gang scheduling "
        "for a GPU training cluster, one Pulumi stack per environment.",
    )
    ap.add_argument("--version", action="version", version=f"gpufabric {__version__}")
    ap.add_argument(
        "--stacks-dir",
        type=Path,
        help="directory of Pulumi.<name>.yaml files (default: the project's stackConfigDir)",
    )
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, command in COMMANDS.items():
        if command.subcommands is not None:
            command.subcommands(sub, command.help)
            continue
        p = sub.add_parser(name, help=command.help)
        if command.stack:
            stack_arg(p)
        command.arguments(p)
    return ap


def _given(argv: Sequence[str] | None) -> set[str]:
    """The destinations of the options typed on the command line (a default is not typed):
    the command line parsed again with every default suppressed."""
    quiet = parser()
    todo = [quiet]
    while todo:
        p = todo.pop()
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo += list(action.choices.values())
            elif not action.required:
                action.default = argparse.SUPPRESS
    return set(vars(quiet.parse_args(argv)))


def _refuse_ignored(args: argparse.Namespace, argv: Sequence[str] | None) -> None:
    """StackError (exit 2) naming each flag the other flags would make the command ignore
    (:class:`~gpufabric.cli.options.AppliesOnly`): a flag is never silently dropped."""
    if not getattr(args, RULES, ()):
        return
    ignored = ignored_flags(args, _given(argv))
    if ignored:
        raise StackError(f"gpufabric {command_words(args)}", [Problem(f, w) for f, w in ignored])


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    command = COMMANDS[args.command]
    try:
        # SIGTERM and SIGHUP (a cancelled CI job, a closed terminal) end every command as
        # Ctrl-C does: its cleanup runs (a staged render, a checkout for diff, cluster jobs)
        with terminating_signals():
            _refuse_ignored(args, argv)
            if args.command == "verify":
                args.typed = frozenset(
                    _given(argv)
                )  # a default may then adapt (the sweep's timeout)
            stack = None
            if command.stack:
                stack = load_stack(args.stack, args.stacks_dir)
                for warning in stack_warnings(stack.model):
                    print(f"{stack.source}: warning: {warning}", file=sys.stderr)
            return int(command.run(args, stack))
    except BaseException as exc:
        code = failure_exit(exc, args)
        if code is None:
            raise
        return code


BROKEN_PIPE = 128 + 13
"""The exit code when the reader of the output went away (``gpufabric stacks | head -1``):
what a shell reports for a command that SIGPIPE ended, said without a message."""


def failure_exit(exc: BaseException, args: argparse.Namespace) -> int | None:
    """How ``exc``, having stopped the command ``args``, ends it: its message printed on
    standard error, and the exit code; None when it is none of these (a bug: it propagates
    and shows its traceback).

    - a :class:`~gpufabric.errors.GpufabricError`: its own message and exit code (one that
      ends only a running check, such as the cluster's KubeError, only when it did);
    - Ctrl-C or SIGTERM/SIGHUP: 130, or 128 + the signal number, as a shell reports it; a
      running check says whether it cleaned up;
    - the reader of the output gone (BrokenPipeError): 141, silently;
    - any other OSError (a full disk, a file that cannot be read): 1.
    """
    words = command_words(args)
    if isinstance(exc, GpufabricError):
        if exc.check_only and not stopped_check(exc):
            return None
        print(exc.message(words), file=sys.stderr)
        return exc.exit_code
    if isinstance(exc, KeyboardInterrupt | Terminated):
        stopped = _stopped if stopped_check(exc) else _interrupted
        print(stopped(exc, words), file=sys.stderr)
        return 128 + exc.signum if isinstance(exc, Terminated) else 130
    if isinstance(exc, BrokenPipeError):
        return BROKEN_PIPE
    if isinstance(exc, OSError):
        print(f"gpufabric: {exc}", file=sys.stderr)
        return ExitCode.ERROR
    return None


def _stopped(exc: BaseException, check: str) -> str:
    """A running check (``verify <check>``, ``health``), stopped by a signal: whether what
    it created is gone."""
    why = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"stopped by {exc}"
    left = leftovers(clear=True)
    if left:
        return f"gpufabric {check}: {why}; NOT cleaned up, run: " + "; ".join(left)
    return f"gpufabric {check}: {why}; cleaned up"


def _interrupted(exc: BaseException, command: str) -> str:
    """A command other than a running check, stopped by a signal: its cleanup ran (a render
    leaves the previous output as it was unless the new one was already in place)."""
    why = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"stopped by {exc}"
    return f"gpufabric {command}: {why}"


def command_words(args: argparse.Namespace) -> str:
    """The command the user ran, as typed after ``gpufabric``: ``verify nccl``, ``job``."""
    check = getattr(args, "verify_command", None)
    return f"{args.command} {check}" if check else str(args.command)


def _with_stack(
    handler: Callable[[Stack, argparse.Namespace], int],
) -> Callable[[argparse.Namespace, Stack | None], int]:
    def run(args: argparse.Namespace, stack: Stack | None) -> int:
        assert stack is not None  # commands with stack=True always get one
        return handler(stack, args)

    return run


COMMANDS: dict[str, Command] = {
    "stacks": Command(
        "list the stacks and what each one sets up", _no_args, plan.cmd_stacks, False
    ),
    "validate": Command(
        "check a stack file and report every problem", _no_args, _with_stack(plan.cmd_validate)
    ),
    "plan": Command(
        "show what a stack installs, in apply order", _no_args, _with_stack(plan.cmd_plan)
    ),
    "discover": Command(
        "read a running cluster into a stack file that renders back with no diff",
        discover.arguments,
        discover.cmd_discover,
        False,
    ),
    "render": Command(
        "write the stack's manifests to files, validated",
        render.arguments,
        _with_stack(render.cmd_render),
    ),
    "nccl-report": Command(
        "judge nccl-tests output: PASS (0), FAIL (4) or INCONCLUSIVE (5)",
        nccl_report.arguments,
        nccl_report.cmd_nccl_report,
        False,
    ),
    "report": Command(
        "one self-contained HTML acceptance page from the verify commands' JSON",
        report.arguments,
        report.cmd_report,
        False,
    ),
    "job": Command(
        "print a training job wired for a stack and tenant (queue, rails, NCCL, GPUs)",
        job.arguments,
        _with_stack(job.cmd_job),
    ),
    "diff": Command(
        "what changes against a git ref or an earlier render, disruptive changes first",
        diff.arguments,
        _with_stack(diff.cmd_diff),
    ),
    "images": Command(
        "every chart, manifest and image the stack pulls (for filling a mirror)",
        images.arguments,
        _with_stack(images.cmd_images),
    ),
    "runbook": Command(
        "the stack's bootstrap runbook (Markdown): prerequisites, phases, checks, triage",
        runbook.arguments,
        _with_stack(runbook.cmd_runbook),
    ),
    "verify": Command(
        "prove a cluster built from the stack works: nodes, pods, cluster, nccl, storage",
        _no_args,
        _with_stack(verify.run),
        subcommands=verify.add_parser,
    ),
    "health": Command(health.HELP, health.arguments, _with_stack(health.run)),
}
"""Every ``gpufabric`` subcommand, in the order ``--help`` lists them."""


def entry() -> int:
    """The ``gpufabric`` program (``main`` is for callers in-process)."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        code = BROKEN_PIPE
    if code == BROKEN_PIPE:  # nothing more reaches the reader; the exit's flush must not fail
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return code
