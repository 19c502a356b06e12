"""Pools and their fabric from the nodes, the rails' networks (NADs), their address pools
and the NIC policies."""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass, field
from typing import Any

from gpufabric import nics
from gpufabric.discover.infer import (
    DEFAULT_NAD_NS,
    NETWORKS,
    QUOTA,
    RESOURCE,
    Context,
    alert_rules,
    annots,
    cni_config,
    labels,
    meta,
    spec,
)
from gpufabric.discover.infer_topology import (
    aggregate,
    block_leaf,
    leaf_label,
    merge_blocks,
    span_blocks,
)
from gpufabric.discover.pools import PRODUCT, Group
from gpufabric.model.config import Fabric

RAIL_LABEL = "gpufabric.io/rail"
GPU_MODEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._()+-]{0,63}")
DEFAULT_SELECTOR = {"feature.node.kubernetes.io/pci-10de.present": "true"}


@dataclass
class Pools:
    """The gpuNodes section, the stack's fabric, and each pool's name and rails."""

    section: Any
    fabric: dict[str, Any]
    names: list[str] = field(default_factory=list)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    """The GPU nodes."""
    routed: bool = False
    """A rail is routed at each leaf (its blocks need the nodes' places: nodeTopology)."""


def link_and_mode(
    plugin: str, resource: str | None, link_types: list[str] | None = None
) -> tuple[str, str] | None:
    """(fabric.type, fabric.rdma) whose rails' networks use this CNI plugin and resource:
    each link and mode is asked for its CNI and resource prefix (and, where the device
    plugin selects the resource's devices by ``linkTypes``, each link for its own)."""
    found = []
    for link in nics.LINKS.members():
        if link_types and link.device_link_type not in link_types:
            continue
        for mode in nics.MODES.members():
            if mode.cni(link) != plugin:
                continue
            prefix = mode.resource_prefix
            if (prefix is None) == (resource is None) and (
                resource is None or resource.startswith(prefix)
            ):
                found.append((link.name, mode.name))
    return found[0] if len(found) == 1 else None


def rail_nads(ctx: Context) -> list[dict[str, Any]]:
    nads = ctx.snap.of("NetworkAttachmentDefinition")
    ours = [n for n in nads if RAIL_LABEL in labels(n)]
    return ours or [n for n in nads if cni_config(n).get("ipam", {}).get("type") == "nv-ipam"]


TENANT = "gpufabric.io/tenant"


def scoped_nads(ctx: Context, nads: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], bool]:
    """(one network per rail, whether they are per tenant): with ``fabric.nadScope: tenant``
    every tenant's namespace holds its own copy of each rail's network (its VLAN or pkey in
    it); the copy read for the rail is one without a VLAN, of the pkey most copies carry."""
    spaces = {str(meta(n).get("namespace")) for n in nads}
    tenants = {
        str(meta(n)["name"]) for n in ctx.snap.of("Namespace") if labels(n).get(TENANT) == "true"
    }
    if not nads or not spaces <= tenants:
        return nads, False
    by_rail: dict[str, list[dict[str, Any]]] = {}
    for nad in nads:
        by_rail.setdefault(str(labels(nad).get(RAIL_LABEL) or meta(nad)["name"]), []).append(nad)
    chosen = []
    for copies in by_rail.values():
        pkeys = [cni_config(n).get("pkey") for n in copies]
        common = max(set(pkeys), key=lambda k: (pkeys.count(k), str(k)))
        chosen.append(
            min(
                copies,
                key=lambda n: ("vlan" in cni_config(n), cni_config(n).get("pkey") != common),
            )
        )
    return chosen, True


def rail_of(
    ctx: Context, nad: dict[str, Any], selectors: dict[str, dict[str, Any]]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(rail entry, fabric keys) one NAD determines, with its address pool's (``selectors``:
    the device plugins' selectors of each resource)."""
    cfg = cni_config(nad)
    name = str(labels(nad).get(RAIL_LABEL) or meta(nad)["name"])
    rail: dict[str, Any] = {"name": name}
    keys: dict[str, Any] = {}
    if not cfg:
        rail["subnet"] = None
        ctx.notes.unmap(nad, "spec.config", f"not a CNI configuration (a JSON object): rail {name} left out")  # fmt: skip
        return rail, keys
    resource = annots(nad).get(RESOURCE)
    link_types = (selectors.get(resource or "") or {}).get("linkTypes")
    lm = link_and_mode(str(cfg.get("type", "")), resource, link_types)
    if lm is None:
        ctx.notes.unmap(
            nad,
            "spec.config.type",
            f"CNI {cfg.get('type')!r} with resource "
            f"{resource!r} is no link and NIC mode gpufabric renders",
        )
    else:
        keys["type"], keys["rdma"] = lm
    if cfg.get("master"):
        rail["netdev"] = cfg["master"]
    if cfg.get("mtu"):
        keys["mtu"] = int(cfg["mtu"])
    if cfg.get("pkey"):
        keys["pkey"] = cfg["pkey"]
    if meta(nad).get("namespace") != DEFAULT_NAD_NS:
        keys["networkNamespace"] = meta(nad).get("namespace")
    ipam = cfg.get("ipam")
    pool_name = str((ipam if isinstance(ipam, dict) else {}).get("poolName") or "")
    if not pool_name:
        rail["subnet"] = None
        ctx.notes.unmap(
            nad, "spec.config.ipam.poolName", f"names no nv-ipam pool: rail {name} left out"
        )
        return rail, keys
    _address_pool(ctx, pool_name, rail, keys)
    return rail, keys


def _cidr(ctx: Context, pool: dict[str, Any], field: str, rail: str) -> str | None:
    """The pool's subnet field, when it is one; else None, said (the rail is left out)."""
    value = spec(pool).get(field)
    try:
        ipaddress.ip_network(str(value), strict=False)
    except ValueError:
        what = "missing" if value is None else f"{value!r} is not a CIDR"
        ctx.notes.unmap(pool, f"spec.{field}", f"{what}: rail {rail} left out")
        return None
    return str(value)


def _number(ctx: Context, pool: dict[str, Any], field: str, default: int) -> int:
    value = spec(pool).get(field, default)
    try:
        return int(str(value))
    except ValueError:
        ctx.notes.unmap(pool, f"spec.{field}", f"{value!r} is not a number: {default} written")
        return default


def _address_pool(ctx: Context, name: str, rail: dict[str, Any], keys: dict[str, Any]) -> None:
    ippool, cidr = ctx.named("IPPool", name), ctx.named("CIDRPool", name)
    if ippool is not None:
        s = spec(ippool)
        rail["subnet"] = _cidr(ctx, ippool, "subnet", rail["name"])
        if s.get("gateway"):
            rail["gateway"] = s["gateway"]
        if rail["subnet"] is not None:
            _leaf_block(ctx, ippool, rail)
        if _number(ctx, ippool, "perNodeBlockSize", 16) != 16:
            keys["perNodeBlockSize"] = _number(ctx, ippool, "perNodeBlockSize", 16)
        for ex in s.get("exclusions") or []:
            rail.setdefault("exclude", []).append(f"{ex.get('startIP')}-{ex.get('endIP')}")
    elif cidr is not None:
        s = spec(cidr)
        rail["subnet"] = _cidr(ctx, cidr, "cidr", rail["name"])
        keys["poolType"] = "cidrpool"
        if s.get("perNodeNetworkPrefix"):
            keys["perNodePrefix"] = _number(ctx, cidr, "perNodeNetworkPrefix", 24)
        if rail["subnet"] is None:
            return
        if s.get("staticAllocations"):
            blocks = span_blocks(ctx, cidr, str(s["cidr"]))
            if blocks is not None:
                rail["blocks"] = blocks
                keys["routing"] = "spanLeaves"
        elif s.get("gatewayIndex") is not None:
            # the gateway by its offset in the rail's subnet (pods route the rail through it)
            net = ipaddress.ip_network(str(s["cidr"]), strict=False)
            rail["gateway"] = str(net.network_address + _number(ctx, cidr, "gatewayIndex", 1))
            if s.get("routes") not in (None, [{"dst": s["cidr"]}]):
                ctx.notes.unmap(cidr, "spec.routes", "only a route to the rail's own cidr maps")
        for ex in s.get("exclusions") or []:
            rail.setdefault("exclude", []).append(f"{ex.get('startIP')}-{ex.get('endIP')}")
    else:
        rail["subnet"] = None
        ctx.notes.unmapped.append(
            f"IPPool/CIDRPool {name}: not found: rail {rail['name']} has no subnet, left out"
        )


def _leaf_block(ctx: Context, pool: dict[str, Any], rail: dict[str, Any]) -> None:
    """An IPPool serving one leaf's nodes (its selector names the narrowest switch level)
    is one block of a routed rail: the rail's subnet is then the aggregate the pool routes
    its pods to."""
    leaf = block_leaf(pool)
    if leaf is None or leaf[0] != leaf_label(ctx):
        return  # no pool per leaf: a selector on another label (e.g. NFD's NIC label)
    block = {"leaf": leaf[1], "subnet": rail.pop("subnet"), "gateway": rail.pop("gateway", None)}
    rail["subnet"] = aggregate(ctx, pool) or block["subnet"]
    rail["blocks"] = [block]


PLUGINS = (
    ("sriovDevicePlugin", "resourceList", "intel.com"),
    ("rdmaSharedDevicePlugin", "configList", "rdma"),
)
"""(NicClusterPolicy section, its config's resource list, the plugin's default prefix)."""


def device_selectors(ctx: Context, pool: str | None) -> dict[str, dict[str, Any]]:
    """Each device plugin resource (``<prefix>/<name>``) with its selectors, from the SR-IOV
    and RDMA shared device plugins' configs in the pool's NicNodePolicy, else the
    NicClusterPolicy (the first to name a resource wins)."""
    policies = [p for p in [ctx.named("NicNodePolicy", pool) if pool else None] if p]
    policies += ctx.snap.of("NicClusterPolicy")
    out: dict[str, dict[str, Any]] = {}
    for policy in policies:
        for section, key, prefix in PLUGINS:
            raw = (spec(policy).get(section) or {}).get("config")
            try:
                resources = json.loads(raw).get(key) or [] if raw else []
            except (ValueError, AttributeError):
                ctx.notes.unmap(policy, f"spec.{section}.config", "not a JSON object")
                continue
            for r in resources:
                if isinstance(r, dict) and r.get("resourceName"):
                    name = f"{r.get('resourcePrefix') or prefix}/{r['resourceName']}"
                    out.setdefault(name, dict(r.get("selectors") or {}))
    return out


def _device_plugin_pfs(
    rails: list[dict[str, Any]], resources: dict[str, str], selectors: dict[str, dict[str, Any]]
) -> None:
    """Rail netdevs the device plugin selects by ``pfNames`` (host-device rails, whose
    networks name no master)."""
    for rail in rails:
        found = selectors.get(resources.get(rail["name"], ""), {}).get("pfNames") or []
        if found and "netdev" not in rail:
            rail["netdev"] = found[0]


def _sriov(ctx: Context, rails: list[dict[str, Any]], fabric: dict[str, Any]) -> None:
    for pol in ctx.snap.of("SriovNetworkNodePolicy"):
        s = spec(pol)
        pfs = (s.get("nicSelector") or {}).get("pfNames") or []
        for rail in rails:
            if s.get("resourceName", "").endswith("_" + rail["name"]) and pfs:
                rail.setdefault("netdev", pfs[0])
                fabric.setdefault("sriov", {"numVfs": int(s.get("numVfs", 1))})
                if s.get("mtu"):
                    fabric.setdefault("mtu", int(s["mtu"]))


def _hcas(ctx: Context, rails: list[dict[str, Any]], pool: str | None) -> None:
    """HCA names from a tenant's nccl-env NCCL_IB_HCA (``=mlx5_0,mlx5_1`` in rail order)."""
    name = f"nccl-env-{pool}" if pool else "nccl-env"
    for cm in ctx.snap.of("ConfigMap"):
        if meta(cm).get("name") != name:
            continue
        hcas = str((cm.get("data") or {}).get("NCCL_IB_HCA", "")).lstrip("=^").split(",")
        if len(hcas) == len(rails) and all(hcas):
            for rail, hca in zip(rails, hcas, strict=True):
                rail["hca"] = hca
        return


FABRIC_BOARD = "gpufabric-fabric"
RAIL_PANEL = re.compile(r"^rail (\S+) \((\S+)\): ports not ACTIVE$")


def _board_hcas(ctx: Context, rails: list[dict[str, Any]]) -> None:
    """HCA names the fabric dashboard shows per rail (``rail <name> (<device>)`` panels), for
    the stack's rails that no nccl-env names (SR-IOV and ipoib stacks set no NCCL_IB_HCA)."""
    shown = {}
    for title in _board_titles(ctx):
        found = RAIL_PANEL.match(title)
        if found:
            shown[found.group(1)] = found.group(2)
    for rail in rails:
        if "hca" not in rail and rail.get("name") in shown:
            rail["hca"] = shown[rail["name"]]
    _rule_hcas(ctx, rails)


def _board_titles(ctx: Context) -> list[str]:
    """The panel titles of gpufabric's fabric dashboard (none without one)."""
    board = ctx.named("ConfigMap", FABRIC_BOARD)
    text = str(((board or {}).get("data") or {}).get(f"{FABRIC_BOARD}.json", ""))
    try:
        panels = json.loads(text).get("panels") or [] if text else []
    except (ValueError, AttributeError):
        return []
    return [str(p.get("title", "")) for p in panels if isinstance(p, dict)]


RULE_DEVICES = re.compile(r'^node_infiniband_state_id\{device=~"([^"]+)"\} != 4$')


def _rule_hcas(ctx: Context, rails: list[dict[str, Any]]) -> None:
    """Without a dashboard: the devices the RailDown alert watches (a sorted set, so each
    rail's is a guess in rail order, said so), where every rail lacks its HCA."""
    if not rails or any("hca" in r for r in rails):
        return
    for rule, r in alert_rules(ctx):
        found = RULE_DEVICES.match(str(r.get("expr", "")))
        devices = found.group(1).split("|") if found else []
        if len(devices) != len(rails):
            continue
        for rail, device in zip(rails, devices, strict=True):
            rail["hca"] = device
        ctx.notes.unmap(
            rule,
            "spec.groups[].rules[RailDown].expr",
            "the rails' RDMA devices as a sorted set: written in rail order "
            f"({', '.join(devices)}); check each rail's hca against ibdev2netdev",
        )
        return


def pool_rails(
    ctx: Context, pool: str | None, nads: list[dict[str, Any]], offered: set[str]
) -> list[str]:
    """The rails of a pool: the networks its nccl-env names (one tenant's is enough), else
    the networks whose device resource the pool's nodes offer (a fleet with no tenants),
    else every rail."""
    all_rails = [str(meta(n)["name"]) for n in nads]
    name = f"nccl-env-{pool}" if pool else "nccl-env"
    for cm in ctx.snap.of("ConfigMap"):
        if meta(cm).get("name") == name and NETWORKS in annots(cm):
            named = _networks(annots(cm))
            return [r for r in all_rails if r in named]
    by_resource = [str(meta(n)["name"]) for n in nads if annots(n).get(RESOURCE) in offered]
    return by_resource or all_rails


def _networks(notes: dict[str, str]) -> set[str]:
    """The networks an nccl-env's annotations attach: ``gpufabric.io/networks``, or on
    routed rails one ``gpufabric.io/networks-<leaf>`` per leaf (the plain one empty)."""
    out: set[str] = set()
    for key, text in notes.items():
        if key != NETWORKS and not key.startswith(NETWORKS + "-"):
            continue
        try:
            nets = json.loads(text) if text else []
        except ValueError:
            continue
        out |= {str(n.get("name")) for n in nets if isinstance(n, dict)}
    return out


def fabric_of(ctx: Context, nads: list[dict[str, Any]], pool: str | None) -> dict[str, Any]:
    fabric: dict[str, Any] = {}
    rails: list[dict[str, Any]] = []
    ib_keys: dict[str, Any] = {}
    selectors = device_selectors(ctx, pool)
    resources: dict[str, str] = {}
    for nad in nads:
        rail, keys = rail_of(ctx, nad, selectors)
        resources[rail["name"]] = annots(nad).get(RESOURCE, "")
        rails.append(rail)
        if "pkey" in keys:
            ib_keys["pkey"] = keys.pop("pkey")
        ipam = {
            k: keys.pop(k)
            for k in ("perNodeBlockSize", "poolType", "perNodePrefix", "routing")
            if k in keys
        }
        if ipam:
            fabric["ipam"] = ipam
        fabric.update(keys)
    rails = merge_blocks([r for r in rails if r.get("subnet") is not None])  # others: said
    _device_plugin_pfs(rails, resources, selectors)
    _sriov(ctx, rails, fabric)
    _hcas(ctx, rails, pool)
    if ib_keys:
        fabric["infiniband"] = ib_keys
    _roce(ctx, fabric, pool, rails)
    _nic_driver(ctx, fabric, pool)
    fabric["rails"] = rails
    _board_hcas(ctx, rails)
    return fabric


def _defaults(fabric: dict[str, Any]) -> dict[str, Any]:
    """What a fabric with these keys takes when it sets no ``mtu`` or ``rdma``: its link's
    MTU, the stack default NIC mode."""
    link = nics.link(fabric["type"]) if "type" in fabric else None
    out: dict[str, Any] = {"rdma": Fabric.model_fields["rdma"].default}
    if link is not None:
        out["mtu"] = link.default_mtu
    return out


def stack_fabric(raw: dict[str, Any]) -> dict[str, Any]:
    """The stack's fabric: the raw one less the values equal to their defaults."""
    defaults = _defaults(raw)
    return {k: v for k, v in raw.items() if k not in defaults or defaults[k] != v}


def pool_fabric(
    ctx: Context, raw: dict[str, Any], base: dict[str, Any], pool: str
) -> dict[str, Any]:
    """A pool's own fabric keys: those its raw fabric holds otherwise than the stack's, and
    the defaults of the ones the stack sets and the pool does not (it would inherit them)."""
    out = {k: v for k, v in raw.items() if base.get(k) != v and k != "networkNamespace"}
    defaults = _defaults(raw)
    for key in base:
        if key in raw or key in out:
            continue
        if key in defaults:
            if base[key] != defaults[key]:
                out[key] = defaults[key]
        elif key != "networkNamespace":
            ctx.notes.unmapped.append(
                f"pool {pool}: fabric.{key}: the stack's fabric sets it and this pool's "
                "objects show none; a pool inherits it and cannot unset it"
            )
    return out


def _nic_driver(ctx: Context, fabric: dict[str, Any], pool: str | None) -> None:
    """nicDriver.source operator where the pool's NicNodePolicy (or, for the stack's fabric,
    the NicClusterPolicy) deploys the DOCA driver container (its ``ofedDriver``)."""
    policy = ctx.named("NicNodePolicy", pool) if pool else None
    if policy is None:
        policy = next(iter(ctx.managed("NicClusterPolicy")), None)
    if policy is not None and spec(policy).get("ofedDriver"):
        fabric["nicDriver"] = {"source": "operator"}


def _roce(
    ctx: Context, fabric: dict[str, Any], pool: str | None, rails: list[dict[str, Any]]
) -> None:
    name = f"nccl-env-{pool}" if pool else "nccl-env"
    cm = next((c for c in ctx.snap.of("ConfigMap") if meta(c).get("name") == name), None)
    link = nics.link(str(fabric["type"])) if fabric.get("type") in nics.LINKS.names() else None
    if (
        link is None
        or link.pfc_priority(Fabric.model_construct(type=fabric["type"], rails=[])) is None
    ):
        return  # no lossless Ethernet class: nothing of RoCE's to read
    tc = ((cm or {}).get("data") or {}).get("NCCL_IB_TC")
    if tc is not None and str(tc).isdigit() and int(tc) % 4:
        # not DSCP x 4 (the ECN bits set): the stack names the traffic class itself, and its
        # DSCP is the class's upper six bits (validation holds them equal)
        fabric.setdefault("roce", {})["trafficClass"] = int(tc)
    if tc is not None and str(tc).isdigit() and int(tc) >> 2 != 26:
        fabric.setdefault("roce", {})["dscp"] = int(tc) >> 2
    qps = ((cm or {}).get("data") or {}).get("NCCL_IB_QPS_PER_CONNECTION")
    if qps is not None and str(qps).isdigit():
        fabric.setdefault("roce", {})["qpsPerConnection"] = int(qps)
    priorities = _pfc_priorities(ctx)
    if len(priorities) > 1:
        # the fabric board titles each rail's RoCE panel with its pool's priority
        shown = {p for r in rails for p in _board_priorities(ctx).get(r["name"], [])}
        priorities = sorted(shown) if len(shown) == 1 else priorities
    if len(priorities) == 1 and priorities[0] != 3:
        fabric.setdefault("roce", {})["pfcPriority"] = priorities[0]
    elif len(priorities) > 1:
        ctx.notes.unmapped.append(
            f"PrometheusRule: PfcStorm watches priorities {', '.join(map(str, priorities))} "
            f"and no fabric dashboard says which of {pool or 'the stack'}'s rails pause on "
            "which: its fabric.roce.pfcPriority left at the default"
        )


BOARD_PRIORITY = re.compile(r"^rail (\S+) \(\S+\) \(priority (\d)\): RoCE congestion control$")


def _board_priorities(ctx: Context) -> dict[str, list[int]]:
    """Rail -> the PFC priorities the fabric dashboard's RoCE panels name for it."""
    out: dict[str, list[int]] = {}
    for title in _board_titles(ctx):
        found = BOARD_PRIORITY.match(title)
        if found:
            out.setdefault(found.group(1), []).append(int(found.group(2)))
    return out


PFC_STORM = re.compile(r"node_ethtool_received_prio(\d)_pause")


def _pfc_priorities(ctx: Context) -> list[int]:
    """The PFC priorities gpufabric's PfcStorm alert watches (each RoCE pool's lossless class)."""
    for _, r in alert_rules(ctx):
        if r.get("alert") == "PfcStorm":
            return sorted({int(p) for p in PFC_STORM.findall(str(r.get("expr", "")))})
    return []


def _selector_matches(selector: dict[str, str], grp: Group) -> bool:
    shared = grp.labels_shared()
    return all(shared.get(k) == v for k, v in selector.items())


def _pool_selectors(ctx: Context, groups: list[Group]) -> list[tuple[str, dict[str, str]]]:
    """(pool name, node selector) of each pool gpufabric wrote: its ResourceFlavors (in the
    order a ClusterQueue lists them), else its NicNodePolicies."""
    flavors = {str(meta(f)["name"]): f for f in ctx.managed("ResourceFlavor")}
    order: list[str] = []
    for cq in ctx.managed("ClusterQueue"):
        for rg in spec(cq).get("resourceGroups") or []:
            order += [str(f["name"]) for f in rg.get("flavors") or [] if f["name"] not in order]
    order += [n for n in sorted(flavors) if n not in order]
    out = [(n, dict(spec(flavors[n]).get("nodeLabels") or {})) for n in order if n in flavors]
    if out:
        return out
    found = _unobjected(ctx, _policy_selectors(ctx), groups)
    return found if len(found) > 1 else []


def _policy_selectors(ctx: Context) -> list[tuple[str, dict[str, str]]]:
    """Without flavors (Volcano, no Kueue): the pools the per-pool objects name, each with
    its node selector: a NicNodePolicy or NVIDIADriver named after its pool, an SR-IOV
    policy named ``<pool>-<rail>-vfs``; in name order."""
    found: dict[str, dict[str, str]] = {}
    for kind in ("NicNodePolicy", "NVIDIADriver"):
        for obj in ctx.managed(kind):
            found.setdefault(str(meta(obj)["name"]), dict(spec(obj).get("nodeSelector") or {}))
    rails = {str(labels(n).get(RAIL_LABEL) or meta(n)["name"]) for n in rail_nads(ctx)}
    for policy in ctx.managed("SriovNetworkNodePolicy"):
        name = str(meta(policy)["name"])
        for rail in rails:
            if name.endswith(f"-{rail}-vfs") and len(name) > len(rail) + 5:
                pool = name.removesuffix(f"-{rail}-vfs")
                found.setdefault(pool, dict(spec(policy).get("nodeSelector") or {}))
    return sorted(found.items())


def _named_pools(ctx: Context) -> list[str]:
    """Pool names the tenants' objects carry: ``nccl-env-<pool>`` ConfigMaps, quota
    annotations ``gpufabric.io/gpu-quota-<pool>``."""
    names = {
        str(meta(c)["name"]).removeprefix("nccl-env-")
        for c in ctx.managed("ConfigMap")
        if str(meta(c).get("name", "")).startswith("nccl-env-")
    }
    for quota in ctx.managed("ResourceQuota"):
        names |= {k.removeprefix(QUOTA) for k in annots(quota) if k.startswith(QUOTA)}
    return sorted(names)


def _unobjected(
    ctx: Context, found: list[tuple[str, dict[str, str]]], groups: list[Group]
) -> list[tuple[str, dict[str, str]]]:
    """A pool the tenants name but no per-pool object selects (its parts are all in the
    cluster-wide policy): the node groups no found selector takes are its nodes, selected
    by a label they all share and no other GPU node carries (GFD's product first; said)."""
    missing = [n for n in _named_pools(ctx) if n not in dict(found)]
    rest = [g for g in groups if not any(_selector_matches(sel, g) for _, sel in found)]
    if len(missing) != 1 or not rest:
        return found
    shared = dict(rest[0].labels_shared())
    for g in rest[1:]:
        shared = {k: v for k, v in shared.items() if g.labels_shared().get(k) == v}
    taken = [g for g in groups if g not in rest]
    keys = sorted(shared, key=lambda k: (k != PRODUCT, k))
    for key in keys:
        if not any(_selector_matches({key: shared[key]}, g) for g in taken):
            ctx.notes.unmapped.append(
                f"pool {missing[0]}: no per-pool object names its node selector: written as "
                f"{key}={shared[key]}, which its {sum(len(g.nodes) for g in rest)} nodes carry"
            )
            return sorted([*found, (missing[0], {key: shared[key]})])
    return found


def _pool(name: str | None, selector: dict[str, str], groups: list[Group]) -> dict[str, Any]:
    members = [g for g in groups if _selector_matches(selector, g)] if selector else groups
    nodes = [n for g in members for n in g.nodes]
    entry: dict[str, Any] = {"name": name} if name else {}
    entry["count"] = max(len(nodes), 1)
    gpus = members[0].fingerprint.gpus if members else 8
    if gpus != 8:
        entry["gpusPerNode"] = gpus
    if selector != DEFAULT_SELECTOR:
        entry["nodeSelector"] = selector
    model = members[0].fingerprint.product.removeprefix("NVIDIA-") if members else ""
    if model and GPU_MODEL.fullmatch(model):
        entry["gpuModel"] = model  # GPU Feature Discovery's product, less the vendor
    if members and members[0].fingerprint.clique:
        product = members[0].fingerprint.product.upper()
        entry["nvlink"] = {"system": "GB300-NVL72" if "GB300" in product else "GB200-NVL72"}
    return entry


def pools(ctx: Context, groups: list[Group]) -> Pools:
    """The gpuNodes section: the pools gpufabric wrote (flavors, NIC policies) matched to
    the node groups, else one pool per node group; the first pool's fabric is the stack's
    and every other pool gets its own."""
    nads, per_tenant = scoped_nads(ctx, rail_nads(ctx))
    selectors = _pool_selectors(ctx, groups)
    if len(selectors) <= 1:
        sel = selectors[0][1] if selectors else _one_selector(ctx, groups)
        _unplaced(ctx, [sel], groups)
        _kinds(ctx, sel, groups)
        section = _pool(None, sel, groups)
        fabric = _scope(stack_fabric(fabric_of(ctx, nads, None)), per_tenant)
        return _with_nodes(Pools(section, fabric, []), groups)
    _unplaced(ctx, [sel for _, sel in selectors], groups)
    entries, fabrics = [], []
    owned = []
    for name, sel in selectors:
        offered = {r for g in groups if _selector_matches(sel, g) for r in g.fingerprint.nics}
        owned.append(pool_rails(ctx, name, nads, offered))
    if not ctx.managed("ResourceFlavor"):
        order = _pool_order(ctx, owned)
        selectors, owned = [selectors[i] for i in order], [owned[i] for i in order]
    for (name, sel), own in zip(selectors, owned, strict=True):
        entries.append(_pool(name, sel, groups))
        fabrics.append(fabric_of(ctx, [n for n in nads if meta(n)["name"] in own], name))
    # the stack's fabric is the plainest pool's (fewest keys): the others override it
    base = min(range(len(fabrics)), key=lambda i: (len(fabrics[i]), i))
    for i, (entry, fab) in enumerate(zip(entries, fabrics, strict=True)):
        differs = {} if i == base else pool_fabric(ctx, fab, fabrics[base], entry["name"])
        if differs:
            entry["fabric"] = differs
    stack = _scope(stack_fabric(fabrics[base]), per_tenant)
    return _with_nodes(Pools(entries, stack, [n for n, _ in selectors]), groups, fabrics)


def _scope(fabric: dict[str, Any], per_tenant: bool) -> dict[str, Any]:
    """Networks per tenant namespace: ``nadScope: tenant``, no one namespace of them."""
    if per_tenant:
        fabric.pop("networkNamespace", None)
        fabric["nadScope"] = "tenant"
    return fabric


TENANT_PODS = "gpufabric-tenant-pods"


def _pool_order(ctx: Context, owned: list[list[str]]) -> list[int]:
    """The stack's order of the pools, where no ClusterQueue lists their flavors: the tenant
    pods' admission policy names the networks pool after pool; a pool it does not name
    keeps its place after them."""
    policy = ctx.named("ValidatingAdmissionPolicy", TENANT_PODS)
    text = json.dumps(spec(policy)) if policy is not None else ""

    def first(i: int) -> int:
        spots = [
            m.start()
            for rail in owned[i]
            for m in [re.search(rf"(?<=[(|]){re.escape(rail)}(?=[|)])", text)]
            if m
        ]
        return min(spots) if spots else len(text) + i

    return sorted(range(len(owned)), key=first)


def _kinds(ctx: Context, selector: dict[str, str], groups: list[Group]) -> None:
    """Several kinds of GPU node (product, GPUs) under the one pool's selector: said."""
    kinds = [g for g in groups if _selector_matches(selector, g)] if selector else groups
    found = sorted({(g.fingerprint.product, g.fingerprint.gpus) for g in kinds})
    if len(found) > 1:
        shown = ", ".join(f"{p or 'no product label'} x{n}" for p, n in found)
        ctx.notes.unmapped.append(
            f"Node: {len(found)} kinds of GPU node under the one pool's selector "
            f"({shown}): written as "
            "one pool of the first kind's GPU model and count; give each kind a gpuNodes[] "
            "entry with its own nodeSelector"
        )


def _unplaced(ctx: Context, selectors: list[dict[str, str]], groups: list[Group]) -> None:
    """GPU nodes no pool's selector takes: named (they are in no pool's count)."""
    for g in groups:
        if not any(_selector_matches(sel, g) for sel in selectors):
            names = sorted(str(meta(n)["name"]) for n in g.nodes)
            shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
            ctx.notes.unmapped.append(
                f"Node {shown}: GPU node(s) ({g.fingerprint.product or 'no GPU product label'}, "
                f"{g.fingerprint.gpus} GPUs) that no pool's node selector takes: in no pool"
            )


def _with_nodes(
    found: Pools, groups: list[Group], fabrics: list[dict[str, Any]] | None = None
) -> Pools:
    found.nodes = [n for g in groups for n in g.nodes]
    rails = [r for f in fabrics or [found.fabric] for r in f.get("rails") or []]
    found.routed = any(r.get("blocks") for r in rails)
    return found


def _one_selector(ctx: Context, groups: list[Group]) -> dict[str, str]:
    for kind in ("SriovNetworkNodePolicy", "NicNodePolicy"):
        for obj in ctx.managed(kind):
            return dict(spec(obj).get("nodeSelector") or {})
    if len(groups) > 1:
        ctx.notes.unmapped.append(
            f"Node: {len(groups)} kinds of GPU node and no pool selectors: written as one pool; "
            "give each kind a gpuNodes[] entry with its own nodeSelector"
        )
    return DEFAULT_SELECTOR


def versions(ctx: Context) -> dict[str, str]:
    """Pins the live operators show that differ from the pinned defaults."""
    from gpufabric.model.versions import effective_versions, load_catalog

    defaults = effective_versions(load_catalog(), {})
    out: dict[str, str] = {}
    for pol in ctx.snap.of("NicClusterPolicy"):
        tag = str((spec(pol).get("nvIpam") or {}).get("version", ""))
        if tag.startswith("network-operator-v"):
            version = tag.removeprefix("network-operator-v")
            if str(defaults.get("network-operator")) != version:
                out["network-operator"] = version
    return out
