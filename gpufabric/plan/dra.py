"""The DRA driver for NVIDIA GPUs on NVL72 pools: ComputeDomains and IMEX channels.

Installed only by a stack with an NVL72 pool (``gpuNodes[].nvlink``), from the pinned chart:
the ComputeDomain controller, and the kubelet plugin on the NVL72 pools' trays only (one
node-affinity term per pool, its selector). GPUs stay with the device plugin
(``resources.gpus.enabled: false``; the chart refuses both on one node). The driver's root is
where the GPU Operator's driver container mounts it (``/run/nvidia/driver``) or ``/`` when the
hosts bring the driver. The resource API is pinned to ``resource.k8s.io/v1`` (Kubernetes 1.34,
which validation requires) rather than detected from the cluster at render time.
"""

from __future__ import annotations

from typing import Any

from gpufabric.plan import ids, tolerations
from gpufabric.plan.facts import PlanContext
from gpufabric.plan.items import Item, Layer, helm_chart, system_namespace

COMPONENT = "dra-driver-nvidia-gpu"
RESOURCE_API = "resource.k8s.io/v1"
CONTAINER_DRIVER_ROOT = "/run/nvidia/driver"


def _affinity(ctx: PlanContext) -> dict[str, Any]:
    """Every NVL72 pool's trays (a term per pool: terms are ORed)."""
    terms = [
        {
            "matchExpressions": [
                {"key": key, "operator": "In", "values": [value]}
                for key, value in sorted(pool.nodes.selector.items())
            ]
        }
        for pool in ctx.facts.nvl72_pools
    ]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}  # fmt: skip


def _tolerations(ctx: PlanContext) -> list[dict[str, Any]]:
    out = [dict(t) for t in tolerations.GPU_OPERATOR_DAEMONSETS]
    for pool in ctx.facts.nvl72_pools:
        out.extend(dict(t) for t in pool.nodes.tolerations if dict(t) not in out)
    return out


def values(ctx: PlanContext) -> dict[str, Any]:
    """The chart's values for this stack's NVL72 pools."""
    root = CONTAINER_DRIVER_ROOT if ctx.facts.gpu_operator.driver else "/"
    return {
        "nvidiaDriverRoot": root,
        "resourceApiVersion": RESOURCE_API,
        "resources": {"gpus": {"enabled": False}, "computeDomains": {"enabled": True}},
        "kubeletPlugin": {"affinity": _affinity(ctx), "tolerations": _tolerations(ctx)},
    }


def build(ctx: PlanContext) -> list[Item]:
    """The driver's namespace and chart; nothing for a stack without an NVL72 pool."""
    if not ctx.facts.nvl72_pools:
        return []
    component = ctx.components[COMPONENT]
    chart = helm_chart(component, values(ctx))
    return [
        system_namespace(
            ctx.stack, ids.DRA_NAMESPACE, Layer.GPU, component.namespace, "privileged"
        ),
        Item(
            id=ids.DRA_DRIVER,
            layer=Layer.GPU,
            payload=chart,
            # Its plugin needs the driver, CDI and GFD's clique labels from the GPU Operator.
            depends_on=(ids.DRA_NAMESPACE, ids.GPU_OPERATOR),
        ),
    ]
