"""The CNI configuration of a rail's network, one builder per CNI plugin.

A rail's plugin is decided by its NIC mode and link (:meth:`NicMode.cni`); this module
only knows what each plugin's configuration holds, and the NicClusterPolicy image a plugin
needs where the Network Operator must install it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gpufabric.plan.facts import FabricFacts, RailFacts, TenantContract

CNI_VERSION = "0.3.1"

Builder = Callable[[FabricFacts, RailFacts, dict[str, Any], TenantContract | None], dict[str, Any]]


def _ipoib(
    fabric: FabricFacts, rail: RailFacts, ipam: dict[str, Any], tenant: TenantContract | None
) -> dict[str, Any]:
    return {
        "cniVersion": CNI_VERSION,
        "name": rail.nad,
        "type": "ipoib",
        "master": rail.netdev,
        "mtu": rail.mtu,
        "ipam": ipam,
    }


def _macvlan(
    fabric: FabricFacts, rail: RailFacts, ipam: dict[str, Any], tenant: TenantContract | None
) -> dict[str, Any]:
    return {
        "cniVersion": CNI_VERSION,
        "name": rail.nad,
        "type": "macvlan",
        "master": rail.netdev,
        "mode": "bridge",
        "mtu": rail.mtu,
        "ipam": ipam,
    }


def _host_device(
    fabric: FabricFacts, rail: RailFacts, ipam: dict[str, Any], tenant: TenantContract | None
) -> dict[str, Any]:
    return {"cniVersion": CNI_VERSION, "name": rail.nad, "type": "host-device", "ipam": ipam}


def _ib_sriov(
    fabric: FabricFacts, rail: RailFacts, ipam: dict[str, Any], tenant: TenantContract | None
) -> dict[str, Any]:
    ib = fabric.infiniband
    config: dict[str, Any] = {
        "cniVersion": CNI_VERSION,
        "name": rail.nad,
        "type": "ib-sriov",
        "link_state": "enable",
        # ib-sriov moves the VF's RDMA device into the pod itself (no rdma CNI then).
        "rdmaIsolation": True,
        "ipam": ipam,
    }
    pkey = tenant.pkey if tenant is not None and tenant.pkey else (ib.pkey if ib else None)
    if pkey is not None:
        config["pkey"] = pkey
    if ib is not None and ib.pkey_management == "ufm":
        config["ibKubernetesEnabled"] = True
    return config


def _sriov(
    fabric: FabricFacts, rail: RailFacts, ipam: dict[str, Any], tenant: TenantContract | None
) -> dict[str, Any]:
    sriov: dict[str, Any] = {"type": "sriov", "link_state": "enable", "ipam": ipam}
    if tenant is not None and tenant.vlan is not None:
        sriov["vlan"] = tenant.vlan
    return {
        "cniVersion": CNI_VERSION,
        "name": rail.nad,
        "plugins": [
            sriov,
            # Moves the VF's RDMA device into the pod network namespace.
            {"type": "rdma"},
        ],
    }


BUILDERS: Mapping[str, Builder] = {
    "ipoib": _ipoib,
    "macvlan": _macvlan,
    "host-device": _host_device,
    "ib-sriov": _ib_sriov,
    "sriov": _sriov,
}
"""Every CNI plugin a rail's network may use, by the name :meth:`NicMode.cni` gives."""

POLICY_PLUGINS: Mapping[str, tuple[str, str]] = {"ipoib": ("ipoib", "ipoib-cni")}
"""Plugins the NicClusterPolicy installs (secondaryNetwork key, image); the others come
with the standard CNI plugins or the SR-IOV operator."""


def cni_config(
    fabric: FabricFacts, rail: RailFacts, tenant: TenantContract | None = None
) -> dict[str, Any]:
    """The exact CNI configuration a pod's interface on this rail is created with; a
    tenant's own partition or VLAN applies to its per-tenant networks."""
    ipam: dict[str, Any] = {"type": "nv-ipam", "poolName": rail.pool}
    if rail.pool_kind == "CIDRPool":
        ipam["poolType"] = "cidrpool"
    if rail.cni not in BUILDERS:
        raise ValueError(f"rail {rail.name}: no CNI configuration for {rail.cni!r}")
    return BUILDERS[rail.cni](fabric, rail, ipam, tenant)


def policy_plugins(fabric: FabricFacts) -> dict[str, str]:
    """secondaryNetwork parts of the NicClusterPolicy the rails' plugins need: key -> image."""
    return dict(POLICY_PLUGINS[r.cni] for r in fabric.rails if r.cni in POLICY_PLUGINS)


__all__ = ["BUILDERS", "cni_config", "policy_plugins"]
