"""GPU layer: the NVIDIA GPU Operator, with values computed from the fabric.

GPUDirect RDMA: DMA-BUF (default) needs the open kernel modules and no peermem; legacy
nvidia-peermem is ``driver.rdma.enabled``; ``driver.rdma.useHostMofed`` when the NIC driver
comes from the host. Node Feature Discovery runs once per cluster, from the operator the
facts name. The ClusterPolicy the chart creates is awaited until its ``.status.state`` is
ready.
"""

from __future__ import annotations

from typing import Any

from gpufabric.plan import ids, tolerations
from gpufabric.plan.facts import PlanContext
from gpufabric.plan.items import STATE_READY, Item, Layer, helm_chart, system_namespace

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
    if ctx.facts.nodes.driver_version is not None:
        driver["version"] = ctx.facts.nodes.driver_version
    return {
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
    return [
        system_namespace(
            ctx.stack, ids.GPU_NAMESPACE, Layer.GPU, component.namespace, "privileged"
        ),
        # The chart installs the ClusterPolicy CRD; deleting it would remove every node's
        # driver stack, so it is protected.
        Item(id=ids.GPU_OPERATOR, layer=Layer.GPU, payload=chart, depends_on=deps, protect=True),
    ]
