"""One pass of ``gpufabric health`` over the stack's GPU nodes: read them (and the alerts),
decide (:mod:`.decide`), quarantine, re-certify and return (:mod:`.actions`), under the
Lease (:mod:`.lease`). The command (:mod:`gpufabric.cli.health`) runs one pass, or one
every --interval with --watch.

A pass's exit code (:attr:`PassReport.exit_code`, :mod:`gpufabric.exitcodes`): 0 every
fault acted on; 4 the circuit breaker held a node with a fatal fault (reported by name and
fault); 5 another pass held the Lease, or the alerts could not be read (what the node
conditions say was still acted on; no node re-certified). :func:`check` refuses bad input
(exit 2) before anything is asked of the cluster.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpufabric.authorities.base import GPU_RESOURCE
from gpufabric.exitcodes import ExitCode
from gpufabric.health import actions, decide, lease, nodechecks, recertify
from gpufabric.health.alerts import AlertsUnavailable, check_url, firing
from gpufabric.model.problems import Problem, StackError
from gpufabric.outputs.jobs import pulled_image
from gpufabric.plan.build import Plan
from gpufabric.verify import cluster
from gpufabric.verify.kube import Kube
from gpufabric.verify.nccl import job as nccl
from gpufabric.verify.nccl import record as acceptance_record
from gpufabric.verify.nccl import report as nccl_report
from gpufabric.verify.nccl import rules as nccl_rules
from gpufabric.verify.nodes import fleet
from gpufabric.verify.sweep import run as sweep
from gpufabric.verify.sweep.rounds import CONFIRM
from gpufabric.verify.sweep.session import delete_jobs, sweep_concurrency

RunPair = sweep.RunPair
Clock = Callable[[], dt.datetime]


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


def _stamp(at: dt.datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(kw_only=True)
class PassReport:
    """What one pass found and did (or, with --dry-run, would do)."""

    stack: str
    dry_run: bool
    gpu_nodes: int = 0
    limit: int = 0
    quarantined: int = 0
    alerts: str = "not asked (no --prometheus)"
    rows: list[dict[str, str]] = field(default_factory=list)
    busy: str = ""
    """Another pass held the Lease: who (this pass then changed nothing)."""

    def add(self, action: str, node: str, words: str) -> None:
        self.rows.append({"action": action, "node": node, "reason": words})

    @property
    def held(self) -> list[str]:
        return [r["node"] for r in self.rows if r["action"] == "held"]

    @property
    def exit_code(self) -> int:
        if self.held:
            return ExitCode.FAIL
        if self.busy:
            return ExitCode.INCONCLUSIVE
        if self.alerts.startswith("unavailable"):
            return ExitCode.INCONCLUSIVE
        return ExitCode.OK

    def document(self) -> dict[str, Any]:
        if self.busy:  # nothing was read: no figures about the cluster
            return {"stack": self.stack, "dryRun": self.dry_run, "busy": self.busy, "actions": []}
        return {
            "stack": self.stack,
            "dryRun": self.dry_run,
            "gpuNodes": self.gpu_nodes,
            "maxQuarantined": self.limit,
            "quarantined": self.quarantined,
            "alerts": self.alerts,
            "actions": self.rows,
            "held": self.held,
        }

    def table(self) -> str:
        verb = "would take" if self.dry_run else "took"
        if self.busy:
            return (
                f"gpufabric health ({self.stack}): another pass holds the Lease "
                f"{self.busy}; this pass changed nothing (run again when it has ended)\n"
            )
        lines = [
            f"gpufabric health ({self.stack}): {self.gpu_nodes} GPU nodes, {self.quarantined} "
            f"quarantined, at most {self.limit} (circuit breaker); alerts {self.alerts}"
        ]
        if not self.rows:
            lines.append("  nothing to do")
        lines += [f"  {r['action']:<12} {r['node']:<24} {r['reason']}" for r in self.rows]
        if self.held:
            lines.append(
                f"held by the circuit breaker (not quarantined; fix or raise --max-quarantined "
                f"knowingly): {', '.join(self.held)}"
            )
        lines.append(f"({verb} the actions above)")
        return "\n".join(lines) + "\n"


def _alerts(plan: Plan, args: argparse.Namespace, report: PassReport) -> tuple[list[decide.Alert], bool]:  # fmt: skip
    if not args.prometheus:
        return [], True
    try:
        alerts = firing(args.prometheus, plan.facts.monitoring.node_label, min(30.0, args.timeout))
    except AlertsUnavailable as exc:
        report.alerts = f"unavailable ({exc})"
        return [], False
    report.alerts = f"read ({len(alerts)} firing with a quarantine label)"
    return alerts, True


def _due(state: decide.NodeState, now: dt.datetime, retry_after: float) -> bool:
    """Whether a node that failed re-certification may be tried again."""
    rec = state.record
    if rec is None or not rec.check or not rec.checked:
        return True
    try:
        checked = dt.datetime.strptime(rec.checked, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    except ValueError:
        return True
    return (now - checked).total_seconds() >= retry_after


def observe_fleet(plan: Plan, args: argparse.Namespace, kube: Kube, report: PassReport) -> tuple[list[decide.NodeState], bool]:  # fmt: skip
    """Every GPU node's state, and whether the alerts were read."""
    m = plan.facts.monitoring
    pools = [plan.for_pool(n) for n in plan.facts.pool_names] if plan.facts.fleet else [plan]
    with kube.limit(args.timeout):
        nodes = [(p.facts.pool, n) for p in pools for n in cluster.gpu_nodes(kube, p.facts)]
    alerts, alerts_read = _alerts(plan, args, report)
    states = [
        decide.observe(n, m.quarantine_taint, m.health.fatal_conditions, alerts, GPU_RESOURCE)
        for _pool, n in nodes
    ]
    if plan.facts.fleet:  # each node's pool decides its re-certification
        states = [dataclasses.replace(s, pool=p) for s, (p, _n) in zip(states, nodes, strict=True)]
    return states, alerts_read


def one_pass(
    plan: Plan,
    args: argparse.Namespace,
    kube: Kube,
    run_pair: RunPair | None = None,
    clock: Clock = utc_now,
    transport: fleet.GatherTransport | None = None,
) -> PassReport:
    """Read, decide, act. ``run_pair`` runs one two-node acceptance job (default: the
    tenant's job, pinned to the pair and tolerating the quarantine taint); ``transport``
    reaches the node-check probe's pods (default: ``kubectl exec``)."""
    m = plan.facts.monitoring
    report = PassReport(stack=plan.stack, dry_run=args.dry_run)
    states, alerts_read = observe_fleet(plan, args, kube, report)
    now = clock()
    limit = decide.breaker(m.health, len(states), args.max_quarantined, args.max_fraction)
    due = {s.name: _due(s, now, args.retry_after) for s in states if s.ours}
    d = decide.decide(states, limit, alerts_read, due)
    report.gpu_nodes, report.limit, report.quarantined = d.gpu_nodes, d.limit, d.quarantined
    for node, fault in d.quarantine:
        if not args.dry_run:
            actions.quarantine(kube, node, fault, m.quarantine_taint, _stamp(now))
        report.add("quarantine", node, fault.words)
    for node, fault in d.held:
        breaker = _breaker_words(plan, args, d)
        if not args.dry_run:
            message = f"held by the circuit breaker, not quarantined: {fault.words}; {breaker}"
            actions.held(kube, node, fault, message, _stamp(now))
        report.add("held", node, f"{fault.words} (breaker: {breaker}); Event {actions.HELD}")
    for node, why in d.waiting:
        report.add("wait", node, why)
    for node, why in d.ignored:
        report.add("no action", node, f"{why} (the job's fault, not the node's)")
    for pool, names in _by_pool(states, d.recertify):
        # a pool's nodes are re-certified by its own acceptance: its partners, node checks,
        # driver, job and threshold, and the median of its own GOOD nodes
        own = plan.for_pool(pool) if pool else plan
        pooled = [s for s in states if s.pool == pool]
        _recertify(own, args, kube, pooled, names, report, run_pair, clock, transport)
    return report


def _by_pool(states: Sequence[decide.NodeState], names: Sequence[str]) -> list[tuple[str, list[str]]]:  # fmt: skip
    """The nodes to re-certify grouped by their pool ("" for one pool), in pool order."""
    pool_of = {s.name: s.pool for s in states}
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(pool_of.get(name, ""), []).append(name)
    return list(groups.items())


def guarded_pass(
    plan: Plan, args: argparse.Namespace, kube: Kube, me: str, clock: Clock = utc_now, **kw: Any
) -> PassReport:
    """One pass under the Lease (:mod:`gpufabric.health.lease`): a report saying who holds
    it, and nothing changed, when another pass does. A dry run takes no Lease."""
    if args.dry_run:
        return one_pass(plan, args, kube, clock=clock, **kw)
    namespace = plan.facts.monitoring.namespace
    try:
        with lease.holding(kube, namespace, me, clock) as lost:
            report = one_pass(plan, args, kube, clock=clock, **kw)
    except lease.Busy as exc:
        report = PassReport(stack=plan.stack, dry_run=args.dry_run)
        report.busy = f"{namespace}/{lease.NAME} ({exc})"
        return report
    if lost.is_set():
        sys.stderr.write(
            f"gpufabric health: another run took the Lease {namespace}/{lease.NAME} while this "
            "pass ran (its renewals had failed for longer than the Lease lasts): check the "
            "actions above against that run's\n"
        )
    return report


def _breaker_words(plan: Plan, args: argparse.Namespace, d: decide.Decision) -> str:
    """The circuit breaker's figures: how many are quarantined, and the limit's terms."""
    h = plan.facts.monitoring.health
    count = h.max_quarantined if args.max_quarantined is None else args.max_quarantined
    fraction = h.max_quarantined_fraction if args.max_fraction is None else args.max_fraction
    return (
        f"{d.quarantined} of {d.limit} quarantined; the limit is min({count}, "
        f"{fraction:g} x {d.gpu_nodes} GPU nodes)"
    )


def _recertify(
    plan: Plan, args: argparse.Namespace, kube: Kube, states: Sequence[decide.NodeState],
    names: Sequence[str], report: PassReport, run_pair: RunPair | None, clock: Clock,
    transport: fleet.GatherTransport | None = None,
) -> None:  # fmt: skip
    """Node checks (the API status, then the probe), then one sweep of the nodes that pass
    them with proven-good partners; return those the sweep proves, keep the others with the
    failing check named."""
    m, by_name = plan.facts.monitoring, {s.name: s for s in states}
    confirm = args.confirm or CONFIRM
    partners = recertify.partners(states, confirm + 1)
    fleet_driver = recertify.fleet_driver(states)
    checked: list[str] = []
    for name in names:
        failing = recertify.node_checks(by_name[name], plan.facts.nodes.gpus_per_node)
        if not failing:
            failing = _driver_words(args, by_name[name], fleet_driver)
        if not failing and len(partners) < confirm + 1:
            failing = f"sweep: {len(partners)} proven-good partners, {confirm + 1} needed"
        if failing:
            _keep(kube, args, name, failing, report, clock)
        else:
            checked.append(name)
    hostnames = {name: by_name[name].hostname for name in checked}
    if not checked or args.dry_run:
        for name in checked:
            report.add(
                "re-certify",
                name,
                _plan_words(plan, args, hostnames, partners, fleet_driver.version),
            )
        return
    checked = _probe(plan, args, kube, hostnames, report, clock, transport, fleet_driver)
    if not checked:
        return
    outcomes = _sweep(plan, args, kube, checked, partners, run_pair)
    for name in checked:
        outcome = outcomes[name]
        if outcome.passed:
            actions.release(kube, name, outcome.words, m.quarantine_taint, _stamp(clock()))
            report.add("return", name, outcome.words)
        else:
            _keep(kube, args, name, outcome.words, report, clock)


def _driver_words(args: argparse.Namespace, state: decide.NodeState, fleet: recertify.FleetDriver) -> str:  # fmt: skip
    """The driver comparison before any probe: none possible without the fleet's version;
    with --node-checks api, the node's GFD label against it (the probe compares the driver
    it reads on the node)."""
    if fleet.version and args.node_checks != nodechecks.API:
        return ""
    label = recertify.driver_check(state.name, state.driver, fleet, f"its label {decide.DRIVER_LABEL}")  # fmt: skip
    return nodechecks.verdict([label])


def _probe_run(plan: Plan, args: argparse.Namespace, transport: fleet.GatherTransport | None) -> nodechecks.ProbeRun:  # fmt: skip
    image = pulled_image(plan, args.probe_image, "--probe-image", "probe-image")
    context = None if args.in_cluster else (args.context or plan.facts.kube_context)
    kubeconfig = None if args.in_cluster else args.kubeconfig
    return nodechecks.ProbeRun(
        image=image, timeout=args.probe_timeout, kubeconfig=kubeconfig, context=context,
        transport=transport, poll=min(5.0, args.poll),
    )  # fmt: skip


def _plan_words(plan: Plan, args: argparse.Namespace, hostnames: dict[str, str], partners: list[str], driver: str) -> str:  # fmt: skip
    """What re-certification would do (--dry-run); ``driver``: the fleet's."""
    sweep_words = f"sweep with {', '.join(partners)}"
    if args.node_checks == nodechecks.API:
        return f"node checks (API status, driver {driver} as the fleet) pass; {sweep_words}"
    probe = nodechecks.describe(
        _probe_run(plan, args, None), sorted(hostnames.values()), plan.facts.monitoring.quarantine_taint
    )  # fmt: skip
    return (
        f"node checks (API status) pass; would start the {probe}; compare the driver it reads "
        f"with the fleet's {driver}; then {sweep_words}"
    )


def _probe(
    plan: Plan, args: argparse.Namespace, kube: Kube, hostnames: dict[str, str],
    report: PassReport, clock: Clock, transport: fleet.GatherTransport | None,
    fleet_driver: recertify.FleetDriver,
) -> list[str]:  # fmt: skip
    """The candidates whose probe node checks pass (all of them with --node-checks api);
    the others are kept with the check named."""
    if args.node_checks == nodechecks.API:
        return list(hostnames)
    run = _probe_run(plan, args, transport)
    taint = plan.facts.monitoring.quarantine_taint
    verdicts = nodechecks.run(kube, plan, hostnames, taint, run, fleet_driver, progress=_progress)
    for name, failing in verdicts.items():
        if failing:
            _keep(kube, args, name, failing, report, clock)
    return [name for name in hostnames if not verdicts[name]]


def _progress(msg: str) -> None:
    print(f"health: {msg}", file=sys.stderr, flush=True)


def _keep(kube: Kube, args: argparse.Namespace, name: str, check: str, report: PassReport, clock: Clock) -> None:  # fmt: skip
    if not args.dry_run:
        actions.keep(kube, name, check, _stamp(clock()))
    report.add("keep", name, check)


def _pool_tenant(plan: Plan, tenant: str) -> str:
    """The tenant a pool's re-certification jobs run through: --tenant where it has a quota
    in the pool, else the first tenant that has one (a job needs a quota to be admitted)."""
    tenants = plan.facts.tenants
    if not plan.facts.fleet or tenants[tenant].gpu_quota > 0:
        return tenant
    return next((ns for ns, t in tenants.items() if t.gpu_quota > 0), tenant)


def _sweep(
    plan: Plan, args: argparse.Namespace, kube: Kube, candidates: list[str], partners: list[str],
    run_pair: RunPair | None,
) -> dict[str, recertify.Recertification]:  # fmt: skip
    m = plan.facts.monitoring
    created: list[dict[str, Any]] = []
    stop = threading.Event()
    wait = sweep.waiting(stop)
    exp = nccl_rules.expectation(plan.facts, args.min_busbw, args.fraction)
    tenant = _pool_tenant(plan, args.tenant)

    def run_job(pair: tuple[str, str], round_: int, index: int) -> nccl_report.NcclReport:
        name = f"{args.name}-r{round_}-{index}"
        job = nccl.acceptance_job(
            plan, tenant, 2, args.image, name, pin_nodes=pair, tolerate=(m.quarantine_taint,)
        )
        created.append(job)
        outcome = nccl.run_job(kube, job, timeout=args.job_timeout, poll=args.poll, sleep=wait)
        return nccl.judge(outcome, exp)

    swept = sweep.SweepReport(nodes={}, rounds=0)
    try:
        outcomes = recertify.run_sweep(
            candidates, partners, run_pair or run_job, sweep_concurrency(plan, args.tenant),
            args.confirm or CONFIRM, m.health.median_fraction, stop=stop, into=swept,
        )  # fmt: skip
    finally:
        delete_jobs(kube, created)
    acceptance_record.after_recertification(kube, plan, args, swept, outcomes)
    return outcomes


def check(plan: Plan, args: argparse.Namespace) -> None:
    """Refuse what cannot run before anything is asked of the cluster (exit 2)."""
    problems = []
    if not plan.facts.monitoring.enabled:
        problems.append(
            Problem(
                "monitoring.enabled",
                "false: gpufabric health acts on the node conditions and alerts of the "
                "monitoring layer; set monitoring.enabled: true",
            )
        )
    if args.tenant not in plan.facts.tenants:
        known = ", ".join(sorted(plan.facts.tenants)) or "none"
        problems.append(Problem("--tenant", f"{args.tenant[:60]!r} is no tenant of the stack; accepted: {known}"))  # fmt: skip
    if args.node_checks == nodechecks.PROBE and not (
        args.probe_image or plan.components["probe-image"].image_ref
    ):
        problems.append(Problem("--probe-image", "the stack pins no probe image; name one or pass --node-checks api"))  # fmt: skip
    if args.in_cluster and (args.kubeconfig or args.context):
        flag = "--kubeconfig" if args.kubeconfig else "--context"
        problems.append(Problem("--in-cluster", f"uses the pod's service account; drop {flag} (or --in-cluster to use the kubeconfig)"))  # fmt: skip
    if problems:
        raise StackError("gpufabric health", problems)
    if args.prometheus:
        args.prometheus = check_url(args.prometheus)
    nccl.acceptance_job(plan, args.tenant, 2, args.image, args.name)  # exit 2 when it cannot run
    pulled_image(plan, args.probe_image, "--probe-image", "probe-image")


__all__ = ["PassReport", "check", "guarded_pass", "observe_fleet", "one_pass"]
