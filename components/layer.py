"""A ComponentResource per Plan layer, registering that layer's items under it."""

from __future__ import annotations

from collections.abc import MutableMapping

import pulumi

from components.items import resource_for
from gpufabric.plan import Item, Layer


def child_name(component: str, item: Item) -> str:
    """Child names derive from the component name and the item id (unique in a Plan)."""
    return f"{component}-{item.id}"


class LayerComponent(pulumi.ComponentResource):
    """Registers one layer's items in apply order, with dependencies from the Plan."""

    token = "gpufabric:index:Layer"

    def __init__(
        self,
        name: str,
        layer: Layer,
        items: tuple[Item, ...],
        registered: MutableMapping[str, pulumi.Resource],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(self.token, name, None, opts)
        self.layer = layer
        self.resources: dict[str, pulumi.Resource] = {}
        for item in items:
            deps = [registered[d] for d in item.depends_on]
            resource = resource_for(
                child_name(name, item), item, pulumi.ResourceOptions(parent=self, depends_on=deps)
            )
            registered[item.id] = resource
            self.resources[item.id] = resource
        self.register_layer_outputs()

    def register_layer_outputs(self) -> None:
        self.register_outputs({"items": sorted(self.resources)})
