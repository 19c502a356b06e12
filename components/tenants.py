"""Tenants layer component: tenant namespaces and their ``nccl-env`` ConfigMaps."""

from __future__ import annotations

from collections.abc import MutableMapping

import pulumi

from components.layer import LayerComponent
from gpufabric.plan import ids
from gpufabric.plan.items import Item, K8sObject, Layer


class Tenants(LayerComponent):
    """Namespaces (protected, kept on removal) and NCCL settings per tenant."""

    token = ids.TENANTS_TYPE

    def __init__(
        self, cluster: str, layer: Layer, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        self.namespaces: list[str] = []
        super().__init__(cluster, layer, opts)

    def add(self, item: Item, registered: MutableMapping[str, pulumi.Resource]) -> None:
        super().add(item, registered)
        if isinstance(item.payload, K8sObject) and item.payload.kind == "Namespace":
            self.namespaces.append(item.payload.name)

    def register_layer_outputs(self) -> None:
        self.namespaces.sort()
        self.register_outputs({"namespaces": self.namespaces, "items": sorted(self.resources)})
