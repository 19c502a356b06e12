"""Switch topology and routed rails: the levels a scheduler places by (a Kueue Topology, or
the HyperNodes Volcano's label discoverer built), the rails routed at each leaf (an nv-ipam
pool per leaf block, or one CIDRPool whose static allocations span the leaves) and the
nodes' places under the switches (``scheduling.nodeTopology``)."""

from __future__ import annotations

import ipaddress
from typing import Any

from gpufabric.discover.infer import Context, labels, meta, spec
from gpufabric.model.railspan import natural_key

HOSTNAME = "kubernetes.io/hostname"
TOPOLOGY_SOURCE = ("volcano.sh/network-topology-source", "label")
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def discovered_hypernodes(ctx: Context) -> list[dict[str, Any]]:
    """HyperNodes Volcano's label discoverer built (never hand-made ones)."""
    return [
        h
        for h in ctx.snap.of("HyperNode")
        if labels(h).get(TOPOLOGY_SOURCE[0]) == TOPOLOGY_SOURCE[1]
    ]


def hypernode_levels(ctx: Context) -> list[str]:
    """The node labels Volcano's label discoverer built HyperNodes from (its ``tierName``),
    widest tier first: the stack's ``topologyLevels`` under Volcano."""
    tiers: dict[int, str] = {}
    for hyper in discovered_hypernodes(ctx):
        s = spec(hyper)
        tier, name = s.get("tier"), s.get("tierName")
        if isinstance(tier, int) and isinstance(name, str) and name:
            tiers.setdefault(tier, name)
    return [tiers[t] for t in sorted(tiers, reverse=True)]


def kueue_levels(ctx: Context) -> list[str]:
    """The node labels of gpufabric's Kueue Topology, widest first (empty: none)."""
    for topo in ctx.managed("Topology"):
        return [str(lv.get("nodeLabel")) for lv in spec(topo).get("levels") or []]
    return []


def leaf_label(ctx: Context) -> str | None:
    """The narrowest switch level (the label naming each node's leaf switch)."""
    levels = [lv for lv in kueue_levels(ctx) or hypernode_levels(ctx) if lv != HOSTNAME]
    return levels[-1] if levels else None


# ------------------------------------------------------------------------------ leaf blocks


def block_leaf(pool: dict[str, Any]) -> tuple[str, str] | None:
    """(leaf label, leaf) of an IPPool that serves the nodes under one leaf (its node
    selector's one ``<label> In [<leaf>]`` expression), else None."""
    terms = (spec(pool).get("nodeSelector") or {}).get("nodeSelectorTerms") or []
    if len(terms) != 1:
        return None
    exprs = terms[0].get("matchExpressions") or []
    if len(exprs) != 1 or terms[0].get("matchFields"):
        return None
    expr = exprs[0]
    values = expr.get("values") or []
    if expr.get("operator") != "In" or len(values) != 1:
        return None
    return str(expr.get("key")), str(values[0])


def aggregate(ctx: Context, pool: dict[str, Any]) -> str | None:
    """The rail's aggregate: the one route a routed pool gives its pods (None: no route, or
    several, which gpufabric does not render; noted)."""
    routes = spec(pool).get("routes") or []
    if len(routes) == 1 and routes[0].get("dst"):
        return str(routes[0]["dst"])
    if routes:
        ctx.notes.unmap(pool, "spec.routes", "only one route, to the rail's aggregate, maps")
    return None


def merge_blocks(rails: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rails read one network at a time, the networks of one routed rail (``<rail>-<leaf>``)
    folded into one rail with a block per leaf, in the order the rail first appears."""
    out: dict[str, dict[str, Any]] = {}
    for rail in rails:
        seen = out.get(rail["name"])
        if seen is None:
            out[rail["name"]] = rail
            continue
        if rail.get("blocks"):
            seen.setdefault("blocks", []).extend(rail["blocks"])
        for text in rail.get("exclude") or []:
            seen.setdefault("exclude", []).append(text)
    for rail in out.values():
        if rail.get("blocks"):
            rail["blocks"].sort(key=lambda b: natural_key(str(b["leaf"])))
    return list(out.values())


# ------------------------------------------------------------------------------ spanning leaves


def span_blocks(ctx: Context, pool: dict[str, Any], cidr: str) -> list[dict[str, Any]] | None:
    """The leaf blocks of a CIDRPool whose static allocations span leaves: each leaf's nodes
    (by the leaf label on their Node objects) hold consecutive prefixes from the block's
    first address, the leaf's address at the pool's gatewayIndex in each. A block's own
    length is on no object: it is written as the widest aligned prefix from its first
    address that holds no other leaf's (noted). None where the allocations do not follow
    that layout (noted by field)."""
    level = leaf_label(ctx)
    allocations = spec(pool).get("staticAllocations") or []
    if level is None:
        ctx.notes.unmap(
            pool, "spec.staticAllocations", "no switch level names the nodes' leaf switches"
        )
        return None
    leaf_of = {str(meta(n).get("name")): labels(n).get(level) for n in ctx.snap.nodes}
    leaves: dict[str, list[tuple[str, Network]]] = {}
    for alloc in allocations:
        node = str(alloc.get("nodeName", ""))
        leaf = leaf_of.get(node)
        if leaf is None:
            ctx.notes.unmap(pool, "spec.staticAllocations", f"node {node!r} has no {level} label")
            return None
        leaves.setdefault(leaf, []).append((node, ipaddress.ip_network(str(alloc["prefix"]))))
    firsts = {leaf: min(p for _, p in rows).network_address for leaf, rows in leaves.items()}
    total = ipaddress.ip_network(cidr, strict=False)
    index = int(spec(pool).get("gatewayIndex") or 0)
    blocks = []
    for leaf in sorted(leaves, key=natural_key):
        rows = sorted(leaves[leaf], key=lambda r: natural_key(r[0]))
        base, size = firsts[leaf], rows[0][1].num_addresses
        if any(int(p.network_address) != int(base) + k * size for k, (_, p) in enumerate(rows)):
            ctx.notes.unmap(
                pool,
                "spec.staticAllocations",
                f"leaf {leaf}'s node prefixes are not consecutive in node-name order",
            )
            return None
        others = [a for other, a in firsts.items() if other != leaf]
        block = _widest(base, total, others, len(rows) * size)
        gateway = type(base)(int(base) + index)
        blocks.append({"leaf": leaf, "subnet": str(block), "gateway": str(gateway)})
    ctx.notes.unmap(
        pool,
        "spec.staticAllocations",
        "each leaf block's length is on no object: written as the widest aligned prefix "
        "that holds no other leaf's nodes",
    )
    return blocks


def _widest(base: Any, total: Network, others: list[Any], needed: int) -> Network:
    """The widest prefix starting at ``base`` inside ``total`` that holds none of ``others``
    and at least ``needed`` addresses (a narrower one does not exist when this fails)."""
    for plen in range(total.prefixlen, total.max_prefixlen + 1):
        if int(base) % (2 ** (total.max_prefixlen - plen)):
            continue
        net = ipaddress.ip_network((base, plen))
        if net.subnet_of(total) and not any(o in net for o in others):  # type: ignore[arg-type]
            return net
    return ipaddress.ip_network((base, total.max_prefixlen - (needed - 1).bit_length()))


def node_topology(nodes: list[dict[str, Any]], levels: list[str]) -> dict[str, dict[str, str]]:
    """Each GPU node carrying every switch level, with its switches (``nodeTopology``)."""
    switch = [lv for lv in levels if lv != HOSTNAME]
    out: dict[str, dict[str, str]] = {}
    for node in sorted(nodes, key=lambda n: natural_key(str(meta(n).get("name")))):
        have = labels(node)
        if switch and all(lv in have for lv in switch):
            out[str(meta(node)["name"])] = {lv: have[lv] for lv in switch}
    return out


# ------------------------------------------------------------------------------ labels alone

NUMBERED = (
    # (label prefix before the number, whether tier 1 is the narrowest)
    ("fabric.topograph.run/tier-", True),  # Topograph 1.0
    ("network.topology.nvidia.com/tier-", True),  # Topograph before 1.0
    ("topology.kubernetes.io/network-level-", True),  # Topograph's first k8s engine
    ("topology.k8s.aws/network-node-layer-", False),  # EKS: layer 1 is the top
)
NAMED = (("cloud.google.com/gce-topology-block", "cloud.google.com/gce-topology-subblock"),)
"""Switch-level label families, widest first (GKE's, as Cluster Toolkit's Kueue Topology)."""


def label_levels(nodes: list[dict[str, Any]]) -> list[str]:
    """Switch levels every GPU node carries in a known family of topology labels, widest
    first (empty: none). Only a hint: a Topology gpufabric would render is a change."""
    if not nodes:
        return []
    shared = set(labels(nodes[0]))
    for node in nodes[1:]:
        shared &= set(labels(node))
    for prefix, narrow_first in NUMBERED:
        tiers = sorted(
            int(k[len(prefix) :])
            for k in shared
            if k.startswith(prefix) and k[len(prefix) :].isdigit()
        )
        if tiers:
            ordered = list(reversed(tiers)) if narrow_first else tiers
            return [f"{prefix}{n}" for n in ordered]
    for family in NAMED:
        found = [k for k in family if k in shared]
        if found:
            return found
    return []
