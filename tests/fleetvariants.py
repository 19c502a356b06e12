"""Fleet stacks the network and GPU layers are proven on: the shipped fleet-mixed example
(an H100 InfiniBand pool and an L40S RoCE pool, shared devices both) and a variant with an
SR-IOV RoCE pool, pools with drivers of their own and a pool that shares the stack's rails."""

from __future__ import annotations

from typing import Any

from builders import example_config

FLEET = "fleet-mixed"


def fleet_mixed() -> dict[str, Any]:
    return example_config(FLEET)


def fleet_sriov_drivers() -> dict[str, Any]:
    """fleet-mixed with its L40S pool on SR-IOV VFs and its own driver 580.95.05, and a third
    pool (h200, tainted, precompiled driver) on the stack's InfiniBand rails, shared with h100;
    the GPU Operator manages drivers per pool (NVIDIADriver)."""
    cfg = fleet_mixed()
    pools = cfg["gpufabric:gpuNodes"]
    l40s = pools[1]
    l40s["fabric"]["rdma"] = "sriov"
    l40s["fabric"]["sriov"] = {"numVfs": 8}
    l40s["driver"] = {"version": "580.95.05"}
    pools.append(
        {
            "name": "h200",
            "count": 4,
            "gpusPerNode": 8,
            "gpuModel": "H200",
            "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H200"},
            "tolerations": [
                {"key": "dedicated", "operator": "Equal", "value": "h200", "effect": "NoSchedule"}
            ],
            "driver": {"usePrecompiled": True},
        }
    )
    cfg["gpufabric:gpuOperator"] = {"driver": {"useNvidiaDriverCRD": True}}
    return cfg


def fleet_same_layout() -> dict[str, Any]:
    """Two pools on the stack's own rails: one NIC layout, so no NicNodePolicy."""
    cfg = fleet_mixed()
    del cfg["gpufabric:gpuNodes"][1]["fabric"]
    return cfg
