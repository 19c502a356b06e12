"""No RDMA devices: secondary networks only, NCCL over sockets (development clusters)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from gpufabric.model.config import Fabric
from gpufabric.model.problems import Problem
from gpufabric.nics.base import Link, NicMode
from gpufabric.plan.facts import RailFacts
from gpufabric.plan.vocabulary import RailCni


class NoRdma(NicMode):
    name = "none"
    has_rdma = False
    resource_prefix = None
    runbook_fragment = "nic-none.md.j2"

    def cni(self, link: Link) -> RailCni:
        return link.shared_cni

    def problems(self, fabric: Fabric, link: Link) -> Iterator[Problem]:
        if link.name != "roce":
            yield Problem(
                "fabric.rdma",
                "'none' (secondary networks without RDMA devices, for development) needs "
                "fabric.type: roce (Ethernet rails)",
            )
        if fabric.gpuDirect == "peermem":
            yield Problem(
                "fabric.gpuDirect", "'peermem' needs RDMA devices, but fabric.rdma is none"
            )
        yield from super().problems(fabric, link)

    def nccl_env(self, rails: Sequence[RailFacts]) -> dict[str, str]:
        # NCCL's socket transport carries data over the rail interfaces.
        return {
            "NCCL_IB_DISABLE": "1",
            "NCCL_SOCKET_IFNAME": "=" + ",".join(r.pod_interface for r in rails),
        }


MODE = NoRdma()
