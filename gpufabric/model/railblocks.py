"""Rules for routed rails with a subnet and gateway per leaf block (fabric.rails[].blocks).

Each block becomes one nv-ipam IPPool that serves only the nodes under its leaf (a
nodeSelector on the narrowest switch level of scheduling.topologyLevels) and one network
named <rail>-<leaf> (docs/decisions/nics-and-fabric.md, "Routed rails: a pool and a network
per leaf block"). With fabric.ipam.routing: spanLeaves the blocks' subnets, gateways and leaves
follow the same rules here, and gpufabric.model.railspan adds what one CIDRPool per rail needs.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator, Sequence

from gpufabric.model.config import HOSTNAME_LABEL, Fabric, Rail, RailBlock, Scheduling
from gpufabric.model.problems import Problem

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def leaf_level(levels: Sequence[str]) -> str | None:
    """The label that names a node's leaf switch: the narrowest level above the node."""
    switches = [lv for lv in levels if lv != HOSTNAME_LABEL]
    return switches[-1] if switches else None


def block_network_name(rail: str, leaf: str) -> str:
    """The NetworkAttachmentDefinition (and CNI network) of one block of a rail."""
    return f"{rail}-{leaf}"


def usable_addresses(subnet: Network, gateway: bool) -> int:
    """Addresses a pool can hand out: all but the network, broadcast and gateway ones."""
    spare = 2 if subnet.num_addresses > 2 else 0
    return subnet.num_addresses - spare - (1 if gateway else 0)


def problems(fabric: Fabric, scheduling: Scheduling | None) -> Iterator[Problem]:
    """Every rail's blocks: names, subnets, gateways, leaves and capacity."""
    blocked = [(i, r) for i, r in enumerate(fabric.rails) if r.blocks]
    if not blocked:
        return
    level = leaf_level(scheduling.topologyLevels) if scheduling is not None else None
    first = blocked[0][0]
    if level is None:
        yield Problem(
            f"fabric.rails[{first}].blocks",
            "name leaf switches, but scheduling.topologyLevels names no switch level; add the "
            "leaf label (e.g. topology.gpufabric.io/leaf) as its narrowest level",
        )
    per_leaf = fabric.ipam.routing == "perLeaf"
    if per_leaf and fabric.ipam.poolType != "ippool":
        yield Problem(
            f"fabric.rails[{first}].blocks",
            "need fabric.ipam.poolType: ippool; a cidrpool puts each node in its own prefix "
            "with its own gateway, so it cannot share a leaf's subnet (fabric.ipam.routing: "
            "spanLeaves gives each node a prefix of its leaf's block instead)",
        )
    leaves = _node_leaves(scheduling, level)
    rail_names = {r.name for r in fabric.rails}
    for i, rail in blocked:
        for j, block in enumerate(rail.blocks if per_leaf else ()):
            if block_network_name(rail.name, block.leaf) in rail_names:
                yield Problem(
                    f"fabric.rails[{i}].blocks[{j}].leaf",
                    f"{block.leaf!r} makes the network name of another rail, "
                    f"{block_network_name(rail.name, block.leaf)!r}",
                )
    for i, rail in blocked:
        yield from _rail_blocks(i, rail, fabric, level, leaves)
    if leaves:
        yield from _uncovered(blocked, leaves)
    elif per_leaf:
        yield from _any_node_fits(blocked, fabric.ipam.perNodeBlockSize)


def _node_leaves(scheduling: Scheduling | None, level: str | None) -> dict[str, list[str]]:
    """Leaf -> the nodes scheduling.nodeTopology puts under it (empty when unset)."""
    leaves: dict[str, list[str]] = {}
    if scheduling is None or level is None:
        return leaves
    for node, labels in sorted(scheduling.nodeTopology.items()):
        if level in labels:
            leaves.setdefault(labels[level], []).append(node)
    return leaves


def _rail_blocks(
    i: int, rail: Rail, fabric: Fabric, level: str | None, leaves: dict[str, list[str]]
) -> Iterator[Problem]:
    if rail.gateway is not None:
        yield Problem(
            f"fabric.rails[{i}].gateway",
            "set together with blocks; a rail with blocks takes each block's gateway, so "
            "remove the rail's",
        )
    seen: dict[str, int] = {}
    for j, block in enumerate(rail.blocks):
        path = f"fabric.rails[{i}].blocks[{j}]"
        if block.leaf in seen:
            yield Problem(f"{path}.leaf", f"{block.leaf!r} is already blocks[{seen[block.leaf]}]")
        seen.setdefault(block.leaf, j)
        if fabric.ipam.routing == "perLeaf":  # spanLeaves: one network per rail
            yield from _block_name(path, rail.name, block.leaf)
        yield from _block_subnet(path, rail, j, fabric)
        yield from _block_gateway(path, block)
        if leaves and block.leaf not in leaves:
            yield Problem(
                f"{path}.leaf",
                f"{block.leaf!r} is the {level} of no node in scheduling.nodeTopology; "
                f"known leaves: {', '.join(sorted(leaves))}",
            )
        elif leaves and fabric.ipam.routing == "perLeaf":  # spanLeaves: gpufabric.model.railspan
            yield from _block_capacity(path, block, len(leaves[block.leaf]), fabric)
    yield from _block_exclusions(i, rail)


def _block_name(path: str, rail: str, leaf: str) -> Iterator[Problem]:
    name = block_network_name(rail, leaf)
    if len(name) > 63 or not _DNS_LABEL.match(name):
        yield Problem(
            f"{path}.leaf",
            f"{leaf!r} makes the network name {name[:70]!r}, which must be a DNS label "
            "(lower-case letters, digits and '-', at most 63 characters with the rail name)",
        )


def _block_subnet(path: str, rail: Rail, j: int, fabric: Fabric) -> Iterator[Problem]:
    subnet = rail.blocks[j].subnet
    if subnet.version != rail.subnet.version or not subnet.subnet_of(rail.subnet):  # type: ignore[arg-type]
        yield Problem(
            f"{path}.subnet",
            f"{subnet} is not inside the rail subnet {rail.subnet}; the rail's subnet is the "
            "aggregate pods route to, so it must hold every block",
        )
    for k in range(j):
        other = rail.blocks[k].subnet
        if other.version == subnet.version and subnet.overlaps(other):
            yield Problem(
                f"{path}.subnet",
                f"{subnet} overlaps blocks[{k}] {other}; blocks need disjoint subnets",
            )
    for n, peer in enumerate(fabric.rails):
        for k, block in enumerate(peer.blocks if peer.name != rail.name else ()):
            if block.subnet.version == subnet.version and subnet.overlaps(block.subnet):
                yield Problem(
                    f"{path}.subnet",
                    f"{subnet} overlaps rails[{n}].blocks[{k}] {block.subnet}; rails need "
                    "disjoint subnets",
                )


def gateway_problems(
    path: str, gateway: ipaddress.IPv4Address | ipaddress.IPv6Address, subnet: Network, what: str
) -> Iterator[Problem]:
    """A gateway must be a usable address of its subnet (``what``: "rail", "block")."""
    if gateway not in subnet:
        yield Problem(path, f"{gateway} is outside the {what} subnet {subnet}")
    elif subnet.num_addresses > 2 and gateway in (
        subnet.network_address,
        subnet.broadcast_address,
    ):
        yield Problem(path, f"{gateway} is the network or broadcast address of {subnet}")


def _block_gateway(path: str, block: RailBlock) -> Iterator[Problem]:
    yield from gateway_problems(f"{path}.gateway", block.gateway, block.subnet, "block")


def _block_capacity(path: str, block: RailBlock, nodes: int, fabric: Fabric) -> Iterator[Problem]:
    size = fabric.ipam.perNodeBlockSize
    usable = usable_addresses(block.subnet, gateway=True)
    if size * nodes > usable:
        yield Problem(
            f"{path}.subnet",
            f"{block.subnet} has {usable} usable addresses but its {nodes} nodes x "
            f"perNodeBlockSize {size} need {size * nodes}; widen the block or lower "
            "fabric.ipam.perNodeBlockSize",
        )


def _block_exclusions(i: int, rail: Rail) -> Iterator[Problem]:
    for k, text in enumerate(rail.exclude):
        first, _, last = (t.strip() for t in text.partition("-"))
        try:
            addrs = [ipaddress.ip_address(a) for a in (first, last or first)]
        except ValueError:
            continue  # reported with the rail's own exclusion rules
        if not any(all(a in b.subnet for a in addrs) for b in rail.blocks):
            yield Problem(
                f"fabric.rails[{i}].exclude[{k}]",
                f"{text!r} is not inside one block's subnet; each block's pool takes the "
                "exclusions inside its subnet",
            )


def _uncovered(blocked: list[tuple[int, Rail]], leaves: dict[str, list[str]]) -> Iterator[Problem]:
    """A node under a leaf that a rail has no block for would get no address on it."""
    for i, rail in blocked:
        missing = sorted(set(leaves) - {b.leaf for b in rail.blocks})
        if missing:
            nodes = ", ".join(n for leaf in missing for n in leaves[leaf])
            yield Problem(
                f"fabric.rails[{i}].blocks",
                f"no block for leaf {', '.join(missing)} (nodes {nodes}); pods there would get "
                f"no address on rail {rail.name}",
            )


def _any_node_fits(blocked: list[tuple[int, Rail]], size: int) -> Iterator[Problem]:
    """Without scheduling.nodeTopology: each block holds at least one node's addresses."""
    for i, rail in blocked:
        for j, block in enumerate(rail.blocks):
            usable = usable_addresses(block.subnet, gateway=True)
            if size > usable:
                yield Problem(
                    f"fabric.rails[{i}].blocks[{j}].subnet",
                    f"{block.subnet} has {usable} usable addresses, fewer than one node's "
                    f"perNodeBlockSize {size}",
                )
