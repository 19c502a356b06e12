"""Tenants layer: a namespace per team, its pod security, quota, queue and ``nccl-env``.

- Namespace: Pod Security enforces "privileged" (RDMA pods need IPC_LOCK, which "baseline"
  forbids) and audits/warns at "baseline"; one ValidatingAdmissionPolicy, bound to every
  tenant namespace, allows exactly baseline plus IPC_LOCK.
- ResourceQuota: a hard GPU ceiling (quota + borrowing limit) whatever the queue admits.
- Queue wiring: a Kueue LocalQueue pointing at the tenant's ClusterQueue, or under Volcano the
  namespace annotation that sends the tenant's PodGroups to its Queue.
- ``nccl-env`` ConfigMap: the NCCL variables of this fabric as data (for ``envFrom``) and the
  pod wiring (Multus annotation value for all rails, RDMA resources per pod) as annotations.
"""

from __future__ import annotations

from typing import Any

from gpufabric import nccl, rails
from gpufabric.config import StackModel, Tenant
from gpufabric.plan import (
    Item,
    K8sObject,
    Layer,
    PlanContext,
    TenantWiring,
    object_item,
    scheduling,
)
from gpufabric.templates import render_object

POLICY_ID = "tenants/pod-security-policy"
BINDING_ID = "tenants/pod-security-binding"

BASELINE_CAPABILITIES = (
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
)
"""Capabilities Pod Security "baseline" lets containers add."""
RDMA_CAPABILITIES = ("IPC_LOCK",)
"""What RDMA needs beyond baseline: locking (pinning) memory registered with the NIC."""
SAFE_SYSCTLS = (
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ping_group_range",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.tcp_wmem",
)
"""Sysctls Pod Security "baseline" allows."""
SELINUX_TYPES = ("container_t", "container_init_t", "container_kvm_t", "container_engine_t")


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


def _policy_items(stack: str) -> list[Item]:
    policy = render_object(
        "tenants/pod-security-policy.yaml.j2",
        stack=stack,
        allowed_capabilities=[*BASELINE_CAPABILITIES, *RDMA_CAPABILITIES],
        safe_sysctls=list(SAFE_SYSCTLS),
        selinux_types=list(SELINUX_TYPES),
    )
    binding = render_object("tenants/pod-security-binding.yaml.j2", stack=stack)
    return [
        Item(POLICY_ID, Layer.TENANTS, K8sObject(policy)),
        Item(BINDING_ID, Layer.TENANTS, K8sObject(binding), depends_on=(POLICY_ID,)),
    ]


def build(ctx: PlanContext) -> list[Item]:
    model = ctx.model
    if not model.tenants:
        return []
    psa_version = f"v{model.cluster.kubernetes_minor}"
    volcano = model.scheduling.gang == "volcano"
    # Pods are admitted only once the policy guards the namespaces.
    items = _policy_items(ctx.stack)
    for tenant in model.tenants:
        common: dict[str, Any] = {"stack": ctx.stack, "tenant": tenant}
        ns_id = namespace_id(tenant.namespace)
        annotations = {scheduling.VOLCANO_QUEUE_ANNOTATION: tenant.namespace} if volcano else {}
        items.append(
            Item(
                id=ns_id,
                layer=Layer.TENANTS,
                payload=K8sObject(
                    render_object(
                        "tenants/namespace.yaml.j2",
                        psa_version=psa_version,
                        annotations=annotations,
                        **common,
                    )
                ),
                depends_on=(BINDING_ID,),
                protect=True,
                retain_on_delete=True,
            )
        )
        ns = tenant.namespace
        gpus = tenant.gpuQuota + tenant.gpuBorrowingLimit
        items.append(
            object_item(
                f"tenants/{ns}/resource-quota",
                Layer.TENANTS,
                "tenants/resource-quota.yaml.j2",
                (ns_id,),
                hard={f"requests.{scheduling.GPU_RESOURCE}": gpus},
                **common,
            )
        )
        if not volcano:
            items.append(
                object_item(
                    f"tenants/{ns}/local-queue",
                    Layer.TENANTS,
                    "tenants/local-queue.yaml.j2",
                    (ns_id, scheduling.cluster_queue_id(tenant)),
                    name=scheduling.LOCAL_QUEUE_NAME,
                    cluster_queue=ns,
                    **common,
                )
            )
        items.append(
            object_item(
                f"tenants/{ns}/nccl-env",
                Layer.TENANTS,
                "tenants/nccl-env.yaml.j2",
                (ns_id,),
                wiring=ctx.wiring[ns],
                **common,
            )
        )
    return items
