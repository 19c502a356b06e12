"""NCCL settings a fabric needs, computed from the stack instead of copied between jobs.

Sources for each choice are in the reference notes on NCCL (jobs.md section 6): bootstrap
over the pod's primary interface, an exact HCA list when the stack names HCAs, the lossless
traffic class on RoCE, and NCCL_IB_GID_INDEX only when the stack sets it.
"""

from __future__ import annotations

from gpufabric import rails
from gpufabric.config import Fabric

BOOTSTRAP_INTERFACE = "eth0"


def nccl_env(fabric: Fabric) -> dict[str, str]:
    """Environment variables every training pod of this fabric gets (sorted by name)."""
    env: dict[str, str] = {}
    if fabric.rdma == "none":
        # No RDMA devices: NCCL's socket transport carries data over the rail interfaces.
        env["NCCL_IB_DISABLE"] = "1"
        env["NCCL_SOCKET_IFNAME"] = "=" + ",".join(rails.interface(r) for r in fabric.rails)
    else:
        # Out-of-band bootstrap over the cluster network; data goes over the RDMA devices.
        env["NCCL_SOCKET_IFNAME"] = f"={BOOTSTRAP_INTERFACE}"
        env["NCCL_IB_DISABLE"] = "0"
        hcas = [r.hca for r in fabric.rails]
        # With shared devices a pod sees the host's HCAs under their host names; VFs and
        # host devices get other names inside the pod, so only pin names in shared mode.
        if fabric.rdma == "shared" and all(hcas):
            env["NCCL_IB_HCA"] = "=" + ",".join(h for h in hcas if h)
    if fabric.type == "roce" and fabric.rdma != "none":
        roce = fabric.roce_settings
        env["NCCL_IB_TC"] = str(roce.effective_traffic_class)
        if roce.qpsPerConnection is not None:
            env["NCCL_IB_QPS_PER_CONNECTION"] = str(roce.qpsPerConnection)
        if roce.gidIndex is not None:
            env["NCCL_IB_GID_INDEX"] = str(roce.gidIndex)
    env.update(fabric.ncclEnv)
    return dict(sorted(env.items()))
