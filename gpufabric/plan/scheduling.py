"""Scheduling layer: the cluster's one gang-scheduling and queueing authority.

Kueue (default): Helm chart with a manager configuration computed from the stack (the
integrations of exactly the job kinds installed, all-or-nothing admission with requeuing,
managed namespaces limited to tenants), a Topology, a ResourceFlavor for the GPU nodes, a
ClusterQueue and a WorkloadPriorityClass per tenant. Volcano: Helm chart with a scheduler
configuration (gang on, capacity queues, network-topology-aware placement when the stack has
topology levels, HyperNodes discovered from the levels' node labels), a Queue and a
PriorityClass per tenant. The tenants layer wires namespaces to these queues.
"""

from __future__ import annotations

from typing import Any

import yaml

from gpufabric import rails
from gpufabric.config import HOSTNAME_LABEL, StackModel, Tenant
from gpufabric.plan import Item, Layer, PlanContext, helm_chart, object_item, system_namespace

KUEUE_CHART_ID = "scheduling/kueue"
VOLCANO_CHART_ID = "scheduling/volcano"
NAMESPACE_ID = "scheduling/namespace"
TOPOLOGY_ID = "scheduling/topology"
FLAVOR_ID = "scheduling/resource-flavor"

TOPOLOGY_NAME = "gpufabric"
FLAVOR_NAME = "gpu-nodes"
LOCAL_QUEUE_NAME = "training"
"""Name of the LocalQueue in every tenant namespace (the value of kueue.x-k8s.io/queue-name)."""

GPU_RESOURCE = "nvidia.com/gpu"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
VOLCANO_QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"

# Kueue integration names of the job kinds each operator serves (Kueue's integrations.frameworks).
BUILTIN_FRAMEWORKS = ("batch/job",)
MPIJOB_FRAMEWORK = "kubeflow.org/mpijob"
TRAINJOB_FRAMEWORK = "trainer.kubeflow.org/trainjob"


def chart_id(model: StackModel) -> str:
    return KUEUE_CHART_ID if model.scheduling.gang == "kueue" else VOLCANO_CHART_ID


def topology_levels(model: StackModel) -> list[str]:
    """Node-label levels, widest first, the node last. Kueue always places through a Topology
    (the node level alone when the stack names none); Volcano only when levels are given."""
    levels = list(model.scheduling.topologyLevels)
    if model.scheduling.gang == "kueue":
        return levels or [HOSTNAME_LABEL]
    if levels and levels[-1] != HOSTNAME_LABEL:
        levels.append(HOSTNAME_LABEL)
    return levels


def switch_tiers(model: StackModel) -> int:
    """Topology levels above the node (Volcano HyperNode tiers; Kueue TAS domains)."""
    return max(len(topology_levels(model)) - 1, 0)


def frameworks(model: StackModel) -> list[str]:
    """Kueue integrations for exactly the job kinds the stack installs. Kueue 0.19 no longer
    enables the Training Operator v1 kinds by default, so those in use are listed explicitly."""
    t = model.training
    out = list(BUILTIN_FRAMEWORKS)
    if t.mpiOperator:
        out.append(MPIJOB_FRAMEWORK)
    out.extend(f"kubeflow.org/{scheme}" for scheme in t.trainingOperator.schemes)
    if t.trainer.enabled:
        out.append(TRAINJOB_FRAMEWORK)
    return out


def priority_class_name(tenant: Tenant) -> str:
    return f"tenant-{tenant.namespace}"


def _duration(seconds: int) -> str:
    return f"{seconds}s"


def kueue_manager_config(model: StackModel) -> dict[str, Any]:
    """The Kueue Configuration (config.kueue.x-k8s.io/v1beta2) of this stack."""
    s = model.scheduling
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        # Service endpoints as the chart's default configuration has them.
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        "clientConnection": {"qps": 300, "burst": 500},
        # Jobs without a queue label are left alone, and only tenant namespaces are managed:
        # system jobs are never suspended.
        "manageJobsWithoutQueueName": False,
        "managedJobsNamespaceSelector": {"matchLabels": {"gpufabric.io/tenant": "true"}},
        # All-or-nothing: a gang whose pods are not all ready in time is evicted and requeued
        # with exponential backoff; the timeout is required in v1beta2.
        "waitForPodsReady": {
            "timeout": _duration(s.allOrNothingTimeout),
            "recoveryTimeout": _duration(s.allOrNothingTimeout),
            "blockAdmission": False,
            "requeuingStrategy": {
                "timestamp": "Eviction",
                "backoffLimitCount": s.requeuing.backoffLimitCount,
                "backoffBaseSeconds": s.requeuing.backoffBase,
                "backoffMaxSeconds": s.requeuing.backoffMax,
            },
        },
        "integrations": {"frameworks": frameworks(model)},
        **_excluded_resources(model),
    }


def _excluded_resources(model: StackModel) -> dict[str, Any]:
    """Kueue refuses workloads requesting a resource their ClusterQueue does not cover. The
    rails' RDMA devices are per-pod plumbing, not a quota: Kueue is told to ignore them."""
    names = sorted(rails.rdma_resources(model.fabric))
    return {"resources": {"excludeResourcePrefixes": names}} if names else {}


def kueue_values(ctx: PlanContext) -> dict[str, Any]:
    repository, tag = ctx.components["kueue"].image_name_tag
    config = yaml.safe_dump(kueue_manager_config(ctx.model), sort_keys=False, width=100)
    return {
        "controllerManager": {
            "manager": {
                "image": {"repository": repository, "tag": tag, "pullPolicy": "IfNotPresent"}
            }
        },
        "managerConfig": {"controllerManagerConfigYaml": config},
    }


def volcano_scheduler_config(model: StackModel) -> dict[str, Any]:
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
    if topology_levels(model):
        second.append({"name": "network-topology-aware"})
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


def volcano_controller_config(model: StackModel) -> dict[str, Any] | None:
    """HyperNodes discovered from the stack's topology-level node labels."""
    levels = topology_levels(model)
    if not levels:
        return None
    return {
        "networkTopologyDiscovery": [
            {
                "source": "label",
                "enabled": True,
                "config": {
                    "networkTopologyTypes": {
                        TOPOLOGY_NAME: [{"nodeLabel": level} for level in levels]
                    }
                },
            }
        ]
    }


def volcano_values(ctx: PlanContext) -> dict[str, Any]:
    custom: dict[str, Any] = {
        "scheduler_config_override": yaml.safe_dump(
            volcano_scheduler_config(ctx.model), sort_keys=False, width=100
        )
    }
    controller = volcano_controller_config(ctx.model)
    if controller is not None:
        custom["controller_config_override"] = yaml.safe_dump(
            controller, sort_keys=False, width=100
        )
    # The chart pins the release images; pull them once rather than on every restart.
    return {"basic": {"image_pull_policy": "IfNotPresent"}, "custom": custom}


UNLIMITED_CPU = "1000000"
UNLIMITED_MEMORY = "1Pi"
"""Quota for CPU or memory when a tenant has none: Kueue only admits workloads whose every
requested resource its ClusterQueue covers, so both are always covered (by values no cluster
reaches, small enough that a cohort's sum stays within Kueue's int64 accounting)."""


def _resources(tenant: Tenant) -> list[dict[str, Any]]:
    """ClusterQueue resources of the GPU flavor, in coveredResources order."""
    return [
        {"name": "cpu", "nominalQuota": tenant.cpuQuota or UNLIMITED_CPU},
        {"name": "memory", "nominalQuota": tenant.memoryQuota or UNLIMITED_MEMORY},
        {
            "name": GPU_RESOURCE,
            "nominalQuota": tenant.gpuQuota,
            "borrowingLimit": tenant.gpuBorrowingLimit,
        },
    ]


def cluster_queue_id(tenant: Tenant) -> str:
    """The tenant's ClusterQueue (Kueue) or Queue (Volcano)."""
    return f"scheduling/{tenant.namespace}/queue"


def priority_id(tenant: Tenant) -> str:
    return f"scheduling/{tenant.namespace}/priority"


def _kueue(ctx: PlanContext) -> list[Item]:
    model, stack, layer = ctx.model, ctx.stack, Layer.SCHEDULING
    items: list[Item] = [
        object_item(
            TOPOLOGY_ID,
            layer,
            "scheduling/topology.yaml.j2",
            (KUEUE_CHART_ID,),
            stack=stack,
            name=TOPOLOGY_NAME,
            levels=topology_levels(model),
        ),
        object_item(
            FLAVOR_ID,
            layer,
            "scheduling/resource-flavor.yaml.j2",
            (TOPOLOGY_ID,),
            stack=stack,
            name=FLAVOR_NAME,
            node_labels=dict(model.gpuNodes.nodeSelector),
            tolerations=tolerations(model),
            topology=TOPOLOGY_NAME,
        ),
    ]
    for tenant in model.tenants:
        common: dict[str, Any] = {"stack": stack, "tenant": tenant}
        items.append(
            object_item(
                priority_id(tenant),
                layer,
                "scheduling/workload-priority-class.yaml.j2",
                (KUEUE_CHART_ID,),
                name=priority_class_name(tenant),
                **common,
            )
        )
        items.append(
            object_item(
                cluster_queue_id(tenant),
                layer,
                "scheduling/cluster-queue.yaml.j2",
                (FLAVOR_ID,),
                cohort=model.scheduling.cohort,
                flavor=FLAVOR_NAME,
                resources=_resources(tenant),
                **common,
            )
        )
    return items


def tolerations(model: StackModel) -> list[dict[str, Any]]:
    return [t.model_dump(exclude_none=True) for t in model.gpuNodes.tolerations]


def _volcano_resources(tenant: Tenant, limit: int) -> dict[str, Any]:
    out: dict[str, Any] = {GPU_RESOURCE: limit}
    if tenant.cpuQuota is not None:
        out["cpu"] = tenant.cpuQuota
    if tenant.memoryQuota is not None:
        out["memory"] = tenant.memoryQuota
    return out


def _volcano(ctx: PlanContext) -> list[Item]:
    items: list[Item] = []
    for tenant in ctx.model.tenants:
        common: dict[str, Any] = {"stack": ctx.stack, "tenant": tenant}
        items.append(
            object_item(
                priority_id(tenant),
                Layer.SCHEDULING,
                "scheduling/priority-class.yaml.j2",
                name=priority_class_name(tenant),
                **common,
            )
        )
        items.append(
            object_item(
                cluster_queue_id(tenant),
                Layer.SCHEDULING,
                "scheduling/volcano-queue.yaml.j2",
                (VOLCANO_CHART_ID,),
                deserved=_volcano_resources(tenant, tenant.gpuQuota),
                capability=_volcano_resources(tenant, tenant.gpuQuota + tenant.gpuBorrowingLimit),
                **common,
            )
        )
    return items


def build(ctx: PlanContext) -> list[Item]:
    gang = ctx.model.scheduling.gang
    component = ctx.components[gang]
    chart = helm_chart(component, kueue_values(ctx) if gang == "kueue" else volcano_values(ctx))
    items = [
        system_namespace(
            ctx.stack, NAMESPACE_ID, Layer.SCHEDULING, component.namespace, "baseline"
        ),
        # The chart holds the queue CRDs (and with them every queued workload): protected.
        Item(
            id=chart_id(ctx.model),
            layer=Layer.SCHEDULING,
            payload=chart,
            depends_on=(NAMESPACE_ID, *training_dependencies(ctx)),
            protect=True,
        ),
    ]
    items.extend(_kueue(ctx) if gang == "kueue" else _volcano(ctx))
    return items


def training_dependencies(ctx: PlanContext) -> tuple[str, ...]:
    """Kueue watches the job CRDs it integrates with when it starts: install the job
    operators first (upstream's order for the MPI Operator)."""
    if ctx.model.scheduling.gang != "kueue":
        return ()
    from gpufabric.plan import training

    return training.operator_ids(ctx.model)
