"""Storage layer: the CSI drivers a stack's backends need, their StorageClasses, and each
tenant's claims and storage quota.

:func:`resolve` turns the ``storage`` section into facts (each backend's through its kind in
:mod:`gpufabric.storage`); :func:`build` reads only those facts.
"""

from __future__ import annotations

from typing import Any

from gpufabric.model.config import StackModel
from gpufabric.model.storage import CHECKPOINTS, ClaimSpec, Storage, show_size, size_bytes
from gpufabric.plan import ids, tolerations
from gpufabric.plan.context import LayerContext
from gpufabric.plan.facts import BackendFacts, ClaimFacts, TenantStorage
from gpufabric.plan.items import Item, Layer, PlanError, helm_chart, object_item, system_namespace
from gpufabric.storage import kinds


def _backend_facts(stack: str, storage: Storage) -> tuple[BackendFacts, ...]:
    out: list[BackendFacts] = []
    for backend in storage.backends:
        kind = next((k for k in kinds() if k.selected(backend)), None)
        if kind is None:
            raise PlanError(f"storage backend {backend.name} has no kind (validation missed it)")
        out.append(kind.facts(backend, stack))
    return tuple(out)


def _claim(namespace: str, spec: ClaimSpec, backends: tuple[BackendFacts, ...]) -> ClaimFacts:
    backend = (
        backends[0] if spec.backend is None else next(b for b in backends if b.name == spec.backend)
    )
    return ClaimFacts(
        name=spec.name,
        namespace=namespace,
        mount_path=spec.mount_path or "",
        read_only=spec.read_only,
        transport=backend.transport,
        storage_class=backend.storage_class,
        size=spec.size,
        backend=backend.name,
        checkpoints=spec.name == CHECKPOINTS,
    )


def resolve(
    stack: str, model: StackModel
) -> tuple[tuple[BackendFacts, ...], tuple[TenantStorage, ...]]:
    """The backends and, per tenant with claims (sorted by namespace), its storage."""
    if model.storage is None:
        return (), ()
    backends = _backend_facts(stack, model.storage)
    tenants: list[TenantStorage] = []
    for tenant in sorted(model.tenants, key=lambda t: t.namespace):
        specs = model.storage.claims if tenant.claims is None else tenant.claims
        if not specs:
            continue
        claims = tuple(_claim(tenant.namespace, s, backends) for s in specs)
        tenants.append(
            TenantStorage(
                namespace=tenant.namespace,
                claims=claims,
                quota_storage=show_size(sum(size_bytes(c.size) for c in claims)),
                quota_claims=len(claims),
            )
        )
    return backends, tuple(tenants)


def _driver_items(ctx: LayerContext) -> tuple[list[Item], dict[str, str]]:
    """One chart per driver component the backends need; backend name -> its chart item."""
    items: list[Item] = []
    chart_of: dict[str, str] = {}
    for backend in ctx.facts.storage_backends:
        if backend.driver is None:
            continue
        chart_id = ids.storage_driver(backend.driver)
        chart_of[backend.name] = chart_id
        if any(it.id == chart_id for it in items):
            continue
        component = ctx.components[backend.driver]
        ns_id = ids.storage_driver_namespace(backend.driver)
        # The node plugin mounts on the host: privileged.
        items.append(
            system_namespace(ctx.stack, ns_id, Layer.STORAGE, component.namespace, "privileged")
        )
        values = dict(backend.driver_values)
        if backend.driver_controller is not None:
            values[backend.driver_controller] = {
                **values.get(backend.driver_controller, {}),
                **gpu_node_placement(ctx),
            }
        chart = helm_chart(component, values)
        items.append(Item(id=chart_id, layer=Layer.STORAGE, payload=chart, depends_on=(ns_id,)))
    return items, chart_of


def gpu_node_placement(ctx: LayerContext) -> dict[str, Any]:
    """A pod's ``affinity`` and ``tolerations`` that put it on a GPU node of any pool: one
    required node-selector term per pool (terms are ORed), each pool's taints tolerated.
    Every pool's nodes mount the tenants' claims, so each reaches the storage server over the
    stack's transport (the runbook's prerequisites); a pool without a selector (every node
    is a GPU node) leaves the placement to the scheduler."""
    selectors = [pool.nodes.selector for pool in ctx.facts.pools] or [ctx.facts.nodes.selector]
    out: dict[str, Any] = {"tolerations": tolerations.stack_tolerations(ctx)}
    if all(selectors):
        unique = dict.fromkeys(tuple(sorted(sel.items())) for sel in selectors)
        terms = [
            {"matchExpressions": [{"key": k, "operator": "In", "values": [v]} for k, v in sel]}
            for sel in unique
        ]
        required = {"nodeSelectorTerms": terms}
        out["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}  # fmt: skip
    return out


def build(ctx: LayerContext) -> list[Item]:
    items, chart_of = _driver_items(ctx)
    class_of: dict[str, str] = {}
    for backend in ctx.facts.storage_backends:
        if backend.class_parameters is None:
            continue
        class_of[backend.name] = ids.storage_class(backend.name)
        deps = (chart_of[backend.name],) if backend.name in chart_of else ()
        items.append(
            object_item(
                class_of[backend.name],
                Layer.STORAGE,
                "storage/storage-class.yaml.j2",
                deps,
                stack=ctx.stack,
                backend=backend,
            )
        )
    for tenant in ctx.facts.storage:
        ns_id = ids.tenant_namespace(tenant.namespace)
        quota_id = ids.tenant_storage_quota(tenant.namespace)
        items.append(
            object_item(
                quota_id,
                Layer.STORAGE,
                "storage/quota.yaml.j2",
                (ns_id,),
                stack=ctx.stack,
                tenant=tenant,
            )
        )
        for claim in tenant.claims:
            needs: tuple[str, ...] = (ns_id, quota_id) + (
                (class_of[claim.backend],) if claim.backend in class_of else ()
            )
            item = object_item(
                ids.tenant_claim(tenant.namespace, claim.name),
                Layer.STORAGE,
                "storage/claim.yaml.j2",
                needs,
                stack=ctx.stack,
                claim=claim,
            )
            # A claim holds the tenant's checkpoints and data: a stack that drops it leaves it
            # (and its volume) in the cluster rather than deleting them.
            items.append(
                Item(
                    id=item.id,
                    layer=item.layer,
                    payload=item.payload,
                    depends_on=item.depends_on,
                    retain_on_delete=True,
                )
            )
    return items


__all__ = ["build", "resolve"]
