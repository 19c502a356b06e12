"""Names derived from a rail, shared by every layer that refers to it.

One place decides what a rail's NetworkAttachmentDefinition, IP pool, pod interface and
device-plugin resource are called, so the network objects, the tenant wiring and the job
manifests can never disagree.
"""

from __future__ import annotations

import json

from gpufabric.config import Fabric, Rail

SHARED_RESOURCE_PREFIX = "rdma"
SRIOV_RESOURCE_PREFIX = "nvidia.com"


def nad_name(rail: Rail) -> str:
    return rail.name


def pool_name(rail: Rail) -> str:
    return f"{rail.name}-pool"


def interface(rail: Rail) -> str:
    """The stable interface name the rail gets inside a pod (<= 15 characters)."""
    return rail.name


def resource_base(rail: Rail) -> str:
    """The rail's part of device-plugin resource names (they allow letters, digits, '_')."""
    return rail.name.replace("-", "_")


def resource_name(fabric: Fabric, rail: Rail) -> str | None:
    """The extended resource a pod requests to get this rail's RDMA device, if any."""
    base = resource_base(rail)
    if fabric.rdma == "shared":
        return f"{SHARED_RESOURCE_PREFIX}/{base}"
    if fabric.rdma == "sriov":
        return f"{SRIOV_RESOURCE_PREFIX}/sriov_{base}"
    if fabric.rdma == "hostdevice":
        return f"{SRIOV_RESOURCE_PREFIX}/hostdev_{base}"
    return None


def nad_namespace(fabric: Fabric, tenant_namespace: str) -> str:
    return tenant_namespace if fabric.nadScope == "tenant" else fabric.networkNamespace


def networks_annotation(fabric: Fabric, tenant_namespace: str) -> str:
    """Value of k8s.v1.cni.cncf.io/networks attaching every rail with a stable name."""
    ns = nad_namespace(fabric, tenant_namespace)
    entries = [
        {"name": nad_name(r), "namespace": ns, "interface": interface(r)} for r in fabric.rails
    ]
    return json.dumps(entries, separators=(",", ":"))


def rdma_resources(fabric: Fabric) -> dict[str, int]:
    """Resources (and counts) one pod requests: one device per rail."""
    out: dict[str, int] = {}
    for rail in fabric.rails:
        name = resource_name(fabric, rail)
        if name is not None:
            out[name] = out.get(name, 0) + 1
    return dict(sorted(out.items()))
