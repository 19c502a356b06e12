"""SR-IOV virtual functions: each pod gets one VF per rail from the SR-IOV operator, with
its RDMA device moved into the pod (exclusive RDMA mode); VFs carry a tenant's own
partition key (InfiniBand) or VLAN (RoCE)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from gpufabric import nics
from gpufabric.model.config import Fabric
from gpufabric.model.problems import Problem
from gpufabric.nics.base import Link, NicMode, device_plugin_name, rdma_nccl_env
from gpufabric.plan import ids
from gpufabric.plan.facts import PlanContext, RailFacts
from gpufabric.plan.items import Item, Layer, spec_object
from gpufabric.plan.vocabulary import RailCni

RESOURCE_PREFIX = "nvidia.com"
SRIOV_API = "sriovnetwork.openshift.io/v1"
DISRUPTIVE = "gpufabric.io/disruptive"
"""Annotation ``gpufabric diff`` reads: what applying a change to the object does to nodes."""


class SriovMode(NicMode):
    name = "sriov"
    has_rdma = True
    resource_prefix = RESOURCE_PREFIX
    sriov_operator = True
    virtual_functions = True
    version_features = ("sriov",)
    summary_note = " (the Network Operator's own SR-IOV operator)"
    runbook_fragment = "nic-sriov.md.j2"

    def cni(self, link: Link) -> RailCni:
        return link.vf_cni

    def device_plugin_resource(self, rail: str) -> str | None:
        return f"sriov_{device_plugin_name(rail)}"

    def problems(self, fabric: Fabric, link: Link) -> Iterator[Problem]:
        if fabric.sriov is None:
            yield Problem(
                "fabric.sriov", "required with rdma: sriov (at least numVfs per physical function)"
            )

    def nccl_env(self, rails: Sequence[RailFacts]) -> dict[str, str]:
        # Inside the pod a VF has another name than on the host: no NCCL_IB_HCA.
        return rdma_nccl_env()

    def items(self, ctx: PlanContext, namespace: str) -> tuple[list[Item], list[str]]:
        """SR-IOV node policies (VFs per rail) and the cluster-wide exclusive RDMA mode."""
        if ctx.facts.fabric.sriov_vfs is None:
            return [], [ids.NIC_POLICY]
        items = [_policy(ctx, rail, namespace) for rail in ctx.facts.fabric.rails]
        items.append(_pool_config(ctx, namespace))
        return items, [it.id for it in items]


def _policy(ctx: PlanContext, rail: RailFacts, namespace: str) -> Item:
    """The rail's VFs on the pool's nodes; in a fleet one per pool and rail (a rail two
    pools share gets a policy for each pool's nodes, with the one resource name)."""
    facts = ctx.facts.fabric
    pool = ctx.facts.pool if ctx.facts.fleet else None
    spec: dict[str, Any] = {
        "resourceName": rail.device_plugin_resource,
        "nodeSelector": dict(ctx.facts.nodes.selector),
        "numVfs": facts.sriov_vfs,
        "mtu": rail.mtu,
        "nicSelector": {"vendor": "15b3", "pfNames": [rail.netdev]},
        "deviceType": "netdevice",
        "isRdma": True,
        "linkType": nics.link(facts.type).sriov_link_type,
        "priority": 50,
    }
    body = spec_object(
        ctx.stack,
        SRIOV_API,
        "SriovNetworkNodePolicy",
        f"{rail.name}-vfs" if pool is None else f"{pool}-{rail.name}-vfs",
        spec,
        namespace,
        {DISRUPTIVE: "creating or changing VFs drains and may reboot GPU nodes"},
    )
    return Item(
        id=ids.sriov_policy(rail.name, pool),
        layer=Layer.NETWORK,
        payload=body,
        depends_on=(ids.NETWORK_OPERATOR,),
        rail=rail.name,
    )


def _pool_config(ctx: PlanContext, namespace: str) -> Item:
    """Exclusive RDMA on the pool's nodes (in a fleet, one per SR-IOV pool)."""
    fleet = ctx.facts.fleet
    pool = {
        "nodeSelector": {"matchLabels": dict(ctx.facts.nodes.selector)},
        "maxUnavailable": 1,
        # VFs' RDMA devices move into pods: the RDMA subsystem is exclusive on these nodes.
        "rdmaMode": "exclusive",
    }
    body = spec_object(
        ctx.stack,
        SRIOV_API,
        "SriovNetworkPoolConfig",
        f"{ctx.facts.pool}-rdma-exclusive" if fleet else "gpu-nodes-rdma-exclusive",
        pool,
        namespace,
        {DISRUPTIVE: "switching the RDMA subsystem to exclusive reboots GPU nodes"},
    )
    return Item(
        id=ids.sriov_pool_config(ctx.facts.pool) if fleet else ids.SRIOV_POOL,
        layer=Layer.NETWORK,
        payload=body,
        depends_on=(ids.NETWORK_OPERATOR,),
    )


MODE = SriovMode()
