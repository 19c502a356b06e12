"""``gpufabric verify nodes|pods|cluster|nccl``: arguments, orchestration, reports.

Exit codes (:mod:`gpufabric.exitcodes`): 0 PASS, 4 FAIL, 5 INCONCLUSIVE (something could
not be decided, or the NCCL run timed out), 2 bad input, 3 the cluster or the hosts could
not be asked at all. Everything a check expects is read from the stack's Plan.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import re
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gpufabric.exitcodes import ExitCode, Verdict
from gpufabric.model.problems import Problem, StackError
from gpufabric.model.redaction import printable
from gpufabric.model.stackfile import Stack
from gpufabric.outputs import ownfile
from gpufabric.outputs.jobs import pulled_image
from gpufabric.outputs.render import OutputError
from gpufabric.plan.build import Plan
from gpufabric.plan.items import LAYER_ORDER
from gpufabric.verify import arguments, cluster, expect
from gpufabric.verify.interrupts import (
    check_running,
    left_behind,
    leftovers,
    shielded,
    terminating_signals,
)
from gpufabric.verify.kube import Kube, KubeError, Malformed, describe, mapping, name_of, path_of
from gpufabric.verify.nccl import job as nccl
from gpufabric.verify.nccl import record as acceptance_record
from gpufabric.verify.nccl import report as nccl_report
from gpufabric.verify.nccl import rules as nccl_rules
from gpufabric.verify.nodes import checks as nodes
from gpufabric.verify.nodes import daemonset as probe_daemonset
from gpufabric.verify.nodes import fleet
from gpufabric.verify.results import (
    Check,
    error,
    exit_code,
    failed,
    format_table,
    junit_xml,
    passed,
    to_json,
)
from gpufabric.verify.results import skipped as skipped_check
from gpufabric.verify.storage import judge as storage
from gpufabric.verify.storage import run as storage_run
from gpufabric.verify.sweep import forecast as sweep_forecast
from gpufabric.verify.sweep import run as sweep
from gpufabric.verify.sweep.cost import Cost
from gpufabric.verify.sweep.job import topology_of
from gpufabric.verify.sweep.judge import NodeVerdict
from gpufabric.verify.sweep.rounds import CONFIRM, ring_orders

MIN_NODES = 2
"""Nodes an acceptance run spans at least: the bandwidth verdict is for inter-node traffic."""
HOST_BACKENDS = ("ssh", "paramiko", "local", "kubectl", "docker", "podman", "ansible", "lxc")
_HOST_SPEC = re.compile(r"^(?P<scheme>[a-z]+)://(?P<rest>[^\s,]*)$")


PASSWORD_REFUSED = (
    "carries a password (USER:PASSWORD@HOST), which every result would print (table, "
    "--json, --junit, the report) and ssh would get on its command line; give ssh a key "
    "instead (ssh-agent, ~/.ssh/config, or ssh://USER@HOST?ssh_identity_file=PATH)"
)


def _userinfo(host: str) -> str:
    """What testinfra takes for ``USER[:PASSWORD]`` in a host spec (before the first ``@`` of
    the URL's network location)."""
    netloc = urlsplit(host).netloc
    return netloc.split("@", 1)[0] if "@" in netloc else ""


def _no_password(host: str) -> str:
    scheme, _, rest = host.partition("://")
    user = _userinfo(host).split(":", 1)[0]
    return f"{scheme}://{user}:***@{rest.split('@', 1)[1]}"


def _hosts(text: str) -> list[str]:
    """The testinfra host specs of --hosts; StackError naming the bad one (exit 2)."""
    hosts = [h.strip() for h in text.split(",") if h.strip()]
    problems = []
    for host in hosts:
        m = _HOST_SPEC.match(host)
        if m is None or m["scheme"] not in HOST_BACKENDS:
            problems.append(
                Problem(
                    "--hosts",
                    f"{host[:60]!r} is not a host spec; expected ssh://HOST, "
                    "kubectl://POD?namespace=NS&container=C, local:// or another of "
                    + ", ".join(f"{b}://" for b in HOST_BACKENDS),
                )
            )
        elif m["scheme"] != "local" and not m["rest"].split("?", 1)[0]:
            problems.append(Problem("--hosts", f"{host!r} names no host or pod"))
        elif ":" in _userinfo(host):
            problems.append(Problem("--hosts", f"{_no_password(host)!r}: {PASSWORD_REFUSED}"))
    if not hosts:
        problems.append(Problem("--hosts", "is empty"))
    if problems:
        raise StackError("gpufabric verify", problems)
    return hosts


def _progress(msg: str) -> None:
    print(f"verify: {msg}", file=sys.stderr, flush=True)


def _context(plan: Plan, args: argparse.Namespace) -> str | None:
    context: str | None = args.context or plan.facts.kube_context
    return context


def _kube(plan: Plan, args: argparse.Namespace, sweep_: bool = False) -> Kube:
    """The API client; everything it does ends within --timeout (a sweep: within
    --sweep-timeout, each job within --timeout)."""
    kube = Kube(args.kubeconfig, _context(plan, args))
    if sweep_:
        kube.set_timeout(args.sweep_timeout, "--sweep-timeout")
    else:
        kube.set_timeout(getattr(args, "timeout", None))
    return kube


def _report(args: argparse.Namespace, title: str, checks: list[Check]) -> int:
    if args.junit:
        _write_junit(args.junit, title, checks)
    if args.json:
        sys.stdout.write(to_json(title, checks))
    else:
        sys.stdout.write(format_table(title, checks))
    return exit_code(checks)


def run(stack: Stack, args: argparse.Namespace) -> int:
    """Run the chosen check. What stops it (the API or hosts unreachable, Ctrl-C, SIGTERM)
    is marked as such and ends the command through the CLI's one table (``cli.FAILURES``)."""
    plan = stack.plan
    for flag, path, written in _files(args):
        _file_check(flag, functools.partial(ownfile.writable, path, written, "verify", flag))
    leftovers(clear=True)
    with check_running(), terminating_signals():
        return int(COMMANDS[args.verify_command](plan, args))


JUNIT_WRITTEN = ownfile.marked('<testsuites name="gpufabric verify"')


def _expect_written(head: bytes) -> bool:
    """An expectations file, as --write-expect writes it (sorted keys, indented)."""
    return head.startswith(b'{\n  "driver_version": ')


def _write_junit(path: Path, suite: str, checks: Sequence[Check]) -> None:
    _file_check(
        "--junit",
        lambda: ownfile.write_out(
            path, junit_xml(suite, checks), JUNIT_WRITTEN, "verify", "--junit"
        ),
    )


def _files(args: argparse.Namespace) -> list[tuple[str, Path, ownfile.Written]]:
    """The files this command writes, with how to recognise one it wrote before."""
    files = [("--junit", getattr(args, "junit", None), JUNIT_WRITTEN)]
    files.append(("--write-expect", getattr(args, "write_expect", None), _expect_written))
    return [(flag, path, written) for flag, path, written in files if path is not None]


def _file_check(flag: str, work: Callable[[], object]) -> None:
    """``work`` (a check or a write of ``flag``'s file); its refusal as a problem of the
    flag (exit 2)."""
    try:
        work()
    except OutputError as exc:
        raise StackError("gpufabric verify", [Problem(flag, str(exc))]) from None


def _write_expect(path: Path, exp: expect.Expectation) -> int:
    write = functools.partial(ownfile.write_out, path, exp.to_json(), _expect_written)
    _file_check("--write-expect", functools.partial(write, "verify", "--write-expect"))
    print(f"wrote {path}", file=sys.stderr)
    return ExitCode.OK


def cmd_nodes(plan: Plan, args: argparse.Namespace) -> int:
    exp = expect.from_facts(plan.facts)
    if args.write_expect:
        return _write_expect(args.write_expect, exp)
    if not args.hosts and not args.via_cluster:
        print(
            "gpufabric verify nodes: pass --hosts ssh://a,ssh://b or --via-cluster",
            file=sys.stderr,
        )
        return ExitCode.BAD_INPUT
    if args.parallel < 1:
        raise StackError("gpufabric verify", [Problem("--parallel", "must be at least 1")])
    progress = (lambda _d, _t: None) if args.json else fleet.terminal_progress()
    until = time.monotonic() + args.timeout  # --timeout bounds the whole command

    def check(hosts: list[str], root: str) -> list[Check]:
        return fleet.run_fleet(
            hosts,
            exp,
            fleet.testinfra_transport(root),
            parallel=args.parallel,
            host_timeout=args.host_timeout,
            progress=progress,
            timeout=max(until - time.monotonic(), 0.0),
        )

    if args.hosts:
        results = check(_hosts(args.hosts), args.root)
    else:
        kube = _kube(plan, args)  # a kubeconfig that cannot be used is bad input: said first
        probe_daemonset.require_kubectl()
        image = pulled_image(plan, args.probe_image, "--probe-image", "probe-image")
        owned: list[str] = []  # what this run creates: all it may delete
        try:
            pods = probe_daemonset.start(
                kube, plan.facts.nodes, image, timeout=min(300, args.timeout),
                progress=_progress, owned=owned,
            )  # fmt: skip
            context = _context(plan, args)
            hosts = [probe_daemonset.host_spec(p, args.kubeconfig, context) for p in pods]
            names = dict(zip(hosts, pods.values(), strict=True))
            results = [
                Check(
                    c.check, names.get(c.target, c.target), c.status, c.message, c.hint, c.details
                )
                for c in check(hosts, probe_daemonset.HOST_ROOT)
            ]
        finally:
            if not args.keep_probe:
                with shielded(), kube.grace():
                    probe_daemonset.stop(kube, progress=_progress, owned=owned)
    results += nodes.fleet_checks(results)
    code = _report(args, f"nodes ({plan.stack})", results)
    summary = fleet.group_failures(results)
    if summary and not args.json:
        print("\nby failure:")
        for line in summary:
            print(f"  {line}")
    return code


def cmd_pods(plan: Plan, args: argparse.Namespace) -> int:
    # pytest is imported only by the commands that run the suite (render stays quick).
    from gpufabric.verify.nodes.suite_runner import run_suite

    exp = expect.from_facts(plan.facts)
    results = run_suite("pod", exp, _hosts(args.hosts), netns=args.netns)
    return _report(args, f"pods ({plan.stack})", results)


def cmd_cluster(plan: Plan, args: argparse.Namespace) -> int:
    checks = cluster.readiness(_kube(plan, args), plan, args.layers)
    suite = f"cluster ({plan.stack})"
    if args.layers is not None:
        chosen = ",".join(x.value for x in LAYER_ORDER if x in args.layers)
        suite = f"cluster ({plan.stack}, layers {chosen})"
    return _report(args, suite, checks)


_SKIP_REASONS = (("cordoned", "cordoned"), ("notReady", "not Ready"))
"""Why a GPU node is left out of a sweep: (JSON key, words)."""


def _skipped(skipped: dict[str, list[str]]) -> list[tuple[str, list[str]]]:
    """(words, nodes) for each reason some GPU nodes were left out."""
    return [(why, skipped[key]) for key, why in _SKIP_REASONS if skipped[key]]


def _sweep_job(
    plan: Plan, args: argparse.Namespace, nodes: tuple[str, ...], round_: int, index: int,
    rail: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """The tenant's acceptance job pinned to ``nodes`` (on ``rail`` alone when given): a
    pair's, or a group's whose launcher runs the tests once per rank order of
    :func:`~gpufabric.verify.sweep.rounds.ring_orders` (so its rings load every pair of the group)."""
    name = f"{args.name}-r{round_}-{index}"
    orders = ring_orders(len(nodes)) if len(nodes) > 2 else ()
    return nccl.acceptance_job(
        plan, args.tenant, len(nodes), args.image, name, pin_nodes=nodes, rail=rail,
        leaf=args.leaf, orders=orders,
    )  # fmt: skip


def _sweep_group(plan: Plan, args: argparse.Namespace) -> int:
    """Nodes per group job the sweep may run: what the tenant's quota runs at once (its
    two-node jobs' nodes), at most --sweep-group, the stack's GPU nodes and, where rails are
    routed per leaf, the nodes its node table puts under the leaf; 2 is pairs only. The
    planner caps it further at a leaf's nodes (:func:`~gpufabric.verify.sweep.rounds.group_size`)."""
    size = min(2 * _sweep_concurrency(plan, args.tenant), plan.facts.nodes.count)
    if args.sweep_group is not None:
        size = min(size, args.sweep_group)
    contract = plan.facts.tenants.get(args.tenant)
    label = contract.leaf_label if contract is not None else None
    if args.leaf is not None and label is not None and plan.facts.gang.node_topology:
        size = min(size, plan.facts.gang.nodes_under(label, args.leaf))
    return max(2, size)


def _sweep_dry_run(plan: Plan, args: argparse.Namespace) -> int:
    """The jobs a sweep submits, for review; the cluster is not asked."""
    from gpufabric.outputs.render import to_yaml

    rails = [r.name for r in plan.facts.fabric.rails]
    size = _sweep_group(plan, args)
    pair = ("<node-a>", "<node-b>")
    jobs = [_sweep_job(plan, args, pair, 1, 0)]
    if size > 2:
        jobs.append(_sweep_job(plan, args, tuple(f"<node-{i}>" for i in range(size)), 1, 1))
    if len(rails) > 1:
        jobs.append(_sweep_job(plan, args, pair, 2, 0, rails[0]))
    sys.stdout.write("---\n".join(to_yaml(job) for job in jobs))
    group = (
        f"group jobs of up to {size} nodes (pinned to the group; its launcher runs the tests "
        f"once per rank order, {len(ring_orders(size))} orders), splitting on "
        "failure, then "
        if size > 2
        else ""
    )
    second = (
        f" and, for each bad node, the last once per rail (shown for {rails[0]})"
        if len(rails) > 1
        else ""
    )
    _progress(
        f"printed {len(jobs)} job{'s' if len(jobs) > 1 else ''}, nothing submitted: a sweep "
        f"runs {group}two-node jobs (pinned to the pair){second}"
    )
    return ExitCode.OK


def _skip_reason(node: dict[str, Any]) -> str | None:
    """Why a GPU node is left out of a sweep (a key of :data:`_SKIP_REASONS`), or None;
    a node whose status cannot be read is not known to be Ready."""
    try:
        if not cluster.node_ready(node):
            return "notReady"
        if mapping(node, "spec").get("unschedulable"):
            return "cordoned"  # a pinned job would wait there until it times out
    except Malformed:
        return "notReady"
    return None


def _sweep_nodes(
    kube: Kube, plan: Plan, leaf: str | None = None, leaf_label: str | None = None
) -> tuple[list[str], dict[str, list[str]], dict[str, dict[str, str]]]:
    """The GPU nodes a sweep pairs (those under ``leaf`` when given), those it leaves out
    by reason (said on stderr), and each paired node's labels."""
    names: list[str] = []
    labels: dict[str, dict[str, str]] = {}
    skipped: dict[str, list[str]] = {key: [] for key, _ in _SKIP_REASONS}
    for node in cluster.gpu_nodes(kube, plan.facts):
        why = _skip_reason(node)
        try:
            name = name_of(node)
            own = {str(k): str(v) for k, v in mapping(node, "metadata", "labels").items()}
        except Malformed:
            name, why, own = describe(node), "notReady", {}
        if leaf is not None and leaf_label is not None and own.get(leaf_label) != leaf:
            continue  # another leaf's nodes cannot attach this leaf's networks
        labels[name] = own
        (names if why is None else skipped[why]).append(name)
    for why, which in _skipped(skipped):
        _progress(f"skipping {len(which)} GPU nodes ({why}): {', '.join(which)}")
    return names, skipped, labels


def _sweep_topology(
    plan: Plan, names: list[str], labels: dict[str, dict[str, str]]
) -> dict[str, tuple[str, ...]]:
    """Each node's switches at the stack's topology levels: its labels, else the stack's
    scheduling.nodeTopology; none when a node has neither (said on stderr)."""
    levels = plan.facts.gang.switch_levels
    table = plan.facts.gang.node_topology
    merged = {n: {**dict(table.get(n, {})), **labels.get(n, {})} for n in names}
    topo = topology_of(names, merged, levels)
    if levels and names and not topo[names[0]]:
        lacking = [n for n in names if any(lv not in merged[n] for lv in levels)]
        _progress(
            f"pairing without topology: {', '.join(lacking[:5])}"
            f"{' and others' if len(lacking) > 5 else ''} lack {', '.join(levels)}"
        )
    return topo


def _sweep_concurrency(plan: Plan, tenant: str) -> int:
    """Two-node jobs the tenant's GPU quota admits at once (at least one)."""
    contract = plan.facts.tenants.get(tenant)
    gpus = 2 * plan.facts.nodes.gpus_per_node
    return max(1, (contract.gpu_admissible if contract else gpus) // gpus)


def _delete_jobs(kube: Kube, created: list[dict[str, Any]]) -> None:
    """Each run deletes its own job; this covers interruptions: each is confirmed gone, or
    the command that deletes it is printed."""
    with shielded(), kube.grace():
        for job in [o for j in created for o in (j, *nccl.companions(j))]:
            command = nccl.delete_command(job)
            try:
                if kube.remove(job):
                    continue
                why = "its deletion could not be confirmed in time"
            except KubeError as exc:
                why = str(exc)
            left_behind(command)
            _progress(f"could not delete {path_of(job)}: {why}; delete it with `{command}`")


def _estimate(
    names: list[str], topo: dict[str, tuple[str, ...]], levels: tuple[str, ...], size: int,
    concurrency: int, args: argparse.Namespace, confirm: int, rails: int,
) -> list[str]:  # fmt: skip
    """What the sweep will take, in words, failures included (the planner's own sweep run
    against simulated fleets: :mod:`sweep_forecast`), and a warning when --sweep-timeout is
    shorter than that."""
    if len(names) >= sweep_forecast.SAID_FROM:
        _progress(
            f"estimating the sweep over {len(names):,} nodes (simulating "
            f"{sweep_forecast.fleets(len(names))} fleets)..."
        )
    fc = sweep_forecast.forecast(names, topo, levels, concurrency, confirm, size, rails)
    said = sweep_forecast.words(fc, names, topo, args.timeout, confirm, size)
    warning = fc.warning(args.sweep_timeout)
    return [said] if warning is None else [said, warning]


def _judged(
    job: dict[str, Any],
    nodes: tuple[str, ...],
    outcome: nccl.Outcome,
    exp: nccl_rules.NcclExpectation,
) -> nccl_report.NcclReport:
    """A sweep job's report; a group job is judged per rank order, and one that did not
    pass is said at once with its failing orders (the sweep's table keeps verdicts only)."""
    orders = len(ring_orders(len(nodes))) if len(nodes) > 2 else 0
    doc = nccl.judge(outcome, exp, orders)
    if orders and doc.verdict != Verdict.PASS:
        name = job["metadata"]["name"]
        _progress(f"group job {name} ({' '.join(nodes)}): {doc.verdict}: " + "; ".join(nccl.headline(doc)))  # fmt: skip
    return doc


def _run_sweep(
    plan: Plan,
    args: argparse.Namespace,
    kube: Kube,
    names: list[str],
    labels: dict[str, dict[str, str]],
) -> sweep.SweepReport:
    """The group and pair rounds, then (with several rails) each bad node's rails alone."""
    rails = [r.name for r in plan.facts.fabric.rails]
    concurrency, size = _sweep_concurrency(plan, args.tenant), _sweep_group(plan, args)
    created: list[dict[str, Any]] = []
    stop = threading.Event()  # set when interrupted: running jobs stop waiting and clean up
    wait = sweep.waiting(stop)
    exp = nccl_rules.expectation(plan.facts, args.min_busbw, args.fraction)
    rail_exp = nccl_rules.expectation(plan.facts, args.min_busbw, args.fraction, rails=1)

    def run_job(
        nodes: tuple[str, ...], rail: str | None, round_: int, index: int
    ) -> nccl_report.NcclReport:
        job = _sweep_job(plan, args, nodes, round_, index, rail)
        created.append(job)
        outcome = nccl.run_job(  # --timeout bounds each job, --sweep-timeout the sweep
            kube, job, timeout=args.timeout, poll=args.poll, keep=args.keep, sleep=wait,
            placement=len(nodes) > 2,
        )  # fmt: skip
        return _judged(job, nodes, outcome, exp if rail is None else rail_exp)

    def run_all_rails(nodes: tuple[str, ...], round_: int, index: int) -> nccl_report.NcclReport:
        return run_job(nodes, None, round_, index)  # a pair's or a group's

    topo = _sweep_topology(plan, names, labels)
    levels = plan.facts.gang.switch_levels if any(topo.values()) else ()
    confirm = args.sweep_confirm or CONFIRM
    for line in _estimate(names, topo, levels, size, concurrency, args, confirm, len(rails)):
        _progress(line)
    report = sweep.SweepReport(nodes={}, rounds=0)
    try:
        sweep.sweep(
            names, run_all_rails, concurrency, stop=stop, into=report, topology=topo,
            levels=levels, confirm=confirm, run_group=run_all_rails if size > 2 else None,
            group=size,
        )  # fmt: skip
        if report.bad and len(rails) > 1:
            _progress(f"each rail of {', '.join(report.bad)} alone")
            sweep.localize_rails(
                report, rails, run_job, concurrency, rail_exp.threshold_gbps, stop=stop
            )
    except KubeError as exc:
        if kube.deadline is None or kube.clock() < kube.deadline:
            raise
        report.stopped = f"--sweep-timeout reached ({args.sweep_timeout:g} s; {exc})"
    except BaseException as exc:
        report.stopped = "interrupted" if isinstance(exc, KeyboardInterrupt) else str(exc)
        sys.stderr.write(printable(sweep.format_table(report)))
        raise
    finally:
        if not args.keep:
            _delete_jobs(kube, created)
    return report


def sweep_document(report: sweep.SweepReport, skipped: dict[str, list[str]]) -> dict[str, Any]:
    """The sweep's stable ``--json`` document."""

    def node(r: sweep.NodeResult) -> dict[str, Any]:
        rails: dict[str, Any] = {}
        if r.rails:
            rails = {
                "rails": {rail: asdict(res) for rail, res in r.rails.items()},
                "failingRails": r.failing_rails,
                "diagnosis": sweep.diagnosis(r),
            }
        return {
            "verdict": r.verdict,
            "busbw": r.busbw,
            "network": r.network,
            "pairs": r.pairs,
            **({"note": r.note} if r.note else {}),
            **rails,
        }

    return {
        "rounds": report.rounds,
        "railRounds": report.rail_rounds,
        "railThreshold": report.rail_threshold_gbps,
        "drain": report.bad,
        "notLocalized": report.unknown,
        "skipped": skipped,
        "nodes": {n: node(r) for n, r in sorted(report.nodes.items())},
        "stopped": report.stopped,
        "flaky": report.flaky,
        "pathFaults": [
            {
                "level": f.level,
                "switch": f.switch,
                "failedJobs": f.failed,
                "nodes": list(f.nodes),
                "words": sweep.path_words(f),
            }
            for f in report.paths
        ],
        "topologyLevels": list(report.levels),
        "confirm": report.confirm,
        "partners": report.partners or report.confirm,
        "jobs": len(report.jobs),
    }


def _refuse_short_timeout(plan: Plan, args: argparse.Namespace) -> None:
    """StackError (exit 2) when --timeout would cut off the longest job the sweep may run
    (as the printed estimate costs it): a sweep whose jobs all end at --timeout judges no
    node, after hours."""
    size = _sweep_group(plan, args)
    cost = Cost()
    longest, pair = cost.seconds(size), cost.seconds(2)
    if args.timeout >= longest:
        return
    group = (
        f", a group job of {size} nodes about {longest:g} s (or --sweep-group 2: two-node "
        "jobs only)"
        if size > 2
        else ""
    )
    problem = Problem(
        "--timeout",
        f"{args.timeout:g} s bounds each job of a sweep, but a two-node job is expected to "
        f"take about {pair:g} s{group}: every job cut off at --timeout judges no node; pass "
        f"--timeout {math.ceil(longest)} or more (default {arguments.NCCL_TIMEOUT})",
    )
    raise StackError("gpufabric verify nccl", [problem])


def cmd_sweep(plan: Plan, args: argparse.Namespace) -> int:
    """``verify nccl --sweep``: localize the nodes that fail the acceptance test."""
    if args.dry_run:
        return _sweep_dry_run(plan, args)
    _refuse_short_timeout(plan, args)
    # a request the stack cannot run (tenant, kind, leaf) is refused before any API call
    nccl.acceptance_job(plan, args.tenant, 2, args.image, args.name, leaf=args.leaf)
    kube = _kube(plan, args, sweep_=True)
    with kube.limit(args.timeout):
        contract = plan.facts.tenants.get(args.tenant)
        label = contract.leaf_label if contract is not None else None
        names, skipped, labels = _sweep_nodes(kube, plan, args.leaf, label)
    if len(names) < 2:
        print(
            "gpufabric verify nccl --sweep: fewer than 2 Ready, schedulable GPU nodes",
            file=sys.stderr,
        )
        return Verdict.INCONCLUSIVE.exit_code
    report = _run_sweep(plan, args, kube, names, labels)
    if args.junit:
        _write_junit(args.junit, f"nccl sweep ({plan.stack})", sweep_checks(report, skipped))
    if args.json:
        sys.stdout.write(json.dumps(sweep_document(report, skipped), indent=2) + "\n")
    else:
        sys.stdout.write(printable(sweep.format_table(report)))
        for why, which in _skipped(skipped):
            print(f"not swept ({why}): {', '.join(which)}")
    sys.stdout.flush()  # the report first: recording the results may take a while
    acceptance_record.after_sweep(kube, plan, args, report)
    return report.verdict.exit_code


def cmd_nccl(plan: Plan, args: argparse.Namespace) -> int:
    nccl.acceptance_kind(plan)  # a stack without an acceptance job: exit 2, no cluster call
    if args.sweep:
        return cmd_sweep(plan, args)
    # the sweep's own flags without --sweep are refused by the CLI (arguments.NCCL_RULES)
    if args.nodes < MIN_NODES:
        problem = Problem(
            "--nodes",
            f"{args.nodes}: the acceptance test needs at least {MIN_NODES} nodes: its "
            "verdict is on the fabric between nodes, and a run on one node sends nothing over "
            "the rails (the analyzer could only call it INCONCLUSIVE)",
        )
        raise StackError("gpufabric verify nccl", [problem])
    job = nccl.acceptance_job(
        plan, args.tenant, args.nodes, args.image, args.name, leaf=getattr(args, "leaf", None)
    )
    if args.dry_run:
        from gpufabric.outputs.render import to_yaml

        sys.stdout.write(to_yaml(job))
        return ExitCode.OK
    exp = nccl_rules.expectation(plan.facts, args.min_busbw, args.fraction)
    kube = _kube(plan, args)
    outcome = nccl.run_job(
        kube,
        job,
        timeout=args.timeout,
        poll=args.poll,
        keep=args.keep,
        progress=_progress,
        find_nodes=plan.facts.monitoring.enabled,
    )
    doc = nccl.judge(outcome, exp)
    checks = nccl_checks(doc, args.nodes)
    if args.junit:
        _write_junit(args.junit, f"nccl ({plan.stack})", checks)
    if args.json:
        sys.stdout.write(json.dumps(doc.to_dict(), indent=2) + "\n")
    else:
        if outcome.state == "Timeout":
            print(f"NCCL acceptance: {outcome.message}")
        sys.stdout.write(nccl_report.format_text(doc) if doc.runs else "")
        if not doc.runs:
            print(f"NCCL acceptance: {doc.verdict}: " + "; ".join(doc.reasons))
    sys.stdout.flush()  # the report first: recording the results may take a while
    acceptance_record.after_run(kube, plan, args, outcome.nodes, doc)
    return doc.exit_code


def _storage_targets(plan: Plan, tenant: str | None) -> list[storage.StorageTarget]:
    """The tenants' claims to prove; StackError (exit 2) when there are none or --tenant
    names a tenant without claims."""
    targets = list(storage.targets_from_plan(plan))
    if not targets:
        problem = Problem("storage", "the stack gives its tenants no storage claims to verify")
        raise StackError("gpufabric verify storage", [problem])
    if tenant is None:
        return targets
    chosen = [t for t in targets if tenant in (t.tenant, t.namespace)]
    if not chosen:
        known = ", ".join(t.namespace for t in targets)
        problem = Problem("--tenant", f"{tenant[:60]!r} has no storage claims; accepted: {known}")
        raise StackError("gpufabric verify storage", [problem])
    return chosen


def cmd_storage(plan: Plan, args: argparse.Namespace) -> int:
    """``verify storage``: each tenant's claims proven from pods on its GPU nodes."""
    targets = _storage_targets(plan, args.tenant)
    default_mbps, source = storage.default_threshold(plan.facts.fabric.link_rate_gbps)
    mbps = args.min_throughput if args.min_throughput is not None else default_mbps
    judge = storage.StorageJudge(
        mbps, "--min-throughput" if args.min_throughput else source, args.size_mib
    )
    image = pulled_image(plan, args.image, "--image", "probe-image")
    opts = storage_run.Options(image, judge, tuple(plan.facts.nodes.tolerations))
    kube = _kube(plan, args)
    kube.set_timeout(None)  # --timeout bounds each pod, not the command
    with kube.limit(args.timeout):
        names, skipped, _labels = _sweep_nodes(kube, plan)
    if not names:
        print("gpufabric verify storage: no Ready, schedulable GPU node", file=sys.stderr)
        return Verdict.INCONCLUSIVE.exit_code
    runner = storage_run.Runner(kube, args.timeout, args.poll, args.parallel, progress=_progress)
    checks: list[Check] = []
    try:
        for target in targets:
            nodes_ = storage.sample(names, args.sample)
            checks += storage_run.verify_tenant(runner, target, nodes_, opts)
    finally:
        runner.cleanup()
    for why, which in _skipped(skipped):
        checks += [skipped_check("storage.node", name, f"not checked: {why}") for name in which]
    checks.sort(key=lambda c: (c.target, c.check))
    suite = f"storage ({plan.stack}, threshold {_threshold_words(judge)})"
    return _report(args, suite, checks)


def _threshold_words(judge: storage.StorageJudge) -> str:
    if judge.min_mbps is None:
        return "none"
    return f"{judge.min_mbps:g} MB/s from {judge.threshold_source}"


COMMANDS: dict[str, Callable[[Plan, argparse.Namespace], int]] = {
    "nodes": cmd_nodes,
    "pods": cmd_pods,
    "cluster": cmd_cluster,
    "nccl": cmd_nccl,
    "storage": cmd_storage,
}
"""``gpufabric verify <check>``: one handler per check, each reading the stack's Plan."""


def sweep_checks(report: sweep.SweepReport, skipped: dict[str, list[str]]) -> list[Check]:
    """The sweep as one check per node, for JUnit: GOOD passes, BAD fails (with its failing
    rails), a node the sweep could not judge is an error, a node it left out is skipped."""
    checks: list[Check] = []
    for name, r in sorted(report.nodes.items()):
        best = f"best bus bandwidth {r.busbw:g} GB/s" if r.busbw is not None else "no bandwidth"
        pairs = "; ".join(f"round {rd} with {p}: {v}" for rd, p, v in r.pairs)
        if r.verdict == NodeVerdict.GOOD:
            checks.append(passed("nccl.sweep", name, f"{best} ({pairs})"))
        elif r.verdict == NodeVerdict.BAD:
            hint = sweep.diagnosis(r) or "drain the node and look at its NICs, cables and GPUs"
            why = f"{r.note}; " if r.note else ""
            checks.append(failed("nccl.sweep", name, f"{why}{best} ({pairs})", hint))
        elif r.verdict == NodeVerdict.FLAKY:
            hint = "not drained on this record: re-run it with proven partners, watch it"
            checks.append(failed("nccl.sweep", name, f"FLAKY: {r.note} ({pairs})", hint))
        else:
            checks.append(error("nccl.sweep", name, f"not localized ({pairs or 'no pair ran'})"))
    for why, which in _skipped(skipped):
        checks += [skipped_check("nccl.sweep", name, f"not swept: {why}") for name in which]
    for fault in report.paths:
        target = f"{fault.level}={fault.switch}"
        checks.append(failed("nccl.sweep.path", target, sweep.path_words(fault)))
    return checks


def nccl_checks(doc: nccl_report.NcclReport, nodes_: int) -> list[Check]:
    """The acceptance report as checks, for JUnit."""
    target = f"{nodes_} nodes"
    out: list[Check] = []
    if doc.job is not None and doc.job.state in ("Failed", "Timeout"):
        out.append(failed("nccl.job", target, doc.job.message))
    for run in doc.runs:
        msg = "; ".join(run.reasons) or f"best busbw {run.busbw_max_gbps} GB/s"
        cid = f"nccl.{run.file}"
        if run.verdict == "PASS":
            out.append(passed(cid, target, msg))
        elif run.verdict == "FAIL":
            out.append(failed(cid, target, msg))
        else:
            out.append(error(cid, target, msg))
    if not doc.runs:
        out.append(error("nccl.log", target, "; ".join(doc.reasons)))
    return out
