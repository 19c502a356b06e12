"""Network layer: NVIDIA Network Operator, its NicClusterPolicy, IP pools, SR-IOV policies
and one NetworkAttachmentDefinition per rail, for every fabric x device-exposure mode.

| fabric / rdma | CNI (per rail)            | device plugin -> pod resource        |
|---------------|---------------------------|--------------------------------------|
| roce shared   | macvlan on the netdev     | RDMA shared DP -> rdma/<rail>        |
| ib shared     | ipoib on the netdev       | RDMA shared DP -> rdma/<rail>        |
| roce sriov    | sriov + rdma (exclusive)  | SR-IOV operator -> nvidia.com/sriov_<rail> |
| ib sriov      | ib-sriov, pkey, isolation | SR-IOV operator -> nvidia.com/sriov_<rail> |
| hostdevice    | host-device               | SR-IOV DP (isRdma) -> nvidia.com/hostdev_<rail> |
| none          | macvlan, no RDMA device   | none                                 |

Node Feature Discovery runs exactly once, from the operator the facts name
(:mod:`gpufabric.plan.resolve`). Names, CNIs, MTUs and resources of the rails come from the
resolved facts.

A fleet (several node pools) renders every pool's rails, each rail once (pools that share
an identical rail share its pool and networks), SR-IOV policies per pool and rail, and,
where the pools' per-node parts differ, one NicNodePolicy per pool with its NIC driver and
device plugins; the NicClusterPolicy then keeps only what is cluster-wide (IPAM, CNI
plugins, Multus, ib-kubernetes). docs/decisions/nics-and-fabric.md says why.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from msgspec.structs import replace

from gpufabric import nics
from gpufabric.nics import cni
from gpufabric.plan import ids, nicpolicy, tolerations
from gpufabric.plan.facts import (
    BlockFacts,
    FabricFacts,
    LeafSpanFacts,
    PlanContext,
    RailFacts,
    TenantContract,
)
from gpufabric.plan.items import (
    STATE_READY,
    Item,
    K8sObject,
    Layer,
    helm_chart,
    spec_object,
    system_namespace,
    upstream_overlay,
)
from gpufabric.plan.vocabulary import PoolKind
from gpufabric.support.templates import render_object

COMPONENT = "network-operator"

IPAM_API = "nv-ipam.nvidia.com/v1alpha1"


def chart_values(ctx: PlanContext) -> dict[str, Any]:
    sriov = any(nics.mode(c.facts.fabric.rdma).sriov_operator for c in nicpolicy.pool_contexts(ctx))
    return {
        "nfd": {"enabled": ctx.facts.operators.nfd_owner == COMPONENT},
        "sriovNetworkOperator": {"enabled": sriov},
        **tolerations.chart_values(ctx, COMPONENT, (), tolerations.NETWORK_OPERATOR_NFD_WORKER),
    }


def policy_spec(ctx: PlanContext) -> dict[str, Any]:
    """The one NicClusterPolicy: drivers, device plugins, CNI plugins, IPAM, ib-kubernetes."""
    if ctx.facts.fleet:
        return _fleet_policy_spec(ctx)
    facts = ctx.facts.fabric

    def image(name: str) -> dict[str, Any]:
        return nicpolicy.image(ctx, name)

    spec: dict[str, Any] = {
        "nvIpam": {**image("nvidia-k8s-ipam"), "enableWebhook": False},
    }
    secondary: dict[str, Any] = {"cniPlugins": image("plugins")}
    if facts.multus == "network-operator":
        secondary["multus"] = image("multus-cni")
    for key, plugin_image in cni.policy_plugins(facts).items():
        secondary[key] = image(plugin_image)
    spec["secondaryNetwork"] = secondary
    if facts.nic_driver == "operator":
        spec["ofedDriver"] = nicpolicy.ofed_driver(ctx)
    spec.update(nics.mode(facts.rdma).policy_spec(ctx, image))
    spec.update(nics.link(facts.type).policy_spec(ctx, image))
    if taints := tolerations.nic_policy(ctx):
        spec["tolerations"] = taints  # every operand DaemonSet runs on the GPU nodes
    return spec


def _fleet_policy_spec(ctx: PlanContext) -> dict[str, Any]:
    """A fleet's NicClusterPolicy: what is cluster-wide (IPAM, CNI plugins of every pool's
    rails, Multus, ib-kubernetes), and the per-node sections only when every pool's are the
    same (else each pool's NicNodePolicy carries its own)."""
    pools = nicpolicy.pool_contexts(ctx)

    def image(name: str) -> dict[str, Any]:
        return nicpolicy.image(ctx, name)

    spec: dict[str, Any] = {"nvIpam": {**image("nvidia-k8s-ipam"), "enableWebhook": False}}
    secondary: dict[str, Any] = {"cniPlugins": image("plugins")}
    if ctx.facts.fabric.multus == "network-operator":
        secondary["multus"] = image("multus-cni")
    for pool in pools:
        for key, plugin_image in cni.policy_plugins(pool.facts.fabric).items():
            secondary.setdefault(key, image(plugin_image))
    spec["secondaryNetwork"] = secondary
    if not nicpolicy.nic_node_policies(ctx):
        spec.update(nicpolicy.node_parts(pools[0]))
    for pool in pools:
        for key, part in nics.link(pool.facts.fabric.type).policy_spec(pool, image).items():
            spec.setdefault(key, part)
    if taints := tolerations.nic_policy(ctx):
        spec["tolerations"] = taints
    return spec


# ------------------------------------------------------------------------------ pools


def pool_spec(fabric: FabricFacts, rail: RailFacts) -> dict[str, Any]:
    """Spec of the rail's nv-ipam pool (of kind ``rail.pool_kind``)."""
    exclusions = [_exclusion(text) for text in rail.exclude]
    subnet = ipaddress.ip_network(rail.subnet)
    if rail.span is not None:
        return span_pool_spec(fabric, rail, rail.span)
    if rail.pool_kind == "CIDRPool":
        spec: dict[str, Any] = {
            "cidr": rail.subnet,
            "perNodeNetworkPrefix": fabric.ipam_node_prefix,
        }
        if rail.gateway is not None:
            # CIDRPool names the gateway by its index inside each node's block; pods reach
            # the other nodes' blocks of the rail through it.
            gateway = ipaddress.ip_address(rail.gateway)
            spec["gatewayIndex"] = int(gateway) - int(subnet.network_address)
            spec["routes"] = [{"dst": rail.subnet}]
        if exclusions:
            spec["exclusions"] = exclusions
        return spec
    spec = {"subnet": rail.subnet, "perNodeBlockSize": fabric.ipam_block_size}
    if rail.gateway is not None:
        spec["gateway"] = rail.gateway
    if exclusions:
        spec["exclusions"] = exclusions
    return spec


def span_pool_spec(fabric: FabricFacts, rail: RailFacts, span: LeafSpanFacts) -> dict[str, Any]:
    """Spec of the CIDRPool of a rail spanning leaves: the rail's aggregate, a static
    allocation per GPU node (a prefix of its leaf's block, the leaf's address in it as the
    gateway) and a route to the aggregate through it. The pool serves only those nodes (one
    selector term per node name): a node without an allocation would otherwise get a free
    prefix of any leaf's block, routed by another leaf."""
    nodes = span.nodes
    spec: dict[str, Any] = {
        "cidr": rail.subnet,
        "perNodeNetworkPrefix": fabric.ipam_node_prefix,
        "gatewayIndex": span.gateway_index,
        "routes": [{"dst": rail.subnet}],
        "staticAllocations": [
            {"nodeName": n.node, "prefix": n.prefix, "gateway": n.gateway} for n in nodes
        ],
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [n.node]}]}
                for n in nodes
            ]
        },
    }
    if rail.exclude:
        spec["exclusions"] = [_exclusion(text) for text in rail.exclude]
    return spec


def block_pool_spec(fabric: FabricFacts, rail: RailFacts, block: BlockFacts) -> dict[str, Any]:
    """Spec of one leaf block's IPPool: the block's subnet and gateway, only for the nodes
    under its leaf, with a route to the rail's aggregate through the leaf."""
    spec: dict[str, Any] = {
        "subnet": block.subnet,
        "perNodeBlockSize": fabric.ipam_block_size,
        "gateway": block.gateway,
        "routes": [{"dst": rail.subnet}],
        "nodeSelector": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": block.leaf_label, "operator": "In", "values": [block.leaf]}
                    ]
                }
            ]
        },
    }
    if block.exclude:
        spec["exclusions"] = [_exclusion(text) for text in block.exclude]
    return spec


def block_rail(rail: RailFacts, block: BlockFacts) -> RailFacts:
    """The rail as one block's network sees it: the block's network, pool and subnet."""
    return replace(
        rail,
        nad=block.nad,
        pool=block.pool,
        subnet=block.subnet,
        gateway=block.gateway,
        exclude=block.exclude,
        blocks=(),
    )


def _exclusion(text: str) -> dict[str, str]:
    first, _, last = (t.strip() for t in text.partition("-"))
    return {
        "startIP": str(ipaddress.ip_address(first)),
        "endIP": str(ipaddress.ip_address(last or first)),
    }


# ------------------------------------------------------------------------------ build


def build(ctx: PlanContext) -> list[Item]:
    facts = ctx.facts.fabric
    operator = ctx.components[COMPONENT]
    items: list[Item] = [
        system_namespace(
            ctx.stack, ids.NETWORK_NAMESPACE, Layer.NETWORK, operator.namespace, "privileged"
        )
    ]
    chart_deps = [ids.NETWORK_NAMESPACE]
    if ctx.facts.operators.nfd_owner != COMPONENT:
        chart_deps.append(ids.GPU_OPERATOR)  # NFD (and its labels) come from there
    items.append(
        Item(
            id=ids.NETWORK_OPERATOR,
            layer=Layer.NETWORK,
            payload=helm_chart(operator, chart_values(ctx)),
            depends_on=tuple(chart_deps),
            protect=True,
        )
    )
    # The link's own objects (UFM credentials) come before the policy that reads them.
    link_items = _unique(
        i for c in nicpolicy.pool_contexts(ctx) for i in nics.link(c.facts.fabric.type).items(c)
    )
    items += link_items
    items.append(
        Item(
            id=ids.NIC_POLICY,
            layer=Layer.NETWORK,
            payload=spec_object(
                ctx.stack,
                "mellanox.com/v1alpha1",
                "NicClusterPolicy",
                "nic-cluster-policy",
                policy_spec(ctx),
                annotations={"pulumi.com/waitFor": STATE_READY},
            ),
            depends_on=(ids.NETWORK_OPERATOR, *(it.id for it in link_items)),
        )
    )
    multus_dep = _multus(ctx, items)
    pool_ids = _pools(ctx, items, operator.namespace)
    if not ctx.facts.fleet:
        device_items, device_deps = nics.mode(facts.rdma).items(ctx, operator.namespace)
        items += device_items
        _networks(ctx, items, [multus_dep, *device_deps], pool_ids)
        return items
    items += _node_policies(ctx)
    rail_deps = _pool_devices(ctx, items, operator.namespace)
    _networks(ctx, items, [multus_dep], pool_ids, rail_deps)
    return items


def _pool_devices(ctx: PlanContext, items: list[Item], namespace: str) -> dict[str, list[str]]:
    """A fleet's device objects, each pool's (its SR-IOV policies); rail name -> the ids its
    networks wait for: those of every pool that has the rail, a pool's NicNodePolicy in
    place of the NicClusterPolicy where its device plugin is there."""
    rail_deps: dict[str, list[str]] = {}
    node_policies = set(nicpolicy.node_policy_ids(ctx))
    for pool in nicpolicy.pool_contexts(ctx):
        device_items, device_deps = nics.mode(pool.facts.fabric.rdma).items(pool, namespace)
        items += _unique(device_items, seen={it.id for it in items})
        own = ids.nic_node_policy(pool.facts.pool)
        deps = [own if d == ids.NIC_POLICY and own in node_policies else d for d in device_deps]
        for rail in pool.facts.fabric.rails:
            rail_deps.setdefault(rail.name, []).extend(deps)
    return rail_deps


def _unique(items: Iterable[Item], seen: set[str] | None = None) -> list[Item]:
    """Items whose id is not already in ``seen``, each once (pools that share a rail or a
    link share its objects)."""
    seen = set() if seen is None else seen
    out = []
    for item in items:
        if item.id not in seen:
            seen.add(item.id)
            out.append(item)
    return out


def _node_policies(ctx: PlanContext) -> list[Item]:
    """A fleet's NicNodePolicies, one per pool whose per-node sections differ. Each follows
    the NicClusterPolicy: the operator's webhook refuses a section both carry, so the
    cluster policy must have given the section up first."""
    return [
        Item(
            id=ids.nic_node_policy(name),
            layer=Layer.NETWORK,
            payload=spec_object(
                ctx.stack,
                "mellanox.com/v1alpha1",
                "NicNodePolicy",
                name,
                spec,
                annotations={"pulumi.com/waitFor": STATE_READY},
            ),
            depends_on=(ids.NETWORK_OPERATOR, ids.NIC_POLICY),
        )
        for name, spec in nicpolicy.nic_node_policies(ctx).items()
    ]


MULTUS_DAEMON_CONFIG: dict[str, Any] = {
    "chrootDir": "/hostroot",
    "cniVersion": "0.3.1",
    "logLevel": "verbose",
    "logToStderr": True,
    "cniConfigDir": "/host/etc/cni/net.d",
    "multusAutoconfigDir": "/host/etc/cni/net.d",
    "multusConfigFile": "auto",
    "socketDir": "/host/run/multus/",
}
"""The thick daemon's configuration as the pinned upstream manifest gives it."""


def multus_daemon_config(fabric: FabricFacts) -> dict[str, Any]:
    """The thick daemon's configuration with namespace isolation: a pod attaches only
    networks of its own namespace, plus the shared networks' namespace when NADs are
    shared (Multus's default exception, ``default``, otherwise)."""
    config = {**MULTUS_DAEMON_CONFIG, "namespaceIsolation": True}
    if fabric.networks_namespace is not None:
        config["globalNamespaces"] = fabric.networks_namespace
    return config


def _multus(ctx: PlanContext, items: list[Item]) -> str:
    """Multus: the thick daemon from the pinned upstream manifest (default), or the Network
    Operator's own (thin) Multus from the NicClusterPolicy."""
    if ctx.facts.fabric.multus == "network-operator":
        return ids.NIC_POLICY
    items.append(
        Item(
            id=ids.MULTUS,
            layer=Layer.NETWORK,
            payload=upstream_overlay(
                ctx.components["multus"],
                "overlays/multus-thick",
                daemon_config=json.dumps(multus_daemon_config(ctx.facts.fabric), indent=4),
            ),
            # It installs the NetworkAttachmentDefinition CRD that holds every rail's network.
            protect=True,
        )
    )
    return ids.MULTUS


def _pools(ctx: PlanContext, items: list[Item], namespace: str) -> dict[str, str]:
    """One pool per rail, or one per leaf block of a routed rail; network name -> item id."""
    pools: dict[str, str] = {}
    for fabric, rail in _rails(ctx):
        objects: list[tuple[str, str, PoolKind, str, dict[str, Any]]] = [
            (ids.pool(b.nad), b.nad, "IPPool", b.pool, block_pool_spec(fabric, rail, b))
            for b in rail.blocks
        ] or [(ids.pool(rail.name), rail.nad, rail.pool_kind, rail.pool, pool_spec(fabric, rail))]
        for item_id, nad, kind, pool, spec in objects:
            body = spec_object(ctx.stack, IPAM_API, kind, pool, spec, namespace=namespace)
            # nv-ipam and its CRDs come with the policy
            items.append(
                Item(
                    id=item_id,
                    layer=Layer.NETWORK,
                    payload=body,
                    depends_on=(ids.NIC_POLICY,),
                    rail=rail.name,
                )
            )
            pools[nad] = item_id
    return pools


def _rails(ctx: PlanContext) -> list[tuple[FabricFacts, RailFacts]]:
    """Every rail of the stack with the fabric of the (first) pool that has it: a rail two
    pools share is one network, rendered once."""
    seen: set[str] = set()
    out = []
    for pool in nicpolicy.pool_contexts(ctx):
        fabric = pool.facts.fabric
        for rail in fabric.rails:
            if rail.name not in seen:
                seen.add(rail.name)
                out.append((fabric, rail))
    return out


def _tenant_on(ctx: PlanContext, fabric: FabricFacts, tenant: TenantContract) -> TenantContract:
    """The tenant's contract on the pool whose fabric this is (a fleet's pools each have one)."""
    if not ctx.facts.fleet:
        return tenant
    for pool in ctx.facts.pools:
        if pool.fabric == fabric:
            return pool.tenants.get(tenant.namespace, tenant)
    return tenant


def _networks(
    ctx: PlanContext,
    items: list[Item],
    deps: list[str],
    pools: dict[str, str],
    rail_deps: Mapping[str, Sequence[str]] | None = None,
) -> None:
    facts = ctx.facts.fabric
    rail_deps = rail_deps or {}
    if facts.networks_namespace is not None:
        # Holds only NetworkAttachmentDefinitions: the strictest Pod Security level.
        items.append(
            system_namespace(
                ctx.stack,
                ids.NETWORKS_NAMESPACE,
                Layer.NETWORK,
                facts.networks_namespace,
                "restricted",
            )
        )
        targets: list[tuple[str, str, TenantContract | None]] = [
            (facts.networks_namespace, ids.NETWORKS_NAMESPACE, None)
        ]
    else:
        targets = [
            (ns, ids.tenant_namespace(ns), contract) for ns, contract in ctx.facts.tenants.items()
        ]
    for namespace, ns_id, tenant in targets:
        for fabric, rail in _rails(ctx):
            on_pool = tenant if tenant is None else _tenant_on(ctx, fabric, tenant)
            for net in [block_rail(rail, b) for b in rail.blocks] or [rail]:
                body = render_object(
                    "network/nad.yaml.j2",
                    name=net.nad,
                    namespace=namespace,
                    stack=ctx.stack,
                    rail=rail.name,
                    resource=rail.resource,
                    cni=cni.cni_config(fabric, net, on_pool),
                )
                item_id = ids.nad(net.nad, tenant.namespace if tenant is not None else None)
                after = [ns_id, *deps, *rail_deps.get(rail.name, ()), pools[net.nad]]
                items.append(
                    Item(
                        id=item_id,
                        layer=Layer.NETWORK,
                        payload=K8sObject(body),
                        depends_on=tuple(dict.fromkeys(after)),
                        rail=rail.name,
                    )
                )
