"""Tenants layer component: tenant namespaces and their ``nccl-env`` ConfigMaps."""

from __future__ import annotations

from components.layer import LayerComponent


class Tenants(LayerComponent):
    """Namespaces (protected, kept on removal) and NCCL settings per tenant."""

    token = "gpufabric:index:Tenants"

    def register_layer_outputs(self) -> None:
        self.namespaces = sorted(
            item_id.split("/")[1] for item_id in self.resources if item_id.endswith("/namespace")
        )
        self.register_outputs({"namespaces": self.namespaces, "items": sorted(self.resources)})
