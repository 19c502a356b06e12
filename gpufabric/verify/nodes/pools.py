"""Which node pool a GPU node belongs to, on a stack with several (a fleet).

A node belongs to the pool whose ``gpuNodes[].nodeSelector`` its labels match; every check
of it is then judged by that pool's layout (its GPUs, rails, link, rate, MTU). A GPU node
that no pool selects, or that several do, is a FAIL naming the selectors: gpufabric would
place nothing on the first and cannot tell which layout the second must show, so neither
is ever passed silently.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpufabric.plan.facts import GPU_RESOURCE, Facts
from gpufabric.verify.kube import Malformed, mapping, name_of
from gpufabric.verify.results import Check, error, failed, passed

GPU_LABELS = {
    "feature.node.kubernetes.io/pci-10de.present": "true",
    "nvidia.com/gpu.present": "true",
}
"""Labels that say a node has NVIDIA GPUs whatever the pools' selectors: Node Feature
Discovery's PCI vendor label (10de: NVIDIA) and GPU Feature Discovery's."""


def pools_of(labels: Mapping[str, str], facts: Facts) -> tuple[str, ...]:
    """The pools whose node selector ``labels`` match, in the stack's order."""
    return tuple(
        p.name for p in facts.pools if all(labels.get(k) == v for k, v in p.nodes.selector.items())
    )


def is_gpu_node(node: Mapping[str, Any]) -> bool:
    """A node with NVIDIA GPUs: it advertises ``nvidia.com/gpu`` or carries a GPU label."""
    labels = mapping(node, "metadata", "labels")
    if any(labels.get(k) == v for k, v in GPU_LABELS.items()):
        return True
    status = mapping(node, "status")
    for key in ("capacity", "allocatable"):
        value = (status.get(key) or {}).get(GPU_RESOURCE)
        if value is not None and str(value) not in ("0", ""):
            return True
    return False


def _selectors(facts: Facts) -> str:
    return "; ".join(f"{p.name}: {p.nodes.selector_text}" for p in facts.pools)


def membership(nodes: Iterable[Mapping[str, Any]], facts: Facts) -> list[Check]:
    """``node.pool`` for each GPU node of a fleet (nodes any pool selects, and nodes with
    GPUs no pool selects): PASS naming its one pool, FAIL when no pool or several select
    it, ERROR when the node cannot be read."""
    out: list[Check] = []
    for node in nodes:
        try:
            name = name_of(node)
            labels = {str(k): str(v) for k, v in mapping(node, "metadata", "labels").items()}
            pools = pools_of(labels, facts)
            gpu = bool(pools) or is_gpu_node(node)
        except Malformed as exc:
            out.append(error("node.pool", str(exc).split(":", 1)[0], str(exc)))
            continue
        if not gpu:
            continue  # a CPU-only node belongs to no pool, rightly
        if len(pools) == 1:
            pool = facts.pool_facts(pools[0])
            out.append(
                passed(
                    "node.pool",
                    name,
                    f"pool {pool.name} ({pool.nodes.selector_text})",
                    pool=pool.name,
                )
            )
        elif not pools:
            out.append(
                failed(
                    "node.pool",
                    name,
                    f"a GPU node no pool selects ({_selectors(facts)}): nothing checks it "
                    "against a layout and no job of the stack runs on it",
                    f"label it for its pool (kubectl label node {name} KEY=VALUE), or add "
                    "its pool under gpuNodes",
                )
            )
        else:
            out.append(
                failed(
                    "node.pool",
                    name,
                    f"pools {', '.join(pools)} all select it ({_selectors(facts)}): which "
                    "layout it must show is undecided",
                    "fix its labels so that one pool's nodeSelector matches it",
                )
            )
    return sorted(out, key=lambda c: c.target)


__all__ = ["GPU_LABELS", "is_gpu_node", "membership", "pools_of"]
