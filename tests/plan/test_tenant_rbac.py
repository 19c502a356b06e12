"""Tenant RBAC: the groups a stack names for a tenant may run its job kinds, pods, config and
storage in its namespace, read its networks, quota and queue, and nothing more; bad group
names are refused with their config path."""

from __future__ import annotations

from typing import Any

import pytest
from builders import example_config, plan_of, problems_of

from gpufabric.plan import ids
from gpufabric.plan.build import Plan

WRITE = {"create", "update", "patch", "delete"}


def _body(plan: Plan, item_id: str) -> dict[str, Any]:
    return dict(plan.item(item_id).payload.body)  # type: ignore[union-attr]


def _grants(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


@pytest.mark.parametrize("stack", ["prod-ib", "roce-sriov-volcano"])
def test_role_runs_installed_job_kinds_and_reads_platform_objects(stack: str) -> None:
    plan = plan_of(example_config(stack), stack)
    grants = _grants(_body(plan, ids.TENANT_ROLE))
    for kind in plan.facts.operators.job_kinds:
        group = "trainer.kubeflow.org" if kind == "trainjob" else "kubeflow.org"
        assert grants[(group, f"{kind}s")] >= WRITE
    for resource in ("pods", "configmaps", "secrets", "persistentvolumeclaims"):
        assert grants[("", resource)] >= WRITE
    for read_only in (
        ("k8s.cni.cncf.io", "network-attachment-definitions"),
        ("", "resourcequotas"),
    ):
        assert grants[read_only] == {"get", "list", "watch"}
    # Nothing that widens rights, reaches other namespaces or changes queues and networks.
    assert not any(g in {"rbac.authorization.k8s.io", "*"} for g, _ in grants)
    assert not any(r == "*" or r == "namespaces" for _, r in grants)
    queue_groups = {"kueue.x-k8s.io", "scheduling.volcano.sh"}
    assert all(not (verbs & WRITE) for (g, _), verbs in grants.items() if g in queue_groups)


def test_groups_bind_the_role_in_the_tenant_namespace_only() -> None:
    config = example_config("lab-roce")
    config["gpufabric:tenants"][0]["groups"] = ["oidc:ml-vision", "ml-admins"]
    config["gpufabric:tenants"][1]["groups"] = []
    plan = plan_of(config)
    first, second = (t["namespace"] for t in config["gpufabric:tenants"])
    binding = _body(plan, ids.tenant_role_binding(first))
    assert binding["metadata"]["namespace"] == first
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": _body(plan, ids.TENANT_ROLE)["metadata"]["name"],
    }
    assert [s["name"] for s in binding["subjects"]] == ["oidc:ml-vision", "ml-admins"]
    assert {s["kind"] for s in binding["subjects"]} == {"Group"}
    # groups: [] binds nobody.
    assert ids.tenant_role_binding(second) not in {i.id for i in plan.items}


def test_default_group_is_per_namespace() -> None:
    plan = plan_of(example_config("prod-ib"))
    for ns in plan.wiring:
        binding = _body(plan, ids.tenant_role_binding(ns))
        assert [s["name"] for s in binding["subjects"]] == [f"gpufabric:tenant:{ns}"]


@pytest.mark.parametrize(
    ("groups", "needle"),
    [
        (["system:authenticated"], "system group"),
        (["system:masters"], "system group"),
        (["ml team"], "group name"),
        (["ok", "ok"], "more than once"),
        (["a\nb"], "group name"),
        ([""], "group name"),
    ],
)
def test_bad_groups_are_refused_with_their_path(groups: list[str], needle: str) -> None:
    config = example_config("lab-roce")
    config["gpufabric:tenants"][0]["groups"] = groups
    problems = problems_of(config)
    paths = [p for p in problems if p.startswith("tenants[0].groups")]
    assert paths, problems
    assert any(needle in problems[p] for p in paths), problems
