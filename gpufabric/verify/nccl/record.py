"""Record each node's acceptance result in its NodeAcceptance object (gpufabric.io), the
resource kube-state-metrics exports as ``gpufabric_node_acceptance_*`` series (the
acceptance dashboard's bus bandwidth per node over time).

Written after ``verify nccl`` (every node its job ran on), ``verify nccl --sweep`` (every node
the sweep judged) and ``gpufabric health``'s re-certification (its candidates): create the
object named after the node when it is missing, then write its status subresource under the
resourceVersion read (a conflict reads it again). A result already recorded is not written
again. Only a stack with the monitoring layer (which installs the CRD) records; a write that
fails (no CRD, forbidden, the API unreachable) is a warning on stderr naming what fixes it,
never a change of the check's verdict or exit code.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gpufabric.exitcodes import Verdict
from gpufabric.plan import ids
from gpufabric.plan import node_acceptance as na
from gpufabric.plan.build import Plan
from gpufabric.plan.items import K8sObject
from gpufabric.verify.kube import Forbidden, Kube, KubeError, NotFound, mapping, path_of
from gpufabric.verify.nccl import report as nccl_report
from gpufabric.verify.nccl import rules as nccl_rules
from gpufabric.verify.sweep.judge import NodeVerdict
from gpufabric.verify.sweep.run import SweepReport

GRACE = 30.0
"""Seconds the writes may take after the check's own time limit (a sweep may use all of it)."""
ATTEMPTS = 3
"""Writes of one object in a row that may meet a concurrent change (409) before giving up."""


@dataclass(frozen=True)
class Result:
    """One node's result, as it goes into its NodeAcceptance status."""

    node: str
    verdict: NodeVerdict
    busbw: float | None
    message: str = ""


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


def _stamp(at: dt.datetime) -> str:
    return at.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _busbw(doc: nccl_report.NcclReport) -> float | None:
    """The run's best bus bandwidth over its tests (as the sweep reads a pair's)."""
    values = [r.busbw_max_gbps for r in doc.runs if r.busbw_max_gbps is not None]
    return max(values) if values else None


def from_run(nodes: Sequence[str], doc: nccl_report.NcclReport) -> list[Result]:
    """A plain run's result for each node it ran on: GOOD when it passed; a failing or
    undecided run names no node, so its nodes are UNKNOWN (the sweep localizes)."""
    if doc.verdict == Verdict.PASS:
        verdict, words = NodeVerdict.GOOD, f"passed the acceptance run over {len(nodes)} nodes"
    else:
        reasons = "; ".join(doc.reasons)[:600]
        verdict = NodeVerdict.UNKNOWN
        words = (
            f"the acceptance run over {len(nodes)} nodes ended {doc.verdict}: {reasons}; "
            "a failing run names no node: gpufabric verify nccl --sweep localizes it"
        )
    return [Result(n, verdict, _busbw(doc), words) for n in sorted(set(nodes))]


def from_sweep(report: SweepReport) -> list[Result]:
    """Each node the sweep ran a job with, with its verdict and best bus bandwidth."""
    return [
        Result(name, r.verdict, r.busbw, r.note)
        for name, r in sorted(report.nodes.items())
        if r.pairs
    ]


class Judged(Protocol):
    """A re-certification outcome (gpufabric.health.recertify.Outcome)."""

    @property
    def passed(self) -> bool: ...
    @property
    def words(self) -> str: ...


def recertified(report: SweepReport, outcomes: Mapping[str, Judged]) -> list[Result]:
    """Re-certification candidates: GOOD when returned; a node the sweep called GOOD that
    was kept fell short of the fleet median, which is BAD here."""
    out = []
    for node, outcome in sorted(outcomes.items()):
        r = report.nodes.get(node)
        if r is None or not r.pairs:
            continue
        verdict = (
            NodeVerdict.GOOD
            if outcome.passed
            else (NodeVerdict.BAD if r.verdict == NodeVerdict.GOOD else r.verdict)
        )
        out.append(Result(node, verdict, r.busbw, outcome.words))
    return out


def _status(r: Result, source: str, job: str, threshold: float | None, stack: str, at: str) -> dict[str, Any]:  # fmt: skip
    status: dict[str, Any] = {"verdict": r.verdict, "source": source, "lastRunTime": at}
    if r.busbw is not None:
        status["busbwGbps"] = float(r.busbw)
    if threshold is not None:
        status["thresholdGbps"] = float(threshold)
    status |= {"jobName": job[:253], "stack": stack}
    if r.message:
        status["message"] = r.message[:1024]
    return status


def _write(kube: Kube, body: dict[str, Any]) -> bool:
    """Create-or-update one object's status; False when it already holds this result."""
    path = path_of(body)
    for _ in range(ATTEMPTS):
        live = kube.get(path)
        if live is None:
            try:
                live = kube.create({k: v for k, v in body.items() if k != "status"})
            except KubeError as exc:
                if ": HTTP 409 " not in str(exc):
                    raise
                continue  # created by another writer since the read: read it again
        if mapping(live, "status") == body["status"]:
            return False
        if kube.replace({**live, "status": body["status"]}, "status") is not None:
            return True
    raise KubeError(f"PUT {path}/status: changed by another writer {ATTEMPTS} times in a row")


def record(
    kube: Kube,
    plan: Plan,
    results: Sequence[Result],
    source: str,
    job: str,
    threshold: float | None,
    at: dt.datetime | None = None,
    warn: Callable[[str], None] | None = None,
) -> int:
    """Write each result; the number written. A failure stops the writes with one warning."""
    if not plan.facts.monitoring.enabled or not results:
        return 0
    stamp, written = _stamp(at or utc_now()), 0
    with kube.grace(GRACE):
        for r in results:
            status = _status(r, source, job, threshold, plan.stack, stamp)
            try:
                written += _write(kube, na.result_object(r.node, plan.stack, status))
            except KubeError as exc:
                (warn or _stderr)(warning(plan, exc, len(results) - written))
                break
    return written


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def crd_file(plan: Plan) -> str:
    """Where ``gpufabric render`` writes the NodeAcceptance CRD (under its --out)."""
    from gpufabric.outputs.render import object_path

    item = plan.item(ids.NODE_ACCEPTANCE_CRD)
    assert isinstance(item.payload, K8sObject)
    return object_path(item, item.payload)


def warning(plan: Plan, exc: KubeError, left: int) -> str:
    """The warning for a failed write, with the command that fixes its cause."""
    head = f"gpufabric: warning: {left} node acceptance results not recorded ({exc})"
    if isinstance(exc, NotFound):
        out = f"out/{plan.stack}"
        render = shlex.join(["gpufabric", "render", "--stack", plan.stack, "--out", out])
        create = shlex.join(["kubectl", "create", "-f", f"{out}/{crd_file(plan)}"])
        return f"{head}: the {na.CRD_NAME} CRD is not installed; install the monitoring layer (pulumi up), or: {render} && {create}"  # fmt: skip
    if isinstance(exc, Forbidden):
        bind = shlex.join(
            ["kubectl", "create", "clusterrolebinding", f"{na.WRITER_ROLE}-USER",
             f"--clusterrole={na.WRITER_ROLE}", "--user=USER"]
        )  # fmt: skip
        return f"{head}: bind the ClusterRole {na.WRITER_ROLE} to your user (USER): {bind}"
    return f"{head}; the results above stand, and the next run records them"


def _threshold(plan: Plan, args: argparse.Namespace) -> float | None:
    exp = nccl_rules.expectation(plan.facts, args.min_busbw, args.fraction)
    return exp.threshold_gbps


def after_run(kube: Kube, plan: Plan, args: argparse.Namespace, nodes: Sequence[str], doc: nccl_report.NcclReport) -> int:  # fmt: skip
    """``verify nccl``: each node the job ran on."""
    results = from_run(nodes, doc)
    return record(kube, plan, results, "acceptance", args.name, doc.threshold_gbps)


def after_sweep(kube: Kube, plan: Plan, args: argparse.Namespace, report: SweepReport) -> int:
    """``verify nccl --sweep``: each node the sweep ran a job with."""
    return record(kube, plan, from_sweep(report), "sweep", args.name, _threshold(plan, args))


def after_recertification(kube: Kube, plan: Plan, args: argparse.Namespace, report: SweepReport, outcomes: Mapping[str, Judged]) -> int:  # fmt: skip
    """``gpufabric health``: each re-certification candidate the sweep ran a job with."""
    results = recertified(report, outcomes)
    return record(kube, plan, results, "recertification", args.name, _threshold(plan, args))


__all__ = [
    "Result",
    "after_recertification",
    "after_run",
    "after_sweep",
    "from_run",
    "from_sweep",
    "recertified",
    "record",
    "warning",
]
