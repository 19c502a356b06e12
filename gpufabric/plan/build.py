"""Build the Plan of a stack: resolve its facts, then ask each layer for its items."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from msgspec import Struct
from msgspec.structs import replace

from gpufabric.model.config import StackModel
from gpufabric.model.versions import Component, effective_components
from gpufabric.plan import authority as registry
from gpufabric.plan import gpu, monitoring, network, scheduling, storage, tenants, training
from gpufabric.plan.authority import Authority
from gpufabric.plan.context import LayerContext
from gpufabric.plan.facts import Facts, TenantContract
from gpufabric.plan.items import Item, K8sObject, Layer, order_items
from gpufabric.plan.resolve import resolve

Builder = Callable[[LayerContext], list[Item]]

LAYER_BUILDERS: Mapping[Layer, Builder] = {
    Layer.GPU: gpu.build,
    Layer.NETWORK: network.build,
    Layer.TRAINING: training.build,
    Layer.SCHEDULING: scheduling.build,
    Layer.TENANTS: tenants.build,
    Layer.MONITORING: monitoring.build,
    Layer.STORAGE: storage.build,
}
"""One builder per layer, in layer order; builders never import each other."""


class Plan(Struct, frozen=True):
    """Ordered items of one stack, with the facts they were built from."""

    stack: str
    items: tuple[Item, ...]
    facts: Facts
    components: Mapping[str, Component]
    authority: Authority
    """The stack's queueing authority (its name is ``facts.gang.authority``)."""

    @property
    def wiring(self) -> Mapping[str, TenantContract]:
        """Each tenant's pod contract, by namespace."""
        return self.facts.tenants

    def for_pool(self, name: str | None) -> Plan:
        """The Plan as one pool's jobs and checks read it (``facts`` narrowed with
        :meth:`Facts.for_pool`). None: the only pool; a fleet must name one (KeyError
        naming the pools)."""
        if name is None:
            if self.facts.fleet:
                raise KeyError(
                    f"the stack has {len(self.facts.pools)} pools "
                    f"({', '.join(self.facts.pool_names)}); name one with --pool"
                )
            return self
        return replace(self, facts=self.facts.for_pool(name))

    def item(self, item_id: str) -> Item:
        for it in self.items:
            if it.id == item_id:
                return it
        raise KeyError(item_id)

    def layer(self, layer: Layer) -> tuple[Item, ...]:
        return tuple(it for it in self.items if it.layer == layer)

    def objects(self) -> Iterator[tuple[Item, K8sObject]]:
        for it in self.items:
            if isinstance(it.payload, K8sObject):
                yield it, it.payload


def build_plan(stack: str, model: StackModel) -> Plan:
    """The whole Plan of a validated stack."""
    authority = registry.get(model.scheduling.gang)
    ctx = LayerContext(
        stack=stack,
        components=effective_components(model.versions, model.sources.mirrors()),
        facts=resolve(stack, model, authority),
        authority=authority,
    )
    items: list[Item] = []
    for build in LAYER_BUILDERS.values():
        items.extend(build(ctx))
    return Plan(
        stack=stack,
        items=order_items(items),
        facts=ctx.facts,
        components=ctx.components,
        authority=authority,
    )
