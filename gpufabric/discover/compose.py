"""The whole snapshot into a stack: the cluster section, the pools and their fabric
(:mod:`.infer_fabric`), scheduling, training and tenants (:mod:`.infer_tenants`)."""

from __future__ import annotations

from typing import Any

from gpufabric import nics
from gpufabric.discover import (
    clusterpolicy,
    infer_fabric,
    infer_handmade,
    infer_links,
    infer_ncclenv,
    infer_sources,
    infer_storage,
    infer_tenants,
    infer_tolerations,
    infer_topology,
    infer_ufm,
)
from gpufabric.discover.infer import Context, Notes, stack_name
from gpufabric.discover.pools import group
from gpufabric.discover.roundtrip import ident, managed
from gpufabric.discover.snapshot import Snapshot
from gpufabric.model.config import Fabric


def infer(
    snap: Snapshot, fallback: str, context: str | None = None, cluster_name: str | None = None
) -> tuple[str, dict[str, Any], Notes]:
    """(stack name, config mapping, notes) of the cluster; ``context``: the kubeconfig
    context it was read through (``--context``), which the stack's provider must use too;
    ``cluster_name``: ``--cluster-name``."""
    name = stack_name(snap, fallback)
    ctx = Context(snap, Notes(), name)
    config: dict[str, Any] = {"gpufabric:cluster": cluster(ctx, cluster_name)}
    if context:
        config["gpufabric:cluster"]["kubeContext"] = context
    pools = infer_fabric.pools(ctx, group(snap.nodes))
    _no_hca(ctx, pools)
    infer_tolerations.apply(ctx, pools)
    infer_links.apply(ctx, pools)
    infer_handmade.adopt(ctx, pools)  # hand-made rails, NIC policy, flavor (not gpufabric's)
    config["gpufabric:gpuNodes"] = pools.section
    policies = snap.of(clusterpolicy.KIND)
    config["gpufabric:gpuOperator"] = clusterpolicy.gpu_operator(policies)
    config["gpufabric:fabric"] = pools.fabric
    gpudirect = clusterpolicy.gpudirect(policies)
    if gpudirect:
        pools.fabric["gpuDirect"] = gpudirect
    infer_ufm.ufm(ctx, pools.fabric)
    config.update(infer_tenants.scheduling(ctx, pools))
    infer_handmade.scheduling(ctx, config)
    _topology_hint(ctx, config, pools.nodes)
    config.update(infer_tenants.training(ctx))
    config.update(infer_tenants.monitoring(ctx))
    tenants = infer_tenants.tenants(ctx, pools)
    config["gpufabric:storage"], own = infer_storage.storage(ctx, [t["namespace"] for t in tenants])
    for tenant in tenants:
        if tenant["namespace"] in own:
            tenant["claims"] = infer_storage.claims(ctx, own[tenant["namespace"]])
    config["gpufabric:tenants"] = tenants
    versions = infer_fabric.versions(ctx)
    if versions:
        config["gpufabric:versions"] = versions
    foreign(ctx)
    config = {k: v for k, v in config.items() if v not in ({}, [], None)}
    infer_ncclenv.apply(ctx, config)
    mirrors = infer_sources.registries(ctx, config)
    if mirrors:
        config["gpufabric:sources"] = {"registries": mirrors}
    return name, config, ctx.notes


def cluster(ctx: Context, name: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name or ctx.stack}
    if name is None:
        ctx.notes.unmapped.append(
            f"cluster.name: on no live object: written as {ctx.stack}; it is the Pulumi "
            "provider's cluster identifier and names every resource, so where this cluster "
            "has Pulumi state already, discover again with --cluster-name <the name it was "
            "deployed with> (the import map's names follow it)"
        )
    ctx.notes.unmapped.append(
        "cluster.podCIDR, cluster.serviceCIDR: on no object discovery reads (the API server's "
        "and controller manager's flags): left out; set them so validation checks the rails "
        "against the real ones"
    )
    minors = sorted(
        {
            ".".join(
                str((n.get("status") or {}).get("nodeInfo", {}).get("kubeletVersion", ""))
                .lstrip("v")
                .split(".")[:2]
            )
            for n in ctx.snap.nodes
        }
        - {""}
    )
    if minors:
        out["kubernetesVersion"] = minors[0]
        if len(minors) > 1:
            ctx.notes.unmapped.append(
                f"Node: status.nodeInfo.kubeletVersion: kubelets at {', '.join(minors)}; the "
                f"oldest ({minors[0]}) written as cluster.kubernetesVersion"
            )
    return out


def foreign(ctx: Context) -> None:
    """Objects of the fabric's kinds that gpufabric did not make: listed, never rendered."""
    for kind in (
        "NicClusterPolicy",
        "NicNodePolicy",
        "SriovNetworkNodePolicy",
        "IPPool",
        "CIDRPool",
        "NetworkAttachmentDefinition",
        "ResourceFlavor",
        "ClusterQueue",
        "Topology",
        "Queue",
        "HyperNode",
        "NVIDIADriver",
    ):
        for obj in ctx.snap.of(kind):
            if not managed(obj):
                ctx.notes.foreign.append(ident(obj))


def _topology_hint(ctx: Context, config: dict[str, Any], nodes: list[dict[str, Any]]) -> None:
    """Switch labels on every GPU node with no topology levels in the stack: a hint."""
    if "topologyLevels" in config.get("gpufabric:scheduling", {}):
        return
    levels = infer_topology.label_levels(nodes)
    if levels:
        ctx.notes.hints.append(
            f"every GPU node carries the switch labels {', '.join(levels)}: "
            f"scheduling.topologyLevels: [{', '.join(levels)}] lets the queueing authority "
            "place gangs by them (a change: it adds a Topology)"
        )


def _no_hca(ctx: Context, pools: infer_fabric.Pools) -> None:
    """Rails whose RDMA device no object names (no nccl-env, no dashboard): said."""
    fabrics = [("fabric", pools.fabric)]
    if isinstance(pools.section, list):
        fabrics += [
            (f"gpuNodes[{p['name']}].fabric", p["fabric"]) for p in pools.section if "fabric" in p
        ]
    default = str(pools.fabric.get("rdma", Fabric.model_fields["rdma"].default))
    for where, fabric in fabrics:
        if nics.mode(str(fabric.get("rdma", default))).resource_prefix is None:
            continue  # no RDMA device to name
        names = [r["name"] for r in fabric.get("rails") or [] if "hca" not in r]
        if names:
            ctx.notes.unmapped.append(
                f"{where}.rails[].hca: {', '.join(names)}: no object names their RDMA device "
                "(no nccl-env, no fabric dashboard): left out; verify finds it from the netdev"
            )
