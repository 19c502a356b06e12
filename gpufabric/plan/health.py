"""The in-cluster form of ``gpufabric health`` (monitoring.health.inCluster): a service
account with least-privilege RBAC (nodes get/list/update, Events create/get/update and
NodeAcceptance results get/create/update cluster-wide; the acceptance job's kind
get/create/delete, pods and their logs read in the tenant's namespace; its Lease in the
monitoring namespace) and a CronJob, or a Deployment running ``--watch``, in the monitoring
namespace."""

from __future__ import annotations

from typing import Any

from gpufabric.plan import ids, node_acceptance
from gpufabric.plan.facts import InClusterHealth, PlanContext
from gpufabric.plan.items import Item, Layer, object_item
from gpufabric.plan.tenants import _job_resources as job_resources

NAME = "gpufabric-health"
NODE_POLICY = "gpufabric-health-nodes"
QUARANTINE_ANNOTATION = "health.gpufabric.io/quarantine"
"""The node annotation holding the quarantine record (gpufabric.health.record.ANNOTATION)."""
CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"
NODE_SPEC_FIELDS = ("podCIDR", "podCIDRs", "providerID", "configSource", "externalID")
"""Every core/v1 NodeSpec field but taints and unschedulable, which the node policy holds
equal (tests/plan/test_health_node_policy.py holds the list to the Node schema)."""
LABELS = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/managed-by": "gpufabric"}


def command(stack: str, ic: InClusterHealth) -> list[str]:
    """What the pod runs: one pass (CronJob) or --watch (Deployment), as the pod's own
    service account, printing the JSON document (the pod's log)."""
    args = ["gpufabric", "--stacks-dir", ic.stacks_dir, "health", "--stack", stack]
    args += ["--tenant", ic.tenant, "--in-cluster", "--json"]
    # the API status only: the probe's privileged host-root pods are not the loop's to
    # create (docs/decisions/health.md); an operator re-certifies with the probe from outside
    args += ["--node-checks", "api"]
    if ic.prometheus_url:
        args += ["--prometheus", ic.prometheus_url]
    if ic.watch:
        args += ["--watch", "--interval", str(ic.interval_s)]
    return args


def pod(stack: str, ic: InClusterHealth) -> dict[str, Any]:
    return {
        "serviceAccountName": NAME,
        "restartPolicy": "Always" if ic.watch else "Never",
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 65532,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [
            {
                "name": "health",
                "image": ic.image,
                "command": command(stack, ic),
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                },
                "resources": {
                    "requests": {"cpu": "100m", "memory": "256Mi"},
                    "limits": {"memory": "1Gi"},
                },
                "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
            }
        ],
        "volumes": [{"name": "tmp", "emptyDir": {}}],
        **({"imagePullSecrets": [{"name": n} for n in ic.pull_secrets]} if ic.pull_secrets else {}),
    }


def items(ctx: PlanContext) -> list[Item]:
    m = ctx.facts.monitoring
    ic = m.health.in_cluster
    kind = ctx.facts.operators.acceptance_kind
    if ic is None or kind is None:
        return []
    runner = object_item(
        ids.HEALTH_RUNNER,
        Layer.MONITORING,
        "monitoring/health-runner.yaml.j2",
        # Re-certification records its results as NodeAcceptance objects.
        (
            ids.HEALTH_CLUSTER_BINDING,
            ids.HEALTH_NODE_POLICY_BINDING,
            ids.HEALTH_BINDING,
            ids.HEALTH_LEASE_BINDING,
            ids.NODE_ACCEPTANCE_CRD,
        ),
        stack=ctx.stack,
        name=NAME,
        namespace=m.namespace,
        labels=LABELS,
        watch=ic.watch,
        schedule=ic.schedule,
        pod=pod(ctx.stack, ic),
    )
    return [
        *_access(ctx, ic, job_resources([kind])),
        *_lease_access(ctx),
        *_node_policy(ctx),
        runner,
    ]


def _node_policy(ctx: PlanContext) -> list[Item]:
    """The admission policy narrowing the runner's node updates, and its binding; the
    runner starts after both (its ClusterRoleBinding depends on the binding)."""
    facts = ctx.facts
    pools = [dict(p.nodes.selector) for p in facts.pools] or [dict(facts.nodes.selector)]
    username = f"system:serviceaccount:{facts.monitoring.namespace}:{NAME}"
    common: dict[str, Any] = {"stack": ctx.stack, "policy": NODE_POLICY}
    return [
        object_item(
            ids.HEALTH_NODE_POLICY,
            Layer.MONITORING,
            "monitoring/health-node-policy.yaml.j2",
            (),
            match=f"request.userInfo.username == {username!r}",
            pools=pools,
            selectors="; ".join(",".join(f"{k}={v}" for k, v in sorted(s.items())) for s in pools),
            taint=facts.monitoring.quarantine_taint,
            annotation=QUARANTINE_ANNOTATION,
            control_plane=CONTROL_PLANE_LABEL,
            spec_fields=NODE_SPEC_FIELDS,
            **common,
        ),
        object_item(
            ids.HEALTH_NODE_POLICY_BINDING,
            Layer.MONITORING,
            "monitoring/health-node-binding.yaml.j2",
            (ids.HEALTH_NODE_POLICY,),
            **common,
        ),
    ]


def _lease_access(ctx: PlanContext) -> list[Item]:
    """The Role and binding for the Lease one pass at a time holds (health/lease.py)."""
    m = ctx.facts.monitoring
    common: dict[str, Any] = {"stack": ctx.stack, "name": NAME, "namespace": m.namespace}
    return [
        object_item(
            ids.HEALTH_LEASE_ROLE,
            Layer.MONITORING,
            "monitoring/health-lease-role.yaml.j2",
            (ids.MONITORING_NAMESPACE,) if m.install_prometheus else (),
            lease=NAME,  # the Lease is named after the loop (health/lease.py)
            **common,
        ),
        object_item(
            ids.HEALTH_LEASE_BINDING,
            Layer.MONITORING,
            "monitoring/health-binding.yaml.j2",
            (ids.HEALTH_ACCOUNT, ids.HEALTH_LEASE_ROLE),
            kind="RoleBinding",
            role_kind="Role",
            account_namespace=m.namespace,
            **common,
        ),
    ]


def _access(ctx: PlanContext, ic: InClusterHealth, jobs: dict[str, list[str]]) -> list[Item]:
    """The service account, its ClusterRole and Role, and their bindings."""
    m = ctx.facts.monitoring
    common: dict[str, Any] = {"stack": ctx.stack, "name": NAME}
    ns_dep = (ids.MONITORING_NAMESPACE,) if m.install_prometheus else ()
    monitoring = Layer.MONITORING
    return [
        object_item(
            ids.HEALTH_ACCOUNT,
            monitoring,
            "monitoring/health-service-account.yaml.j2",
            ns_dep,
            namespace=m.namespace,
            **common,
        ),
        object_item(
            ids.HEALTH_CLUSTER_ROLE,
            monitoring,
            "monitoring/health-cluster-role.yaml.j2",
            (),
            results=node_acceptance.WRITE_RULES,
            **common,
        ),
        object_item(
            ids.HEALTH_CLUSTER_BINDING,
            monitoring,
            "monitoring/health-binding.yaml.j2",
            # the node policy is in force before the account may update a node
            (ids.HEALTH_ACCOUNT, ids.HEALTH_CLUSTER_ROLE, ids.HEALTH_NODE_POLICY_BINDING),
            kind="ClusterRoleBinding",
            role_kind="ClusterRole",
            namespace=None,
            account_namespace=m.namespace,
            **common,
        ),
        object_item(
            ids.HEALTH_ROLE,
            monitoring,
            "monitoring/health-role.yaml.j2",
            (ids.tenant_namespace(ic.tenant),),
            namespace=ic.tenant,
            job_resources=jobs,
            **common,
        ),
        object_item(
            ids.HEALTH_BINDING,
            monitoring,
            "monitoring/health-binding.yaml.j2",
            (ids.HEALTH_ACCOUNT, ids.HEALTH_ROLE),
            kind="RoleBinding",
            role_kind="Role",
            namespace=ic.tenant,
            account_namespace=m.namespace,
            **common,
        ),
    ]


__all__ = ["NAME", "command", "items", "pod"]
