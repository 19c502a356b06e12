"""Whole host devices: each pod gets a rail's whole NIC (PF) through the SR-IOV network
device plugin with isRdma, moved into the pod by the host-device CNI."""

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

RESOURCE_PREFIX = "nvidia.com"


class HostDevice(NicMode):
    name = "hostdevice"
    has_rdma = True
    resource_prefix = RESOURCE_PREFIX
    runbook_fragment = "nic-hostdevice.md.j2"

    def cni(self, link: Link) -> RailCni:
        return "host-device"

    def device_plugin_resource(self, rail: str) -> str | None:
        return f"hostdev_{device_plugin_name(rail)}"

    def problems(self, fabric: Fabric, link: Link) -> Iterator[Problem]:
        # fabric.sriov (numVfs) may be set: the PFs keep their VFs, pods take the PF.
        return iter(())

    def pins_hca_names(self, rails: Sequence[RailFacts]) -> bool:
        # A whole device keeps its host name in the pod (RDMA device names do not change
        # when the device moves into the pod's network namespace).
        return all(r.hca for r in rails)

    def nccl_env(self, rails: Sequence[RailFacts]) -> dict[str, str]:
        env = rdma_nccl_env()
        if self.pins_hca_names(rails):
            env["NCCL_IB_HCA"] = "=" + ",".join(r.hca for r in rails if r.hca)
        return env

    def policy_spec(self, ctx: PlanContext, image: Image) -> dict[str, Any]:
        fabric = ctx.facts.fabric
        config = {
            "resourceList": [
                {
                    "resourcePrefix": RESOURCE_PREFIX,
                    "resourceName": r.device_plugin_resource,
                    "selectors": {
                        "vendors": ["15b3"],  # Mellanox/NVIDIA NICs
                        "pfNames": [r.netdev],
                        "linkTypes": [fabric.device_link_type],
                        "isRdma": True,
                    },
                }
                for r in fabric.rails
            ]
        }
        return {
            "sriovDevicePlugin": {
                **image("sriov-network-device-plugin"),
                "config": plugin_config(config),
            }
        }


MODE = HostDevice()
