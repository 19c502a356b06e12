"""Tenants layer: a namespace per team with Pod Security labels, and its ``nccl-env``.

The ``nccl-env`` ConfigMap carries the NCCL variables of this fabric as data (for
``envFrom``) and the pod wiring (the Multus annotation value for all rails, the RDMA
resources per pod) as annotations, so job generators and users read one object.
"""

from __future__ import annotations

from gpufabric import nccl, rails
from gpufabric.config import StackModel, Tenant
from gpufabric.plan import Item, K8sObject, Layer, PlanContext, TenantWiring
from gpufabric.templates import render_object


def namespace_id(namespace: str) -> str:
    return f"tenants/{namespace}/namespace"


def wiring_for(model: StackModel, tenant: Tenant) -> TenantWiring:
    return TenantWiring(
        namespace=tenant.namespace,
        networks=rails.networks_annotation(model.fabric, tenant.namespace),
        rdma_resources=rails.rdma_resources(model.fabric),
        nccl_env=nccl.nccl_env(model.fabric),
    )


def wiring_by_namespace(model: StackModel) -> dict[str, TenantWiring]:
    return {t.namespace: wiring_for(model, t) for t in model.tenants}


def build(ctx: PlanContext) -> list[Item]:
    model = ctx.model
    psa_version = f"v{model.cluster.kubernetes_minor}"
    items: list[Item] = []
    for tenant in model.tenants:
        common = {"stack": ctx.stack, "tenant": tenant}
        ns_id = namespace_id(tenant.namespace)
        items.append(
            Item(
                id=ns_id,
                layer=Layer.TENANTS,
                payload=K8sObject(
                    render_object("tenants/namespace.yaml.j2", psa_version=psa_version, **common)
                ),
                protect=True,
                retain_on_delete=True,
            )
        )
        items.append(
            Item(
                id=f"tenants/{tenant.namespace}/nccl-env",
                layer=Layer.TENANTS,
                payload=K8sObject(
                    render_object(
                        "tenants/nccl-env.yaml.j2", wiring=ctx.wiring[tenant.namespace], **common
                    )
                ),
                depends_on=(ns_id,),
            )
        )
    return items
