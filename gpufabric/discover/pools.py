"""GPU nodes grouped into pools by what they are: GPU product, GPUs per node, the RDMA and
SR-IOV resources they offer (their NIC fingerprint) and whether they carry an NVLink
clique label. Each distinct tuple is one group; no group is merged into or replaces
another (the failure k8s-launch-kit#234 reports)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PRODUCT = "nvidia.com/gpu.product"
COUNT = "nvidia.com/gpu.count"
CLIQUE = "nvidia.com/gpu.clique"
GPU = "nvidia.com/gpu"
NIC_PREFIXES = ("rdma/", "nvidia.com/sriov_", "nvidia.com/hostdev_")


@dataclass(frozen=True)
class Fingerprint:
    product: str
    gpus: int
    nics: tuple[str, ...]
    clique: bool


@dataclass
class Group:
    """Nodes that are the same kind of GPU node."""

    fingerprint: Fingerprint
    nodes: list[dict[str, Any]] = field(default_factory=list)

    def labels_shared(self) -> dict[str, str]:
        """Labels every node of the group carries with the same value."""
        first = _labels(self.nodes[0])
        return {
            k: v for k, v in first.items() if all(_labels(n).get(k) == v for n in self.nodes[1:])
        }


def _labels(node: dict[str, Any]) -> dict[str, str]:
    return dict((node.get("metadata") or {}).get("labels") or {})


def _allocatable(node: dict[str, Any]) -> dict[str, Any]:
    return dict((node.get("status") or {}).get("allocatable") or {})


def gpu_count(node: dict[str, Any]) -> int:
    raw = _allocatable(node).get(GPU) or _labels(node).get(COUNT) or 0
    try:
        return int(str(raw))
    except ValueError:
        return 0


def fingerprint(node: dict[str, Any]) -> Fingerprint:
    labels, alloc = _labels(node), _allocatable(node)
    nics = tuple(sorted(r for r in alloc if r.startswith(NIC_PREFIXES)))
    return Fingerprint(labels.get(PRODUCT, ""), gpu_count(node), nics, CLIQUE in labels)


def group(nodes: list[dict[str, Any]]) -> list[Group]:
    """The GPU nodes (a GPU allocatable or a GFD product label) by fingerprint, in order of
    their first node's name; CPU-only nodes belong to no group."""
    groups: dict[Fingerprint, Group] = {}
    for node in sorted(nodes, key=lambda n: str(n["metadata"].get("name"))):
        if not gpu_count(node) and PRODUCT not in _labels(node):
            continue
        fp = fingerprint(node)
        groups.setdefault(fp, Group(fp)).nodes.append(node)
    return list(groups.values())
