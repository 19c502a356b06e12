"""The two protocols of the NIC room: a fabric's link (InfiniBand or RoCE Ethernet) and the
mode a pod gets its RDMA devices in (shared, SR-IOV VFs, whole host devices, none).

Everything that differs between links or modes is a method or class attribute here, so the
rest of gpufabric asks the stack's link and mode instead of comparing names: validation,
the rails' CNI and device-plugin resources, the NicClusterPolicy and SR-IOV objects, NCCL
variables, the runbook's fragments and which node checks apply.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar

from gpufabric.model.config import Fabric, Tenant
from gpufabric.model.problems import Problem
from gpufabric.plan import ids
from gpufabric.plan.facts import (
    FabricFacts,
    InfinibandFacts,
    PlanContext,
    RailFacts,
    RoceFacts,
)
from gpufabric.plan.items import Item
from gpufabric.plan.vocabulary import DeviceLinkType, LinkLayer, NcclLinkLayer, RailCni

Image = Callable[[str], dict[str, Any]]
"""image name -> the image, repository and version keys of a NicClusterPolicy part."""


class Link(ABC):
    """The fabric's link layer: what differs between InfiniBand and RoCE rails."""

    name: ClassVar[str]
    """The value of ``fabric.type``."""
    title: ClassVar[str]
    """How people name it: InfiniBand, RoCE."""
    sysfs_link_layer: ClassVar[LinkLayer]
    """``/sys/class/infiniband/<hca>/ports/<n>/link_layer`` of its ports."""
    nccl_link_layer: ClassVar[NcclLinkLayer]
    """How NCCL names it in its NET/IB lines."""
    device_link_type: ClassVar[DeviceLinkType]
    """linkTypes of the device plugins' selectors."""
    sriov_link_type: ClassVar[str]
    """linkType of an SriovNetworkNodePolicy."""
    default_mtu: ClassVar[int]
    """MTU of the rails when the stack sets none."""
    mtu_range: ClassVar[tuple[int, int]]
    mtu_hint: ClassVar[str]
    """Why the range is what it is, appended to an out-of-range MTU's problem."""
    other_section: ClassVar[tuple[str, str]]
    """The other link's settings section and the problem when a stack sets it."""
    shared_cni: ClassVar[RailCni]
    """CNI of a rail whose pods share the host port (or have no RDMA device)."""
    vf_cni: ClassVar[RailCni]
    """CNI of a rail whose pods get SR-IOV VFs."""
    tenant_isolation: ClassVar[str]
    """The per-tenant setting that isolates tenants' VFs on this link (tenants[].pkey or
    tenants[].vlan)."""
    node_rail_checks: ClassVar[tuple[str, ...]]
    """Per-rail checks ``verify nodes`` runs on its ports, in order (hca, port, gid, mtu,
    pfc: see gpufabric.verify.nodes.checks)."""
    runbook_fragment: ClassVar[str]
    """Template under manifests/runbooks/ defining :attr:`runbook_macros`."""
    runbook_macros: ClassVar[tuple[str, ...]] = (
        "facts_row",
        "tools",
        "prerequisites",
        "netdev_note",
        "routed_class",
        "leaf_hint",
        "node_checks",
        "triage",
    )
    """Macros every link's fragment defines (empty where nothing applies): the runbook
    calls them and never tests which link the stack has."""

    def tenant_isolation_problems(self, fabric: Fabric, path: str) -> Iterator[Problem]:
        """Problems of a tenant's own isolation value (at ``path``, tenants[i].<attr>) that
        this fabric's settings cannot enforce; the link and the VFs are checked already."""
        return iter(())

    @abstractmethod
    def other_section_set(self, fabric: Fabric) -> bool:
        """The stack sets the other link's section."""

    def problems(self, fabric: Fabric, mode: NicMode) -> Iterator[Problem]:
        """What is wrong with the link's own settings (``fabric.mtu``, its own section,
        rail names) for this mode."""
        low, high = self.mtu_range
        if fabric.mtu is not None and not low <= fabric.mtu <= high:
            yield Problem(
                "fabric.mtu",
                f"{fabric.mtu} is outside {low}-{high} for {self.name}{self.mtu_hint}",
            )
        if self.other_section_set(fabric):
            yield Problem(*self.other_section)

    def roce_facts(self, fabric: Fabric) -> RoceFacts | None:
        """The resolved ``fabric.roce`` section (None: the link has none)."""
        return None

    def pfc_priority(self, fabric: Fabric) -> int | None:
        """The priority RDMA traffic pauses on (None: no lossless Ethernet class)."""
        return None

    def infiniband_facts(
        self, fabric: Fabric, tenants: Sequence[Tenant] = ()
    ) -> InfinibandFacts | None:
        """The resolved ``fabric.infiniband`` section and the partitions ``tenants`` use
        (None: the link has none)."""
        return None

    def port_pkeys(self, facts: FabricFacts) -> tuple[str, ...] | None:
        """Partition keys every rail port must be a full member of, as the port's sysfs pkey
        table shows them (None: the link has no partitions to check)."""
        return None

    def vf_pkeys(self, facts: FabricFacts) -> tuple[tuple[str, ...], str] | None:
        """The partitions the rails' VFs are put in and the rule a VF's pkey table keeps
        (``every`` or ``one``, verify.expect.Expectation.vf_pkey_rule); None: not checked."""
        return None

    def nccl_env(self, facts: FabricFacts) -> dict[str, str]:
        """NCCL variables the link adds when pods have RDMA devices."""
        return {}

    def policy_spec(self, ctx: PlanContext, image: Image) -> dict[str, Any]:
        """Its parts of the NicClusterPolicy spec."""
        return {}

    def items(self, ctx: PlanContext) -> list[Item]:
        """Objects the network layer adds for this link before the NicClusterPolicy."""
        return []


def rail_name_problems(
    fabric: Fabric, unlike: Callable[[str], bool], message: str
) -> Iterator[Problem]:
    """A warning for each rail whose netdev name does not look like the link's ports."""
    for i, rail in enumerate(fabric.rails):
        if unlike(rail.netdev):
            yield Problem(
                f"fabric.rails[{i}].netdev", message.format(netdev=rail.netdev), warning=True
            )


class NicMode(ABC):
    """How a pod gets the rails' RDMA devices (``fabric.rdma``)."""

    name: ClassVar[str]
    """The value of ``fabric.rdma`` and the module's name."""
    has_rdma: ClassVar[bool]
    """Pods get RDMA devices (NCCL's IB transport); False: NCCL runs over sockets."""
    resource_prefix: ClassVar[str | None]
    """Prefix of the extended resource a pod requests per rail (None: no device)."""
    virtual_functions: ClassVar[bool] = False
    """Pods get SR-IOV VFs, which carry a tenant's own partition key or VLAN and need the
    subnet manager's virtualization on InfiniBand."""
    sriov_operator: ClassVar[bool] = False
    """It needs the Network Operator's SR-IOV operator."""
    summary_note: ClassVar[str] = ""
    """Appended to the mode's name in ``gpufabric stacks``."""
    version_features: ClassVar[tuple[str, ...]] = ()
    """Features it adds to what manifests/versions.yaml rules match on."""
    runbook_fragment: ClassVar[str]
    """Template under manifests/runbooks/ defining :attr:`runbook_macros`."""
    runbook_macros: ClassVar[tuple[str, ...]] = (
        "pod_devices",
        "network_ready",
        "rollback_changes",
        "rollback_effects",
        "triage",
        "hca_note",
    )
    """Macros every mode's fragment defines (empty where nothing applies)."""

    @abstractmethod
    def cni(self, link: Link) -> RailCni:
        """The CNI plugin of every rail's network."""

    def device_plugin_resource(self, rail: str) -> str | None:
        """The device plugin's resourceName for a rail (None: no device plugin)."""
        return None

    def problems(self, fabric: Fabric, link: Link) -> Iterator[Problem]:
        """What is wrong with the mode's settings."""
        if fabric.sriov is not None:
            yield Problem(
                "fabric.sriov",
                f"applies to rdma: sriov or hostdevice, but fabric.rdma is {fabric.rdma}",
            )

    def pins_hca_names(self, rails: Sequence[RailFacts]) -> bool:
        """Pods see the rails' HCAs under their host names (NCCL_IB_HCA may name them)."""
        return False

    def nccl_env(self, rails: Sequence[RailFacts]) -> dict[str, str]:
        """NCCL variables of the mode (transport, bootstrap, device names)."""
        return {}

    def policy_spec(self, ctx: PlanContext, image: Image) -> dict[str, Any]:
        """Its parts of the NicClusterPolicy spec (device plugins)."""
        return {}

    def items(self, ctx: PlanContext, namespace: str) -> tuple[list[Item], list[str]]:
        """Objects the mode adds to the network layer and the ids rails' networks wait
        for (default: the NicClusterPolicy, whose device plugins serve the devices)."""
        return [], [ids.NIC_POLICY]


BOOTSTRAP_INTERFACE = "eth0"


def rdma_nccl_env() -> dict[str, str]:
    """Out-of-band bootstrap over the cluster network; data goes over the RDMA devices."""
    return {"NCCL_SOCKET_IFNAME": f"={BOOTSTRAP_INTERFACE}", "NCCL_IB_DISABLE": "0"}


def plugin_config(config: Any) -> str:
    """A device plugin's configuration as the NicClusterPolicy carries it: compact JSON."""
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


def device_plugin_name(rail: str) -> str:
    """A rail's name as device-plugin resource names allow it (letters, digits, '_')."""
    return rail.replace("-", "_")


__all__ = [
    "BOOTSTRAP_INTERFACE",
    "Image",
    "Link",
    "NicMode",
    "device_plugin_name",
    "plugin_config",
    "rail_name_problems",
    "rdma_nccl_env",
]
