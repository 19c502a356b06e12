"""Scheduling layer: the cluster's one gang-scheduling and queueing authority.

The authority module (:mod:`gpufabric.authorities`) named by ``scheduling.gang`` supplies its
chart values, its cluster objects and each tenant's queue and priority objects; this layer
puts them in the Plan with the authority's namespace and chart. The tenants layer wires
namespaces to these queues.
"""

from __future__ import annotations

from gpufabric.plan import ids
from gpufabric.plan.context import LayerContext
from gpufabric.plan.items import Item, Layer, helm_chart, system_namespace


def build(ctx: LayerContext) -> list[Item]:
    authority = ctx.authority
    component = ctx.components[authority.component]
    chart_id = ids.authority_chart(authority.name)
    # An authority that watches the job CRDs when it starts is installed after the job
    # operators (upstream's order for Kueue and the MPI Operator).
    after = (
        ids.job_operators(ctx.facts.operators.job_kinds) if authority.job_operators_first else ()
    )
    items = [
        system_namespace(
            ctx.stack, ids.SCHEDULING_NAMESPACE, Layer.SCHEDULING, component.namespace, "baseline"
        ),
        # The chart holds the queue CRDs (and with them every queued workload): protected.
        Item(
            id=chart_id,
            layer=Layer.SCHEDULING,
            payload=helm_chart(component, authority.chart_values(ctx)),
            depends_on=(ids.SCHEDULING_NAMESPACE, *after),
            protect=True,
            holds=authority.holds,
        ),
    ]
    items.extend(authority.cluster_items(ctx, chart_id))
    for contract in ctx.facts.tenants.values():
        items.extend(authority.tenant_items(ctx, contract, chart_id))
    return items
