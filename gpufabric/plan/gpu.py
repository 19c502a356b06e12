"""GPU layer: the NVIDIA GPU Operator, with values computed from the fabric.

GPUDirect RDMA: DMA-BUF (default) needs the open kernel modules and no peermem; legacy
nvidia-peermem is ``driver.rdma.enabled``; ``driver.rdma.useHostMofed`` when the NIC driver
comes from the host. Node Feature Discovery runs once per cluster, from the operator the
facts name. The ClusterPolicy the chart creates is awaited until its ``.status.state`` is
ready.

A fleet whose pools need different drivers (``gpuNodes[].driver``, or another GPUDirect
mode) gets an NVIDIADriver per such pool on its nodes (``gpuOperator.driver.useNvidiaDriverCRD``,
which validation asks for); the chart's default NVIDIADriver serves every other GPU node.
"""

from __future__ import annotations

from typing import Any

from msgspec.structs import replace

from gpufabric.model.sources import split_tag
from gpufabric.model.versions import Component
from gpufabric.plan import dra, ids, nicpolicy, tolerations
from gpufabric.plan.facts import PlanContext
from gpufabric.plan.items import (
    STATE_READY,
    Item,
    Layer,
    helm_chart,
    spec_object,
    system_namespace,
)

COMPONENT = "gpu-operator"


def values(ctx: PlanContext) -> dict[str, Any]:
    gpu = ctx.facts.gpu_operator
    fabric = ctx.facts.fabric
    # With the driver on the hosts, nvidia-peermem comes from their driver package.
    peermem = (
        fabric.gpudirect == "peermem"
        and fabric.has_rdma
        and not ctx.facts.operators.gpu_driver_on_host
    )
    driver: dict[str, Any] = {
        "enabled": gpu.driver,
        # DMA-BUF (and GDS, which the model allows only with it) needs the open kernel
        # modules; pin them rather than rely on "auto", which only picks open modules from
        # the R570 driver containers on.
        "kernelModuleType": "open" if fabric.gpudirect == "dmabuf" else "auto",
        "rdma": {
            "enabled": peermem,
            # Read only on the peermem path (the driver container's MOFED wait): set it
            # where it acts, never as an inert flag.
            "useHostMofed": peermem and fabric.nic_driver == "host",
        },
        "usePrecompiled": gpu.use_precompiled,
        "nvidiaDriverCRD": {"enabled": gpu.use_nvidia_driver_crd},
    }
    # A fleet's chart carries the stack's driver; pools with their own get an NVIDIADriver.
    version = gpu.driver_version if ctx.facts.fleet else ctx.facts.nodes.driver_version
    if version is not None:
        driver["version"] = version
    out: dict[str, Any] = {
        "nfd": {"enabled": ctx.facts.operators.nfd_owner == COMPONENT},
        "driver": driver,
        "gdrcopy": {"enabled": gpu.gdrcopy},
        "gds": {"enabled": gpu.gds},
        "mig": {"strategy": gpu.mig_strategy},
        "dcgmExporter": dcgm_exporter(ctx),
        **tolerations.chart_values(
            ctx, COMPONENT, tolerations.GPU_OPERATOR_DAEMONSETS, tolerations.GPU_OPERATOR_NFD_WORKER
        ),
    }
    if not ctx.facts.gpu_operator.cdi:
        out["cdi"] = {"enabled": False}
    elif ctx.facts.nvl72_pools:
        # Set where the DRA driver needs them, not left to the chart's defaults: CDI hands
        # pods their IMEX channels, GFD labels each tray's NVLink domain (nvidia.com/gpu.clique).
        out["cdi"] = {"enabled": True}
        out["gfd"] = {"enabled": True}
    return out


def dcgm_exporter(ctx: PlanContext) -> dict[str, Any]:
    """The DCGM exporter: with monitoring, gpufabric's counters CSV (the chart creates the
    ConfigMap) and a ServiceMonitor the Prometheus selects, labelling series by node."""
    gpu = ctx.facts.gpu_operator
    m = ctx.facts.monitoring
    if not m.enabled:
        return {
            "enabled": gpu.dcgm_exporter,
            "serviceMonitor": {"enabled": gpu.dcgm_service_monitor},
        }
    return {
        "enabled": True,
        "config": {"name": m.dcgm_config, "create": True, "data": m.dcgm_counters_csv},
        "serviceMonitor": {
            "enabled": True,
            "additionalLabels": dict(m.selector_labels),
            "relabelings": [m.node_relabeling],
        },
    }


NVIDIA_DRIVER_API = "nvidia.com/v1alpha1"
DRIVER_IMAGE_KEY = "driver.repository"


def _pool_driver(ctx: PlanContext) -> dict[str, Any]:
    """The driver the nodes of the pool ``ctx`` is narrowed to need: version, precompiled
    modules, kernel module type and the peermem settings of the pool's fabric."""
    gpu = ctx.facts.gpu_operator
    nodes = ctx.facts.nodes
    chart = values(ctx)["driver"]
    return {
        "version": nodes.driver_version,
        "usePrecompiled": gpu.use_precompiled
        if nodes.use_precompiled is None
        else nodes.use_precompiled,
        "kernelModuleType": chart["kernelModuleType"],
        "rdma": chart["rdma"],
    }


def pool_drivers(ctx: PlanContext) -> dict[str, dict[str, Any]]:
    """Pool name -> the NVIDIADriver spec of each fleet pool whose driver differs from the
    stack's (the chart's default NVIDIADriver serves the others). Empty for one pool, for
    drivers on the hosts, and without ``gpuOperator.driver.useNvidiaDriverCRD`` (validation
    refuses a fleet that needs it without it)."""
    gpu = ctx.facts.gpu_operator
    if not ctx.facts.fleet or not gpu.driver or not gpu.use_nvidia_driver_crd:
        return {}
    stack = {**_pool_driver(ctx), "version": gpu.driver_version, "usePrecompiled": False}
    specs: dict[str, dict[str, Any]] = {}
    for name in ctx.facts.pool_names:
        pool = replace(ctx, facts=ctx.facts.for_pool(name))
        wanted = _pool_driver(pool)
        if wanted != stack:
            specs[name] = _nvidia_driver(pool, wanted)
    return specs


def _nvidia_driver(ctx: PlanContext, wanted: dict[str, Any]) -> dict[str, Any]:
    """A pool's NVIDIADriver: the chart's driver image (through the stack's mirrors) at the
    pool's version, on the pool's nodes only."""
    component = ctx.components[COMPONENT]
    entry = next(e for e in component.chart_images if e.key == DRIVER_IMAGE_KEY)
    name, tag = split_tag(component.expand(entry.image) or "")
    parent, _, image = name.rpartition("/")
    version = wanted["version"] or tag
    if wanted["usePrecompiled"] and wanted["version"] is None:
        version = tag.split(".", 1)[0]  # precompiled drivers are named by their branch
    spec: dict[str, Any] = {
        "default": False,
        "driverType": "gpu",
        "repository": component.mirrors.image(parent),
        "image": image,
        "version": version,
        "usePrecompiled": wanted["usePrecompiled"],
        "kernelModuleType": wanted["kernelModuleType"],
        "rdma": wanted["rdma"],
        "nodeSelector": dict(ctx.facts.nodes.selector),
        "tolerations": [
            *map(dict, tolerations.GPU_OPERATOR_DAEMONSETS),
            *(
                t
                for t in tolerations.pool_tolerations(ctx)
                if t not in tolerations.GPU_OPERATOR_DAEMONSETS
            ),
        ],
    }
    if component.mirrors.pull_secrets:
        spec["imagePullSecrets"] = list(component.mirrors.pull_secrets)
    gpu = ctx.facts.gpu_operator
    for key, enabled in (("gds", gpu.gds), ("gdrcopy", gpu.gdrcopy)):
        if enabled:
            spec[key] = {"enabled": True, **_sidecar(component, f"{key}.repository")}
    return spec


def _sidecar(component: Component, key: str) -> dict[str, str]:
    """repository, image and version of a driver sidecar the chart pulls (GDS, GDRCopy)."""
    entry = next(e for e in component.chart_images if e.key == key)
    name, tag = split_tag(component.expand(entry.image) or "")
    parent, _, image = name.rpartition("/")
    return {"repository": component.mirrors.image(parent), "image": image, "version": tag}


def build(ctx: PlanContext) -> list[Item]:
    component = ctx.components[COMPONENT]
    chart = helm_chart(
        component,
        values(ctx),
        awaits={"nvidia.com/v1/ClusterPolicy": STATE_READY},
    )
    deps: tuple[str, ...] = (ids.GPU_NAMESPACE,)
    if ctx.facts.operators.gpu_waits_for_nic_driver:
        deps += (ids.NIC_POLICY,)
        # In a fleet the NIC drivers may come from the pools' NicNodePolicies.
        deps += nicpolicy.node_policy_ids(ctx, driver_only=True)
    items = [
        system_namespace(
            ctx.stack, ids.GPU_NAMESPACE, Layer.GPU, component.namespace, "privileged"
        ),
        # The chart installs the ClusterPolicy CRD; deleting it would remove every node's
        # driver stack, so it is protected.
        Item(id=ids.GPU_OPERATOR, layer=Layer.GPU, payload=chart, depends_on=deps, protect=True),
    ]
    items.extend(dra.build(ctx))
    for name, spec in pool_drivers(ctx).items():
        items.append(
            Item(
                id=ids.nvidia_driver(name),
                layer=Layer.GPU,
                payload=spec_object(
                    ctx.stack,
                    NVIDIA_DRIVER_API,
                    "NVIDIADriver",
                    name,
                    spec,
                    annotations={"pulumi.com/waitFor": STATE_READY},
                ),
                # The chart installs the NVIDIADriver CRD.
                depends_on=(ids.GPU_OPERATOR,),
            )
        )
    return items
