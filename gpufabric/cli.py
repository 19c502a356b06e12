"""The ``gpufabric`` command: validate, plan and render stacks without a cluster, and
verify a cluster built from one.

:data:`COMMANDS` is the one table of subcommands (arguments and handler); exit codes come
from the one table in :mod:`gpufabric.exitcodes`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

# Commands import what only they need (verify, diff, runbook, images, nccl-report) when
# they run: `render` and `--help` start quickly.
from gpufabric import __version__, nics
from gpufabric.exitcodes import ExitCode
from gpufabric.health import arguments as health_arguments
from gpufabric.model.problems import Problem, StackError
from gpufabric.model.redaction import printable
from gpufabric.model.stackfile import (
    Stack,
    list_stacks,
    load_stack,
    project_root,
    stack_warnings,
    stacks_dir,
)
from gpufabric.outputs import ownfile
from gpufabric.outputs.jobs import JOB_KINDS, JobRequest, job_objects, read_entrypoint
from gpufabric.outputs.render import (
    OutputError,
    check_output_dir,
    render_files,
    to_yaml,
    write_tree,
)
from gpufabric.plan.build import Plan
from gpufabric.plan.items import LAYER_ORDER, HelmChart, K8sObject, KustomizeOverlay
from gpufabric.support.counts import counted
from gpufabric.verify import arguments as verify_arguments
from gpufabric.verify.interrupts import (
    Terminated,
    leftovers,
    stopped_check,
    terminating_signals,
)

if TYPE_CHECKING:
    from gpufabric.outputs.schema import Report

MAX_LOG_BYTES = 512 << 20
"""nccl-tests logs are megabytes; a larger input is not one."""


def _stack_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--stack",
        required=True,
        help="stack name (stacks/Pulumi.<name>.yaml) or path to a stack file",
    )


def _no_args(p: argparse.ArgumentParser) -> None:
    """A command that takes nothing but --stack."""


def _directory(text: str) -> Path:
    """A directory argument: an empty one would be the working directory (``Path("")``)."""
    if not text:
        raise argparse.ArgumentTypeError("empty; expected a directory")
    return Path(text)


def _render_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, help="output directory (default: out/<stack>)")
    p.add_argument(
        "--crd-dir",
        type=_directory,
        help="directory of upstream CRDs to validate custom resources against",
    )


def _nccl_report_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", type=Path, metavar="FILE", help="nccl-tests log or -J JSON")
    p.add_argument("--stack", help="stack whose fabric sets the expected transport and line rate")
    verify_arguments.add_threshold_args(p)
    p.add_argument("--json", action="store_true", help="print the stable JSON document")
    p.set_defaults(**{verify_arguments.RULES: _NCCL_REPORT_RULES})


_NCCL_REPORT_RULES = (
    verify_arguments.AppliesOnly(
        "--fraction",
        "fraction",
        lambda a: a.stack is not None and a.min_busbw is None,
        "applies only with --stack (a fraction of its line rate) and without --min-busbw",
    ),
)


def _report_args(p: argparse.ArgumentParser) -> None:
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
        _write_out(args.out, page, "report")
        print(f"wrote {args.out}: {verdict}", file=sys.stderr)
    return verdict.exit_code


def _job_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tenant", required=True, help="tenant namespace the job runs in")
    p.add_argument("--kind", required=True, choices=JOB_KINDS, help="job kind")
    p.add_argument("--nodes", type=int, default=2, help="GPU nodes (pods) the job spans (2)")
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
        "placed under it",
    )
    p.add_argument(
        "--crd-dir",
        type=_directory,
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


def _diff_args(p: argparse.ArgumentParser) -> None:
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


def _images_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--format",
        choices=("text", "json", "refs"),
        default="text",
        help="text (default); json; refs: one image per line, with its mirror when one is set",
    )


def _runbook_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, help="write to this file instead of printing")


@dataclass(frozen=True)
class Command:
    """One ``gpufabric`` subcommand: its help, its arguments and its handler."""

    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, Stack | None], int]
    stack: bool = True
    """The handler gets the loaded --stack (required); False: it takes no stack or loads
    its own."""


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
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
        if name == "verify":
            verify_arguments.add_parser(sub, _stack_arg)
            continue
        p = sub.add_parser(name, help=command.help)
        if command.stack:
            _stack_arg(p)
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
    (:class:`verify_arguments.AppliesOnly`): a flag is never silently dropped."""
    if not getattr(args, verify_arguments.RULES, ()):
        return
    ignored = verify_arguments.ignored_flags(args, _given(argv))
    if ignored:
        raise StackError(f"gpufabric {_command_words(args)}", [Problem(f, w) for f, w in ignored])


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    command = COMMANDS[args.command]
    try:
        # SIGTERM and SIGHUP (a cancelled CI job, a closed terminal) end every command as
        # Ctrl-C does: its cleanup runs (a staged render, a checkout for diff, cluster jobs)
        with terminating_signals():
            _refuse_ignored(args, argv)
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


@dataclass(frozen=True)
class Failure:
    """How ``gpufabric`` ends when an exception stops a command: the message on standard
    error and the exit code."""

    types: tuple[type[BaseException] | str, ...]
    """Exception classes, or ``"module:Class"`` for one of a module the command may never
    import (nothing of it can have been raised then): ``render`` does not load verify's."""
    code: Callable[[BaseException], int]
    message: Callable[[BaseException, argparse.Namespace], str]
    in_check: bool = False
    """Only when it stopped a running ``verify`` check (elsewhere it propagates)."""


def _exit(code: ExitCode) -> Callable[[BaseException], int]:
    return lambda _exc: code


def _signal_exit(exc: BaseException) -> int:
    """130 for Ctrl-C, 128 + the signal number for SIGTERM/SIGHUP (as a shell reports it)."""
    return 128 + exc.signum if isinstance(exc, Terminated) else 130


def _stopped(exc: BaseException, args: argparse.Namespace) -> str:
    why = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"stopped by {exc}"
    left = leftovers(clear=True)
    if left:
        return f"gpufabric {_check(args)}: {why}; NOT cleaned up, run: " + "; ".join(left)
    return f"gpufabric {_check(args)}: {why}; cleaned up"


def _interrupted(exc: BaseException, args: argparse.Namespace) -> str:
    """A command other than a running check, stopped by a signal: its cleanup ran (a render
    leaves the previous output as it was unless the new one was already in place)."""
    why = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"stopped by {exc}"
    return f"gpufabric {_command_words(args)}: {why}"


BROKEN_PIPE = 128 + 13
"""The exit code when the reader of the output went away (``gpufabric stacks | head -1``):
what a shell reports for a command that SIGPIPE ended, said without a message."""


def _check(args: argparse.Namespace) -> str:
    """The running check's name: ``verify <check>``, or ``health``."""
    return _command_words(args)


def _command_words(args: argparse.Namespace) -> str:
    """The command the user ran, as typed after ``gpufabric``: ``verify nccl``, ``job``."""
    check = getattr(args, "verify_command", None)
    return f"{args.command} {check}" if check else str(args.command)


def _stack_report(exc: BaseException, args: argparse.Namespace) -> str:
    """The problems under their source: the stack file, or for a problem with the command
    line (a source ``gpufabric <command>`` set by whichever module found it, such as the
    job builder ``verify nccl`` shares with ``job``), the command the user ran."""
    assert isinstance(exc, StackError)
    if exc.source.startswith("gpufabric ") and not Path(exc.source).exists():
        return StackError(f"gpufabric {_command_words(args)}", exc.problems).report()
    return exc.report()


FAILURES: tuple[Failure, ...] = (
    Failure(
        ("gpufabric.verify.kube:KubeError", "gpufabric.verify.results:SuiteError"),
        _exit(ExitCode.UNREACHABLE),
        lambda exc, args: f"gpufabric {_check(args)}: {exc}",
        in_check=True,
    ),
    Failure((KeyboardInterrupt, Terminated), _signal_exit, _stopped, in_check=True),
    Failure((KeyboardInterrupt, Terminated), _signal_exit, _interrupted),
    Failure((BrokenPipeError,), lambda _exc: BROKEN_PIPE, lambda _exc, _args: ""),
    Failure((StackError,), _exit(ExitCode.BAD_INPUT), _stack_report),
    Failure(
        (OutputError,),
        _exit(ExitCode.BAD_INPUT),
        lambda exc, args: f"gpufabric {args.command}: --out {exc}",
    ),
    Failure((OSError,), _exit(ExitCode.ERROR), lambda exc, _args: f"gpufabric: {exc}"),
)
"""The one table from an exception that stops a command to its exit code and message; the
first entry that matches wins. Anything else propagates (a bug shows its traceback)."""


def _loaded(kind: type[BaseException] | str) -> type[BaseException]:
    """An exception class of :data:`FAILURES`; for a module that was never imported, one
    that nothing raises."""
    if not isinstance(kind, str):
        return kind
    module, _, name = kind.partition(":")
    loaded = sys.modules.get(module)
    found: type[BaseException] = getattr(loaded, name) if loaded is not None else _NeverRaised
    return found


class _NeverRaised(Exception):
    """Stands for the classes of a module that was not imported."""


def failure_exit(exc: BaseException, args: argparse.Namespace) -> int | None:
    """Print the message of ``exc``'s entry in :data:`FAILURES` and give its exit code;
    None when no entry matches."""
    for failure in FAILURES:
        types = tuple(_loaded(t) for t in failure.types)
        if isinstance(exc, types) and (not failure.in_check or stopped_check(exc)):
            message = failure.message(exc, args)
            if message:
                print(message, file=sys.stderr)
            return failure.code(exc)
    return None


def _with_stack(
    handler: Callable[[Stack, argparse.Namespace], int],
) -> Callable[[argparse.Namespace, Stack | None], int]:
    def run(args: argparse.Namespace, stack: Stack | None) -> int:
        assert stack is not None  # commands with stack=True always get one
        return handler(stack, args)

    return run


def _describe(stack: Stack) -> str:
    m = stack.model
    f = m.fabric
    note = nics.mode(f.rdma).summary_note
    return (
        f"{f.type}, {counted(len(f.rails), 'rail')}, rdma {f.rdma}{note}, gpuDirect "
        f"{f.gpuDirect}, {m.scheduling.gang}, {m.gpuNodes.count}x{m.gpuNodes.gpusPerNode} GPUs, "
        f"{counted(len(m.tenants), 'tenant')}"
    )


def _validate_command(args: argparse.Namespace, name: str) -> str:
    """The command that lists a stack's problems, with the stacks directory it was found in."""
    where = f"--stacks-dir {shlex.quote(str(args.stacks_dir))} " if args.stacks_dir else ""
    return f"gpufabric {where}validate --stack {shlex.quote(name)}"


def cmd_stacks(args: argparse.Namespace, _stack: Stack | None = None) -> int:
    directory = args.stacks_dir or stacks_dir()
    names = list_stacks(directory)
    if not names:
        print(f"no stacks in {directory}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    status = ExitCode.OK
    width = max(len(n) for n in names)
    for name in names:
        try:
            line = _describe(load_stack(name, directory))
        except StackError as err:
            found = counted(len(err.problems), "problem")
            line = f"INVALID ({found}; run {_validate_command(args, name)})"
            status = ExitCode.BAD_INPUT
        print(printable(f"{name:<{width}}  {line}"))  # a file's name is anyone's to choose
    return status


def _verify(stack: Stack, args: argparse.Namespace) -> int:
    from gpufabric.verify import commands as verify_commands

    return verify_commands.run(stack, args)


def _health(stack: Stack, args: argparse.Namespace) -> int:
    from gpufabric.health import command as health_command

    return health_command.run(stack, args)


def cmd_validate(stack: Stack, _args: argparse.Namespace) -> int:
    plan = stack.plan
    print(f"{stack.source}: ok ({_describe(stack)}; {counted(len(plan.items), 'plan item')})")
    return ExitCode.OK


def _what(plan: Plan, index: int) -> str:
    it = plan.items[index]
    p = it.payload
    if isinstance(p, K8sObject):
        where = f" -n {p.namespace}" if p.namespace else ""
        return f"{p.kind} {p.name}{where}"
    if isinstance(p, HelmChart):
        return f"helm {p.chart} {p.version} -n {p.namespace}"
    assert isinstance(p, KustomizeOverlay)
    return f"kustomize {p.directory} -n {p.namespace}"


def cmd_plan(stack: Stack, _args: argparse.Namespace) -> int:
    plan = stack.plan
    print(f"stack {stack.name}: {counted(len(plan.items), 'item')} in apply order")
    width = max((len(it.id) for it in plan.items), default=0)
    for i, it in enumerate(plan.items):
        flags = " [protect]" if it.protect else ""
        after = f"  after: {', '.join(it.depends_on)}" if it.depends_on else ""
        print(f"{i + 1:4d}  {it.layer.value:<10}  {it.id:<{width}}  {_what(plan, i)}{flags}{after}")
    _print_pod_contract(plan)
    return ExitCode.OK


def _print_pod_contract(plan: Plan) -> None:
    """What a training pod in each tenant namespace gets from the fabric."""
    if not plan.wiring:
        return
    print()
    print("pod contract (pod annotation k8s.v1.cni.cncf.io/networks, resources, nccl-env):")
    groups: dict[tuple[str, ...], list[str]] = {}
    mounts: dict[str, list[str]] = {}
    for namespace, w in plan.wiring.items():
        storage = plan.facts.storage_of(namespace)
        mounts[namespace] = [
            f"    volume    {c.mount_path} <- claim {c.name} ({c.size}, class {c.storage_class}, "
            f"{'read-only' if c.read_only else 'read-write'}, transport {c.transport or 'the class'})"
            for c in (storage.claims if storage else ())
        ]
        nets = json.dumps(dict(w.leaf_networks)) if w.leaf_networks else w.networks
        key = (nets, json.dumps(dict(w.rdma_resources)), json.dumps(dict(w.nccl_env)))
        groups.setdefault((*key, *mounts[namespace]), []).append(namespace)
    for namespaces in groups.values():
        wiring = plan.wiring[namespaces[0]]
        print(f"  tenants: {', '.join(namespaces)}")
        for line in mounts[namespaces[0]]:
            print(line)
        by_leaf = wiring.leaf_networks or {"": wiring.networks}
        for leaf, networks in by_leaf.items():
            under = f" (under {wiring.leaf_label}={leaf}: gpufabric job --leaf {leaf})"
            for net in json.loads(networks):
                where = f"{net['namespace']}/{net['name']}"
                print(f"    network   {net['interface']:<8} <- {where}{under if leaf else ''}")
        for resource, count in wiring.rdma_resources.items():
            print(f"    resource  {resource}: {count}")
        for name, value in wiring.nccl_env.items():
            print(f"    env       {name}={value}")


def _crd_dir_ok(crd_dir: Path | None) -> bool:
    """--crd-dir, when given, must be a readable directory holding CRD files (*.yaml,
    *.yml): said on stderr when it is not."""
    if crd_dir is None:
        return True
    why = None
    if not crd_dir.is_dir():
        why = "no such file or directory" if not crd_dir.exists() else "not a directory"
    elif not os.access(crd_dir, os.R_OK | os.X_OK):
        why = "not readable"
    elif not any(True for pattern in ("*.yaml", "*.yml") for _ in crd_dir.rglob(pattern)):
        why = "holds no *.yaml or *.yml file; expected the upstream CRDs' YAML files"
    if why is not None:
        print(f"gpufabric: --crd-dir {str(crd_dir)!r}: {why}", file=sys.stderr)
        return False
    return True


_WRITTEN_BY = {
    "runbook": ownfile.marked("Generated by `gpufabric runbook"),
    "report": ownfile.marked('<meta name="generator" content="gpufabric report">'),
}
"""What every file a command writes holds in its first lines: --out replaces only such a
file (or an empty one), as ``render`` replaces only a directory it wrote."""


def _write_out(path: Path, text: str, command: str) -> None:
    """Write ``path`` (--out of ``runbook`` or ``report``) atomically, creating its missing
    parent directories as ``render`` does, and say which ones on stderr; never over a file
    the command did not write."""
    for directory in ownfile.write_out(path, text, _WRITTEN_BY[command], command):
        print(f"created directory {directory}", file=sys.stderr)


def _validate(plan: Plan, crd_dir: Path | None) -> Report:
    from gpufabric.outputs.schema import validate_objects

    objects = (obj.body for _, obj in plan.objects())
    return validate_objects(objects, plan.facts.kubernetes_minor, crd_dir)


def cmd_render(stack: Stack, args: argparse.Namespace) -> int:
    plan = stack.plan
    out: Path = args.out or Path("out") / stack.name
    crd_dir: Path | None = args.crd_dir
    if not _crd_dir_ok(crd_dir):
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
    if args.format == "json":
        sys.stdout.write(semantic_diff.to_json(stack.name, args.base, diffs))
    else:
        sys.stdout.write(semantic_diff.to_markdown(stack.name, args.base, diffs))
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


def cmd_runbook(stack: Stack, args: argparse.Namespace) -> int:
    from gpufabric.outputs import runbook

    stacks_dir = None if args.stacks_dir is None else str(args.stacks_dir)
    text = runbook.render(stack.plan, stack.pulled, runbook.FoundAs(args.stack, stacks_dir))
    if args.out:
        _write_out(args.out, text, "runbook")
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return ExitCode.OK


def cmd_images(stack: Stack, args: argparse.Namespace) -> int:
    from gpufabric.outputs import images

    pulled = stack.pulled
    if args.format == "json":
        sys.stdout.write(images.to_json(pulled))
    elif args.format == "refs":
        sys.stdout.write(images.to_refs(pulled))
    else:
        sys.stdout.write(images.to_text(pulled))
    return ExitCode.OK


def cmd_nccl_report(args: argparse.Namespace, _stack: Stack | None = None) -> int:
    from gpufabric.verify.nccl import report as nccl_report

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
    doc = nccl_report.report(files, nccl_report.expectation(facts, args.min_busbw, args.fraction))
    if args.json:
        print(json.dumps(doc.to_dict(), indent=2, sort_keys=True))
    else:
        print(nccl_report.format_text(doc), end="")
    return doc.exit_code


def cmd_job(stack: Stack, args: argparse.Namespace) -> int:
    plan = stack.plan
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
        if not _crd_dir_ok(args.crd_dir):
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
    print("---\n".join(to_yaml(o) for o in objects), end="")
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


COMMANDS: dict[str, Command] = {
    "stacks": Command("list the stacks and what each one sets up", _no_args, cmd_stacks, False),
    "validate": Command(
        "check a stack file and report every problem", _no_args, _with_stack(cmd_validate)
    ),
    "plan": Command("show what a stack installs, in apply order", _no_args, _with_stack(cmd_plan)),
    "render": Command(
        "write the stack's manifests to files, validated", _render_args, _with_stack(cmd_render)
    ),
    "nccl-report": Command(
        "judge nccl-tests output: PASS (0), FAIL (4) or INCONCLUSIVE (5)",
        _nccl_report_args,
        cmd_nccl_report,
        False,
    ),
    "report": Command(
        "one self-contained HTML acceptance page from the verify commands' JSON",
        _report_args,
        cmd_report,
        False,
    ),
    "job": Command(
        "print a training job wired for a stack and tenant (queue, rails, NCCL, GPUs)",
        _job_args,
        _with_stack(cmd_job),
    ),
    "diff": Command(
        "what changes against a git ref or an earlier render, disruptive changes first",
        _diff_args,
        _with_stack(cmd_diff),
    ),
    "images": Command(
        "every chart, manifest and image the stack pulls (for filling a mirror)",
        _images_args,
        _with_stack(cmd_images),
    ),
    "runbook": Command(
        "the stack's bootstrap runbook (Markdown): prerequisites, phases, checks, triage",
        _runbook_args,
        _with_stack(cmd_runbook),
    ),
    "verify": Command(
        "prove a cluster built from the stack works: nodes, pods, cluster, nccl",
        _no_args,
        _with_stack(_verify),
    ),
    "health": Command(health_arguments.HELP, health_arguments.add_arguments, _with_stack(_health)),
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


if __name__ == "__main__":
    sys.exit(entry())
