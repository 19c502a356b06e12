"""Scheduling, training and tenants from the queues, quotas and priority classes."""

from __future__ import annotations

import re
import typing
from collections.abc import Iterator
from typing import Any

from gpufabric.discover import infer_health
from gpufabric.discover.infer import (
    QUOTA,
    Context,
    alert_rules,
    annots,
    cni_config,
    labels,
    meta,
    spec,
)
from gpufabric.discover.infer_fabric import Pools
from gpufabric.discover.infer_topology import discovered_hypernodes, hypernode_levels, node_topology
from gpufabric.discover.roundtrip import managed
from gpufabric.model.config import TrainerRuntime

TENANT_LABEL = "gpufabric.io/tenant"
HOSTNAME = "kubernetes.io/hostname"
UNBOUNDED = {"cpu": "1000000", "memory": "1Pi"}


def authority(ctx: Context) -> str | None:
    """The queueing authority whose objects the cluster holds: each authority is asked for
    its component, and the one whose API group carries it wins."""
    from gpufabric.authorities import AUTHORITIES

    kinds = ("ClusterQueue", "LocalQueue", "Topology", "Queue", "HyperNode")
    groups = {str(o.get("apiVersion", "")) for k in kinds for o in ctx.managed(k)}
    # HyperNodes the scheduler's own discovery built from the stack's topology labels
    groups |= {str(o.get("apiVersion", "")) for o in discovered_hypernodes(ctx)}
    if not groups:  # no queue at all (no tenants): the metrics gpufabric scrapes from it
        groups |= {str(meta(o).get("namespace", "")) for o in ctx.managed("ServiceMonitor")}
    found = [a.name for a in AUTHORITIES.members() if _serves(a.component, groups)]
    return found[0] if len(found) == 1 else None


def _serves(chart: str, groups: set[str]) -> bool:
    """Whether an authority (by its component's name) serves one of these API groups."""
    return any(chart in g for g in groups)


def scheduling(ctx: Context, pools: Pools) -> dict[str, Any]:
    out: dict[str, Any] = {}
    chosen = authority(ctx)
    if chosen is not None:
        out["gang"] = chosen
    for topo in ctx.managed("Topology"):
        levels = [str(lv.get("nodeLabel")) for lv in spec(topo).get("levels") or []]
        if levels != [HOSTNAME] and not any(
            e.get("nvlink")
            for e in ([pools.section] if isinstance(pools.section, dict) else pools.section)
        ):
            out["topologyLevels"] = levels
    cohorts = {str(spec(q).get("cohortName")) for q in ctx.managed("ClusterQueue")} - {"None"}
    if len(cohorts) == 1 and cohorts != {"gpufabric"}:
        out["cohort"] = cohorts.pop()
    if "topologyLevels" not in out:
        levels = hypernode_levels(ctx)
        if levels:
            out["topologyLevels"] = levels
    if pools.routed:
        # routed rails' blocks are named by leaf: the nodes' places under the switches
        places = node_topology(pools.nodes, out.get("topologyLevels") or [])
        if places:
            out["nodeTopology"] = places
    return {"gpufabric:scheduling": out} if out else {}


def training(ctx: Context) -> dict[str, Any]:
    crds = {str(meta(c).get("name")) for c in ctx.snap.of("CustomResourceDefinition")}
    out: dict[str, Any] = {}
    granted = infer_health.mpi_operator(ctx)
    if granted is False or (granted is None and crds and "mpijobs.kubeflow.org" not in crds):
        out["mpiOperator"] = False
    restarts = infer_health.max_restarts(ctx)
    if restarts is not None and restarts != 3:
        out["failurePolicy"] = {"maxRestarts": restarts}
    ctx.notes.unmapped.append(
        "training.failurePolicy.activeDeadline: on no object (the jobs gpufabric writes carry "
        "it): written at its default"
        + ("" if restarts is not None else "; maxRestarts too (no Trainer runtime carries it)")
    )
    kinds = infer_health.schemes(ctx)
    if kinds:
        out["trainingOperator"] = {"schemes": kinds}
    offered = typing.get_args(TrainerRuntime)  # gpufabric's acceptance runtime is no choice
    runtimes = sorted(
        str(meta(r)["name"])
        for r in ctx.snap.of("ClusterTrainingRuntime")
        if meta(r).get("name") in offered
    )
    if runtimes:
        out["trainer"] = {"enabled": True, "runtimes": runtimes}
    return {"gpufabric:training": out} if out else {}


DASHBOARD = "grafana_dashboard"


def monitoring(ctx: Context) -> dict[str, Any]:
    """monitoring.enabled where gpufabric's Grafana dashboards are there; prometheus.install
    false where the kube-state-metrics ConfigMap for an existing Prometheus is there, and
    the labels gpufabric's ServiceMonitors carry as prometheus.selectorLabels (an installed
    one's ``release`` label is the chart's, not the stack's). Thresholds, health and
    nodeProblemDetector are not read (noted)."""
    from gpufabric.discover.sources import MANAGED_BY, STACK_LABEL
    from gpufabric.plan.monitoring import PROMETHEUS_COMPONENT
    from gpufabric.plan.node_acceptance import KSM_CONFIG_MAP

    boards = [c for c in ctx.managed("ConfigMap") if labels(c).get(DASHBOARD) == "1"]
    rules = ctx.managed("PrometheusRule")
    if not boards and not rules:
        return {}
    ctx.notes.unmapped.append(
        "monitoring: nodeProblemDetector is on no object discovery reads: written at its default"
    )
    out: dict[str, Any] = {"enabled": True}
    loop = infer_health.in_cluster(ctx)
    if loop:
        out["health"] = {"inCluster": loop}
    if not boards:
        out["dashboards"] = False
    found = thresholds(ctx)
    if found:
        out["thresholds"] = found
    install = not any(meta(c).get("name") == KSM_CONFIG_MAP for c in ctx.managed("ConfigMap"))
    selector: dict[str, str] = {}
    for monitor in ctx.managed("ServiceMonitor"):
        selector.update(labels(monitor))
    for key in (MANAGED_BY[0], STACK_LABEL):
        selector.pop(key, None)
    if install and selector.get("release") == PROMETHEUS_COMPONENT:
        del selector["release"]
    prometheus: dict[str, Any] = {} if install else {"install": False}
    if selector:
        prometheus["selectorLabels"] = dict(sorted(selector.items()))
    if prometheus:
        out["prometheus"] = prometheus
    return {"gpufabric:monitoring": out}


THRESHOLDS = (
    # (alert, the number in its expression, stack key, default, seconds per unit)
    ("RailSymbolErrors", re.compile(r"> (\d+)$"), "symbolErrorsPerHour", 10, 1),
    ("PfcStorm", re.compile(r"> (\d+)$"), "pfcPausesPerSecond", 10_000, 1),
    ("AcceptanceStale", re.compile(r"\) < (\d+)\)"), "acceptanceMaxAgeHours", 168, 3600),
)
"""Where gpufabric's alert rules (plan/alerts.py) hold each ``monitoring.thresholds`` value;
the gate compares the whole rule, so a number read wrong shows as a difference."""


def thresholds(ctx: Context) -> dict[str, int]:
    """``monitoring.thresholds`` that differ from the defaults, from the alert rules."""
    exprs = {str(r.get("alert")): str(r.get("expr", "")) for _, r in alert_rules(ctx)}
    out: dict[str, int] = {}
    for alert, pattern, key, default, unit in THRESHOLDS:
        found = pattern.search(exprs.get(alert, ""))
        if found and int(found.group(1)) // unit != default:
            out[key] = int(found.group(1)) // unit
    return out


def _tenant_namespaces(ctx: Context) -> list[str]:
    return [
        str(meta(n)["name"])
        for n in ctx.snap.of("Namespace")
        if labels(n).get(TENANT_LABEL) == "true"
    ]


def tenants(ctx: Context, pools: Pools) -> list[dict[str, Any]]:
    out = []
    for ns in _tenant_namespaces(ctx):
        entry: dict[str, Any] = {"namespace": ns}
        _gpus(ctx, ns, pools, entry)
        _queue_limits(ctx, ns, entry)
        prio = ctx.named("WorkloadPriorityClass", f"tenant-{ns}")
        value = (prio or {}).get("value")
        queue = ctx.named("Queue", ns)
        if prio is None and queue is not None:
            value = spec(queue).get("priority")
        if value:
            entry["priority"] = int(value)
        members = infer_health.groups(ctx, ns)
        if members is not None:
            entry["groups"] = members
        if pools.fabric.get("nadScope") == "tenant":
            _own_network(ctx, ns, pools.fabric, entry)
        out.append(entry)
    return out


def _own_network(ctx: Context, ns: str, fabric: dict[str, Any], entry: dict[str, Any]) -> None:
    """A tenant's VLAN and pkey, from its own copy of the rails' networks (nadScope:
    tenant): the copy's ``vlan``, and its ``pkey`` where it is not the fabric's."""
    shared = (fabric.get("infiniband") or {}).get("pkey")
    for nad in ctx.managed("NetworkAttachmentDefinition"):
        if meta(nad).get("namespace") != ns or "gpufabric.io/rail" not in labels(nad):
            continue
        cfg = cni_config(nad)
        if isinstance(cfg.get("vlan"), int) and not isinstance(cfg.get("vlan"), bool):
            entry["vlan"] = cfg["vlan"]
        if cfg.get("pkey") and cfg.get("pkey") != shared:
            entry["pkey"] = cfg["pkey"]
        return


LIMIT = "gpufabric.io/gpu-limit-"
GPU = "nvidia.com/gpu"


def _gpus(ctx: Context, ns: str, pools: Pools, entry: dict[str, Any]) -> None:
    """``gpuQuota`` and ``gpuBorrowingLimit``: per pool from the namespace quota's
    annotations (quota and limit per pool); for one pool from the tenant's queue (Kueue's
    nominal quota and borrowing limit, Volcano's deserved and capability), else from the
    namespace quota, whose hard limit is the quota plus what the tenant may borrow."""
    quota = ctx.named("ResourceQuota", "gpufabric-gpus", ns)
    notes = annots(quota) if quota is not None else {}
    if pools.names:
        per = {k.removeprefix(QUOTA): _int(v) for k, v in notes.items() if k.startswith(QUOTA)}
        cap = {k.removeprefix(LIMIT): _int(v) for k, v in notes.items() if k.startswith(LIMIT)}
        entry["gpuQuota"] = {p: per[p] for p in pools.names if p in per}
        _fleet_disagreement(ctx, ns, quota, per)
        extra = {p: cap[p] - per[p] for p in pools.names if p in per and cap.get(p, 0) > per[p]}
        if extra:
            entry["gpuBorrowingLimit"] = extra
        return
    hard = _int((spec(quota).get("hard") or {}).get("requests.nvidia.com/gpu", 0)) if quota else 0
    queued = _queue_gpus(ctx, ns)
    if queued is None:
        entry["gpuQuota"] = hard
        return
    nominal, borrow = queued
    entry["gpuQuota"] = nominal
    if borrow:
        entry["gpuBorrowingLimit"] = borrow
    if quota is not None and nominal + borrow != hard:
        ctx.notes.unmap(
            quota,
            "spec.hard",
            f"{hard} GPUs, and the tenant's queue admits {nominal} (+{borrow} borrowed): the "
            f"two disagree; the queue's written as tenants[{ns}] (the diff shows the quota's)",
        )


def _fleet_disagreement(
    ctx: Context, ns: str, quota: dict[str, Any] | None, per: dict[str, int]
) -> None:
    """A fleet tenant's ClusterQueue that admits another number of a pool's GPUs than the
    namespace quota's annotation says: said (the annotation is written)."""
    cq = ctx.named("ClusterQueue", ns)
    if cq is None or quota is None:
        return
    for _, pool, res in _flavor_resources(cq):
        nominal = _int(res.get("nominalQuota"))
        if res.get("name") == GPU and pool in per and nominal != per[pool]:
            ctx.notes.unmap(
                quota,
                f"metadata.annotations.{QUOTA}{pool}",
                f"{per[pool]} GPUs, and ClusterQueue {ns} admits {nominal} of pool "
                f"{pool}: the two disagree; the annotation's written (the diff shows "
                "the queue's)",
            )


def _flavor_resources(cq: dict[str, Any]) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """(the flavor's place in its resource group, its name, a resource's quota) of each
    resource a ClusterQueue's flavors hold."""
    for rg in spec(cq).get("resourceGroups") or []:
        for i, flavor in enumerate(rg.get("flavors") or []):
            for res in flavor.get("resources") or []:
                yield i, str(flavor.get("name")), res


def _int(value: Any) -> int:
    text = str(value)
    return int(text) if text.isdigit() else 0


def _queue_gpus(ctx: Context, ns: str) -> tuple[int, int] | None:
    """(GPUs, borrowable GPUs) the tenant's queue admits: a ClusterQueue's flavors' nominal
    quotas and borrowing limits, or a Volcano Queue's deserved and capability less it."""
    cq = ctx.named("ClusterQueue", ns)
    if cq is not None:
        gpus = [res for _, _, res in _flavor_resources(cq) if res.get("name") == GPU]
        nominal = sum(_int(res.get("nominalQuota")) for res in gpus)
        return nominal, sum(_int(res.get("borrowingLimit", 0)) for res in gpus)
    queue = ctx.named("Queue", ns)
    if queue is not None and managed(queue):
        deserved = _int((spec(queue).get("deserved") or {}).get(GPU))
        capability = _int((spec(queue).get("capability") or {}).get(GPU))
        return deserved, max(capability - deserved, 0)
    return None


def _queue_limits(ctx: Context, ns: str, entry: dict[str, Any]) -> None:
    """``cpuQuota`` and ``memoryQuota``: the first flavor's in the tenant's ClusterQueue, or a
    Volcano Queue's deserved."""
    cq = ctx.named("ClusterQueue", ns)
    queue = ctx.named("Queue", ns)
    if cq is None and queue is not None and managed(queue):
        deserved = spec(queue).get("deserved") or {}
        for name in UNBOUNDED:
            if name in deserved:
                entry[f"{name}Quota"] = str(deserved[name])
        return
    for place, _, res in _flavor_resources(cq or {}):
        kind, nominal = str(res.get("name")), str(res.get("nominalQuota"))
        if place == 0 and kind in UNBOUNDED and nominal != UNBOUNDED[kind]:
            entry[f"{kind}Quota"] = nominal
