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
    """Parent of one layer's items. Items are added in the Plan's global apply order (a
    layer's item may follow an item of a later layer, e.g. the job operators follow Volcano),
    then :meth:`finish` registers the outputs."""

    token = "gpufabric:index:Layer"

    def __init__(self, name: str, layer: Layer, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(self.token, name, None, opts)
        self.name = name
        self.layer = layer
        self.resources: dict[str, pulumi.Resource] = {}

    def add(self, item: Item, registered: MutableMapping[str, pulumi.Resource]) -> None:
        deps = [registered[d] for d in item.depends_on]
        resource = resource_for(
            child_name(self.name, item), item, pulumi.ResourceOptions(parent=self, depends_on=deps)
        )
        registered[item.id] = resource
        self.resources[item.id] = resource

    def finish(self) -> None:
        self.register_layer_outputs()

    def register_layer_outputs(self) -> None:
        self.register_outputs({"items": sorted(self.resources)})
