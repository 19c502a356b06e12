"""A ComponentResource per Plan layer, registering that layer's items under it."""

from __future__ import annotations

from collections.abc import MutableMapping

import pulumi

from components.items import resource_for
from gpufabric.plan import ids
from gpufabric.plan.items import Item, Layer


class LayerComponent(pulumi.ComponentResource):
    """Parent of one layer's items. Items are added in the Plan's global apply order (a
    layer's item may follow an item of a later layer, e.g. the job operators follow Volcano),
    then :meth:`finish` registers the outputs."""

    token = ids.LAYER_TYPE

    def __init__(
        self, cluster: str, layer: Layer, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        name = ids.layer_component_name(cluster, layer.value)
        super().__init__(self.token, name, None, opts)
        self.cluster = cluster
        self.name = name
        self.layer = layer
        self.resources: dict[str, pulumi.Resource] = {}

    def add(self, item: Item, registered: MutableMapping[str, pulumi.Resource]) -> None:
        deps = [registered[d] for d in item.depends_on]
        resource = resource_for(
            ids.child_name(self.cluster, self.layer.value, item.id),
            item,
            pulumi.ResourceOptions(parent=self, depends_on=deps),
        )
        registered[item.id] = resource
        self.resources[item.id] = resource

    def finish(self) -> None:
        self.register_layer_outputs()

    def register_layer_outputs(self) -> None:
        self.register_outputs({"items": sorted(self.resources)})
