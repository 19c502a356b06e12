"""InfiniBand rails: IPoIB netdevs, partition keys, the subnet manager, UFM."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from gpufabric import nics
from gpufabric.model.config import Fabric, Tenant
from gpufabric.model.problems import Problem
from gpufabric.nics.base import Image, Link, NicMode, rail_name_problems
from gpufabric.plan import ids
from gpufabric.plan.facts import FabricFacts, InfinibandFacts, Partition, PlanContext
from gpufabric.plan.items import Item, K8sObject, Layer, SecretRef
from gpufabric.support.templates import render_object

MAX_VFS = 16
"""VFs per physical function an InfiniBand port supports."""
UFM_SECRET_NAME = "ib-kubernetes-ufm-secret"
DEFAULT_PKEY = "0xffff"
"""The default partition (0x7fff) with full membership, as a port's pkey table shows it."""


class InfinibandLink(Link):
    name = "infiniband"
    title = "InfiniBand"
    sysfs_link_layer = "InfiniBand"
    nccl_link_layer = "IB"
    device_link_type = "infiniband"
    sriov_link_type = "ib"
    default_mtu = 4092  # IPoIB's datagram maximum
    mtu_range = (2044, 4092)
    mtu_hint = (
        " (enhanced IPoIB on ConnectX runs datagram mode only: 4092 with a 4K IB MTU, 2044 with 2K)"
    )
    shared_cni = "ipoib"
    vf_cni = "ib-sriov"
    tenant_isolation = "pkey"
    other_section = (
        "fabric.roce",
        "RoCE options are set but fabric.type is infiniband; remove them",
    )
    node_rail_checks = ("hca", "port", "mtu", "pkeys", "vfpkeys")
    runbook_fragment = "link-infiniband.md.j2"

    def other_section_set(self, fabric: Fabric) -> bool:
        return fabric.roce is not None

    def problems(self, fabric: Fabric, mode: NicMode) -> Iterator[Problem]:
        yield from super().problems(fabric, mode)
        if fabric.sriov is not None and fabric.sriov.numVfs > MAX_VFS:
            yield Problem(
                "fabric.sriov.numVfs",
                f"{fabric.sriov.numVfs} is more than {MAX_VFS} VFs per PF, the limit on InfiniBand",
            )
        yield from rail_name_problems(
            fabric,
            lambda netdev: not netdev.startswith("ib"),
            "{netdev!r} does not look like an IPoIB interface (ib*, e.g. ibp24s0) on an "
            "infiniband fabric; check the port's link type",
        )
        yield from _section_problems(fabric, mode)

    def tenant_isolation_problems(self, fabric: Fabric, path: str) -> Iterator[Problem]:
        """A tenant's own partition holds only when the subnet manager puts that tenant's VFs,
        and no other tenant's, in it. The ib-sriov CNI does not apply a network's pkey (only
        ib-kubernetes reads it); with static management the VFs' GUIDs are set on the hosts
        and partitions.conf can only reach them through ALL, which makes every VF a member
        of every tenant's partition."""
        ib = fabric.infiniband
        if ib is None or ib.pkeyManagement != "ufm":
            yield Problem(
                path,
                "a tenant's own partition needs fabric.infiniband.pkeyManagement: ufm "
                "(ib-kubernetes adds each pod's VF GUID to the tenant's key through UFM); "
                "with static management every VF is a member of every partition "
                "(partitions.conf reaches VFs only through ALL) and the ib-sriov CNI does not "
                "apply a network's pkey. Set pkeyManagement: ufm with fabric.infiniband.ufm "
                "and fabric.infiniband.pkey, or remove the tenant's pkey so the tenants share "
                "fabric.infiniband.pkey",
            )

    def infiniband_facts(self, fabric: Fabric, tenants: Sequence[Tenant] = ()) -> InfinibandFacts:
        ib = fabric.infiniband
        return InfinibandFacts(
            pkey=ib.pkey if ib else None,
            pkey_management=ib.pkeyManagement if ib else "static",
            ufm=ib.ufm if ib and ib.pkeyManagement == "ufm" else None,
            partitions=partitions(fabric, tenants),
        )

    def port_pkeys(self, facts: FabricFacts) -> tuple[str, ...] | None:
        """With UFM the partitions hold only the pods' VF GUIDs, not the hosts' ports."""
        ib = facts.infiniband
        if ib is None or not ib.partitions or ib.pkey_management == "ufm":
            return None
        return tuple(p.full_member for p in ib.partitions)

    def vf_pkeys(self, facts: FabricFacts) -> tuple[tuple[str, ...], str] | None:
        ib = facts.infiniband
        if ib is None or not ib.partitions:
            return None
        keys = tuple(p.full_member for p in ib.partitions)
        return keys, ("one" if ib.pkey_management == "ufm" else "every")

    def policy_spec(self, ctx: PlanContext, image: Image) -> dict[str, Any]:
        if _ufm(ctx) is None:
            return {}
        return {
            "ibKubernetes": {
                **image("ib-kubernetes"),
                "periodicUpdateSeconds": 5,
                "pKeyGUIDPoolRangeStart": "02:00:00:00:00:00:00:00",
                "pKeyGUIDPoolRangeEnd": "02:FF:FF:FF:FF:FF:FF:FF",
                "ufmSecret": UFM_SECRET_NAME,
            }
        }

    def items(self, ctx: PlanContext) -> list[Item]:
        """The UFM credentials ib-kubernetes reads (before the NicClusterPolicy)."""
        ufm = _ufm(ctx)
        if ufm is None:
            return []
        secret = render_object(
            "network/ufm-secret.yaml.j2",
            name=UFM_SECRET_NAME,
            namespace=ctx.components["network-operator"].namespace,
            stack=ctx.stack,
            ufm=ufm,
        )
        secret["stringData"]["UFM_PASSWORD"] = SecretRef(
            "fabric.infiniband.ufm.password", ufm.password
        )
        return [
            Item(
                id=ids.UFM_SECRET,
                layer=Layer.NETWORK,
                payload=K8sObject(secret),
                depends_on=(ids.NETWORK_NAMESPACE,),
            )
        ]


def partitions(fabric: Fabric, tenants: Sequence[Tenant]) -> tuple[Partition, ...]:
    """Every partition the rails' networks put pods in, in order of the key: the ib-sriov
    networks carry the tenant's own pkey (nadScope: tenant), else fabric.infiniband.pkey,
    else none (the default partition). Shared IPoIB devices carry none: their partition is
    the rail netdev's own (ibp24s0.8001)."""
    if not nics.mode(fabric.rdma).virtual_functions:
        return ()
    ib = fabric.infiniband
    shared = ib.pkey if ib is not None and ib.pkey else DEFAULT_PKEY
    users: dict[str, list[str]] = {}
    for tenant in tenants:
        own = tenant.pkey if fabric.nadScope == "tenant" and tenant.pkey else None
        users.setdefault(own or shared, []).append(tenant.namespace)
    if not users:
        users[shared] = []
    return tuple(
        Partition(name=_partition_name(key, names, shared), pkey=key, tenants=tuple(names))
        for key, names in sorted(users.items(), key=lambda kv: int(kv[0], 16) & 0x7FFF)
    )


def _partition_name(key: str, tenants: Sequence[str], shared: str) -> str:
    """OpenSM's name for it: Default, gpufabric (the stack's key), or gpufabric_<tenant> for
    a tenant's own key (names are logged by the subnet manager; letters, digits and _)."""
    if key == DEFAULT_PKEY:
        return "Default"
    if key != shared and len(tenants) == 1:
        return "gpufabric_" + tenants[0].replace("-", "_")
    return "gpufabric"


def _ufm(ctx: PlanContext) -> Any:
    ib = ctx.facts.fabric.infiniband
    return ib.ufm if ib is not None else None


def _section_problems(f: Fabric, mode: NicMode) -> Iterator[Problem]:
    ib = f.infiniband
    if ib is None:
        return
    vfs = mode.virtual_functions
    if ib.pkey is not None and not vfs:
        yield Problem(
            "fabric.infiniband.pkey",
            f"a pkey is carried by SR-IOV VFs (rdma: sriov), but fabric.rdma is {f.rdma}; with "
            "shared devices use the pkey child interface (e.g. ibp24s0.8001) as the rail netdev",
        )
    if ib.pkeyManagement == "ufm":
        if not vfs:
            yield Problem(
                "fabric.infiniband.pkeyManagement",
                f"'ufm' needs rdma: sriov (ib-kubernetes adds VF GUIDs to the pkey), "
                f"but fabric.rdma is {f.rdma}",
            )
        if ib.ufm is None:
            yield Problem(
                "fabric.infiniband.ufm",
                "required with pkeyManagement: ufm (address, username, password)",
            )
        if ib.pkey is None:
            yield Problem(
                "fabric.infiniband.pkey", "required with pkeyManagement: ufm (e.g. '0x8001')"
            )
    elif ib.ufm is not None:
        yield Problem(
            "fabric.infiniband.ufm", "set, but pkeyManagement is static; set pkeyManagement: ufm"
        )


LINK = InfinibandLink()
