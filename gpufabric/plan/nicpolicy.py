"""The NIC policies' shared parts: the Network Operator's policy images, the NIC driver
section, and which pools of a fleet get a NicNodePolicy (Network Operator >= 26.4). The network
layer renders them; the GPU layer waits for the policies that install the NIC driver. Neither
builder imports the other: both read this module.
"""

from __future__ import annotations

import json
from typing import Any

from msgspec.structs import replace

from gpufabric import nics
from gpufabric.model.versions import NIC_POLICY_IMAGE_REPOSITORY
from gpufabric.plan import ids, tolerations
from gpufabric.plan.facts import PlanContext

COMPONENT = "network-operator"


def image(ctx: PlanContext, name: str) -> dict[str, Any]:
    component = ctx.components[COMPONENT]
    version = component.version.lstrip("v")
    spec: dict[str, Any] = {
        "image": name,
        "repository": component.mirrors.image(NIC_POLICY_IMAGE_REPOSITORY),
        "version": f"network-operator-v{version}",
    }
    if component.mirrors.pull_secrets:
        spec["imagePullSecrets"] = list(component.mirrors.pull_secrets)
    return spec


def pool_contexts(ctx: PlanContext) -> tuple[PlanContext, ...]:
    """The context of each pool, its facts narrowed to the pool; a one-pool stack's own."""
    if not ctx.facts.fleet:
        return (ctx,)
    return tuple(replace(ctx, facts=ctx.facts.for_pool(name)) for name in ctx.facts.pool_names)


NODE_SECTIONS = ("ofedDriver", "rdmaSharedDevicePlugin", "sriovDevicePlugin")
"""The NicClusterPolicy sections a NicNodePolicy may carry instead (Network Operator >= 26.4);
one section is in the NicClusterPolicy or in NicNodePolicies, never both (its webhook)."""


def node_parts(ctx: PlanContext) -> dict[str, Any]:
    """One pool's per-node sections: its NIC driver (operator-managed) and device plugins."""
    facts = ctx.facts.fabric
    parts: dict[str, Any] = {}
    if facts.nic_driver == "operator":
        parts["ofedDriver"] = ofed_driver(ctx)
    parts.update(nics.mode(facts.rdma).policy_spec(ctx, lambda name: image(ctx, name)))
    return parts


def nic_node_policies(ctx: PlanContext) -> dict[str, dict[str, Any]]:
    """Pool name -> the spec of its NicNodePolicy; empty when the NicClusterPolicy carries
    the per-node sections (one pool, or pools whose per-node sections are all the same).
    A pool with no per-node section (no device plugin, the hosts' NIC driver) gets none."""
    if not ctx.facts.fleet:
        return {}
    parts = {c.facts.pool: (c, node_parts(c)) for c in pool_contexts(ctx)}
    if len({json.dumps(p, sort_keys=True) for _, p in parts.values()}) == 1:
        return {}
    specs: dict[str, dict[str, Any]] = {}
    for name, (pool_ctx, sections) in parts.items():
        if not sections:
            continue
        spec: dict[str, Any] = {"nodeSelector": dict(pool_ctx.facts.nodes.selector), **sections}
        if taints := tolerations.nic_node_policy(pool_ctx):
            spec["tolerations"] = taints
        specs[name] = spec
    return specs


def node_policy_ids(ctx: PlanContext, driver_only: bool = False) -> tuple[str, ...]:
    """Ids of the fleet's NicNodePolicy items (``driver_only``: those that install the NIC
    driver), in pool order."""
    return tuple(
        ids.nic_node_policy(name)
        for name, spec in nic_node_policies(ctx).items()
        if not driver_only or "ofedDriver" in spec
    )


def ofed_driver(ctx: PlanContext) -> dict[str, Any]:
    doca = ctx.components["doca-driver"]
    repository, _, image = (doca.image_ref or "").rpartition("/")
    secrets = (
        {"imagePullSecrets": list(doca.mirrors.pull_secrets)} if doca.mirrors.pull_secrets else {}
    )
    return {
        "image": image,
        "repository": repository,
        "version": doca.version,
        **secrets,
        # Driver upgrades reload mlx5 on every node: one node at a time, drained first.
        "upgradePolicy": {
            "autoUpgrade": True,
            "maxParallelUpgrades": 1,
            "drain": {
                "enable": True,
                "force": True,
                "deleteEmptyDir": True,
                "timeoutSeconds": 300,
            },
        },
    }
