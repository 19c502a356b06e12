"""The root component: one explicit Kubernetes provider and a component per Plan layer."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from components.layer import LayerComponent
from components.tenants import Tenants
from gpufabric.model.config import StackModel
from gpufabric.plan import ids
from gpufabric.plan.build import Plan
from gpufabric.plan.items import LAYER_ORDER, Layer

LAYER_COMPONENTS: dict[Layer, type[LayerComponent]] = {Layer.TENANTS: Tenants}


class TrainingFabric(pulumi.ComponentResource):
    """Everything one stack installs on its cluster, registered from its Plan."""

    def __init__(
        self,
        name: str,
        model: StackModel,
        plan: Plan,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(ids.ROOT_TYPE, name, None, opts)
        self.plan = plan
        # One explicit provider per stack; the cluster identifier keeps it (and with it every
        # resource) from being replaced when kubeconfig credentials rotate.
        self.provider = k8s.Provider(
            ids.provider_name(name),
            context=model.cluster.kubeContext,
            cluster_identifier=model.cluster.name,
            enable_server_side_apply=True,
            opts=pulumi.ResourceOptions(parent=self),
        )
        registered: dict[str, pulumi.Resource] = {}
        # Names: the cluster, then gpufabric.plan.ids (the runbook's --target URNs use them).
        self.layers: dict[Layer, LayerComponent] = {}
        used = {it.layer for it in plan.items}
        for layer in LAYER_ORDER:
            if layer in used:
                cls = LAYER_COMPONENTS.get(layer, LayerComponent)
                self.layers[layer] = cls(
                    name,
                    layer,
                    opts=pulumi.ResourceOptions(
                        parent=self, providers={"kubernetes": self.provider}
                    ),
                )
        # Plan order is a topological order over all layers: every dependency is registered
        # before the items that follow it.
        for item in plan.items:
            self.layers[item.layer].add(item, registered)
        for component in self.layers.values():
            component.finish()
        self.resources = registered
        self.tenant_wiring = {
            ns: {
                "networks": w.networks,
                "rdmaResources": dict(w.rdma_resources),
                "ncclEnv": dict(w.nccl_env),
            }
            for ns, w in sorted(plan.wiring.items())
        }
        self.register_outputs({"items": len(plan.items), "tenants": self.tenant_wiring})
