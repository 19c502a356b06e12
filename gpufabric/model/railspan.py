"""Routed rails whose networks span leaves (fabric.ipam.routing: spanLeaves).

Each rail with leaf blocks becomes one nv-ipam CIDRPool and one network: every GPU node gets
a static per-node prefix (fabric.ipam.perNodePrefix) carved from its leaf's block, in the
natural order of the node names under that leaf, and the leaf holds the address at the
block gateway's offset in every one of its nodes' prefixes (the pool's gatewayIndex). nv-ipam
requires a static allocation's gateway to lie inside that node's own prefix
(api/v1alpha1/cidrpool_validate.go, validateStaticAllocations), so a leaf cannot serve all its
nodes from one address: it holds one per node prefix (docs/decisions/nics-and-fabric.md,
"Routed rails spanning leaves: one CIDRPool per rail with a prefix per node").
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import NamedTuple

from gpufabric.model.config import Fabric, GpuNodes, Rail, RailBlock, Scheduling
from gpufabric.model.problems import Problem
from gpufabric.model.railblocks import leaf_level

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_DIGITS = re.compile(r"(\d+)")


class NodePrefix(NamedTuple):
    """One node's static allocation on a rail: its prefix of its leaf's block and the
    leaf's address in it (the node's gateway)."""

    node: str
    leaf: str
    prefix: str
    gateway: str


def spans(fabric: Fabric) -> bool:
    """The stack asks for networks spanning leaves and has a rail with leaf blocks."""
    return fabric.ipam.routing == "spanLeaves" and any(r.blocks for r in fabric.rails)


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders gpu-node-2 before gpu-node-10 (digit runs compared as numbers)."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in _DIGITS.split(name) if p)


def nodes_by_leaf(topology: Mapping[str, Mapping[str, str]], level: str) -> dict[str, list[str]]:
    """Leaf -> the nodes under it, in natural name order (the order of their prefixes)."""
    leaves: dict[str, list[str]] = {}
    for node in sorted(topology, key=natural_key):
        if level in topology[node]:
            leaves.setdefault(topology[node][level], []).append(node)
    return leaves


def gateway_offset(block: RailBlock) -> int:
    """The block gateway's offset from the block's first address: the pool's gatewayIndex."""
    return int(block.gateway) - int(block.subnet.network_address)


def node_prefixes(
    rail: Rail, prefixlen: int, leaves: Mapping[str, Sequence[str]]
) -> tuple[NodePrefix, ...]:
    """Every node's static allocation on ``rail``: the k-th node under a leaf takes the k-th
    /``prefixlen`` of that leaf's block, and the address at the block gateway's offset in it."""
    out: list[NodePrefix] = []
    for block in rail.blocks:
        size = 2 ** (block.subnet.max_prefixlen - prefixlen)
        offset = gateway_offset(block)
        base = int(block.subnet.network_address)
        for k, node in enumerate(leaves.get(block.leaf, ())):
            first = base + k * size
            prefix = type(block.subnet)((first, prefixlen))
            gateway = type(block.subnet.network_address)(first + offset)
            out.append(NodePrefix(node, block.leaf, str(prefix), str(gateway)))
    return tuple(out)


# ------------------------------------------------------------------------------ problems


def problems(
    fabric: Fabric, scheduling: Scheduling | None, gpu_nodes: GpuNodes | None
) -> Iterator[Problem]:
    """What the spanning form needs beyond the leaf blocks' own rules
    (gpufabric.model.railblocks): a CIDRPool, every GPU node placed under a leaf, node
    prefixes that fit the blocks and a leaf address at one offset in each of them."""
    if fabric.ipam.routing != "spanLeaves":
        return
    blocked = [(i, r) for i, r in enumerate(fabric.rails) if r.blocks]
    if not blocked:
        yield Problem(
            "fabric.ipam.routing",
            "'spanLeaves' applies to rails routed per leaf (fabric.rails[].blocks), and no "
            "rail has blocks; remove it or list each rail's leaf blocks",
        )
        return
    if fabric.ipam.poolType != "cidrpool":
        yield Problem(
            "fabric.ipam.poolType",
            f"{fabric.ipam.poolType!r} with fabric.ipam.routing: spanLeaves; accepted: cidrpool "
            "(one CIDRPool per rail gives each node a prefix of its leaf's block)",
        )
        return
    level = leaf_level(scheduling.topologyLevels) if scheduling is not None else None
    if scheduling is None or level is None:
        return  # reported by the blocks' own rules
    yield from _placement(scheduling, level, gpu_nodes)
    prefixlen = fabric.ipam.perNodePrefix
    if prefixlen is None:
        return  # reported with the CIDRPool's own rules
    leaves = nodes_by_leaf(scheduling.nodeTopology, level)
    for i, rail in blocked:
        yield from _rail_prefixes(i, rail, prefixlen, leaves)


def _placement(scheduling: Scheduling, level: str, gpu_nodes: GpuNodes | None) -> Iterator[Problem]:
    """Every GPU node in scheduling.nodeTopology with its leaf: a node left out would get no
    address (the pools serve only the nodes they allocate to)."""
    table = scheduling.nodeTopology
    if not table:
        yield Problem(
            "scheduling.nodeTopology",
            f"required with fabric.ipam.routing: spanLeaves: list every GPU node with its {level} "
            "(each node's prefix is carved from its leaf's block)",
        )
        return
    # a node without the leaf label is reported by the topology's own rules
    placed = sum(1 for labels in table.values() if level in labels)
    if gpu_nodes is not None and placed < gpu_nodes.count:
        yield Problem(
            "scheduling.nodeTopology",
            f"places {placed} nodes under a leaf but gpuNodes.count is {gpu_nodes.count}; with "
            "fabric.ipam.routing: spanLeaves every GPU node needs an entry (a node without one "
            "gets no address on the rails)",
        )


def _rail_prefixes(
    i: int, rail: Rail, prefixlen: int, leaves: Mapping[str, Sequence[str]]
) -> Iterator[Problem]:
    offsets: dict[int, int] = {}
    for j, block in enumerate(rail.blocks):
        path = f"fabric.rails[{i}].blocks[{j}]"
        subnet = block.subnet
        if prefixlen < subnet.prefixlen or prefixlen > subnet.max_prefixlen:
            yield Problem(
                f"{path}.subnet",
                f"{subnet} does not split into fabric.ipam.perNodePrefix /{prefixlen} node "
                f"prefixes; expected a perNodePrefix between {subnet.prefixlen} and "
                f"{subnet.max_prefixlen}, or a wider block",
            )
            continue
        slots = 2 ** (prefixlen - subnet.prefixlen)
        nodes = len(leaves.get(block.leaf, ()))
        if nodes > slots:
            yield Problem(
                f"{path}.subnet",
                f"{subnet} holds {slots} /{prefixlen} node prefixes but scheduling.nodeTopology "
                f"puts {nodes} nodes under {block.leaf}; widen the block or raise "
                "fabric.ipam.perNodePrefix",
            )
        if block.gateway not in subnet:
            continue  # reported with the block's own rules
        problem = _gateway_problem(block, prefixlen)
        if problem:
            yield Problem(f"{path}.gateway", problem)
            continue
        offset = gateway_offset(block)
        first = next(iter(offsets.items()), None)
        if first is not None and first[1] != offset:
            yield Problem(
                f"{path}.gateway",
                f"{block.gateway} is at offset {offset} of its node prefix but blocks[{first[0]}]'s "
                f"gateway is at offset {first[1]}; the rail's one CIDRPool has one gatewayIndex, "
                "so every block's gateway sits at the same offset",
            )
        offsets.setdefault(j, offset)


def _gateway_problem(block: RailBlock, prefixlen: int) -> str | None:
    """The block gateway names the leaf's address in the block's first node prefix; nv-ipam
    takes its offset as gatewayIndex, valid only for a host address of the prefix
    (api/v1alpha1/helpers.go, GetGatewayForSubnet)."""
    subnet = block.subnet
    size = 2 ** (subnet.max_prefixlen - prefixlen)
    offset = gateway_offset(block)
    point_to_point = prefixlen >= subnet.max_prefixlen - 1
    low, high = (0, size - 1) if point_to_point else (1, size - 2)
    if low <= offset <= high:
        return None
    first = type(subnet)((int(subnet.network_address), prefixlen))
    example = type(subnet.network_address)(int(subnet.network_address) + low)
    return (
        f"{block.gateway} is not a host address of the block's first /{prefixlen} node prefix "
        f"{first}; with fabric.ipam.routing: spanLeaves the leaf holds the address at the same "
        f"offset in every node's prefix, so name it in the first one (e.g. {example})"
    )
