"""What gpufabric's own RBAC and health objects say about the stack: the training kinds its
tenants may run (the ``gpufabric-tenant`` ClusterRole), each tenant's groups (its
RoleBinding's subjects) and the in-cluster health loop (the ``gpufabric-health`` CronJob, or
Deployment with ``--watch``: its image and the flags of its command, plan/health.py)."""

from __future__ import annotations

from typing import Any

from gpufabric.discover.infer import Context, meta, spec
from gpufabric.model.config import default_tenant_group

TENANT_ROLE = "gpufabric-tenant"
HEALTH = "gpufabric-health"
JOB_GROUP = "kubeflow.org"
MPI = "mpijobs"
FLAGS = {
    "--stacks-dir": "stacksDir",
    "--tenant": "tenant",
    "--prometheus": "prometheusUrl",
    "--interval": "intervalSeconds",
}


def _job_resources(ctx: Context) -> list[str] | None:
    """The kubeflow.org resources gpufabric's tenant role grants (None: no such role)."""
    role = next((r for r in ctx.managed("ClusterRole") if meta(r).get("name") == TENANT_ROLE), None)
    if role is None:
        return None
    return [
        str(resource)
        for rule in role.get("rules") or []
        if isinstance(rule, dict) and JOB_GROUP in (rule.get("apiGroups") or [])
        for resource in rule.get("resources") or []
    ]


def schemes(ctx: Context) -> list[str]:
    """The Training Operator's job kinds tenants may run (``trainingOperator.schemes``):
    the kubeflow.org resources the tenant role grants, less MPIJob (the MPI Operator's)."""
    found = [
        text.removesuffix("s")
        for text in _job_resources(ctx) or []
        if text != MPI and "/" not in text and text.endswith("s")
    ]
    return list(dict.fromkeys(found))


def mpi_operator(ctx: Context) -> bool | None:
    """Whether tenants may run MPIJobs (the tenant role grants ``mpijobs``); None: no role."""
    granted = _job_resources(ctx)
    return None if granted is None else MPI in granted


def max_restarts(ctx: Context) -> int | None:
    """``training.failurePolicy.maxRestarts`` as gpufabric's Trainer runtimes carry it."""
    for runtime in ctx.managed("ClusterTrainingRuntime"):
        policy = ((spec(runtime).get("template") or {}).get("spec") or {}).get("failurePolicy")
        if isinstance(policy, dict) and isinstance(policy.get("maxRestarts"), int):
            return int(policy["maxRestarts"])
    return None


def groups(ctx: Context, namespace: str) -> list[str] | None:
    """A tenant's groups: the Group subjects of gpufabric's RoleBinding of the tenant role in
    its namespace; None where that is the default group alone (the stack need not say it),
    [] where there is no such binding (the stack's ``groups: []``)."""
    for binding in ctx.managed("RoleBinding"):
        if meta(binding).get("namespace") != namespace:
            continue
        if (binding.get("roleRef") or {}).get("name") != TENANT_ROLE:
            continue
        names = [
            str(s.get("name"))
            for s in binding.get("subjects") or []
            if isinstance(s, dict) and s.get("kind") == "Group"
        ]
        return None if names == [default_tenant_group(namespace)] else names
    return []  # no binding: nobody reaches the namespace through gpufabric


def in_cluster(ctx: Context) -> dict[str, Any]:
    """``monitoring.health.inCluster`` from the health runner gpufabric wrote (empty: none)."""
    from gpufabric.model.monitoring import InCluster

    runner = next(
        (
            o
            for kind in ("CronJob", "Deployment")
            for o in ctx.managed(kind)
            if meta(o).get("name") == HEALTH
        ),
        None,
    )
    if runner is None:
        return {}
    pod = _pod(runner)
    container = (pod.get("containers") or [{}])[0]
    command = [str(a) for a in container.get("command") or []]
    out: dict[str, Any] = {"enabled": True, "image": container.get("image")}
    defaults = InCluster.model_fields
    for flag, key in FLAGS.items():
        if flag in command[:-1]:
            value: Any = command[command.index(flag) + 1]
            if key == "intervalSeconds":
                value = int(value) if value.isdigit() else value
            if value != defaults[key].default:
                out[key] = value
    if runner.get("kind") == "Deployment":
        out["watch"] = True
    else:
        schedule = spec(runner).get("schedule")
        if schedule != defaults["schedule"].default:
            out["schedule"] = schedule
    ctx.notes.unmapped.append(
        f"{runner.get('kind')} {meta(runner).get('namespace')}/{HEALTH}: the loop reads "
        "monitoring.health's limits (maxQuarantined, maxQuarantinedFraction, medianFraction) "
        "from the stack file in its image: written at their defaults"
    )
    return out


def _pod(runner: dict[str, Any]) -> dict[str, Any]:
    s = spec(runner)
    if runner.get("kind") == "CronJob":
        s = ((s.get("jobTemplate") or {}).get("spec")) or {}
    return dict(((s.get("template") or {}).get("spec")) or {})
