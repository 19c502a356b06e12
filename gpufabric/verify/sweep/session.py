"""A sweep session: ``gpufabric verify nccl --sweep`` against a cluster, from the nodes it
pairs to the jobs it leaves behind.

What a session does, in order: :func:`check` refuses, before any API call, a sweep the stack
or --timeout cannot run; :func:`run` picks the Ready, schedulable GPU nodes
(:func:`sweep_nodes`), says what the sweep will take (:mod:`.forecast`), runs the group and
pair rounds of :mod:`.run` with the tenant's acceptance jobs pinned to each pair or group
(:func:`sweep_job`), then each bad node's rails alone, and deletes every job it created
(:func:`delete_jobs`), however it ends. :func:`dry_run` prints the jobs instead.
:func:`sweep_document` and :func:`sweep_checks` are the result as ``--json`` and as JUnit
checks; the command line (:mod:`gpufabric.cli.verify_run`) prints them.
"""

from __future__ import annotations

import argparse
import math
import sys
import threading
from collections.abc import Callable
from dataclasses import asdict, replace
from typing import Any, NamedTuple

from gpufabric.exitcodes import ExitCode, Verdict, worst
from gpufabric.model.problems import Problem, StackError
from gpufabric.model.redaction import printable
from gpufabric.plan.build import Plan
from gpufabric.verify import cluster
from gpufabric.verify.defaults import NCCL_TIMEOUT
from gpufabric.verify.interrupts import left_behind, shielded
from gpufabric.verify.kube import Kube, KubeError, Malformed, describe, mapping, name_of, path_of
from gpufabric.verify.nccl import job as nccl
from gpufabric.verify.nccl import report as nccl_report
from gpufabric.verify.nccl import rules as nccl_rules
from gpufabric.verify.nccl.parse import parse_runs
from gpufabric.verify.results import Check, error, failed, passed, progress
from gpufabric.verify.results import skipped as skipped_check
from gpufabric.verify.sweep import domains
from gpufabric.verify.sweep import forecast as sweep_forecast
from gpufabric.verify.sweep import run as sweep
from gpufabric.verify.sweep.cost import Cost
from gpufabric.verify.sweep.job import topology_of
from gpufabric.verify.sweep.judge import NodeVerdict
from gpufabric.verify.sweep.rounds import CONFIRM, ring_orders

SKIP_REASONS = (("cordoned", "cordoned"), ("notReady", "not Ready"))
"""Why a GPU node is left out of a sweep: (JSON key, words)."""


def skipped_words(skipped: dict[str, list[str]]) -> list[tuple[str, list[str]]]:
    """(words, nodes) for each reason some GPU nodes were left out."""
    return [(why, skipped[key]) for key, why in SKIP_REASONS if skipped[key]]


def sweep_job(
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


def sweep_group(plan: Plan, args: argparse.Namespace) -> int:
    """Nodes per group job the sweep may run: what the tenant's quota runs at once (its
    two-node jobs' nodes), at most --sweep-group, the stack's GPU nodes and, where rails are
    routed per leaf, the nodes its node table puts under the leaf; 2 is pairs only. The
    planner caps it further at a leaf's nodes (:func:`~gpufabric.verify.sweep.rounds.group_size`)."""
    size = min(2 * sweep_concurrency(plan, args.tenant), plan.facts.nodes.count)
    if args.sweep_group is not None:
        size = min(size, args.sweep_group)
    contract = plan.facts.tenants.get(args.tenant)
    label = contract.leaf_label if contract is not None else None
    if args.leaf is not None and label is not None and plan.facts.gang.node_topology:
        size = min(size, plan.facts.gang.nodes_under(label, args.leaf))
    return max(2, size)


def dry_run(plan: Plan, args: argparse.Namespace) -> int:
    """The jobs a sweep submits, for review; the cluster is not asked. A sweep the real run
    refuses (:func:`check`) is refused here too."""
    from gpufabric.outputs.render import to_yaml

    check(plan, args)

    rails = [r.name for r in plan.facts.fabric.rails]
    size = sweep_group(plan, args)
    pair = ("<node-a>", "<node-b>")
    jobs = [sweep_job(plan, args, pair, 1, 0)]
    if size > 2:
        jobs.append(sweep_job(plan, args, tuple(f"<node-{i}>" for i in range(size)), 1, 1))
    if len(rails) > 1:
        jobs.append(sweep_job(plan, args, pair, 2, 0, rails[0]))
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
    progress(
        f"printed {len(jobs)} job{'s' if len(jobs) > 1 else ''}, nothing submitted: a sweep "
        f"runs {group}two-node jobs (pinned to the pair){second}"
    )
    return ExitCode.OK


def skip_reason(node: dict[str, Any]) -> str | None:
    """Why a GPU node is left out of a sweep (a key of :data:`SKIP_REASONS`), or None;
    a node whose status cannot be read is not known to be Ready."""
    try:
        if not cluster.node_ready(node):
            return "notReady"
        if mapping(node, "spec").get("unschedulable"):
            return "cordoned"  # a pinned job would wait there until it times out
    except Malformed:
        return "notReady"
    return None


def sweep_nodes(
    kube: Kube, plan: Plan, leaf: str | None = None, leaf_label: str | None = None
) -> tuple[list[str], dict[str, list[str]], dict[str, dict[str, str]]]:
    """The GPU nodes a sweep pairs (those under ``leaf`` when given), those it leaves out
    by reason (said on stderr), and each paired node's labels."""
    names: list[str] = []
    labels: dict[str, dict[str, str]] = {}
    skipped: dict[str, list[str]] = {key: [] for key, _ in SKIP_REASONS}
    for node in cluster.gpu_nodes(kube, plan.facts):
        why = skip_reason(node)
        try:
            name = name_of(node)
            own = {str(k): str(v) for k, v in mapping(node, "metadata", "labels").items()}
        except Malformed:
            name, why, own = describe(node), "notReady", {}
        if leaf is not None and leaf_label is not None and own.get(leaf_label) != leaf:
            continue  # another leaf's nodes cannot attach this leaf's networks
        labels[name] = own
        (names if why is None else skipped[why]).append(name)
    for why, which in skipped_words(skipped):
        progress(f"skipping {len(which)} GPU nodes ({why}): {', '.join(which)}")
    return names, skipped, labels


def sweep_topology(
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
        progress(
            f"pairing without topology: {', '.join(lacking[:5])}"
            f"{' and others' if len(lacking) > 5 else ''} lack {', '.join(levels)}"
        )
    return topo


def sweep_units(
    plan: Plan, names: list[str], labels: dict[str, dict[str, str]]
) -> tuple[dict[str, tuple[str, ...]], tuple[str, ...]]:
    """The sweep's topology (:func:`sweep_topology`) and its levels; on NVL72 trays (every
    node carries GPU Feature Discovery's clique label) the clique is the innermost level
    (:func:`~gpufabric.verify.sweep.domains.nvlink_topology`), said on stderr."""
    topo = sweep_topology(plan, names, labels)
    known = plan.facts.gang.switch_levels if any(topo.values()) else ()
    cliques, unlabelled = domains.cliques_of(names, labels)
    if unlabelled:
        progress(
            f"pairing without NVLink domains: {', '.join(unlabelled[:5])}"
            f"{' and others' if len(unlabelled) > 5 else ''} lack {domains.CLIQUE_LABEL} "
            "(GPU Feature Discovery sets it on NVL72 trays)"
        )
    if not cliques:
        return topo, known
    topo, known, dropped = domains.nvlink_topology(names, topo, known, cliques)
    racks = len(set(cliques.values()))
    progress(
        f"NVLink domains: {len(names)} trays in {racks} cliques ({domains.CLIQUE_LABEL}); "
        "trays pair inside their rack first, then across racks"
        + (f"; a rack spans switches at {', '.join(dropped)}, not paired by it" if dropped else "")
    )
    return topo, known


def sweep_concurrency(plan: Plan, tenant: str) -> int:
    """Two-node jobs the tenant's GPU quota admits at once (at least one)."""
    contract = plan.facts.tenants.get(tenant)
    gpus = 2 * plan.facts.nodes.gpus_per_node
    return max(1, (contract.gpu_admissible if contract else gpus) // gpus)


def delete_jobs(kube: Kube, created: list[dict[str, Any]]) -> None:
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
            progress(f"could not delete {path_of(job)}: {why}; delete it with `{command}`")


def _estimate(
    names: list[str], topo: dict[str, tuple[str, ...]], levels: tuple[str, ...], size: int,
    concurrency: int, args: argparse.Namespace, confirm: int, rails: int,
) -> list[str]:  # fmt: skip
    """What the sweep will take, in words, failures included (the planner's own sweep run
    against simulated fleets: :mod:`sweep_forecast`), and a warning when --sweep-timeout is
    shorter than that."""
    if len(names) >= sweep_forecast.SAID_FROM:
        progress(
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
        progress(f"group job {name} ({' '.join(nodes)}): {doc.verdict}: " + "; ".join(nccl.headline(doc)))  # fmt: skip
    return doc


def nvlink_system(labels: dict[str, dict[str, str]], nodes: tuple[str, ...]) -> str:
    """The NVL72 system whose NVLink-domain bar judges a job of ``nodes``: GB300 when GPU
    Feature Discovery's product label says so on every one, else GB200 (the lower bar)."""
    products = {labels.get(n, {}).get(GPU_PRODUCT_LABEL, "") for n in nodes}
    return "GB300" if products and all("GB300" in p for p in products) else "GB200"


GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
"""GPU Feature Discovery's product label (e.g. NVIDIA-GB200, NVIDIA-GB300)."""


def _nvlink_expectations(
    exp: nccl_rules.NcclExpectation, rail_exp: nccl_rules.NcclExpectation,
    topo: dict[str, tuple[str, ...]], levels: tuple[str, ...], labels: dict[str, dict[str, str]],
) -> Callable[[tuple[str, ...], nccl.Outcome, str | None], nccl_rules.NcclExpectation]:  # fmt: skip
    """The expectation a sweep job is judged by: a job of trays of one NVLink domain whose
    log shows NCCL's multi-node NVLink lines by the NVLink-domain verdict
    (:func:`~gpufabric.verify.nccl.rules.nvlink_domain`: the system's bar, MNNVL proven, one
    clique, no NET channel); every other job as before."""

    def pick(
        nodes: tuple[str, ...], outcome: nccl.Outcome, rail: str | None
    ) -> nccl_rules.NcclExpectation:
        base = exp if rail is None else rail_exp
        if rail is not None or not domains.in_domain(topo, levels, nodes):
            return base
        if not shows_mnnvl(outcome.log):
            return base
        bar = nccl_rules.nvlink_domain(nvlink_system(labels, nodes))
        # the run's stated threshold is the domain's bar (the NICs' is not read inside it)
        return replace(
            base, nvlink=bar, threshold_gbps=bar.threshold_gbps,
            threshold_source=bar.threshold_source,
        )  # fmt: skip

    return pick


def shows_mnnvl(log: str) -> bool:
    """Whether NCCL's own lines in ``log`` speak of multi-node NVLink (a rank's ``comm ...
    MNNVL n``, ``MNNVL n cliqueId``, or a ``via P2P/MNNVL`` channel)."""
    return any(
        run.mnnvl or run.mnnvl_off or run.cliques or run.mnnvl_channels for run in parse_runs(log)
    )


def _run_sweep(
    plan: Plan,
    args: argparse.Namespace,
    kube: Kube,
    names: list[str],
    labels: dict[str, dict[str, str]],
) -> sweep.SweepReport:
    """The group and pair rounds, then (with several rails) each bad node's rails alone."""
    rails = [r.name for r in plan.facts.fabric.rails]
    concurrency, size = sweep_concurrency(plan, args.tenant), sweep_group(plan, args)
    created: list[dict[str, Any]] = []
    stop = threading.Event()  # set when interrupted: running jobs stop waiting and clean up
    wait = sweep.waiting(stop)
    exp = nccl_rules.expectation(plan.facts, args.min_busbw, args.fraction)
    rail_exp = nccl_rules.expectation(plan.facts, args.min_busbw, args.fraction, rails=1)

    def run_job(
        nodes: tuple[str, ...], rail: str | None, round_: int, index: int
    ) -> nccl_report.NcclReport:
        job = sweep_job(plan, args, nodes, round_, index, rail)
        created.append(job)
        outcome = nccl.run_job(  # --timeout bounds each job, --sweep-timeout the sweep
            kube, job, timeout=args.timeout, poll=args.poll, keep=args.keep, sleep=wait,
            placement=len(nodes) > 2,
        )  # fmt: skip
        return _judged(job, nodes, outcome, nvlink(nodes, outcome, rail))

    def run_all_rails(nodes: tuple[str, ...], round_: int, index: int) -> nccl_report.NcclReport:
        return run_job(nodes, None, round_, index)  # a pair's or a group's

    topo, levels = sweep_units(plan, names, labels)
    nvlink = _nvlink_expectations(exp, rail_exp, topo, levels, labels)
    confirm = args.sweep_confirm or CONFIRM
    for line in _estimate(names, topo, levels, size, concurrency, args, confirm, len(rails)):
        progress(line)
    report = sweep.SweepReport(nodes={}, rounds=0, cliques=_cliques(topo, levels))
    try:
        sweep.sweep(
            names, run_all_rails, concurrency, stop=stop, into=report, topology=topo,
            levels=levels, confirm=confirm, run_group=run_all_rails if size > 2 else None,
            group=size,
        )  # fmt: skip
        if report.bad and len(rails) > 1:
            progress(f"each rail of {', '.join(report.bad)} alone")
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
            delete_jobs(kube, created)
    return report


def _cliques(topo: dict[str, tuple[str, ...]], levels: tuple[str, ...]) -> dict[str, str]:
    """Each tray's clique when the sweep's innermost level is the clique (else none)."""
    return {n: t[-1] for n, t in topo.items()} if levels[-1:] == (domains.CLIQUE_LABEL,) else {}


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
            **({"clique": report.cliques[r.node]} if r.node in report.cliques else {}),
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
        **(_domain_document(report) if report.cliques else {}),
    }


def _domain_document(report: sweep.SweepReport) -> dict[str, Any]:
    """The NVLink domains of a sweep of NVL72 trays (only then: other sweeps' documents
    are unchanged): each clique's trays and verdict, and the racks faulted as a whole."""
    by_clique: dict[str, list[str]] = {}
    for node, clique in sorted(report.cliques.items()):
        by_clique.setdefault(clique, []).append(node)
    faulted = {d.clique for d in report.domains}
    return {
        "domains": {
            clique: {
                "trays": trays,
                "verdict": str(
                    Verdict.FAIL
                    if clique in faulted
                    else worst(sweep.NODE_VERDICT[report.nodes[t].verdict] for t in trays)
                ),
            }
            for clique, trays in by_clique.items()
        },
        "domainFaults": [
            {
                "clique": d.clique,
                "trays": list(d.trays),
                "failedJobs": d.failed,
                "passedAcross": list(d.across),
                "words": sweep.domain_words(d),
            }
            for d in report.domains
        ],
    }


def _refuse_short_timeout(plan: Plan, args: argparse.Namespace) -> None:
    """StackError (exit 2) when --timeout would cut off the longest job the sweep may run
    (as the printed estimate costs it): a sweep whose jobs all end at --timeout judges no
    node, after hours."""
    size = sweep_group(plan, args)
    cost = Cost()
    longest, pair = cost.seconds(size), cost.seconds(2)
    if args.timeout >= longest:
        return
    if "timeout" not in getattr(args, "typed", {"timeout"}):
        # Not typed: the default grows to the longest job the sweep runs, as the runbook's
        # sweep lines (which pass none) rely on; a --timeout typed is held to (below).
        args.timeout = float(math.ceil(longest))
        progress(
            f"a group job of {size} nodes takes about {longest:g} s: each job may take "
            f"{args.timeout:g} s (--timeout sets another bound)"
        )
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
        f"--timeout {math.ceil(longest)} or more (default {NCCL_TIMEOUT})",
    )
    raise StackError("gpufabric verify nccl", [problem])


def check(plan: Plan, args: argparse.Namespace) -> None:
    """StackError (exit 2), before any API call, for a sweep that cannot run: a request the
    stack cannot run (tenant, kind, leaf), or a --timeout that would cut off its jobs."""
    _refuse_short_timeout(plan, args)
    nccl.acceptance_job(plan, args.tenant, 2, args.image, args.name, leaf=args.leaf)


class Swept(NamedTuple):
    """A sweep that ran: its report, and the GPU nodes it left out (by reason)."""

    report: sweep.SweepReport
    skipped: dict[str, list[str]]


def run(plan: Plan, args: argparse.Namespace, kube: Kube) -> Swept | None:
    """Sweep the tenant's Ready, schedulable GPU nodes (those under --leaf when given);
    None when fewer than 2 are left to pair."""
    with kube.limit(args.timeout):
        contract = plan.facts.tenants.get(args.tenant)
        label = contract.leaf_label if contract is not None else None
        names, skipped, labels = sweep_nodes(kube, plan, args.leaf, label)
    if len(names) < 2:
        return None
    return Swept(_run_sweep(plan, args, kube, names, labels), skipped)


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
    for why, which in skipped_words(skipped):
        checks += [skipped_check("nccl.sweep", name, f"not swept: {why}") for name in which]
    for fault in report.paths:
        target = f"{fault.level}={fault.switch}"
        checks.append(failed("nccl.sweep.path", target, sweep.path_words(fault)))
    for rack in report.domains:
        target = f"{domains.CLIQUE_LABEL}={rack.clique}"
        checks.append(failed("nccl.sweep.domain", target, sweep.domain_words(rack)))
    return checks
