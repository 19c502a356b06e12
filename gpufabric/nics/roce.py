"""RoCE rails: Ethernet netdevs on a lossless class (DSCP, PFC, ECN) that must match the
switches."""

from __future__ import annotations

from collections.abc import Iterator

from gpufabric.model.config import Fabric, Roce
from gpufabric.model.problems import Problem
from gpufabric.nics.base import BOOTSTRAP_INTERFACE, Link, NicMode, rail_name_problems
from gpufabric.plan.facts import FabricFacts, RoceFacts

FULL_PATH_MTU = 4200
"""The netdev MTU that still gives RDMA a 4096-byte path MTU."""
DSCP_TO_TRAFFIC_CLASS = 4
"""NCCL_IB_TC carries the DSCP in its upper six bits."""


class RoceLink(Link):
    name = "roce"
    title = "RoCE"
    sysfs_link_layer = "Ethernet"
    nccl_link_layer = "RoCE"
    device_link_type = "ether"
    sriov_link_type = "eth"
    default_mtu = 9000  # jumbo frames
    mtu_range = (1500, 9216)
    mtu_hint = " (jumbo frames: 9000 end to end, switches included)"
    shared_cni = "macvlan"
    vf_cni = "sriov"
    tenant_isolation = "vlan"
    other_section = (
        "fabric.infiniband",
        "InfiniBand options are set but fabric.type is roce; remove them",
    )
    node_rail_checks = ("hca", "port", "gid", "mtu", "pfc")
    runbook_fragment = "link-roce.md.j2"

    def other_section_set(self, fabric: Fabric) -> bool:
        return fabric.infiniband is not None

    def _macvlan_mtu(self, fabric: Fabric, mode: NicMode) -> Iterator[Problem]:
        """An unset MTU is the jumbo default, and a macvlan cannot be larger than its parent:
        warned for each macvlan rail likely over the node's primary interface (every rail
        without RDMA, and a rail on the pods' own primary name)."""
        if fabric.mtu is not None or mode.cni(self) != self.shared_cni:
            return
        for i, rail in enumerate(fabric.rails):
            if mode.has_rdma and rail.netdev != BOOTSTRAP_INTERFACE:
                continue
            yield Problem(
                f"fabric.rails[{i}].netdev",
                f"rail {rail.name} is a macvlan over {rail.netdev} and gets MTU "
                f"{self.default_mtu} (fabric.mtu is unset); a macvlan cannot be larger than "
                "its parent, and a node's primary interface usually runs 1500, so pods on "
                "this rail would fail to attach or drop large frames: set fabric.mtu to the "
                f"MTU of {rail.netdev} on the nodes (e.g. 1500)",
                warning=True,
            )

    def problems(self, fabric: Fabric, mode: NicMode) -> Iterator[Problem]:
        yield from super().problems(fabric, mode)
        # Unset, the MTU is the fabric's jumbo default; only a configured one can be too small.
        if mode.has_rdma and fabric.mtu is not None and fabric.mtu < FULL_PATH_MTU:
            yield Problem(
                "fabric.mtu",
                f"{fabric.mtu} caps the RDMA path MTU at 2048 or less; RoCE fabrics run "
                "jumbo frames (9000 end to end) for full bandwidth",
                warning=True,
            )
        yield from self._macvlan_mtu(fabric, mode)
        yield from rail_name_problems(
            fabric,
            lambda netdev: netdev.startswith("ib"),
            "{netdev!r} looks like an IPoIB interface on a roce fabric; RoCE rails are "
            "Ethernet netdevs (e.g. ens1f0np0)",
        )
        r = fabric.roce
        if (
            r is not None
            and r.trafficClass is not None
            and "dscp" in r.model_fields_set
            and r.trafficClass >> 2 != r.dscp
        ):
            yield Problem(
                "fabric.roce.trafficClass",
                f"{r.trafficClass} marks DSCP {r.trafficClass >> 2}, but fabric.roce.dscp is "
                f"{r.dscp}; set one of them (trafficClass defaults to dscp x 4 = {r.dscp * 4})",
            )

    def pfc_priority(self, fabric: Fabric) -> int | None:
        return self.roce_facts(fabric).pfc_priority

    def roce_facts(self, fabric: Fabric) -> RoceFacts:
        roce = fabric.roce or Roce()
        pfc = ["0"] * 8
        pfc[roce.pfcPriority] = "1"
        return RoceFacts(
            dscp=roce.dscp,
            traffic_class=roce.trafficClass
            if roce.trafficClass is not None
            else roce.dscp * DSCP_TO_TRAFFIC_CLASS,
            pfc_priority=roce.pfcPriority,
            qps_per_connection=roce.qpsPerConnection,
            gid_index=roce.gidIndex,
            pfc_vector=",".join(pfc),
        )

    def nccl_env(self, facts: FabricFacts) -> dict[str, str]:
        """The lossless traffic class (and the stack's QP and GID choices) on RDMA traffic."""
        roce = facts.roce
        if roce is None:
            return {}
        env = {"NCCL_IB_TC": str(roce.traffic_class)}
        if roce.qps_per_connection is not None:
            env["NCCL_IB_QPS_PER_CONNECTION"] = str(roce.qps_per_connection)
        if roce.gid_index is not None:
            env["NCCL_IB_GID_INDEX"] = str(roce.gid_index)
        return env


LINK = RoceLink()
