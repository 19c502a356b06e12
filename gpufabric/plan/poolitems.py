"""Which node pool of a fleet an item belongs to, for ``plan.json`` and ``gpufabric diff``.

An item a builder made for one pool says so (``Item.pool``); otherwise it is found from what
the item is for: a rail that only one pool has (its IP pool, SR-IOV policy, network), an
object that selects exactly one pool's nodes (a NicNodePolicy's ``nodeSelector``, a Kueue
ResourceFlavor's ``nodeLabels``), or a ConfigMap named ``nccl-env-<pool>``. Everything else
(the operators, the NicClusterPolicy, a rail two pools share, the tenants' namespaces) is
cluster-wide: no pool.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpufabric.plan.facts import Facts
from gpufabric.plan.items import Item, K8sObject

NCCL_ENV_PREFIX = "nccl-env-"
"""The per-pool NCCL settings' ConfigMap is named after its pool."""


def _selector(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The node labels an object selects its nodes by (None: it selects none)."""
    spec = body.get("spec")
    if not isinstance(spec, Mapping):
        return None
    for key in ("nodeSelector", "nodeLabels"):
        value = spec.get(key)
        if isinstance(value, Mapping) and value:
            return value
    return None


def pool_of(item: Item, facts: Facts) -> str | None:
    """The pool ``item`` belongs to; None for what is cluster-wide (or a one-pool stack)."""
    if item.pool is not None or not facts.fleet:
        return item.pool
    if item.rail is not None:
        having = [p.name for p in facts.pools if any(r.name == item.rail for r in p.fabric.rails)]
        return having[0] if len(having) == 1 else None
    payload = item.payload
    if not isinstance(payload, K8sObject):
        return None
    selector = _selector(payload.body)
    if selector is not None:
        matching = [
            p.name
            for p in facts.pools
            if all(selector.get(k) == v for k, v in p.nodes.selector.items())
        ]
        return matching[0] if len(matching) == 1 else None
    if payload.kind == "ConfigMap" and payload.name.startswith(NCCL_ENV_PREFIX):
        name = payload.name.removeprefix(NCCL_ENV_PREFIX)
        return name if name in facts.pool_names else None
    return None


__all__ = ["NCCL_ENV_PREFIX", "pool_of"]
