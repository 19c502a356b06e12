"""The taints of each pool's nodes (``gpuNodes.tolerations``), from the objects that carry
them as tolerations: the pool's Kueue ResourceFlavor (exactly the pool's), else, for one
pool, the Trainer runtimes' pods (exactly the stack's), else the taints all the pool's nodes
carry, else the NicClusterPolicy's operands (the stack's less ``nvidia.com/gpu``, which the
Network Operator adds itself: noted)."""

from __future__ import annotations

from typing import Any

from gpufabric.discover.infer import Context, spec
from gpufabric.discover.infer_fabric import Pools
from gpufabric.plan.tolerations import GPU_TAINT


def apply(ctx: Context, pools: Pools) -> None:
    """Set ``tolerations`` on each pool entry whose nodes' taints the cluster shows."""
    entries = pools.section if isinstance(pools.section, list) else [pools.section]
    flavors = ctx.managed("ResourceFlavor")
    for entry in entries:
        name = entry.get("name")
        flavor = next((f for f in flavors if f["metadata"].get("name") == name), None)
        if flavor is None and len(entries) == 1 and len(flavors) == 1:
            flavor = flavors[0]
        found = _listed(spec(flavor).get("tolerations")) if flavor is not None else None
        if found is None and len(entries) == 1:
            found = _runtime(ctx) if flavor is None else None
        if found is None and flavor is None:
            found = _taints(pools, entry)
        if found is None and len(entries) == 1 and flavor is None:
            found = _nic_policy(ctx)
        if found:
            entry["tolerations"] = found


def _listed(value: Any) -> list[dict[str, Any]] | None:
    if not isinstance(value, list):
        return None
    return [_short(t) for t in value if isinstance(t, dict) and t.get("key")]


def _short(toleration: dict[str, Any]) -> dict[str, Any]:
    """A toleration as a stack writes it: ``operator: Exists`` (the default) left out."""
    out = {k: v for k, v in toleration.items() if k in ("key", "operator", "value", "effect")}
    if out.get("operator") == "Exists":
        del out["operator"]
    return out


def _taints(pools: Pools, entry: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The taints every node of the pool carries (``spec.taints``), as tolerations."""
    selector = entry.get("nodeSelector") or {}
    mine = [
        n
        for n in pools.nodes
        if all(
            ((n.get("metadata") or {}).get("labels") or {}).get(k) == v for k, v in selector.items()
        )
    ]
    if not mine:
        return None
    common: list[dict[str, Any]] | None = None
    for node in mine:
        taints = [
            {k: t[k] for k in ("key", "value", "effect") if t.get(k)}
            for t in ((node.get("spec") or {}).get("taints") or [])
            if isinstance(t, dict) and t.get("key")
        ]
        common = taints if common is None else [t for t in common if t in taints]
    out = []
    for taint in common or []:
        toleration = {"key": taint["key"]}
        if "value" in taint:
            toleration |= {"operator": "Equal", "value": taint["value"]}
        if "effect" in taint:
            toleration["effect"] = taint["effect"]
        out.append(toleration)
    return out or None


def _runtime(ctx: Context) -> list[dict[str, Any]] | None:
    """The tolerations of the first gpufabric Trainer runtime's first pod template."""
    for runtime in ctx.managed("ClusterTrainingRuntime"):
        jobs = (spec(runtime).get("template") or {}).get("spec", {}).get("replicatedJobs") or []
        for job in jobs:
            pod = (((job.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec")  # fmt: skip
            if isinstance(pod, dict) and "tolerations" in pod:
                return _listed(pod["tolerations"])
    return None


def _nic_policy(ctx: Context) -> list[dict[str, Any]] | None:
    for policy in ctx.managed("NicClusterPolicy"):
        found = _listed(spec(policy).get("tolerations"))
        if found:
            ctx.notes.unmap(
                policy,
                "spec.tolerations",
                f"the operands' tolerations, written as gpuNodes.tolerations; whether the "
                f"nodes also carry {GPU_TAINT['key']} is on no object the stack renders",
            )
            return found
    return None
