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

Node Feature Discovery runs exactly once: from the GPU Operator, except when the GPU
Operator must wait for operator-managed NIC drivers (legacy peermem), where the Network
Operator is installed first and runs it.
"""

from __future__ import annotations

import ipaddress
import json
from typing import Any

from gpufabric import rails
from gpufabric.config import Fabric, Rail, StackModel, Tenant
from gpufabric.plan import (
    STATE_READY,
    Item,
    K8sObject,
    Layer,
    PlanContext,
    SecretRef,
    helm_chart,
    system_namespace,
    upstream_overlay,
)
from gpufabric.templates import render_object

NAMESPACE_ID = "network/namespace"
CHART_ID = "network/network-operator"
POLICY_ID = "network/nic-cluster-policy"
UFM_SECRET_ID = "network/ufm-secret"
MULTUS_ID = "network/multus"
NETWORKS_NAMESPACE_ID = "network/networks-namespace"
SRIOV_POOL_ID = "network/sriov-rdma-exclusive"

NO_IMAGE_REPOSITORY = "nvcr.io/nvidia/mellanox"
UFM_SECRET_NAME = "ib-kubernetes-ufm-secret"
RDMA_HCA_MAX = 63  # pods sharing one HCA, as in NVIDIA's examples
IPAM_API = "nv-ipam.nvidia.com/v1alpha1"
SRIOV_API = "sriovnetwork.openshift.io/v1"
DISRUPTIVE = "gpufabric.io/disruptive"


def network_operator_runs_nfd(model: StackModel) -> bool:
    """True when the GPU Operator must follow the NIC driver, so the Network Operator goes
    first and brings Node Feature Discovery (whose labels its driver pods select on)."""
    return gpu_waits_for_nic_driver(model)


def gpu_waits_for_nic_driver(model: StackModel) -> bool:
    """Legacy peermem is built against the NIC driver; with operator-managed drivers the GPU
    Operator must wait for them (a known failure otherwise). DMA-BUF needs no such wait."""
    fabric = model.fabric
    return (
        fabric.gpuDirect == "peermem"
        and fabric.rdma != "none"
        and fabric.nicDriver.source == "operator"
    )


def uses_sriov_operator(fabric: Fabric) -> bool:
    return fabric.rdma == "sriov"


def _image(ctx: PlanContext, name: str) -> dict[str, str]:
    component = ctx.components["network-operator"]
    version = component.version.lstrip("v")
    return {
        "image": name,
        "repository": component.mirrors.image(NO_IMAGE_REPOSITORY),
        "version": f"network-operator-v{version}",
    }


def chart_values(ctx: PlanContext) -> dict[str, Any]:
    model = ctx.model
    values: dict[str, Any] = {
        "nfd": {"enabled": network_operator_runs_nfd(model)},
        "sriovNetworkOperator": {"enabled": uses_sriov_operator(model.fabric)},
    }
    return values


def link_type(fabric: Fabric) -> str:
    return "infiniband" if fabric.type == "infiniband" else "ether"


def policy_spec(ctx: PlanContext) -> dict[str, Any]:
    """The one NicClusterPolicy: drivers, device plugins, CNI plugins, IPAM, ib-kubernetes."""
    model = ctx.model
    fabric = model.fabric
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
        config = {
            "configList": [
                {
                    "resourceName": rails.resource_base(r),
                    "rdmaHcaMax": RDMA_HCA_MAX,
                    "selectors": {"ifNames": [r.netdev], "linkTypes": [link_type(fabric)]},
                }
                for r in fabric.rails
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
                    "resourcePrefix": rails.SRIOV_RESOURCE_PREFIX,
                    "resourceName": f"hostdev_{rails.resource_base(r)}",
                    "selectors": {
                        "vendors": ["15b3"],
                        "pfNames": [r.netdev],
                        "linkTypes": [link_type(fabric)],
                        "isRdma": True,
                    },
                }
                for r in fabric.rails
            ]
        }
        spec["sriovDevicePlugin"] = {
            **_image(ctx, "sriov-network-device-plugin"),
            "config": _json(config),
        }
    ib = fabric.infiniband_settings
    if fabric.type == "infiniband" and ib.pkeyManagement == "ufm":
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


def pool_spec(fabric: Fabric, rail: Rail) -> tuple[str, dict[str, Any]]:
    """(kind, spec) of the rail's nv-ipam pool."""
    exclusions = [_exclusion(text) for text in rail.exclude]
    if fabric.ipam.poolType == "cidrpool":
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
        return "CIDRPool", spec
    spec = {"subnet": str(rail.subnet), "perNodeBlockSize": fabric.ipam.perNodeBlockSize}
    if rail.gateway is not None:
        spec["gateway"] = str(rail.gateway)
    if exclusions:
        spec["exclusions"] = exclusions
    return "IPPool", spec


def _exclusion(text: str) -> dict[str, str]:
    first, _, last = (t.strip() for t in text.partition("-"))
    return {
        "startIP": str(ipaddress.ip_address(first)),
        "endIP": str(ipaddress.ip_address(last or first)),
    }


# ------------------------------------------------------------------------------- CNIs


def cni_config(fabric: Fabric, rail: Rail, tenant: Tenant | None = None) -> dict[str, Any]:
    """The exact CNI configuration a pod's interface on this rail is created with; a
    tenant's own partition or VLAN applies to its per-tenant networks."""
    name = rails.nad_name(rail)
    ipam: dict[str, Any] = {"type": "nv-ipam", "poolName": rails.pool_name(rail)}
    if fabric.ipam.poolType == "cidrpool":
        ipam["poolType"] = "cidrpool"
    mtu = fabric.effective_mtu
    if fabric.rdma in ("shared", "none"):
        if fabric.type == "infiniband":
            return {
                "cniVersion": "0.3.1",
                "name": name,
                "type": "ipoib",
                "master": rail.netdev,
                "mtu": mtu,
                "ipam": ipam,
            }
        return {
            "cniVersion": "0.3.1",
            "name": name,
            "type": "macvlan",
            "master": rail.netdev,
            "mode": "bridge",
            "mtu": mtu,
            "ipam": ipam,
        }
    if fabric.rdma == "hostdevice":
        return {"cniVersion": "0.3.1", "name": name, "type": "host-device", "ipam": ipam}
    if fabric.type == "infiniband":
        ib = fabric.infiniband_settings
        config: dict[str, Any] = {
            "cniVersion": "0.3.1",
            "name": name,
            "type": "ib-sriov",
            "link_state": "enable",
            # ib-sriov moves the VF's RDMA device into the pod itself (no rdma CNI then).
            "rdmaIsolation": True,
            "ipam": ipam,
        }
        pkey = tenant.pkey if tenant is not None and tenant.pkey else ib.pkey
        if pkey is not None:
            config["pkey"] = pkey
        if ib.pkeyManagement == "ufm":
            config["ibKubernetesEnabled"] = True
        return config
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
    model = ctx.model
    fabric = model.fabric
    operator = ctx.components["network-operator"]
    items: list[Item] = [
        system_namespace(ctx.stack, NAMESPACE_ID, Layer.NETWORK, operator.namespace, "privileged")
    ]
    chart_deps = [NAMESPACE_ID]
    if not network_operator_runs_nfd(model):
        chart_deps.append("gpu/gpu-operator")  # NFD (and its labels) come from there
    items.append(
        Item(
            CHART_ID,
            Layer.NETWORK,
            helm_chart(operator, chart_values(ctx)),
            tuple(chart_deps),
            protect=True,
        )
    )
    policy_deps = [CHART_ID]
    ib = fabric.infiniband_settings
    if fabric.type == "infiniband" and ib.pkeyManagement == "ufm" and ib.ufm is not None:
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
        items.append(Item(UFM_SECRET_ID, Layer.NETWORK, K8sObject(secret), (NAMESPACE_ID,)))
        policy_deps.append(UFM_SECRET_ID)  # ib-kubernetes needs it before the policy
    items.append(
        Item(
            POLICY_ID,
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
    if ctx.model.fabric.multus == "network-operator":
        return POLICY_ID
    items.append(
        Item(
            MULTUS_ID,
            Layer.NETWORK,
            upstream_overlay(ctx.components["multus"], "overlays/multus-thick"),
            # It installs the NetworkAttachmentDefinition CRD that holds every rail's network.
            protect=True,
        )
    )
    return MULTUS_ID


def _pools(ctx: PlanContext, items: list[Item], namespace: str) -> dict[str, str]:
    fabric = ctx.model.fabric
    ids: dict[str, str] = {}
    for rail in fabric.rails:
        kind, spec = pool_spec(fabric, rail)
        item_id = f"network/pool/{rail.name}"
        items.append(
            Item(
                item_id,
                Layer.NETWORK,
                _object(ctx, IPAM_API, kind, rails.pool_name(rail), spec, namespace=namespace),
                (POLICY_ID,),  # nv-ipam and its CRDs come with the policy
            )
        )
        ids[rail.name] = item_id
    return ids


def _sriov(ctx: PlanContext, items: list[Item], namespace: str) -> list[str]:
    """SR-IOV node policies (VFs per rail) and the cluster-wide exclusive RDMA mode."""
    model = ctx.model
    fabric = model.fabric
    if not uses_sriov_operator(fabric) or fabric.sriov is None:
        return [POLICY_ID]
    ids: list[str] = []
    for rail in fabric.rails:
        spec: dict[str, Any] = {
            "resourceName": f"sriov_{rails.resource_base(rail)}",
            "nodeSelector": dict(model.gpuNodes.nodeSelector),
            "numVfs": fabric.sriov.numVfs,
            "mtu": fabric.effective_mtu,
            "nicSelector": {"vendor": "15b3", "pfNames": [rail.netdev]},
            "deviceType": "netdevice",
            "isRdma": True,
            "linkType": "ib" if fabric.type == "infiniband" else "eth",
            "priority": 50,
        }
        item_id = f"network/sriov-policy/{rail.name}"
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
                (CHART_ID,),
            )
        )
        ids.append(item_id)
    pool = {
        "nodeSelector": {"matchLabels": dict(model.gpuNodes.nodeSelector)},
        "maxUnavailable": 1,
        # VFs' RDMA devices move into pods: the RDMA subsystem is exclusive on these nodes.
        "rdmaMode": "exclusive",
    }
    items.append(
        Item(
            SRIOV_POOL_ID,
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
            (CHART_ID,),
        )
    )
    return [*ids, SRIOV_POOL_ID]


def _networks(ctx: PlanContext, items: list[Item], deps: list[str], pools: dict[str, str]) -> None:
    model = ctx.model
    fabric = model.fabric
    if fabric.nadScope == "system":
        # Holds only NetworkAttachmentDefinitions: the strictest Pod Security level.
        items.append(
            system_namespace(
                ctx.stack,
                NETWORKS_NAMESPACE_ID,
                Layer.NETWORK,
                fabric.networkNamespace,
                "restricted",
            )
        )
        targets: list[tuple[str, str, Tenant | None]] = [
            (fabric.networkNamespace, NETWORKS_NAMESPACE_ID, None)
        ]
    else:
        targets = [(t.namespace, f"tenants/{t.namespace}/namespace", t) for t in model.tenants]
    for namespace, ns_id, tenant in targets:
        for rail in fabric.rails:
            body = render_object(
                "network/nad.yaml.j2",
                name=rails.nad_name(rail),
                namespace=namespace,
                stack=ctx.stack,
                rail=rail.name,
                resource=rails.resource_name(fabric, rail),
                cni=cni_config(fabric, rail, tenant),
            )
            scope = "" if fabric.nadScope == "system" else f"{namespace}/"
            items.append(
                Item(
                    f"network/nad/{scope}{rail.name}",
                    Layer.NETWORK,
                    K8sObject(body),
                    tuple(dict.fromkeys([ns_id, *deps, pools[rail.name]])),
                )
            )
