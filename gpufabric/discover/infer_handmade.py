"""A cluster gpufabric did not make: the hand-made fabric and queueing objects (written by
k8s-launch-kit, AI Cluster Runtime, or by hand) read into the stack where the stack can say
the same thing, and a ``not mapped:`` note by object and field where it cannot.

It runs after the readers of :mod:`.infer_fabric` and :mod:`.infer_tenants` and touches only
rails whose network is not gpufabric's (no ``gpufabric.io/rail`` label) and sections they
left empty, so a cluster seeded from gpufabric's own render reads back as before.

- Rails: a network's SR-IOV policy is the one whose ``resourceName`` is the NAD's resource
  (``<prefix>/<resourceName>``, as the SR-IOV operator annotates the NADs it makes), not one
  named after the rail: its ``pfNames`` (or its ``rootDevices`` through the nodes'
  SriovNetworkNodeStates) give the netdev, ``numVfs`` and ``mtu`` the fabric's; a
  ``linkType`` or ``isRdma`` that disagrees with the fabric is noted.
- The RDMA shared device plugin's config (``configList[].resourceName``, ``ifNames``) of a
  NicClusterPolicy gives a rail's netdev; one resource over several rails is noted (gpufabric
  offers one per rail).
- A network whose name is no rail name (at most 15 characters: it is the pod's interface) is
  written as ``rail<n>``; pools and networks under other names than gpufabric renders are
  noted: the render makes its own beside them.
- The NicClusterPolicy is a singleton (``nic-cluster-policy``): a hand-made one's
  ``ofedDriver`` is ``nicDriver.source: operator``, and the gate compares it field by field.
- Kueue: the Topology a hand-made ResourceFlavor names gives ``scheduling.topologyLevels``
  (Topograph 1.0 ``fabric.topograph.run/tier-N``, its legacy keys, cloud keys: the node
  labels as the cluster has them); the flavor's ``nodeLabels`` the pool's ``nodeSelector``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from gpufabric.discover.infer import RESOURCE, Context, annots, labels, meta, spec
from gpufabric.discover.infer_fabric import DEFAULT_SELECTOR, Pools, rail_nads
from gpufabric.discover.roundtrip import ident, managed

RAIL_LABEL = "gpufabric.io/rail"
NIC_POLICY = "nic-cluster-policy"
RAIL_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,13}[a-z0-9])?$")
LEGACY_TOPOGRAPH = "network.topology.nvidia.com/"
LINK_TYPES = {"roce": "eth", "infiniband": "ib"}


def adopt(ctx: Context, pools: Pools) -> None:
    """Fill the fabric (and the one pool's selector) from hand-made objects."""
    hand = {str(meta(n)["name"]): n for n in rail_nads(ctx) if RAIL_LABEL not in labels(n)}
    if hand:
        fabrics = [pools.fabric]
        if isinstance(pools.section, list):
            fabrics += [e["fabric"] for e in pools.section if "rails" in e.get("fabric", {})]
        for fabric in fabrics:
            for rail, nad in _rail_names(ctx, fabric, hand):
                _sriov_policy(ctx, nad, rail, fabric)
                _shared_plugin(ctx, nad, rail)
                _pool_name(ctx, nad, rail)
            _network_namespace(ctx, fabric, hand)
    _nic_driver(ctx, pools.fabric)
    _flavor_selector(ctx, pools)


RESERVED_NS = ("default", "kube-system", "kube-public", "kube-node-lease")


def _network_namespace(
    ctx: Context, fabric: dict[str, Any], hand: dict[str, dict[str, Any]]
) -> None:
    """Networks in a namespace Kubernetes owns (SR-IOV operator's ``networkNamespace:
    default``, l8k's default): the stack's networks go to gpufabric's own namespace."""
    ns = fabric.get("networkNamespace")
    if ns in RESERVED_NS:
        del fabric["networkNamespace"]
        nad = next(n for n in hand.values() if meta(n).get("namespace") == ns)
        ctx.notes.unmap(
            nad,
            "metadata.namespace",
            f"{ns!r} belongs to Kubernetes; the stack's networks go to gpufabric-networks "
            "(fabric.networkNamespace): pods name them there",
        )


def _once(ctx: Context, obj: dict[str, Any], where: str, why: str) -> None:
    line = f"{ident(obj)}: {where}: {why}"
    if line not in ctx.notes.unmapped:
        ctx.notes.unmapped.append(line)


def _resource(nad: dict[str, Any]) -> tuple[str, str]:
    prefix, _, name = str(annots(nad).get(RESOURCE, "")).rpartition("/")
    return prefix, name


def _sriov_policy(
    ctx: Context, nad: dict[str, Any], rail: dict[str, Any], fabric: dict[str, Any]
) -> None:
    _, resource = _resource(nad)
    policy = next(
        (
            p
            for p in ctx.snap.of("SriovNetworkNodePolicy")
            if resource and spec(p).get("resourceName") == resource
        ),
        None,
    )
    if policy is None:
        return
    s = spec(policy)
    selector = s.get("nicSelector") or {}
    pfs = [str(pf).partition("#")[0] for pf in selector.get("pfNames") or []]
    if not pfs:
        pfs = _pf_names(ctx, [str(d) for d in selector.get("rootDevices") or []])
    if pfs and "netdev" not in rail:
        rail["netdev"] = pfs[0]
    if len(pfs) != 1:
        ctx.notes.unmap(
            policy,
            "spec.nicSelector",
            f"{len(pfs)} physical functions ({', '.join(pfs) or 'none by name'}); a rail is one "
            "PF: rails[].netdev set from the first"
            if pfs
            else "no PF by name or PCI address a node reports: set rails[].netdev",
        )
    vfs = int(s.get("numVfs", 1))
    have = fabric.setdefault("sriov", {"numVfs": vfs})
    if have.get("numVfs") != vfs:
        ctx.notes.unmap(
            policy, "spec.numVfs", f"{vfs}, another policy {have['numVfs']}: one numVfs per fabric"
        )
    if s.get("mtu") and int(s["mtu"]) != _default_mtu(fabric):
        fabric.setdefault("mtu", int(s["mtu"]))
    link = str(s.get("linkType", "")).lower()
    want = LINK_TYPES.get(str(fabric.get("type")))
    if link and want and link != want:
        ctx.notes.unmap(policy, "spec.linkType", f"{link!r} on a {fabric.get('type')} fabric")
    if s.get("isRdma") is False:
        ctx.notes.unmap(policy, "spec.isRdma", "false: gpufabric's VFs always carry RDMA")
    if s.get("deviceType", "netdevice") != "netdevice":
        ctx.notes.unmap(
            policy, "spec.deviceType", f"{s['deviceType']!r}: gpufabric binds VFs as netdevice"
        )
    ctx.notes.unmapped.append(
        f"{ident(policy)}: read as rail {rail['name']} ({rail.get('netdev')}); its resource "
        f"{resource} becomes {_sriov_resource(str(rail['name']))} in gpufabric's own policy for "
        "that PF: delete this one when adopting (two policies on one PF: the higher priority "
        "wins)"
    )


def _sriov_resource(rail: str) -> str | None:
    from gpufabric import nics

    return nics.mode("sriov").device_plugin_resource(rail)


def _default_mtu(fabric: dict[str, Any]) -> int | None:
    from gpufabric import nics

    link = nics.link(fabric["type"]) if "type" in fabric else None
    return link.default_mtu if link is not None else None


def _pf_names(ctx: Context, pci: list[str]) -> list[str]:
    """The PF names nodes report (SriovNetworkNodeState) for these PCI addresses."""
    found: list[str] = []
    for state in ctx.snap.of("SriovNetworkNodeState"):
        for iface in (state.get("status") or {}).get("interfaces") or []:
            name = str(iface.get("name", ""))
            if iface.get("pciAddress") in pci and name and name not in found:
                found.append(name)
    return found


def _nic_cluster_policy(ctx: Context) -> dict[str, Any] | None:
    return ctx.named("NicClusterPolicy", NIC_POLICY)


def _shared_plugin(ctx: Context, nad: dict[str, Any], rail: dict[str, Any]) -> None:
    policy = _nic_cluster_policy(ctx)
    prefix, resource = _resource(nad)
    plugin = spec(policy or {}).get("rdmaSharedDevicePlugin") or {}
    if policy is None or managed(policy) or not plugin.get("config") or not resource:
        return
    try:
        entries = json.loads(str(plugin["config"])).get("configList") or []
    except (ValueError, AttributeError):
        ctx.notes.unmap(policy, "spec.rdmaSharedDevicePlugin.config", "not JSON")
        return
    entry = next((e for e in entries if e.get("resourceName") == resource), None)
    if entry is None:
        return
    where = f"spec.rdmaSharedDevicePlugin.config.configList[{entries.index(entry)}]"
    selectors = entry.get("selectors") or {}
    ifnames = [str(i) for i in selectors.get("ifNames") or []]
    if "netdev" not in rail and len(ifnames) == 1:
        rail["netdev"] = ifnames[0]
    if len(ifnames) != 1:
        how = f"ifNames {ifnames}" if ifnames else f"selectors {json.dumps(selectors)}"
        _once(
            ctx,
            policy,
            where,
            f"one resource {prefix}/{resource} over {how}; gpufabric offers one per rail "
            f"({prefix}/<rail>): pods that request {prefix}/{resource} no longer fit once the "
            "render is applied",
        )
    if entry.get("rdmaHcaMax", 63) != 63:
        _once(ctx, policy, f"{where}.rdmaHcaMax", f"{entry['rdmaHcaMax']}; gpufabric renders 63")


def _pool_name(ctx: Context, nad: dict[str, Any], rail: dict[str, Any]) -> None:
    pool = str(_ipam(nad).get("poolName", ""))
    if pool and pool != f"{rail['name']}-pool":
        obj = ctx.named("IPPool", pool) or ctx.named("CIDRPool", pool)
        if obj is not None:
            ctx.notes.unmapped.append(
                f"{ident(obj)}: read as rail {rail['name']}'s subnet; gpufabric renders its "
                f"own pool ({rail['name']}-pool) on that subnet: remove this one once no pod "
                "holds an address from it"
            )


def _ipam(nad: dict[str, Any]) -> dict[str, Any]:
    try:
        cfg = json.loads(str(spec(nad).get("config") or "{}"))
    except ValueError:
        return {}
    plugins = cfg.get("plugins") if isinstance(cfg, dict) else None
    first = plugins[0] if isinstance(plugins, list) and plugins else cfg
    return dict(first.get("ipam") or {}) if isinstance(first, dict) else {}


def _rail_names(
    ctx: Context, fabric: dict[str, Any], hand: dict[str, dict[str, Any]]
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(rail, its hand-made network); a rail named after a network whose name is no rail
    name (the pod's interface, at most 15 characters) becomes ``rail<n>``."""
    rails = fabric.get("rails", [])
    taken = {str(r.get("name")) for r in rails}
    out = []
    for i, rail in enumerate(rails):
        name = str(rail.get("name"))
        if name not in hand:
            continue
        out.append((rail, hand[name]))
        if RAIL_NAME.match(name):
            continue
        new = next(f"rail{n}" for n in range(i, i + len(rails) + 1) if f"rail{n}" not in taken)
        taken.add(new)
        rail["name"] = new
        ctx.notes.unmap(
            hand[name],
            "metadata.name",
            f"{len(name)} characters, no rail name (the pod's interface, at most 15): written "
            f"as rail {new}; gpufabric renders its own network {new} beside it",
        )
    return out


def _nic_driver(ctx: Context, fabric: dict[str, Any]) -> None:
    policy = _nic_cluster_policy(ctx)
    if policy is None or managed(policy) or "nicDriver" in fabric:
        return
    if spec(policy).get("ofedDriver"):
        fabric["nicDriver"] = {"source": "operator"}
        version = (spec(policy)["ofedDriver"] or {}).get("version")
        ctx.notes.unmap(
            policy,
            "spec.ofedDriver.version",
            f"{version}; the render deploys the DOCA driver its Network Operator pin ships",
        )


def _flavor_selector(ctx: Context, pools: Pools) -> None:
    """The one pool's node selector from the hand-made flavor that names a Topology (Kueue
    TAS) or that a hand-made ClusterQueue uses, when gpufabric wrote no flavor."""
    if ctx.managed("ResourceFlavor") or not isinstance(pools.section, dict):
        return
    for flavor in _hand_flavors(ctx):
        selector = dict(spec(flavor).get("nodeLabels") or {})
        if selector and "nodeSelector" not in pools.section and selector != DEFAULT_SELECTOR:
            pools.section["nodeSelector"] = selector
        for key in ("tolerations", "nodeTaints"):
            if spec(flavor).get(key):
                ctx.notes.unmap(flavor, f"spec.{key}", "not read: tolerations are not in the stack")
        return


def _hand_flavors(ctx: Context) -> list[dict[str, Any]]:
    used = {
        str(f.get("name"))
        for cq in ctx.snap.of("ClusterQueue")
        if not managed(cq)
        for rg in spec(cq).get("resourceGroups") or []
        for f in rg.get("flavors") or []
    }
    flavors = [f for f in ctx.snap.of("ResourceFlavor") if not managed(f)]
    return [f for f in flavors if spec(f).get("topologyName") or meta(f)["name"] in used]


def scheduling(ctx: Context, config: dict[str, Any]) -> None:
    """topologyLevels from the Topology a hand-made flavor names, where gpufabric's objects
    gave none; a hand-made ClusterQueue's quotas are noted (gpufabric's are per tenant)."""
    section = config.setdefault("gpufabric:scheduling", {})
    if "topologyLevels" not in section and not ctx.managed("Topology"):
        names = [str(spec(f).get("topologyName")) for f in _hand_flavors(ctx)]
        topo = next((ctx.named("Topology", n) for n in names if ctx.named("Topology", n)), None)
        if topo is not None:
            levels = [str(lv.get("nodeLabel")) for lv in spec(topo).get("levels") or []]
            if levels and levels != ["kubernetes.io/hostname"]:
                section["topologyLevels"] = levels
            legacy = [lv for lv in levels if lv.startswith(LEGACY_TOPOGRAPH)]
            if legacy:
                ctx.notes.unmap(
                    topo,
                    "spec.levels",
                    f"{', '.join(legacy)}: Topograph before 1.0; 1.0 labels "
                    "fabric.topograph.run/tier-N and leaves these stale: kept as the nodes "
                    "carry them",
                )
            ctx.notes.unmapped.append(
                f"{ident(topo)}: levels read as scheduling.topologyLevels; gpufabric renders "
                "its own Topology (gpufabric) with them"
            )
    if not ctx.managed("ClusterQueue"):
        for cq in ctx.snap.of("ClusterQueue"):
            ctx.notes.unmap(
                cq,
                "spec.resourceGroups",
                "a queue for "
                + (
                    "every namespace"
                    if spec(cq).get("namespaceSelector") == {}
                    else "its namespaces"
                )
                + ": gpufabric's queues are one per tenant namespace (tenants[]); not mapped",
            )
    if not section:
        del config["gpufabric:scheduling"]
