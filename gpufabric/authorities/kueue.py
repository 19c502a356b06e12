"""Kueue: quota and all-or-nothing admission of jobs, topology-aware placement.

The chart runs with a manager configuration computed from the stack (the integrations of
exactly the job kinds installed, ``waitForPodsReady`` with requeuing backoff, managed
namespaces limited to tenants, the rails' RDMA resources excluded from quota); gpufabric
writes a Topology, a ResourceFlavor for the GPU nodes, and per tenant a ClusterQueue, a
WorkloadPriorityClass and a LocalQueue in its namespace. Jobs name the LocalQueue and the
priority class by label; pods carry the preferred topology level.

A fleet (several node pools) gets a ResourceFlavor per pool, named after the pool, all
placing through the one Topology (Kueue builds each flavor's topology tree from the nodes its
``nodeLabels`` select), and each tenant's ClusterQueue lists every pool's flavor with the
tenant's quota in that pool. A job's pods carry their pool's node selector, which only that
pool's flavor matches (the pools' selectors share a key whose values differ: validation), so
Kueue admits it against that pool's quota and it never mixes pools.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import yaml

from gpufabric.authorities.base import GPU_RESOURCE, Authority, tolerations
from gpufabric.model.config import HOSTNAME_LABEL, Scheduling
from gpufabric.model.problems import Problem
from gpufabric.plan import ids
from gpufabric.plan.facts import (
    FabricFacts,
    Facts,
    GangPolicy,
    PlanContext,
    QueueMetrics,
    TenantContract,
)
from gpufabric.plan.items import Item, Layer, object_item

TOPOLOGY_NAME = "gpufabric"
FLAVOR_NAME = "gpu-nodes"
LOCAL_QUEUE_NAME = "training"
"""Name of the LocalQueue in every tenant namespace (the value of kueue.x-k8s.io/queue-name)."""
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
TOPOLOGY_HINT = "kueue.x-k8s.io/podset-preferred-topology"
TOPOLOGY_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
"""A job that must fit under one value of a level (an NVL72 job of one rack's trays): Kueue
admits it only where one clique holds it, rather than spreading it over racks."""

BUILTIN_FRAMEWORKS = ("batch/job",)
FRAMEWORK_OF = {"mpijob": "kubeflow.org/mpijob", "trainjob": "trainer.kubeflow.org/trainjob"}
"""Kueue integration names of the job kinds (Training Operator v1 kinds: kubeflow.org/<kind>)."""

UNLIMITED_CPU = "1000000"
UNLIMITED_MEMORY = "1Pi"
"""Quota for CPU or memory when a tenant has none: Kueue only admits workloads whose every
requested resource its ClusterQueue covers, so both are always covered (by values no cluster
reaches, small enough that a cohort's sum stays within Kueue's int64 accounting)."""


def _own(field: str, key: str, wanted: str) -> str:
    """CEL: the object's label or annotation ``key``, where set, names ``wanted``."""
    meta = f"object.metadata.{field}"
    return f"(!has({meta}) || !({key!r} in {meta}) || {meta}[{key!r}] == {wanted})"


ADMISSION_RULES = (
    {
        "expression": " && ".join(
            _own(field, key, wanted)
            for key, wanted in (
                (QUEUE_LABEL, "variables.tenant.queue"),
                (PRIORITY_LABEL, "variables.tenant.priorityClass"),
            )
            for field in ("labels", "annotations")
        ),
        "message": (
            "a tenant's jobs name only its own Kueue LocalQueue and WorkloadPriorityClass "
            f"({QUEUE_LABEL}, {PRIORITY_LABEL})"
        ),
        "reason": "Forbidden",
    },
    {
        # Kueue writes the priority it read (a WorkloadPriorityClass label, or else the pod
        # template's PriorityClass) into the Workload it creates in the tenant namespace:
        # refusing a foreign one there covers every job kind, whatever its pod template.
        "expression": (
            "!(request.kind.group == 'kueue.x-k8s.io' && request.kind.kind == 'Workload') || ("
            "(!has(object.spec.queueName) || object.spec.queueName == variables.tenant.queue)"
            " && (!has(object.spec.priorityClassName) || object.spec.priorityClassName == ''"
            " || object.spec.priorityClassName == variables.tenant.priorityClass)"
            " && (!has(object.spec.priorityClassRef)"
            " || object.spec.priorityClassRef.name == variables.tenant.priorityClass))"
        ),
        "message": "a tenant's Workloads use only its own queue and priority class",
        "reason": "Forbidden",
    },
)
"""Admission rules of a tenant namespace under Kueue."""


def _duration(seconds: int) -> str:
    return f"{seconds}s"


class Kueue(Authority):
    name: ClassVar[str] = "kueue"
    title: ClassVar[str] = "Kueue"
    component: ClassVar[str] = "kueue"
    holds: ClassVar[str] = "Workloads and queues (admitted jobs lose their admission)"
    job_operators_first: ClassVar[bool] = True
    runbook_fragment: ClassVar[str] = "authority-kueue.md.j2"
    requeues_gangs: ClassVar[bool] = True
    quota_per_pool: ClassVar[bool] = True
    admits_only_quota: ClassVar[bool] = True
    readiness: ClassVar[dict[str, tuple[str, str]]] = {
        "ClusterQueue": ("condition", "Active"),
        "LocalQueue": ("condition", "Active"),
    }

    def scheduling_problems(self, scheduling: Scheduling) -> Iterator[Problem]:
        """Kueue places through a Topology ending with the node level: never an empty one."""
        levels = scheduling.topologyLevels
        if not levels and "topologyLevels" in scheduling.model_fields_set:
            yield Problem(
                "scheduling.topologyLevels",
                f"[] leaves Kueue without a topology; list the levels widest first ending with "
                f"{HOSTNAME_LABEL!r}, or remove the key for the node level only",
            )
        elif levels and levels[-1] != HOSTNAME_LABEL:
            yield Problem(
                "scheduling.topologyLevels",
                f"Kueue topologies end with the node level; add {HOSTNAME_LABEL!r} as the last "
                "level",
            )

    def failure_problems(self, scheduling: Scheduling, max_restarts: int) -> Iterator[Problem]:
        """A restarted gang whose pods are not all ready within recoveryTimeout is evicted
        and requeued; at backoffLimitCount requeues Kueue deactivates the workload, so fewer
        requeues than restarts ends a job before its restart budget."""
        count = scheduling.requeuing.backoffLimitCount
        if count < max_restarts:
            yield Problem(
                "scheduling.requeuing.backoffLimitCount",
                f"{count} is below training.failurePolicy.maxRestarts {max_restarts}: Kueue "
                "deactivates a workload after that many requeues (a restarted gang whose pods "
                "are not all ready within allOrNothingTimeout is requeued), so a job may stop "
                f"before its restarts are spent; accepted: {max_restarts} or more",
                warning=True,
            )

    def topology_levels(self, configured: Sequence[str]) -> tuple[str, ...]:
        # Kueue always places through a Topology: the node level alone when none is named.
        return tuple(configured) or (HOSTNAME_LABEL,)

    def queue_metrics(self) -> QueueMetrics:
        """Kueue's admission wait histogram and pending workload gauge, both per ClusterQueue
        and registered without any flag (pkg/metrics/metrics.go at the pin), served over
        HTTPS on the chart's metrics Service (port ``https``, 8443) to a token allowed to
        get ``/metrics``."""
        wait = "kueue_admission_wait_time_seconds_bucket"
        return QueueMetrics(
            component=self.component,
            service_labels={
                "app.kubernetes.io/name": "kueue",
                "app.kubernetes.io/component": "metrics-service",
            },
            port="https",
            scheme="https",
            wait=tuple(
                (
                    f"histogram_quantile({q}, sum by (cluster_queue, le) "
                    f"(increase({wait}[$__range])))",
                    f"{{{{cluster_queue}}}} p{int(q * 100)}",
                )
                for q in (0.5, 0.9)
            ),
            pending=(
                (
                    "sum by (cluster_queue, status) (kueue_pending_workloads)",
                    "{{cluster_queue}} {{status}}",
                ),
            ),
            note="Kueue's kueue_admission_wait_time_seconds: from a workload's creation or "
            "requeue until its admission, per ClusterQueue (a tenant's LocalQueue feeds its "
            "ClusterQueue). Pending: workloads waiting, 'active' (being tried) or "
            "'inadmissible' (cannot fit now).",
        )

    def preferred_topology_level(self, levels: Sequence[str]) -> str | None:
        """Prefer the narrowest switch level (all pods under one leaf), climbing to wider
        levels when the gang does not fit; the node level when there are no switches."""
        return levels[-2] if len(levels) > 1 else levels[-1]

    def frameworks(self, job_kinds: Sequence[str]) -> tuple[str, ...]:
        """Integrations for exactly the job kinds installed. Kueue 0.19 no longer enables the
        Training Operator v1 kinds by default, so those in use are listed explicitly."""
        return (
            *BUILTIN_FRAMEWORKS,
            *(FRAMEWORK_OF.get(kind, f"kubeflow.org/{kind}") for kind in job_kinds),
        )

    def queue_name(self, tenant: str) -> str:
        return LOCAL_QUEUE_NAME

    def admissible_gpus(self, quota: int, borrowing_limit: int, pooled: int) -> tuple[int, str]:
        """Kueue's ``PotentialAvailable``, which its flavor assigner checks first: a ClusterQueue
        with a borrowingLimit (gpufabric always sets one) reaches at most nominalQuota +
        borrowingLimit, and never more than its cohort holds (every tenant's nominalQuota:
        none sets a lendingLimit); a workload asking more is "insufficient quota ...,
        request > maximum capacity" (NoFit, never preempting) and never admitted."""
        most, why = super().admissible_gpus(quota, borrowing_limit, pooled)
        if pooled < most:
            return pooled, (
                f"{why}, but all tenants' quota in the Kueue cohort is {pooled} GPUs and a "
                "ClusterQueue borrows only from its cohort"
            )
        return most, why

    # ------------------------------------------------------------------- plan

    def manager_config(self, ctx: PlanContext) -> dict[str, Any]:
        """The Kueue Configuration (config.kueue.x-k8s.io/v1beta2) of this stack."""
        requeue = ctx.facts.gang.requeue
        config: dict[str, Any] = {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            # Service endpoints as the chart's default configuration has them.
            "health": {"healthProbeBindAddress": ":8081"},
            "metrics": {"bindAddress": ":8443"},
            "webhook": {"port": 9443},
            "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
            "clientConnection": {"qps": 300, "burst": 500},
            # Jobs without a queue label are left alone, and only tenant namespaces are
            # managed: system jobs are never suspended.
            "manageJobsWithoutQueueName": False,
            "managedJobsNamespaceSelector": {"matchLabels": {"gpufabric.io/tenant": "true"}},
            # All-or-nothing: a gang whose pods are not all ready in time is evicted and
            # requeued with exponential backoff; the timeout is required in v1beta2.
            "waitForPodsReady": {
                "timeout": _duration(ctx.facts.gang.all_or_nothing_timeout_s),
                "recoveryTimeout": _duration(ctx.facts.gang.all_or_nothing_timeout_s),
                "blockAdmission": False,
                "requeuingStrategy": {
                    "timestamp": "Eviction",
                    "backoffLimitCount": requeue.backoff_limit_count,
                    "backoffBaseSeconds": requeue.backoff_base_s,
                    "backoffMaxSeconds": requeue.backoff_max_s,
                },
            },
            "integrations": {"frameworks": list(ctx.facts.gang.frameworks)},
        }
        # Kueue refuses workloads requesting a resource their ClusterQueue does not cover.
        # The rails' RDMA devices are per-pod plumbing, not a quota: Kueue ignores them.
        names = sorted({name for fabric in _fabrics(ctx) for name in fabric.rdma_resources})
        if names:
            config["resources"] = {"excludeResourcePrefixes": names}
        return config

    def chart_values(self, ctx: PlanContext) -> dict[str, Any]:
        repository, tag = ctx.components[self.component].image_name_tag
        config = yaml.safe_dump(self.manager_config(ctx), sort_keys=False, width=100)
        return {
            "controllerManager": {
                "manager": {
                    "image": {"repository": repository, "tag": tag, "pullPolicy": "IfNotPresent"}
                }
            },
            "managerConfig": {"controllerManagerConfigYaml": config},
        }

    def cluster_items(self, ctx: PlanContext, chart_id: str) -> list[Item]:
        layer = Layer.SCHEDULING
        topology = object_item(
            ids.TOPOLOGY,
            layer,
            "scheduling/topology.yaml.j2",
            (chart_id,),
            stack=ctx.stack,
            name=TOPOLOGY_NAME,
            levels=list(ctx.facts.gang.topology_levels),
        )
        if not ctx.facts.fleet:
            return [
                topology,
                object_item(
                    ids.FLAVOR,
                    layer,
                    "scheduling/resource-flavor.yaml.j2",
                    (ids.TOPOLOGY,),
                    stack=ctx.stack,
                    name=FLAVOR_NAME,
                    pool=None,
                    node_labels=dict(ctx.facts.nodes.selector),
                    tolerations=tolerations(ctx),
                    topology=TOPOLOGY_NAME,
                ),
            ]
        # One Topology for every pool: its levels are the stack's, and Kueue builds each
        # flavor's tree of domains from the nodes that flavor's nodeLabels select.
        return [
            topology,
            *(
                object_item(
                    ids.flavor(pool.name),
                    layer,
                    "scheduling/resource-flavor.yaml.j2",
                    (ids.TOPOLOGY,),
                    stack=ctx.stack,
                    name=flavor_name(ctx.facts, pool.name),
                    pool=pool.name,
                    node_labels=dict(pool.nodes.selector),
                    tolerations=[dict(t) for t in pool.nodes.tolerations],
                    topology=TOPOLOGY_NAME,
                )
                for pool in ctx.facts.pools
            ),
        ]

    def tenant_items(self, ctx: PlanContext, tenant: TenantContract, chart_id: str) -> list[Item]:
        common: dict[str, Any] = {"stack": ctx.stack, "tenant": tenant}
        facts = ctx.facts
        if facts.fleet:
            # Every pool's flavor, with the tenant's quota in that pool (0 where its gpuQuota
            # names none: it may still borrow there up to gpuBorrowingLimit).
            flavors = [
                {"name": flavor_name(facts, pool), "resources": _resources(contract)}
                for pool, contract in facts.tenant_in_pools(tenant.namespace)
            ]
            flavor_ids = tuple(ids.flavor(pool) for pool in facts.pool_names)
        else:
            flavors = [{"name": FLAVOR_NAME, "resources": _resources(tenant)}]
            flavor_ids = (ids.FLAVOR,)
        return [
            object_item(
                ids.tenant_priority(tenant.namespace),
                Layer.SCHEDULING,
                "scheduling/workload-priority-class.yaml.j2",
                (chart_id,),
                name=tenant.priority_class,
                **common,
            ),
            object_item(
                ids.tenant_queue(tenant.namespace),
                Layer.SCHEDULING,
                "scheduling/cluster-queue.yaml.j2",
                flavor_ids,
                cohort=facts.gang.cohort,
                flavors=flavors,
                **common,
            ),
        ]

    def namespace_items(
        self, ctx: PlanContext, tenant: TenantContract, namespace_id: str
    ) -> list[Item]:
        ns = tenant.namespace
        return [
            object_item(
                ids.tenant_local_queue(ns),
                Layer.TENANTS,
                "tenants/local-queue.yaml.j2",
                (namespace_id, ids.tenant_queue(ns)),
                stack=ctx.stack,
                tenant=tenant,
                name=tenant.queue,
                cluster_queue=ns,
            )
        ]

    def admission_rules(self) -> list[dict[str, str]]:
        return [dict(rule) for rule in ADMISSION_RULES]

    def tenant_rbac_rules(self) -> list[dict[str, Any]]:
        return [
            {
                "apiGroups": ["kueue.x-k8s.io"],
                "resources": ["localqueues", "workloads"],
                "verbs": ["get", "list", "watch"],
            }
        ]

    # ------------------------------------------------------------------- jobs

    def job_labels(self, contract: TenantContract) -> dict[str, str]:
        return {QUEUE_LABEL: contract.queue, PRIORITY_LABEL: contract.priority_class}

    def pod_annotations(self, gang: GangPolicy, within: str | None = None) -> dict[str, str]:
        if within is not None and within in gang.topology_levels:
            return {TOPOLOGY_REQUIRED: within}
        level = gang.preferred_topology_level
        return {TOPOLOGY_HINT: level} if level else {}


def flavor_name(facts: Facts, pool: str) -> str:
    """The ResourceFlavor of a pool's GPU nodes: ``gpu-nodes`` in a one-pool stack, the
    pool's name in a fleet."""
    return pool if facts.fleet else FLAVOR_NAME


def _fabrics(ctx: PlanContext) -> tuple[FabricFacts, ...]:
    """Every pool's fabric (a one-pool stack: its one)."""
    return tuple(pool.fabric for pool in ctx.facts.pools) or (ctx.facts.fabric,)


def _resources(tenant: TenantContract) -> list[dict[str, Any]]:
    """ClusterQueue resources of a GPU flavor, in coveredResources order: in a fleet the
    tenant's quota in that flavor's pool; CPU and memory quotas hold in each pool."""
    return [
        {"name": "cpu", "nominalQuota": tenant.cpu_quota or UNLIMITED_CPU},
        {"name": "memory", "nominalQuota": tenant.memory_quota or UNLIMITED_MEMORY},
        {
            "name": GPU_RESOURCE,
            "nominalQuota": tenant.gpu_quota,
            "borrowingLimit": tenant.gpu_borrowing_limit,
        },
    ]


AUTHORITY = Kueue()
