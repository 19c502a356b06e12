"""Tenants layer: a namespace per team, its pod security, quota, queue and ``nccl-env``.

- Namespace: Pod Security enforces "privileged" (RDMA pods need IPC_LOCK, which "baseline"
  forbids) and audits/warns at "baseline"; one ValidatingAdmissionPolicy, bound to every
  tenant namespace, allows exactly baseline plus IPC_LOCK.
- ResourceQuota: a hard GPU ceiling (quota + borrowing limit) whatever the queue admits.
- Queue wiring from the queueing authority: e.g. a Kueue LocalQueue pointing at the
  tenant's ClusterQueue, or under Volcano the namespace annotation that sends the tenant's
  PodGroups to its Queue.
- ``nccl-env`` ConfigMap: the NCCL variables of this fabric as data (for ``envFrom``) and the
  pod wiring (Multus annotation value for all rails, RDMA resources per pod) as annotations.
"""

from __future__ import annotations

from typing import Any

from gpufabric.plan import ids
from gpufabric.plan.context import LayerContext
from gpufabric.plan.facts import GPU_RESOURCE
from gpufabric.plan.items import Item, K8sObject, Layer, object_item
from gpufabric.support.templates import render_object

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


def _policy_items(stack: str, namespaces: list[str]) -> list[Item]:
    policy = render_object(
        "tenants/pod-security-policy.yaml.j2",
        stack=stack,
        allowed_capabilities=[*BASELINE_CAPABILITIES, *RDMA_CAPABILITIES],
        safe_sysctls=list(SAFE_SYSCTLS),
        selinux_types=list(SELINUX_TYPES),
    )
    binding = render_object(
        "tenants/pod-security-binding.yaml.j2", stack=stack, namespaces=sorted(namespaces)
    )
    return [
        Item(ids.TENANT_POLICY, Layer.TENANTS, K8sObject(policy)),
        Item(
            ids.TENANT_BINDING, Layer.TENANTS, K8sObject(binding), depends_on=(ids.TENANT_POLICY,)
        ),
    ]


def build(ctx: LayerContext) -> list[Item]:
    tenants = ctx.facts.tenants
    if not tenants:
        return []
    psa_version = f"v{ctx.facts.kubernetes_minor}"
    authority = ctx.authority
    # Pods are admitted only once the policy guards the namespaces.
    items = _policy_items(ctx.stack, list(tenants))
    for ns, contract in tenants.items():
        common: dict[str, Any] = {"stack": ctx.stack, "tenant": contract}
        ns_id = ids.tenant_namespace(ns)
        annotations = authority.namespace_annotations(contract)
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
                depends_on=(ids.TENANT_BINDING,),
                protect=True,
                retain_on_delete=True,
            )
        )
        items.append(
            object_item(
                ids.tenant_quota(ns),
                Layer.TENANTS,
                "tenants/resource-quota.yaml.j2",
                (ns_id,),
                hard={f"requests.{GPU_RESOURCE}": contract.gpu_limit},
                **common,
            )
        )
        items.extend(authority.namespace_items(ctx, contract, ns_id))
        items.append(
            object_item(
                ids.tenant_nccl_env(ns),
                Layer.TENANTS,
                "tenants/nccl-env.yaml.j2",
                (ns_id,),
                wiring=contract,
                **common,
            )
        )
    return items
