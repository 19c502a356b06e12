"""Tenants layer: a namespace per team, its pod security, quota, queue and ``nccl-env``.

- Namespace: Pod Security enforces "privileged" (RDMA pods need IPC_LOCK, which "baseline"
  forbids) and audits/warns at "baseline"; one ValidatingAdmissionPolicy, bound to every
  tenant namespace, allows exactly baseline plus IPC_LOCK.
- ResourceQuota: a hard GPU ceiling (quota + borrowing limit) whatever the queue admits; in
  a fleet the sum over the pools (a ResourceQuota cannot tell pools apart), with the tenant's
  quota and limit in each pool as annotations.
- Queue wiring from the queueing authority: e.g. a Kueue LocalQueue pointing at the
  tenant's ClusterQueue, or under Volcano the namespace annotation that sends the tenant's
  PodGroups to its Queue.
- ``nccl-env`` ConfigMap: the NCCL variables of this fabric as data (for ``envFrom``) and the
  pod wiring (Multus annotation value for all rails, RDMA resources per pod) as annotations.
  In a fleet, one per pool, ``nccl-env-<pool>``: each pool's rails, HCAs, GID index, traffic
  class and socket interface differ, and a job reads its own pool's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from msgspec.structs import replace

from gpufabric.plan import ids
from gpufabric.plan.context import LayerContext
from gpufabric.plan.facts import GPU_RESOURCE, NCCL_ENV, Facts, TenantContract
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
DIRECT_VOLUMES = (
    "awsElasticBlockStore", "azureDisk", "azureFile", "cephfs", "cinder", "fc", "flexVolume",
    "flocker", "gcePersistentDisk", "gitRepo", "glusterfs", "iscsi", "nfs",
    "photonPersistentDisk", "portworxVolume", "quobyte", "rbd", "scaleIO", "storageos",
    "vsphereVolume",
)  # fmt: skip
"""Pod volume sources that name a server, share or disk directly (and gitRepo, which runs
git on the node): Pod Security "restricted" forbids them, baseline does not. A tenant pod
with ``nfs`` could mount the share the stack's NFS StorageClass carves every tenant's claims
from; its storage comes through its own claims. (hostPath has its own rule.)"""


NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
INTERFACE = "[A-Za-z0-9_.-]{1,15}"
"""An interface name a pod may request for an attachment (Linux: at most 15 characters)."""
TENANT_ROLE = "gpufabric-tenant"
"""The ClusterRole bound, in each tenant namespace, to the tenant's groups."""
MANAGED_LABEL = ("app.kubernetes.io/managed-by", "gpufabric")
"""The label on every object gpufabric writes: in a tenant namespace, the platform's alone."""


def _alternatives(names: Sequence[str]) -> str:
    """An RE2 (and Python) group matching exactly one of ``names`` (DNS names: only the
    dot needs escaping)."""
    return "(" + "|".join(n.replace(".", "\\.") for n in names) + ")"


def networks_pattern(contract: TenantContract) -> str:
    """An anchored RE2 pattern that a networks annotation value matches only when every
    network it attaches is one of the tenant's own (its contract's namespace and NADs).

    Multus reads two forms. The comma form ``[ns/]name[@ifname]`` is matched entry by entry
    (a bare name means the pod's namespace, so it is accepted only where the tenant's NADs
    are in its own namespace). The JSON form cannot be parsed in Kubernetes CEL, and Go's
    decoder takes keys in any case and the last of duplicate keys, so only one canonical
    shape is accepted: a list of objects with exactly the keys "name", "namespace" and an
    optional "interface", in that order, lowercase, no escapes; anything else is denied.
    """
    names = _alternatives(contract.network_names)
    ns = contract.network_namespace.replace(".", "\\.")
    prefix = f"({ns}/)?" if contract.network_namespace == contract.namespace else f"{ns}/"
    entry = f" *{prefix}{names}(@{INTERFACE})? *"
    comma = f"{entry}(,{entry})*"
    item = (
        f' *\\{{ *"name" *: *"{names}" *, *"namespace" *: *"{ns}"'
        f' *(, *"interface" *: *"{INTERFACE}")? *\\}} *'
    )
    listed = f" *\\[{item}(,{item})*\\] *"
    return f"^({comma}|{listed})$"


def every_pool_networks(facts: Facts, namespace: str) -> TenantContract:
    """The tenant's contract with the networks of every pool it may run in: a pod of any
    pool attaches its own pool's rails (the networks' namespace is cluster-wide). A one-pool
    stack: its contract as it is."""
    contracts = [c for _, c in facts.tenant_in_pools(namespace)]
    if len(contracts) == 1:
        return contracts[0]
    names = tuple(dict.fromkeys(n for c in contracts for n in c.network_names))
    return replace(contracts[0], network_names=names)


def _pod_variables(facts: Facts) -> dict[str, dict[str, str]]:
    """What the pod policy knows of each tenant namespace (strings only: Kubernetes CEL
    requires a literal's values to share one type)."""
    out = {}
    for ns in sorted(facts.tenants):
        c = every_pool_networks(facts, ns)
        out[ns] = {
            "priorityClass": c.priority_class,
            "networks": networks_pattern(c) if c.network_names else "^$",
        }
    return out


def _object_variables(tenants: Mapping[str, TenantContract]) -> dict[str, dict[str, str]]:
    """What the objects policy knows of each tenant namespace: its queue and priority."""
    return {
        ns: {"queue": c.queue, "priorityClass": c.priority_class}
        for ns, c in sorted(tenants.items())
    }


def _policy_items(ctx: LayerContext) -> list[Item]:
    stack = ctx.stack
    namespaces = sorted(ctx.facts.tenants)
    policy = render_object(
        "tenants/pod-security-policy.yaml.j2",
        stack=stack,
        tenants=_pod_variables(ctx.facts),
        allowed_capabilities=[*BASELINE_CAPABILITIES, *RDMA_CAPABILITIES],
        safe_sysctls=list(SAFE_SYSCTLS),
        selinux_types=list(SELINUX_TYPES),
        direct_volumes=list(DIRECT_VOLUMES),
        networks_annotation=NETWORKS_ANNOTATION,
    )
    binding = render_object(
        "tenants/pod-security-binding.yaml.j2",
        stack=stack,
        policy=policy["metadata"]["name"],
        namespaces=namespaces,
    )
    objects = render_object(
        "tenants/objects-policy.yaml.j2",
        stack=stack,
        tenants=_object_variables(ctx.facts.tenants),
        groups={ns: list(c.groups) for ns, c in sorted(ctx.facts.tenants.items())},
        rules=ctx.authority.admission_rules(),
    )
    objects_binding = render_object(
        "tenants/pod-security-binding.yaml.j2",
        stack=stack,
        policy=objects["metadata"]["name"],
        namespaces=namespaces,
    )
    return [
        *_policy_and_binding((ids.TENANT_POLICY, ids.TENANT_BINDING), policy, binding),
        *_policy_and_binding(
            (ids.TENANT_OBJECTS_POLICY, ids.TENANT_OBJECTS_BINDING), objects, objects_binding
        ),
        *_managed_policy_items(ctx, namespaces),
        object_item(
            ids.TENANT_ROLE,
            Layer.TENANTS,
            "tenants/role.yaml.j2",
            stack=stack,
            name=TENANT_ROLE,
            job_resources=_job_resources(
                ctx.facts.operators.job_kinds, compute_domains=bool(ctx.facts.nvl72_pools)
            ),
            authority_rules=ctx.authority.tenant_rbac_rules(),
        ),
    ]


def _policy_and_binding(
    ids_: tuple[str, str], policy: dict[str, Any], binding: dict[str, Any]
) -> list[Item]:
    """An admission policy and its binding, which waits for it: (policy id, binding id)."""
    policy_id, binding_id = ids_
    return [
        Item(id=policy_id, layer=Layer.TENANTS, payload=K8sObject(policy)),
        Item(
            id=binding_id,
            layer=Layer.TENANTS,
            payload=K8sObject(binding),
            depends_on=(policy_id,),
        ),
    ]


def _managed_policy_items(ctx: LayerContext, namespaces: list[str]) -> list[Item]:
    """The policy that keeps what gpufabric manages in tenant namespaces the platform's
    (CREATE, UPDATE and DELETE), and its binding."""
    label, manager = MANAGED_LABEL
    policy = render_object(
        "tenants/managed-policy.yaml.j2",
        stack=ctx.stack,
        groups={ns: list(c.groups) for ns, c in sorted(ctx.facts.tenants.items())},
        label=label,
        manager=manager,
        nccl_env=NCCL_ENV,
    )
    binding = render_object(
        "tenants/pod-security-binding.yaml.j2",
        stack=ctx.stack,
        policy=policy["metadata"]["name"],
        namespaces=namespaces,
    )
    return _policy_and_binding(
        (ids.TENANT_MANAGED_POLICY, ids.TENANT_MANAGED_BINDING), policy, binding
    )


def _job_resources(kinds: Sequence[str], compute_domains: bool = False) -> dict[str, list[str]]:
    """API group -> the plural resources of the job kinds the stack installs, and the
    ComputeDomains a tenant's jobs on NVL72 trays come with."""
    out: dict[str, list[str]] = {}
    for kind in kinds:
        group = "trainer.kubeflow.org" if kind == "trainjob" else "kubeflow.org"
        out.setdefault(group, []).append(f"{kind}s")
    if compute_domains:
        out["resource.nvidia.com"] = ["computedomains"]
    return {g: sorted(r) for g, r in sorted(out.items())}


def _role_binding(stack: str, contract: TenantContract, ns_id: str) -> list[Item]:
    """The tenant role for the tenant's groups in its namespace (none: nobody is bound)."""
    if not contract.groups:
        return []
    return [
        object_item(
            ids.tenant_role_binding(contract.namespace),
            Layer.TENANTS,
            "tenants/role-binding.yaml.j2",
            (ns_id, ids.TENANT_ROLE),
            role=TENANT_ROLE,
            stack=stack,
            tenant=contract,
        )
    ]


def build(ctx: LayerContext) -> list[Item]:
    tenants = ctx.facts.tenants
    if not tenants:
        return []
    psa_version = f"v{ctx.facts.kubernetes_minor}"
    authority = ctx.authority
    # Pods are admitted only once the policy guards the namespaces.
    items = _policy_items(ctx)
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
                depends_on=(
                    ids.TENANT_BINDING,
                    ids.TENANT_OBJECTS_BINDING,
                    ids.TENANT_MANAGED_BINDING,
                ),
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
                hard={f"requests.{GPU_RESOURCE}": ctx.facts.tenant_gpu_limit(ns)},
                annotations=_pool_quotas(ctx.facts, ns),
                **common,
            )
        )
        items.extend(authority.namespace_items(ctx, contract, ns_id))
        items.extend(_role_binding(ctx.stack, contract, ns_id))
        items.extend(_nccl_envs(ctx, ns, ns_id))
    return items


def _pool_quotas(facts: Facts, namespace: str) -> dict[str, str]:
    """A fleet's ResourceQuota annotations: the tenant's GPU quota and limit (quota plus
    borrowing limit) in each pool, what its queue admits there. None for one pool."""
    if not facts.fleet:
        return {}
    out = {}
    for pool, c in facts.tenant_in_pools(namespace):
        out[f"gpufabric.io/gpu-quota-{pool}"] = str(c.gpu_quota)
        out[f"gpufabric.io/gpu-limit-{pool}"] = str(c.gpu_limit)
    return out


def _nccl_envs(ctx: LayerContext, namespace: str, ns_id: str) -> list[Item]:
    """The tenant's NCCL settings and pod wiring: ``nccl-env``, or one ConfigMap per pool of
    a fleet (``nccl-env-<pool>``, labelled with the pool)."""
    facts = ctx.facts
    return [
        object_item(
            ids.tenant_nccl_env(namespace, pool if facts.fleet else None),
            Layer.TENANTS,
            "tenants/nccl-env.yaml.j2",
            (ns_id,),
            stack=ctx.stack,
            tenant=contract,
            wiring=contract,
            pool=pool if facts.fleet else None,
        )
        for pool, contract in facts.tenant_in_pools(namespace)
    ]
