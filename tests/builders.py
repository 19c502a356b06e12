"""Builders every test module shares: example stacks as config mappings, models, plans and
the payloads of plan items, and the problems a bad stack is refused with."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufabric.model.config import StackModel
from gpufabric.model.problems import StackError
from gpufabric.model.stackfile import model_from_config
from gpufabric.plan.build import Plan, build_plan
from gpufabric.plan.items import HelmChart, K8sObject

REPO = Path(__file__).resolve().parent.parent
STACKS_DIR = REPO / "stacks"
SHIPPED_STACKS = (
    "dgx-h100",
    "fleet-mixed",
    "gb200-nvl72",
    "kind-dev",
    "lab-roce",
    "prod-ib",
    "roce-sriov-volcano",
    "routed-b200",
)
"""The example stacks the project ships (tests select them by name, so a stack a user adds
to stacks/ is validated, never held to the examples' expectations)."""


def example_config(name: str) -> dict[str, Any]:
    """The `config:` mapping of an example stack, as a fresh mutable copy."""
    doc = yaml.safe_load((STACKS_DIR / f"Pulumi.{name}.yaml").read_text())
    return copy.deepcopy(doc["config"])


SPAN_LEAF_LABEL = "topology.gpufabric.io/leaf"


def routed_span_config(nodes: int = 32, leaves: int = 4) -> dict[str, Any]:
    """routed-b200 grown to ``nodes`` nodes under ``leaves`` leaves (nodes / leaves each, in
    natural name order) with fabric.ipam.routing: spanLeaves: each rail's /22 aggregate holds
    a /24 block per leaf, each node takes a /29 of its leaf's block, the leaf the first host
    address (.1, .9, ...) of each; one CIDRPool and one network per rail span the leaves."""
    config = example_config("routed-b200")
    config["gpufabric:gpuNodes"]["count"] = nodes
    fabric = config["gpufabric:fabric"]
    fabric["ipam"] = {"poolType": "cidrpool", "perNodePrefix": 29, "routing": "spanLeaves"}
    names = [f"leaf-{k + 1:02d}" for k in range(leaves)]
    for i, rail in enumerate(fabric["rails"]):
        base = 4 * i
        rail["subnet"] = f"172.30.{base}.0/22"
        rail["blocks"] = [
            {"leaf": leaf, "subnet": f"172.30.{base + k}.0/24", "gateway": f"172.30.{base + k}.1"}
            for k, leaf in enumerate(names)
        ]
    per_leaf = nodes // leaves
    config["gpufabric:scheduling"]["nodeTopology"] = {
        f"gpu-node-{n}": {SPAN_LEAF_LABEL: names[min(n // per_leaf, leaves - 1)]}
        for n in range(nodes)
    }
    config["gpufabric:tenants"][0]["gpuQuota"] = 8 * nodes
    return config


def two_roce_classes_config() -> dict[str, Any]:
    """fleet-mixed, monitored, with both pools on RoCE: the h100 pool's rails copy the l40s
    pool's (h-prefixed, their own subnets) and pause on priority 5, the l40s pool's on 4."""
    config = example_config("fleet-mixed")
    config["gpufabric:monitoring"] = {"enabled": True}
    roce = config["gpufabric:gpuNodes"][1]["fabric"]
    config["gpufabric:gpuNodes"][0]["fabric"] = {
        "type": "roce",
        "roce": {"pfcPriority": 5},
        "rails": [
            {**r, "name": f"h{r['name']}", "subnet": f"10.121.{4 * i}.0/22"}
            for i, r in enumerate(roce["rails"])
        ],
    }
    roce["roce"] = {"pfcPriority": 4}
    return config


def sections(config: dict[str, Any]) -> dict[str, Any]:
    """`gpufabric:x` keys -> `x`, as the Pulumi program hands them to the model."""
    return {k.split(":", 1)[1]: v for k, v in config.items() if k.startswith("gpufabric:")}


def model_of(config: dict[str, Any]) -> StackModel:
    """The validated model of a config mapping, read as a stack file would be."""
    return model_from_config(sections(config), "t", from_file=True)


def plan_of(config: dict[str, Any], stack: str = "t") -> Plan:
    return build_plan(stack, model_of(config))


def example_plan(name: str, gang: str) -> Plan:
    """The plan of an example stack under the given gang authority (kueue, volcano)."""
    config = example_config(name)
    config["gpufabric:scheduling"]["gang"] = gang
    return build_plan(name, model_from_config(sections(config), name, from_file=True))


def gpu_pods(job: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod templates of a job that hold GPU ranks (MPIJob workers, every PyTorchJob
    replica, every replicated job of a TrainJob's runtime patch)."""
    if job["kind"] == "MPIJob":
        return [job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]]
    if job["kind"] == "PyTorchJob":
        return [r["template"] for r in job["spec"]["pytorchReplicaSpecs"].values()]
    patch = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]
    return [rj["template"]["spec"]["template"] for rj in patch["spec"]["replicatedJobs"]]


def problems_of(config: dict[str, Any]) -> dict[str, str]:
    """Config path -> message of every problem a bad config is refused with."""
    with pytest.raises(StackError) as info:
        model_of(config)
    return {p.path: p.message for p in info.value.problems}


def problem_lines(config: dict[str, Any]) -> list[str]:
    """Every problem as the user reads it ("path: message")."""
    with pytest.raises(StackError) as info:
        model_of(config)
    return [str(p) for p in info.value.problems]


def body(plan: Plan, item_id: str) -> dict[str, Any]:
    """The object an item writes."""
    payload = plan.item(item_id).payload
    assert isinstance(payload, K8sObject)
    return dict(payload.body)


def chart(plan: Plan, item_id: str) -> HelmChart:
    payload = plan.item(item_id).payload
    assert isinstance(payload, HelmChart)
    return payload


XID79 = "NVRM: Xid (PCI:0000:1b:00): 79, GPU has fallen off the bus"


GFD_DRIVER = "575.57.08"
"""The driver GPU Feature Discovery labels a built node with (nodefs.Node's by default)."""


def gpu_node(name: str, hostname: str | None = None, xid: bool = False, driver: str | None = GFD_DRIVER) -> dict[str, Any]:  # fmt: skip
    """A Ready GPU node of 8 GPUs as the API server returns it, with node-problem-detector's
    fatal conditions (False, or GpuFatalXid True with Xid 79 when ``xid``); its
    ``kubernetes.io/hostname`` label is ``hostname`` (default: the name); GPU Feature
    Discovery's driver-version labels say ``driver`` (none when None)."""
    gfd = {}
    if driver is not None:
        major, minor, *rev = driver.split(".")
        gfd = {
            "nvidia.com/cuda.driver-version.full": driver,
            "nvidia.com/cuda.driver.major": major,
            "nvidia.com/cuda.driver.minor": minor,
            "nvidia.com/cuda.driver.rev": rev[0] if rev else "",
        }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "labels": {
                "nvidia.com/gpu.present": "true",
                "kubernetes.io/hostname": hostname or name,
                **gfd,
            },
        },
        "spec": {},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8"},
            "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "GpuFatalXid", "status": "True", "reason": "FatalXid", "message": XID79}
                if xid
                else {"type": "GpuFatalXid", "status": "False", "reason": "NoFatalXid"},
                {"type": "NicFatalError", "status": "False", "reason": "NoNicFatalError"},
            ],
        },
    }


def fleet_config(name: str, nodes: int) -> dict[str, Any]:
    """A shipped one-pool stack grown to ``nodes`` GPU nodes: each rail a /16 of its own
    (172.<16 + i>.0.0/16, room for 4,096 blocks of 16; a block of 4 for more nodes), so the
    rails can address every node."""
    config = example_config(name)
    config["gpufabric:gpuNodes"]["count"] = nodes
    fabric = config["gpufabric:fabric"]
    for i, rail in enumerate(fabric["rails"]):
        rail["subnet"] = f"172.{16 + i}.0.0/16"
        rail.pop("gateway", None)
    if nodes > 4096:
        fabric.setdefault("ipam", {})["perNodeBlockSize"] = 4
    return config
