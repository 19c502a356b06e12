"""Volcano: gang scheduling with capacity queues and network-topology-aware placement.

The chart runs with a scheduler configuration (gang on, capacity queues, reclaim of borrowed
resources, network-topology-aware placement when the stack has topology levels) and a
controller configuration that discovers HyperNodes from the levels' node labels; gpufabric
writes a Queue and a PriorityClass per tenant. Tenant namespaces carry the queue annotation;
the job operators start with Volcano's gang flags and create the PodGroups.

A Volcano Queue has no flavors: its ``deserved`` and ``capability`` are amounts per resource
name, and every pool's GPUs are ``nvidia.com/gpu``. In a fleet a tenant's Queue holds the sum of
its quotas (and of its per-pool borrowing limits) over the pools; which pool a job runs in is
its pods' node selector. The per-pool split of a ``gpuQuota`` map is kept by ``gpufabric job``
and ``verify`` (they refuse a job its pool's share cannot admit), not by Volcano: validation
says so in a warning. HyperNodes are discovered per switch from the topology-level labels of
every node, so each pool's switches become its own HyperNodes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import yaml

from gpufabric.authorities.base import GPU_RESOURCE, Authority
from gpufabric.model.config import HOSTNAME_LABEL
from gpufabric.plan import ids
from gpufabric.plan.facts import (
    DiscoveredTopology,
    GangPolicy,
    PlanContext,
    QueueMetrics,
    TenantContract,
)
from gpufabric.plan.items import Item, Layer, object_item

TOPOLOGY_NAME = "gpufabric"
HYPERNODE_SOURCE = "volcano.sh/network-topology-source=label"
"""The label Volcano's controller puts on the HyperNodes it discovers from node labels."""
NORMAL_POD_BINPACK = {"hypernode.binpack.normal-pod.enable": True}
"""network-topology-aware's packing of pods whose PodGroup has no networkTopology under the
fewest HyperNodes: how MPIJob and PyTorchJob gangs are placed (their operators write
PodGroups without one); set, not left to the plugin's default."""
QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"
OPERATOR_FLAGS = {
    "mpi-operator": ("--gang-scheduling=volcano",),
    "training-operator": ("--gang-scheduler-name=volcano",),
}

OWN_QUEUE = "variables.tenant.queue"
OWN_PRIORITY = "variables.tenant.priorityClass"


def _unset_or(path: str, wanted: str) -> str:
    """CEL: the optional string field ``path`` is unset, empty or ``wanted``."""
    return f"(!has({path}) || {path} == '' || {path} == {wanted})"


def _for_kind(group: str, kind: str | None, checks: str) -> str:
    match = f"request.kind.group == {group!r}"
    if kind is not None:
        match += f" && request.kind.kind == {kind!r}"
    return f"(!({match}) || ({checks}))"


_QUEUE_AND_PRIORITY = (
    f"{_unset_or('object.spec.queue', OWN_QUEUE)}"
    f" && {_unset_or('object.spec.priorityClassName', OWN_PRIORITY)}"
)
_SCHEDULING_POLICY = (
    "!has(object.spec.runPolicy) || !has(object.spec.runPolicy.schedulingPolicy) || ("
    f"{_unset_or('object.spec.runPolicy.schedulingPolicy.queue', OWN_QUEUE)} && "
    f"{_unset_or('object.spec.runPolicy.schedulingPolicy.priorityClass', OWN_PRIORITY)})"
)
ADMISSION_RULES = (
    {
        "expression": " && ".join(
            f"(!has(object.metadata.{field}) || !({QUEUE_ANNOTATION!r} in object.metadata.{field})"
            f" || object.metadata.{field}[{QUEUE_ANNOTATION!r}] == {OWN_QUEUE})"
            for field in ("annotations", "labels")
        ),
        "message": f"a tenant's jobs name only its own Volcano Queue ({QUEUE_ANNOTATION})",
        "reason": "Forbidden",
    },
    {
        # The PodGroup is what Volcano schedules: the job operators copy the queue and the
        # priority class into it, so a foreign one is refused here whatever the job kind.
        "expression": " && ".join(
            (
                _for_kind("scheduling.volcano.sh", "PodGroup", _QUEUE_AND_PRIORITY),
                _for_kind("batch.volcano.sh", "Job", _QUEUE_AND_PRIORITY),
                _for_kind("kubeflow.org", None, _SCHEDULING_POLICY),
            )
        ),
        "message": (
            "a tenant's PodGroups, Volcano Jobs and Kubeflow jobs (runPolicy.schedulingPolicy) "
            "name only its own Volcano Queue and PriorityClass"
        ),
        "reason": "Forbidden",
    },
)
"""Admission rules of a tenant namespace under Volcano."""


class Volcano(Authority):
    name: ClassVar[str] = "volcano"
    title: ClassVar[str] = "Volcano"
    component: ClassVar[str] = "volcano"
    holds: ClassVar[str] = "PodGroups and Volcano Jobs"
    job_operators_first: ClassVar[bool] = False
    runbook_fragment: ClassVar[str] = "authority-volcano.md.j2"
    readiness: ClassVar[dict[str, tuple[str, str]]] = {"Queue": ("state", "Open")}
    own_queues: ClassVar[frozenset[str]] = frozenset({"default", "root"})
    """Volcano's controller creates the `default` queue (jobs naming none land there) and the
    `root` queue every queue of the hierarchy sits under."""
    ignored_settings: ClassVar[Mapping[str, str]] = {
        "allOrNothingTimeout": (
            "the MPI and Training Operators write Volcano PodGroups without a timeout; a gang "
            "waits in its queue until all its pods fit"
        ),
        "requeuing": "Kueue's requeue backoff; Volcano keeps a gang queued instead",
        "cohort": (
            "Kueue's cohort; Volcano queues lend idle GPUs through their deserved and "
            "capability (gpuQuota, gpuBorrowingLimit)"
        ),
    }

    def queue_metrics(self) -> QueueMetrics:
        """Volcano's scheduler exports no queue wait histogram nor a pending count per queue
        (pkg/scheduler/metrics at the pin): the nearest are the per-job gauge of the time from
        a job's creation until its last task was placed (ms, labelled with its queue, set
        by the allocate and backfill actions) and the gang plugin's count of jobs it could
        not schedule, fleet-wide. Served over HTTP on the chart's scheduler Service."""
        duration = "max_over_time(volcano_e2e_job_scheduling_duration[$__range])"
        return QueueMetrics(
            component=self.component,
            service_labels={"app": "volcano-scheduler"},
            port="metrics",
            scheme="http",
            wait=tuple(
                (
                    f"quantile by (queue) ({q}, {duration}) / 1000",
                    f"{{{{queue}}}} p{int(q * 100)}",
                )
                for q in (0.5, 0.9)
            ),
            pending=(("volcano_unschedule_job_count", "jobs not schedulable (all queues)"),),
            note="Volcano exports no queue wait metric: this is volcano_e2e_job_scheduling_"
            "duration, the time from a job's creation until its last task was placed, per "
            "queue over the jobs placed in the range; a job still waiting is not in it. "
            "Pending: the gang plugin's count of jobs it could not schedule, all queues "
            "together (Volcano has no per-queue pending count).",
        )

    def topology_levels(self, configured: Sequence[str]) -> tuple[str, ...]:
        # Volcano places by topology only when the stack names levels (then the node last).
        levels = list(configured)
        if levels and levels[-1] != HOSTNAME_LABEL:
            levels.append(HOSTNAME_LABEL)
        return tuple(levels)

    def queue_name(self, tenant: str) -> str:
        return tenant

    def discovered_topology(self, switch_levels: Sequence[str]) -> DiscoveredTopology | None:
        if not switch_levels:
            return None
        return DiscoveredTopology("topology.volcano.sh/v1alpha1", "HyperNode", HYPERNODE_SOURCE)

    def operator_flags(self, operator: str) -> tuple[str, ...]:
        return OPERATOR_FLAGS.get(operator, ())

    # ------------------------------------------------------------------- plan

    def scheduler_config(self, gang: GangPolicy) -> dict[str, Any]:
        """volcano-scheduler.conf: gang on, capacity queues (deserved/capability), reclaim of
        borrowed resources, network-topology-aware placement when the stack has levels."""
        second = [
            {"name": "overcommit"},
            {"name": "drf", "enablePreemptable": False},
            {"name": "predicates"},
            {"name": "capacity"},
            {"name": "nodeorder"},
            {"name": "binpack"},
        ]
        if gang.topology_levels:
            second.append({"name": "network-topology-aware", "arguments": NORMAL_POD_BINPACK})
        return {
            "actions": "enqueue, allocate, backfill, reclaim",
            "tiers": [
                {
                    "plugins": [
                        {"name": "priority"},
                        {"name": "gang", "enablePreemptable": False},
                        {"name": "conformance"},
                    ]
                },
                {"plugins": second},
            ],
        }

    def controller_config(self, gang: GangPolicy) -> dict[str, Any] | None:
        """HyperNodes discovered from the stack's topology-level node labels."""
        if not gang.topology_levels:
            return None
        return {
            "networkTopologyDiscovery": [
                {
                    "source": "label",
                    "enabled": True,
                    "config": {
                        "networkTopologyTypes": {
                            TOPOLOGY_NAME: [{"nodeLabel": level} for level in gang.topology_levels]
                        }
                    },
                }
            ]
        }

    def chart_values(self, ctx: PlanContext) -> dict[str, Any]:
        gang = ctx.facts.gang
        custom: dict[str, Any] = {
            "scheduler_config_override": yaml.safe_dump(
                self.scheduler_config(gang), sort_keys=False, width=100
            )
        }
        controller = self.controller_config(gang)
        if controller is not None:
            # The chart writes this one with toYaml (a mapping), unlike the scheduler's
            # string: a YAML string here is encoded twice and Volcano cannot load it.
            custom["controller_config_override"] = controller
        # The chart pins the release images; pull them once rather than on every restart.
        return {"basic": {"image_pull_policy": "IfNotPresent"}, "custom": custom}

    def cluster_items(self, ctx: PlanContext, chart_id: str) -> list[Item]:
        return []

    def tenant_items(self, ctx: PlanContext, tenant: TenantContract, chart_id: str) -> list[Item]:
        common: dict[str, Any] = {"stack": ctx.stack, "tenant": tenant}
        facts = ctx.facts
        # A fleet: the tenant's quotas and limits over every pool (a Queue has no flavors).
        in_pools = (
            [c for _, c in facts.tenant_in_pools(tenant.namespace)] if facts.fleet else [tenant]
        )
        quota = sum(c.gpu_quota for c in in_pools)
        limit = sum(c.gpu_limit for c in in_pools)
        return [
            object_item(
                ids.tenant_priority(tenant.namespace),
                Layer.SCHEDULING,
                "scheduling/priority-class.yaml.j2",
                name=tenant.priority_class,
                **common,
            ),
            object_item(
                ids.tenant_queue(tenant.namespace),
                Layer.SCHEDULING,
                "scheduling/volcano-queue.yaml.j2",
                (chart_id,),
                deserved=_resources(tenant, quota),
                capability=_resources(tenant, limit),
                **common,
            ),
        ]

    def namespace_annotations(self, contract: TenantContract) -> dict[str, str]:
        return {QUEUE_ANNOTATION: contract.queue}

    def trainer_pod_group_policy(self, gang: GangPolicy) -> dict[str, Any] | None:
        """Gang scheduling for TrainJobs, topology-aware when the stack has levels: soft, so
        a job that cannot fit under one switch still runs, spanning at most every tier."""
        if not gang.switch_tiers:
            return {"volcano": {}}
        return {
            "volcano": {
                "networkTopology": {"mode": "soft", "highestTierAllowed": gang.switch_tiers}
            }
        }

    def admission_rules(self) -> list[dict[str, str]]:
        return [dict(rule) for rule in ADMISSION_RULES]

    def tenant_rbac_rules(self) -> list[dict[str, Any]]:
        return [
            {
                "apiGroups": ["scheduling.volcano.sh"],
                "resources": ["podgroups"],
                "verbs": ["get", "list", "watch"],
            }
        ]

    # ------------------------------------------------------------------- jobs

    def job_annotations(self, contract: TenantContract) -> dict[str, str]:
        return {QUEUE_ANNOTATION: contract.queue}

    def scheduling_policy(self, contract: TenantContract, min_available: int) -> dict[str, Any]:
        return {
            "minAvailable": min_available,
            "queue": contract.queue,
            "priorityClass": contract.priority_class,
        }

    def trainjob_template_metadata(self, contract: TenantContract) -> dict[str, Any]:
        return {"annotations": {QUEUE_ANNOTATION: contract.queue}}


def _resources(tenant: TenantContract, gpus: int) -> dict[str, Any]:
    out: dict[str, Any] = {GPU_RESOURCE: gpus}
    if tenant.cpu_quota is not None:
        out["cpu"] = tenant.cpu_quota
    if tenant.memory_quota is not None:
        out["memory"] = tenant.memory_quota
    return out


AUTHORITY = Volcano()
