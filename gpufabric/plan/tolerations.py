"""What lets the operators' DaemonSets onto GPU nodes that carry taints.

``gpuNodes.tolerations`` lists the taints the GPU nodes carry. Jobs get them from the queue
(the ResourceFlavor); the drivers, device plugins and feature discovery that must run on
those nodes get them here: a chart's list value replaces its default, so the chart's own
tolerations (from its values.yaml at the pinned version) are kept in front of the stack's.
The NicClusterPolicy's operands take the stack's list as they are (the Network Operator adds
``nvidia.com/gpu`` itself)."""

from __future__ import annotations

from typing import Any

from gpufabric.plan.facts import PlanContext

GPU_TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}

GPU_OPERATOR_DAEMONSETS = (GPU_TAINT,)
"""gpu-operator ``daemonsets.tolerations``: every operand (driver, toolkit, device plugin,
DCGM exporter, feature discovery, validators)."""
GPU_OPERATOR_NFD_WORKER = (
    {
        "key": "node-role.kubernetes.io/control-plane",
        "operator": "Equal",
        "value": "",
        "effect": "NoSchedule",
    },
    GPU_TAINT,
)
"""gpu-operator ``node-feature-discovery.worker.tolerations``."""
NETWORK_OPERATOR_NFD_WORKER = (
    {"key": "node-role.kubernetes.io/master", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
    GPU_TAINT,
)
"""network-operator ``node-feature-discovery.worker.tolerations``."""


def stack_tolerations(ctx: PlanContext) -> list[dict[str, Any]]:
    """The taints the GPU nodes carry, as tolerations (``gpuNodes.tolerations``); in a
    fleet, every pool's (the cluster-wide operands run on all of them), each once."""
    if not ctx.facts.fleet:
        return pool_tolerations(ctx)
    out: list[dict[str, Any]] = []
    for pool in ctx.facts.pools:
        out += [dict(t) for t in pool.nodes.tolerations if dict(t) not in out]
    return out


def pool_tolerations(ctx: PlanContext) -> list[dict[str, Any]]:
    """The taints of the nodes of the pool ``ctx`` is narrowed to (the only pool's, else
    the first's)."""
    return [dict(t) for t in ctx.facts.nodes.tolerations]


def nic_policy(ctx: PlanContext) -> list[dict[str, Any]]:
    """The NicClusterPolicy's ``tolerations``: the stack's, less ``nvidia.com/gpu``, which
    the Network Operator adds to every operand itself."""
    return [t for t in stack_tolerations(ctx) if t != GPU_TAINT]


def nic_node_policy(ctx: PlanContext) -> list[dict[str, Any]]:
    """A pool's NicNodePolicy ``tolerations``: its own taints, less ``nvidia.com/gpu``."""
    return [t for t in pool_tolerations(ctx) if t != GPU_TAINT]


def chart_values(
    ctx: PlanContext,
    component: str,
    operands: tuple[dict[str, str], ...],
    nfd_worker: tuple[dict[str, str], ...],
) -> dict[str, Any]:
    """Chart values that add the stack's tolerations to the chart's operand DaemonSets
    (``daemonsets``, when the chart has that key) and to NFD's worker where this chart runs
    NFD. Empty when the GPU nodes carry no taint: the chart's defaults stay as they are."""
    stack = stack_tolerations(ctx)
    if not stack:
        return {}
    values: dict[str, Any] = {}
    if operands:
        values["daemonsets"] = {"tolerations": _joined(operands, stack)}
    if ctx.facts.operators.nfd_owner == component:
        values["node-feature-discovery"] = {"worker": {"tolerations": _joined(nfd_worker, stack)}}
    return values


def _joined(defaults: tuple[dict[str, str], ...], stack: list[dict[str, Any]]) -> list[Any]:
    """The chart's tolerations, then each of the stack's that is not one of them."""
    return [*map(dict, defaults), *(t for t in stack if t not in defaults)]
