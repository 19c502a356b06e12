"""GPU layer: the NVIDIA GPU Operator, with values computed from the fabric.

GPUDirect RDMA: DMA-BUF (default) needs the open kernel modules and no peermem; legacy
nvidia-peermem is ``driver.rdma.enabled``; ``driver.rdma.useHostMofed`` when the NIC driver
comes from the host. The GPU Operator runs the cluster's only Node Feature Discovery (the
Network Operator's is switched off). The ClusterPolicy the chart creates is awaited until its
``.status.state`` is ready.
"""

from __future__ import annotations

from typing import Any

from gpufabric.plan import (
    STATE_READY,
    Item,
    Layer,
    PlanContext,
    helm_chart,
    network,
    system_namespace,
)

CHART_ID = "gpu/gpu-operator"
NAMESPACE_ID = "gpu/namespace"


def values(ctx: PlanContext) -> dict[str, Any]:
    model = ctx.model
    fabric, gpu = model.fabric, model.gpuOperator
    has_rdma = fabric.rdma != "none"
    peermem = fabric.gpuDirect == "peermem" and has_rdma
    driver: dict[str, Any] = {
        "enabled": gpu.driver.enabled,
        # DMA-BUF and GDS need the open kernel modules; pin them rather than rely on "auto",
        # which only picks open modules from the R570 driver containers on.
        "kernelModuleType": "open" if fabric.gpuDirect == "dmabuf" or gpu.gds else "auto",
        "rdma": {
            "enabled": peermem,
            "useHostMofed": has_rdma and fabric.nicDriver.source == "host",
        },
        "usePrecompiled": gpu.driver.usePrecompiled,
        "nvidiaDriverCRD": {"enabled": gpu.driver.useNvidiaDriverCRD},
    }
    if gpu.driver.version is not None:
        driver["version"] = gpu.driver.version
    return {
        # Node Feature Discovery runs once per cluster; see gpufabric.plan.network.
        "nfd": {"enabled": not network.network_operator_runs_nfd(model)},
        "driver": driver,
        "gdrcopy": {"enabled": gpu.gdrcopy},
        "gds": {"enabled": gpu.gds},
        "mig": {"strategy": gpu.migStrategy},
        "dcgmExporter": {
            "enabled": gpu.dcgmExporter.enabled,
            "serviceMonitor": {"enabled": gpu.dcgmExporter.serviceMonitor},
        },
    }


def build(ctx: PlanContext) -> list[Item]:
    component = ctx.components["gpu-operator"]
    chart = helm_chart(
        component,
        values(ctx),
        awaits={"nvidia.com/v1/ClusterPolicy": STATE_READY},
    )
    return [
        system_namespace(ctx.stack, NAMESPACE_ID, Layer.GPU, component.namespace, "privileged"),
        # The chart installs the ClusterPolicy CRD; deleting it would remove every node's
        # driver stack, so it is protected.
        Item(
            id=CHART_ID,
            layer=Layer.GPU,
            payload=chart,
            depends_on=(NAMESPACE_ID, network.POLICY_ID)
            if network.gpu_waits_for_nic_driver(ctx.model)
            else (NAMESPACE_ID,),
            protect=True,
        ),
    ]
