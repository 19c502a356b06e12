"""Shared devices: every pod on a node shares the rails' host ports through the RDMA shared
device plugin (macvlan on RoCE, IPoIB on InfiniBand)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from gpufabric.model.config import Fabric
from gpufabric.model.problems import Problem
from gpufabric.nics.base import (
    Image,
    Link,
    NicMode,
    device_plugin_name,
    plugin_config,
    rdma_nccl_env,
)
from gpufabric.plan.facts import PlanContext, RailFacts
from gpufabric.plan.vocabulary import RailCni

RDMA_HCA_MAX = 63
"""Pods sharing one HCA, as in NVIDIA's examples."""


class Shared(NicMode):
    name = "shared"
    has_rdma = True
    resource_prefix = "rdma"
    runbook_fragment = "nic-shared.md.j2"

    def cni(self, link: Link) -> RailCni:
        return link.shared_cni

    def device_plugin_resource(self, rail: str) -> str | None:
        return device_plugin_name(rail)

    def problems(self, fabric: Fabric, link: Link) -> Iterator[Problem]:
        yield from super().problems(fabric, link)
        if fabric.roce is not None and fabric.roce.gidIndex is not None:
            yield Problem(
                "fabric.roce.gidIndex",
                "a fixed GID index breaks with shared devices: every macvlan pod adds its own "
                "GIDs, so the index differs per pod; leave it unset and NCCL >= 2.21 picks the "
                "RoCEv2 GID",
            )

    def pins_hca_names(self, rails: Sequence[RailFacts]) -> bool:
        # Pods see the host's HCAs under their host names.
        return all(r.hca for r in rails)

    def nccl_env(self, rails: Sequence[RailFacts]) -> dict[str, str]:
        env = rdma_nccl_env()
        if self.pins_hca_names(rails):
            env["NCCL_IB_HCA"] = "=" + ",".join(r.hca for r in rails if r.hca)
        return env

    def policy_spec(self, ctx: PlanContext, image: Image) -> dict[str, Any]:
        fabric = ctx.facts.fabric
        config = {
            "configList": [
                {
                    "resourceName": r.device_plugin_resource,
                    "rdmaHcaMax": RDMA_HCA_MAX,
                    "selectors": {"ifNames": [r.netdev], "linkTypes": [fabric.device_link_type]},
                }
                for r in fabric.rails
            ]
        }
        return {
            "rdmaSharedDevicePlugin": {
                **image("k8s-rdma-shared-dev-plugin"),
                "config": plugin_config(config),
            }
        }


MODE = Shared()
