"""``gpufabric verify nodes|pods|cluster|nccl|storage``: each check's handler, run with the
stack's Plan, and its report (terminal table, ``--json``, ``--junit``).

Exit codes (:mod:`gpufabric.exitcodes`): 0 PASS, 4 FAIL, 5 INCONCLUSIVE (something could
not be decided, or the NCCL run timed out), 2 bad input, 3 the cluster or the hosts could
not be asked at all. Everything a check expects is read from the stack's Plan. The checks
are the verify families' (:mod:`gpufabric.verify`); ``verify nccl --sweep`` runs a sweep
session (:mod:`gpufabric.verify.sweep.session`). Only :func:`gpufabric.cli.verify.run`
imports this module, when a check runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit

from gpufabric.exitcodes import ExitCode, Verdict, worst
from gpufabric.model.problems import Problem, StackError
from gpufabric.model.redaction import printable
from gpufabric.model.stackfile import Stack
from gpufabric.outputs import ownfile
from gpufabric.outputs.jobs import plan_for_pool, pulled_image
from gpufabric.outputs.render import OutputError
from gpufabric.plan.build import Plan
from gpufabric.plan.items import LAYER_ORDER
from gpufabric.plan.resolve import DEFAULT_FRACTION
from gpufabric.verify import cluster, expect
from gpufabric.verify.interrupts import check_running, leftovers, shielded, terminating_signals
from gpufabric.verify.kube import Kube, mapping, name_of
from gpufabric.verify.nccl import job as nccl
from gpufabric.verify.nccl import record as acceptance_record
from gpufabric.verify.nccl import report as nccl_report
from gpufabric.verify.nccl import rules as nccl_rules
from gpufabric.verify.nodes import checks as nodes
from gpufabric.verify.nodes import daemonset as probe_daemonset
from gpufabric.verify.nodes import fabric, fleet
from gpufabric.verify.nodes import pools as node_pools
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
from gpufabric.verify.results import progress as report_progress
from gpufabric.verify.results import skipped as skipped_check
from gpufabric.verify.storage import judge as storage
from gpufabric.verify.storage import run as storage_run
from gpufabric.verify.sweep import run as sweep
from gpufabric.verify.sweep import session

_T = TypeVar("_T")

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
    is marked as such (:func:`~gpufabric.verify.interrupts.check_running`) and ends the
    command in :func:`gpufabric.cli.failure_exit`."""
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


def _nodes_pool(plan: Plan, args: argparse.Namespace) -> list[Plan]:
    """The pools ``verify nodes`` judges, each as its narrowed Plan: --pool's; the only
    pool; on a fleet with --via-cluster every pool (each node by the pool its labels
    select). --hosts and --write-expect on a fleet name the pool their hosts are of."""
    if args.pool is not None or not plan.facts.fleet:
        return [plan_for_pool(plan, args.pool, "gpufabric verify")]
    if args.via_cluster:
        return [plan.for_pool(name) for name in plan.facts.pool_names]
    flag = "--write-expect" if args.write_expect else "--hosts"
    problem = Problem(
        "--pool",
        f"the stack has {len(plan.facts.pools)} node pools, each with its own layout: "
        f"{flag} needs the pool its hosts are of (--via-cluster finds each node's pool from "
        f"its labels); accepted: {', '.join(plan.facts.pool_names)}",
    )
    raise StackError("gpufabric verify", [problem])


def cmd_nodes(plan: Plan, args: argparse.Namespace) -> int:
    pools = _nodes_pool(plan, args)
    if args.write_expect:
        return _write_expect(args.write_expect, expect.from_facts(pools[0].facts))
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

    def check(hosts: list[str], root: str, exp: expect.Expectation) -> list[Check]:
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
        results = check(_hosts(args.hosts), args.root, expect.from_facts(pools[0].facts))
        results += nodes.fleet_checks(results) + _nvlink_domains(pools[0], results)
    else:
        kube = _kube(plan, args)  # a kubeconfig that cannot be used is bad input: said first
        probe_daemonset.require_kubectl()
        image = pulled_image(plan, args.probe_image, "--probe-image", "probe-image")
        results = []
        if plan.facts.fleet:  # which pool each GPU node is of, by its labels
            chosen = {p.facts.pool for p in pools}
            listed = node_pools.membership(kube.list("/api/v1/nodes"), plan.facts)
            results += [c for c in listed if c.details.get("pool", "") in chosen | {""}]
        for one in pools:
            if plan.facts.fleet:
                report_progress(f"pool {one.facts.pool} ({one.facts.nodes.selector_text})")
            exp = expect.from_facts(one.facts)
            judged = _via_cluster(one, args, kube, image, functools.partial(check, exp=exp))
            results += judged
            results += _pool_fleet_checks(one, judged, kube)
    code = _report(args, f"nodes ({plan.stack})", results)
    summary = fleet.group_failures(results)
    if summary and not args.json:
        print("\nby failure:")
        for line in summary:
            print(f"  {line}")
    return code


def _pool_fleet_checks(plan: Plan, results: list[Check], kube: Kube) -> list[Check]:
    """Checks across one pool's nodes (one driver version: a job never spans pools, and
    pools may pin their own drivers; an NVL72 pool's NVLink domains), on a fleet named for
    the pool."""
    out = nodes.fleet_checks(results) + _nvlink_domains(plan, results, kube)
    if not plan.facts.fleet:
        return out
    return [dataclasses.replace(c, target=f"pool {plan.facts.pool}") for c in out]


def _nvlink_domains(plan: Plan, results: list[Check], kube: Kube | None = None) -> list[Check]:
    """Across an NVL72 pool's trays (:func:`~gpufabric.verify.nodes.fabric.domain_checks`):
    no clique holds more trays than a rack; with the API (``kube``), each node's clique label
    (GPU Feature Discovery's) is the clique its GPUs' fabric reports. None on other pools."""
    domains = plan.facts.nodes.nvlink
    if domains is None:
        return []
    labels: dict[str, str | None] | None = None
    if kube is not None:
        listed, _unreadable = cluster.readable_nodes(cluster.gpu_nodes(kube, plan.facts))
        labels = {
            name_of(n): _text_or_none(mapping(n, "metadata", "labels").get(domains.clique_label))
            for n in listed
        }
    return fabric.domain_checks(results, domains.trays_per_domain, labels)


def _text_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _via_cluster(
    plan: Plan,
    args: argparse.Namespace,
    kube: Kube,
    image: str,
    check: Callable[[list[str], str], list[Check]],
) -> list[Check]:
    """The checks of every node of the plan's pool, through a probe DaemonSet on them."""
    owned: list[str] = []  # what this run creates: all it may delete
    try:
        pods = probe_daemonset.start(
            kube, plan.facts.nodes, image, timeout=min(300, args.timeout),
            progress=report_progress, owned=owned,
        )  # fmt: skip
        context = _context(plan, args)
        hosts = [probe_daemonset.host_spec(p, args.kubeconfig, context) for p in pods]
        names = dict(zip(hosts, pods.values(), strict=True))
        return [
            dataclasses.replace(c, target=names.get(c.target, c.target))
            for c in check(hosts, probe_daemonset.HOST_ROOT)
        ]
    finally:
        if not args.keep_probe:
            with shielded(), kube.grace():
                probe_daemonset.stop(kube, progress=report_progress, owned=owned)


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


def sweep_pools(plan: Plan, pool: str | None) -> list[Plan]:
    """The pools a sweep covers, each as its narrowed Plan: --pool's, else every pool (a
    sweep never pairs nodes of two pools: each pool is swept apart, judged by its own
    threshold)."""
    if pool is not None or not plan.facts.fleet:
        return [plan_for_pool(plan, pool, "gpufabric verify nccl")]
    return [plan.for_pool(name) for name in plan.facts.pool_names]


def _in_pool(name: str, others: Sequence[str], work: Callable[[], _T]) -> _T:
    """``work`` for pool ``name`` of a fleet's sweep; its refusal names the pool, and the
    --pool that sweeps each other pool without it (exit 2)."""
    try:
        return work()
    except StackError as exc:
        alone = " or ".join(f"--pool {o}" for o in others)
        problems = [
            Problem(p.path, f"pool {name}: {p.message} ({alone} sweeps a pool without it)")
            for p in exc.problems
        ]
        raise StackError(exc.source, problems) from None


def cmd_sweep(plan: Plan, args: argparse.Namespace) -> int:
    """``verify nccl --sweep``: localize the nodes that fail the acceptance test, pool by
    pool on a fleet."""
    pools = sweep_pools(plan, args.pool)
    if len(pools) == 1:
        return _sweep_one(pools[0], args)
    # Every pool's refusal before the first API call, and before a dry run prints anything.
    for one in pools:
        _in_pool(one.facts.pool, _others(pools, one), functools.partial(session.check, one, args))
    if args.dry_run:
        for one in pools:
            report_progress(f"pool {one.facts.pool}:")
            _in_pool(
                one.facts.pool, _others(pools, one), functools.partial(session.dry_run, one, args)
            )
            sys.stdout.write("---\n" if one is not pools[-1] else "")
        return ExitCode.OK
    kube = _kube(plan, args, sweep_=True)
    swept: dict[str, session.Swept | None] = {}
    for one in pools:
        report_progress(f"sweeping pool {one.facts.pool} ({one.facts.nodes.selector_text})")
        swept[one.facts.pool] = session.run(one, args, kube)
    return _fleet_sweep_report(plan, pools, args, kube, swept)


def _others(pools: Sequence[Plan], one: Plan) -> list[str]:
    return [p.facts.pool for p in pools if p is not one]


def _fleet_sweep_report(
    plan: Plan,
    pools: list[Plan],
    args: argparse.Namespace,
    kube: Kube,
    swept: dict[str, session.Swept | None],
) -> int:
    """A fleet's sweep: each pool's table (or JSON document) under its name; the verdict is
    the worst pool's, and a pool with fewer than 2 nodes to pair is INCONCLUSIVE."""
    verdicts = [Verdict.INCONCLUSIVE if s is None else s.report.verdict for s in swept.values()]
    if args.junit:
        checks: list[Check] = []
        for name, s in swept.items():
            if s is None:
                checks.append(error("nccl.sweep", f"pool {name}", _TOO_FEW))
            else:
                checks += session.sweep_checks(s.report, s.skipped)
        _write_junit(args.junit, f"nccl sweep ({plan.stack})", checks)
    if args.json:
        doc = {
            "verdict": worst(verdicts),
            "pools": {
                name: (
                    {"verdict": Verdict.INCONCLUSIVE, "error": _TOO_FEW}
                    if s is None
                    else {"verdict": s.report.verdict, **session.sweep_document(*s)}
                )
                for name, s in swept.items()
            },
        }
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        for name, s in swept.items():
            print(f"pool {name}:")
            if s is None:
                print(f"  {_TOO_FEW}")
                continue
            sys.stdout.write(printable(sweep.format_table(s.report)))
            for why, which in session.skipped_words(s.skipped):
                print(f"not swept ({why}): {', '.join(which)}")
    sys.stdout.flush()  # the report first: recording the results may take a while
    for one in pools:
        s = swept[one.facts.pool]
        if s is not None:
            acceptance_record.after_sweep(kube, one, args, s.report)
    return worst(verdicts).exit_code


_TOO_FEW = "fewer than 2 Ready, schedulable GPU nodes"


def _sweep_one(plan: Plan, args: argparse.Namespace) -> int:
    """The sweep of one pool (the stack's only one, or --pool's)."""
    if args.dry_run:
        return session.dry_run(plan, args)
    session.check(plan, args)
    kube = _kube(plan, args, sweep_=True)
    swept = session.run(plan, args, kube)
    if swept is None:
        print(f"gpufabric verify nccl --sweep: {_TOO_FEW}", file=sys.stderr)
        return Verdict.INCONCLUSIVE.exit_code
    report, skipped = swept
    if args.junit:
        checks = session.sweep_checks(report, skipped)
        _write_junit(args.junit, f"nccl sweep ({plan.stack})", checks)
    if args.json:
        sys.stdout.write(json.dumps(session.sweep_document(report, skipped), indent=2) + "\n")
    else:
        sys.stdout.write(printable(sweep.format_table(report)))
        for why, which in session.skipped_words(skipped):
            print(f"not swept ({why}): {', '.join(which)}")
    sys.stdout.flush()  # the report first: recording the results may take a while
    acceptance_record.after_sweep(kube, plan, args, report)
    return report.verdict.exit_code


def cmd_nccl(plan: Plan, args: argparse.Namespace) -> int:
    nccl.acceptance_kind(plan)  # a stack without an acceptance job: exit 2, no cluster call
    if args.sweep:
        return cmd_sweep(plan, args)
    plan = plan_for_pool(plan, args.pool, "gpufabric verify nccl")
    # the sweep's own flags without --sweep are refused by the CLI (cli.verify.NCCL_RULES)
    if args.nodes < MIN_NODES:
        problem = Problem(
            "--nodes",
            f"{args.nodes}: the acceptance test needs at least {MIN_NODES} nodes: its "
            "verdict is on the fabric between nodes, and a run on one node sends nothing over "
            "the rails (the analyzer could only call it INCONCLUSIVE)",
        )
        raise StackError("gpufabric verify nccl", [problem])
    exp = _nccl_expectation(plan, args)
    job = nccl.acceptance_job(
        plan, args.tenant, args.nodes, args.image, args.name, leaf=getattr(args, "leaf", None)
    )
    if args.dry_run:
        from gpufabric.outputs.render import to_yaml

        sys.stdout.write(to_yaml(job))
        return ExitCode.OK
    kube = _kube(plan, args)
    outcome = nccl.run_job(
        kube,
        job,
        timeout=args.timeout,
        poll=args.poll,
        keep=args.keep,
        progress=report_progress,
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


def _nccl_expectation(plan: Plan, args: argparse.Namespace) -> nccl_rules.NcclExpectation:
    """What the acceptance run of --nodes on the plan's pool must show; on an NVL72 pool
    inside one NVLink domain (the run's trays fit one clique) or across domains. A
    threshold flag the run's scope would ignore is refused (exit 2), naming the one that
    applies."""
    facts = plan.facts
    scope = nccl_rules.nvlink_scope(facts, args.nodes)
    problems = []
    if args.nvlink_min_busbw is not None and scope is None:
        problems.append(
            Problem(
                "--nvlink-min-busbw",
                f"{args.nvlink_min_busbw:g}: "
                + (f"pool {facts.pool}'s nodes are" if facts.fleet else "the GPU nodes are")
                + " no NVL72 trays (gpuNodes.nvlink): a run is judged over the NICs "
                "(--min-busbw)",
            )
        )
    elif args.nvlink_min_busbw is not None and scope == "across" and facts.nodes.nvlink:
        most = facts.nodes.nvlink.trays_per_domain
        problems.append(
            Problem(
                "--nvlink-min-busbw",
                f"{args.nvlink_min_busbw:g}: --nodes {args.nodes} spans NVLink domains (at "
                f"most {most} trays in one), judged by the InfiniBand threshold (--min-busbw); "
                f"accepted: --nodes {most} or fewer",
            )
        )
    if scope == "domain":
        for flag, given in (
            ("--min-busbw", args.min_busbw is not None),
            ("--fraction", args.fraction != DEFAULT_FRACTION),
        ):
            if given:
                problems.append(_domain_only(flag, args.nodes))
    if problems:
        raise StackError("gpufabric verify nccl", problems)
    return nccl_rules.expectation(
        facts, args.min_busbw, args.fraction, nodes=args.nodes,
        nvlink_min_busbw=args.nvlink_min_busbw,
    )  # fmt: skip


def _domain_only(flag: str, nodes: int) -> Problem:
    return Problem(
        flag,
        f"--nodes {nodes} runs inside one NVLink domain, judged by the system's bar over "
        "NVLink, not the NICs' line rate: set that bar with --nvlink-min-busbw (the "
        "InfiniBand threshold applies to runs across domains)",
    )


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
    """``verify storage``: each tenant's claims proven from pods on its GPU nodes; in a
    fleet pool by pool (each pool's nodes, tolerations and threshold), every check carrying
    its pool."""
    targets = _storage_targets(plan, args.tenant)
    image = pulled_image(plan, args.image, "--image", "probe-image")
    if args.dry_run:
        return _storage_dry_run(plan, args, targets, image)
    kube = _kube(plan, args)
    kube.set_timeout(None)  # --timeout bounds each pod, not the command
    runner = storage_run.Runner(
        kube=kube,
        timeout=args.timeout,
        poll=args.poll,
        parallel=args.parallel,
        progress=report_progress,
    )
    pools = [plan.for_pool(n) for n in plan.facts.pool_names] if plan.facts.fleet else [plan]
    checks: list[Check] = []
    words: list[str] = []
    try:
        for pool_plan in pools:
            found, judge = _storage_pool(pool_plan, args, kube, runner, targets, image)
            if found is None:
                continue
            checks += found
            pool = f"{pool_plan.facts.pool}: " if plan.facts.fleet else ""
            words.append(pool + _threshold_words(judge))
    finally:
        runner.cleanup()
    if not words:
        print("gpufabric verify storage: no Ready, schedulable GPU node", file=sys.stderr)
        return Verdict.INCONCLUSIVE.exit_code
    checks.sort(key=lambda c: (c.target, c.check))
    if plan.facts.fleet:
        return _report(args, f"storage ({plan.stack}, threshold {'; '.join(words)})", checks)
    return _report(args, f"storage ({plan.stack}, threshold {words[0]})", checks)


def _storage_dry_run(
    plan: Plan, args: argparse.Namespace, targets: list[storage.StorageTarget], image: str
) -> int:
    """``verify storage --dry-run``: each tenant's pods (in a fleet, each pool's, with its
    tolerations), for review; the cluster is not asked."""
    from gpufabric.outputs.render import to_yaml

    pools = [plan.for_pool(n) for n in plan.facts.pool_names] if plan.facts.fleet else [plan]
    docs: list[str] = []
    for pool_plan in pools:
        judge = storage.StorageJudge(None, "--dry-run", args.size_mib)
        opts = storage_run.Options(
            image, judge, tuple(pool_plan.facts.nodes.tolerations), plan.facts.pull_secrets
        )
        for target in targets:
            docs += [to_yaml(p) for p in storage_run.dry_run_pods(target, opts, args.timeout)]
    sys.stdout.write("---\n".join(docs))
    pods = len(docs)
    report_progress(
        f"printed {pods} pod{'s' if pods != 1 else ''}, nothing created: a run writes from a "
        "pod of each tenant on every Ready GPU node (or --sample N), then each node reads back "
        "what the previous one wrote"
    )
    return ExitCode.OK


def _storage_pool(
    plan: Plan,
    args: argparse.Namespace,
    kube: Kube,
    runner: storage_run.Runner,
    targets: list[storage.StorageTarget],
    image: str,
) -> tuple[list[Check] | None, storage.StorageJudge]:
    """One pool's storage checks (None: it has no Ready, schedulable GPU node), each
    naming the pool in a fleet (``details.pool``), and the judge they were held to."""
    default_mbps, source = storage.default_threshold(plan.facts.fabric.link_rate_gbps)
    mbps = args.min_throughput if args.min_throughput is not None else default_mbps
    judge = storage.StorageJudge(
        mbps, "--min-throughput" if args.min_throughput else source, args.size_mib
    )
    opts = storage_run.Options(
        image, judge, tuple(plan.facts.nodes.tolerations), plan.facts.pull_secrets
    )
    with kube.limit(args.timeout):
        names, skipped, _labels = session.sweep_nodes(kube, plan)
    if not names:
        return None, judge
    checks: list[Check] = []
    for target in targets:
        nodes_ = storage.sample(names, args.sample)
        checks += storage_run.verify_tenant(runner, target, nodes_, opts)
    for why, which in session.skipped_words(skipped):
        checks += [skipped_check("storage.node", name, f"not checked: {why}") for name in which]
    if plan.facts.fleet:
        checks = [dataclasses.replace(c, details={**c.details, "pool": plan.facts.pool}) for c in checks]  # fmt: skip
    return checks, judge


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
