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
"""

from __future__ import annotations

import ipaddress
import json
from typing import Any

from gpufabric.model.config import Fabric, Rail, Tenant
from gpufabric.model.versions import NIC_POLICY_IMAGE_REPOSITORY
from gpufabric.plan import ids
from gpufabric.plan.facts import PlanContext, RailFacts
from gpufabric.plan.items import (
    STATE_READY,
    Item,
    K8sObject,
    Layer,
    SecretRef,
    helm_chart,
    system_namespace,
    upstream_overlay,
)
from gpufabric.plan.resolve import SRIOV_RESOURCE_PREFIX
from gpufabric.support.templates import render_object

COMPONENT = "network-operator"

UFM_SECRET_NAME = "ib-kubernetes-ufm-secret"
RDMA_HCA_MAX = 63  # pods sharing one HCA, as in NVIDIA's examples
IPAM_API = "nv-ipam.nvidia.com/v1alpha1"
SRIOV_API = "sriovnetwork.openshift.io/v1"
DISRUPTIVE = "gpufabric.io/disruptive"


def _image(ctx: PlanContext, name: str) -> dict[str, str]:
    component = ctx.components[COMPONENT]
    version = component.version.lstrip("v")
    return {
        "image": name,
        "repository": component.mirrors.image(NIC_POLICY_IMAGE_REPOSITORY),
        "version": f"network-operator-v{version}",
    }


def chart_values(ctx: PlanContext) -> dict[str, Any]:
    return {
        "nfd": {"enabled": ctx.facts.operators.nfd_owner == COMPONENT},
        "sriovNetworkOperator": {"enabled": ctx.facts.fabric.rdma == "sriov"},
    }


def policy_spec(ctx: PlanContext) -> dict[str, Any]:
    """The one NicClusterPolicy: drivers, device plugins, CNI plugins, IPAM, ib-kubernetes."""
    fabric = ctx.model.fabric
    facts = ctx.facts.fabric
    spec: dict[str, Any] = {
        "nvIpam": {**_image(ctx, "nvidia-k8s-ipam"), "enableWebhook": False},
    }
    secondary: dict[str, Any] = {"cniPlugins": _image(ctx, "plugins")}
    if fabric.multus == "network-operator":
        secondary["multus"] = _image(ctx, "multus-cni")
    if fabric.type == "infiniband" and fabric.rdma == "shared":
        secondary["ipoib"] = _image(ctx, "ipoib-cni")
    spec["secondaryNetwork"] = secondary
    if fabric.nicDriver.source == "operator":
        doca = ctx.components["doca-driver"]
        repository, _, image = (doca.image_ref or "").rpartition("/")
        spec["ofedDriver"] = {
            "image": image,
            "repository": repository,
            "version": doca.version,
            # Driver upgrades reload mlx5 on every node: one node at a time, drained first.
            "upgradePolicy": {
                "autoUpgrade": True,
                "maxParallelUpgrades": 1,
                "drain": {
                    "enable": True,
                    "force": True,
                    "deleteEmptyDir": True,
                    "timeoutSeconds": 300,
                },
            },
        }
    if fabric.rdma == "shared":
        config: dict[str, Any] = {
            "configList": [
                {
                    "resourceName": r.device_plugin_resource,
                    "rdmaHcaMax": RDMA_HCA_MAX,
                    "selectors": {"ifNames": [r.netdev], "linkTypes": [facts.device_link_type]},
                }
                for r in facts.rails
            ]
        }
        spec["rdmaSharedDevicePlugin"] = {
            **_image(ctx, "k8s-rdma-shared-dev-plugin"),
            "config": _json(config),
        }
    if fabric.rdma == "hostdevice":
        config = {
            "resourceList": [
                {
                    "resourcePrefix": SRIOV_RESOURCE_PREFIX,
                    "resourceName": r.device_plugin_resource,
                    "selectors": {
                        "vendors": ["15b3"],  # Mellanox/NVIDIA NICs
                        "pfNames": [r.netdev],
                        "linkTypes": [facts.device_link_type],
                        "isRdma": True,
                    },
                }
                for r in facts.rails
            ]
        }
        spec["sriovDevicePlugin"] = {
            **_image(ctx, "sriov-network-device-plugin"),
            "config": _json(config),
        }
    if facts.infiniband is not None and facts.infiniband.pkey_management == "ufm":
        spec["ibKubernetes"] = {
            **_image(ctx, "ib-kubernetes"),
            "periodicUpdateSeconds": 5,
            "pKeyGUIDPoolRangeStart": "02:00:00:00:00:00:00:00",
            "pKeyGUIDPoolRangeEnd": "02:FF:FF:FF:FF:FF:FF:FF",
            "ufmSecret": UFM_SECRET_NAME,
        }
    return spec


def _json(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def _object(
    ctx: PlanContext,
    api_version: str,
    kind: str,
    name: str,
    spec: dict[str, Any],
    namespace: str | None = None,
    annotations: dict[str, str] | None = None,
) -> K8sObject:
    return K8sObject(
        render_object(
            "network/object.yaml.j2",
            api_version=api_version,
            kind=kind,
            name=name,
            namespace=namespace,
            stack=ctx.stack,
            spec=spec,
            annotations=annotations or {},
        )
    )


# ------------------------------------------------------------------------------ pools


def pool_spec(fabric: Fabric, rail: Rail, facts: RailFacts) -> dict[str, Any]:
    """Spec of the rail's nv-ipam pool (of kind ``facts.pool_kind``)."""
    exclusions = [_exclusion(text) for text in rail.exclude]
    if facts.pool_kind == "CIDRPool":
        spec: dict[str, Any] = {
            "cidr": str(rail.subnet),
            "perNodeNetworkPrefix": fabric.ipam.perNodePrefix,
        }
        if rail.gateway is not None:
            # CIDRPool names the gateway by its index inside each node's block; pods reach
            # the other nodes' blocks of the rail through it.
            spec["gatewayIndex"] = int(rail.gateway) - int(rail.subnet.network_address)
            spec["routes"] = [{"dst": str(rail.subnet)}]
        if exclusions:
            spec["exclusions"] = exclusions
        return spec
    spec = {"subnet": str(rail.subnet), "perNodeBlockSize": fabric.ipam.perNodeBlockSize}
    if rail.gateway is not None:
        spec["gateway"] = str(rail.gateway)
    if exclusions:
        spec["exclusions"] = exclusions
    return spec


def _exclusion(text: str) -> dict[str, str]:
    first, _, last = (t.strip() for t in text.partition("-"))
    return {
        "startIP": str(ipaddress.ip_address(first)),
        "endIP": str(ipaddress.ip_address(last or first)),
    }


# ------------------------------------------------------------------------------- CNIs


def cni_config(fabric: Fabric, rail: RailFacts, tenant: Tenant | None = None) -> dict[str, Any]:
    """The exact CNI configuration a pod's interface on this rail is created with; a
    tenant's own partition or VLAN applies to its per-tenant networks."""
    name = rail.nad
    ipam: dict[str, Any] = {"type": "nv-ipam", "poolName": rail.pool}
    if rail.pool_kind == "CIDRPool":
        ipam["poolType"] = "cidrpool"
    mtu = rail.mtu
    if rail.cni == "ipoib":
        return {
            "cniVersion": "0.3.1",
            "name": name,
            "type": "ipoib",
            "master": rail.netdev,
            "mtu": mtu,
            "ipam": ipam,
        }
    if rail.cni == "macvlan":
        return {
            "cniVersion": "0.3.1",
            "name": name,
            "type": "macvlan",
            "master": rail.netdev,
            "mode": "bridge",
            "mtu": mtu,
            "ipam": ipam,
        }
    if rail.cni == "host-device":
        return {"cniVersion": "0.3.1", "name": name, "type": "host-device", "ipam": ipam}
    if rail.cni == "ib-sriov":
        ib = fabric.infiniband
        config: dict[str, Any] = {
            "cniVersion": "0.3.1",
            "name": name,
            "type": "ib-sriov",
            "link_state": "enable",
            # ib-sriov moves the VF's RDMA device into the pod itself (no rdma CNI then).
            "rdmaIsolation": True,
            "ipam": ipam,
        }
        pkey = tenant.pkey if tenant is not None and tenant.pkey else (ib.pkey if ib else None)
        if pkey is not None:
            config["pkey"] = pkey
        if ib is not None and ib.pkeyManagement == "ufm":
            config["ibKubernetesEnabled"] = True
        return config
    if rail.cni != "sriov":
        raise ValueError(f"rail {rail.name}: no CNI configuration for {rail.cni!r}")
    sriov: dict[str, Any] = {"type": "sriov", "link_state": "enable", "ipam": ipam}
    if tenant is not None and tenant.vlan is not None:
        sriov["vlan"] = tenant.vlan
    return {
        "cniVersion": "0.3.1",
        "name": name,
        "plugins": [
            sriov,
            # Moves the VF's RDMA device into the pod network namespace.
            {"type": "rdma"},
        ],
    }


# ------------------------------------------------------------------------------ build


def build(ctx: PlanContext) -> list[Item]:
    fabric = ctx.model.fabric
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
            ids.NETWORK_OPERATOR,
            Layer.NETWORK,
            helm_chart(operator, chart_values(ctx)),
            tuple(chart_deps),
            protect=True,
        )
    )
    policy_deps = [ids.NETWORK_OPERATOR]
    ib = fabric.infiniband
    if ib is not None and ib.pkeyManagement == "ufm" and ib.ufm is not None:
        secret = render_object(
            "network/ufm-secret.yaml.j2",
            name=UFM_SECRET_NAME,
            namespace=operator.namespace,
            stack=ctx.stack,
            ufm=ib.ufm,
        )
        secret["stringData"]["UFM_PASSWORD"] = SecretRef(
            "fabric.infiniband.ufm.password", ib.ufm.password
        )
        items.append(
            Item(ids.UFM_SECRET, Layer.NETWORK, K8sObject(secret), (ids.NETWORK_NAMESPACE,))
        )
        policy_deps.append(ids.UFM_SECRET)  # ib-kubernetes needs it before the policy
    items.append(
        Item(
            ids.NIC_POLICY,
            Layer.NETWORK,
            _object(
                ctx,
                "mellanox.com/v1alpha1",
                "NicClusterPolicy",
                "nic-cluster-policy",
                policy_spec(ctx),
                annotations={"pulumi.com/waitFor": STATE_READY},
            ),
            tuple(policy_deps),
        )
    )
    multus_dep = _multus(ctx, items)
    pool_ids = _pools(ctx, items, operator.namespace)
    device_deps = _sriov(ctx, items, operator.namespace)
    _networks(ctx, items, [multus_dep, *device_deps], pool_ids)
    return items


def _multus(ctx: PlanContext, items: list[Item]) -> str:
    """Multus: the thick daemon from the pinned upstream manifest (default), or the Network
    Operator's own (thin) Multus from the NicClusterPolicy."""
    if ctx.facts.fabric.multus == "network-operator":
        return ids.NIC_POLICY
    items.append(
        Item(
            ids.MULTUS,
            Layer.NETWORK,
            upstream_overlay(ctx.components["multus"], "overlays/multus-thick"),
            # It installs the NetworkAttachmentDefinition CRD that holds every rail's network.
            protect=True,
        )
    )
    return ids.MULTUS


def _pools(ctx: PlanContext, items: list[Item], namespace: str) -> dict[str, str]:
    fabric = ctx.model.fabric
    pools: dict[str, str] = {}
    for rail, facts in zip(fabric.rails, ctx.facts.fabric.rails, strict=True):
        spec = pool_spec(fabric, rail, facts)
        item_id = ids.pool(facts.name)
        items.append(
            Item(
                item_id,
                Layer.NETWORK,
                _object(ctx, IPAM_API, facts.pool_kind, facts.pool, spec, namespace=namespace),
                (ids.NIC_POLICY,),  # nv-ipam and its CRDs come with the policy
                rail=facts.name,
            )
        )
        pools[facts.name] = item_id
    return pools


def _sriov(ctx: PlanContext, items: list[Item], namespace: str) -> list[str]:
    """SR-IOV node policies (VFs per rail) and the cluster-wide exclusive RDMA mode."""
    facts = ctx.facts.fabric
    if facts.rdma != "sriov" or facts.sriov_vfs is None:
        return [ids.NIC_POLICY]
    policies: list[str] = []
    selector = dict(ctx.facts.nodes.selector)
    for rail in facts.rails:
        spec: dict[str, Any] = {
            "resourceName": rail.device_plugin_resource,
            "nodeSelector": selector,
            "numVfs": facts.sriov_vfs,
            "mtu": rail.mtu,
            "nicSelector": {"vendor": "15b3", "pfNames": [rail.netdev]},
            "deviceType": "netdevice",
            "isRdma": True,
            "linkType": "ib" if facts.type == "infiniband" else "eth",
            "priority": 50,
        }
        item_id = ids.sriov_policy(rail.name)
        items.append(
            Item(
                item_id,
                Layer.NETWORK,
                _object(
                    ctx,
                    SRIOV_API,
                    "SriovNetworkNodePolicy",
                    f"{rail.name}-vfs",
                    spec,
                    namespace=namespace,
                    annotations={
                        DISRUPTIVE: "creating or changing VFs drains and may reboot GPU nodes"
                    },
                ),
                (ids.NETWORK_OPERATOR,),
                rail=rail.name,
            )
        )
        policies.append(item_id)
    pool = {
        "nodeSelector": {"matchLabels": selector},
        "maxUnavailable": 1,
        # VFs' RDMA devices move into pods: the RDMA subsystem is exclusive on these nodes.
        "rdmaMode": "exclusive",
    }
    items.append(
        Item(
            ids.SRIOV_POOL,
            Layer.NETWORK,
            _object(
                ctx,
                SRIOV_API,
                "SriovNetworkPoolConfig",
                "gpu-nodes-rdma-exclusive",
                pool,
                namespace=namespace,
                annotations={
                    DISRUPTIVE: "switching the RDMA subsystem to exclusive reboots GPU nodes"
                },
            ),
            (ids.NETWORK_OPERATOR,),
        )
    )
    return [*policies, ids.SRIOV_POOL]


def _networks(ctx: PlanContext, items: list[Item], deps: list[str], pools: dict[str, str]) -> None:
    model = ctx.model
    facts = ctx.facts.fabric
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
        targets: list[tuple[str, str, Tenant | None]] = [
            (facts.networks_namespace, ids.NETWORKS_NAMESPACE, None)
        ]
    else:
        targets = [(t.namespace, ids.tenant_namespace(t.namespace), t) for t in model.tenants]
    for namespace, ns_id, tenant in targets:
        for rail in facts.rails:
            body = render_object(
                "network/nad.yaml.j2",
                name=rail.nad,
                namespace=namespace,
                stack=ctx.stack,
                rail=rail.name,
                resource=rail.resource,
                cni=cni_config(model.fabric, rail, tenant),
            )
            items.append(
                Item(
                    ids.nad(rail.name, tenant.namespace if tenant is not None else None),
                    Layer.NETWORK,
                    K8sObject(body),
                    tuple(dict.fromkeys([ns_id, *deps, pools[rail.name]])),
                    rail=rail.name,
                )
            )
