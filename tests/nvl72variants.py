"""NVL72 stacks the tests build: the shipped 18-rack GB200 example and its GB300 variant."""

from __future__ import annotations

from typing import Any

from builders import example_config

EXAMPLE = "gb200-nvl72"


def gb200() -> dict[str, Any]:
    """The example: 18 GB200 NVL72 racks, 324 trays of 4 GPUs, Kueue."""
    return example_config(EXAMPLE)


def gb300() -> dict[str, Any]:
    """The same racks as GB300 NVL72, under Volcano, with PyTorchJob only (no MPI Operator),
    the driver left to the GPU Operator and 4 racks."""
    config = example_config(EXAMPLE)
    config["gpufabric:cluster"]["name"] = "gb300-nvl72"
    config["gpufabric:cluster"]["kubernetesVersion"] = "1.34.2"
    nodes = config["gpufabric:gpuNodes"]
    nodes["nvlink"] = {"system": "GB300-NVL72"}
    nodes["gpuModel"] = "GB300"
    nodes["count"] = 72
    del config["gpufabric:gpuOperator"]
    config["gpufabric:scheduling"] = {"gang": "volcano"}
    config["gpufabric:training"] = {"mpiOperator": False, "trainingOperator": {"schemes": ["pytorchjob"]}}  # fmt: skip
    config["gpufabric:tenants"] = [{"namespace": "frontier-pretrain", "gpuQuota": 288}]
    return config
