"""Tenant isolation as the API server enforces it: both tenant admission policies of every
stack of the golden matrix, evaluated by a real CEL engine against the catalogue in
tests/tenant_admission.py. A tenant's own jobs, their pods and its own networks are admitted;
another tenant's networks, queues and priority classes, NADs or gpufabric's objects changed
by a tenant, and every Pod Security baseline violation are denied."""

from __future__ import annotations

from functools import cache

import golden
import pytest
from builders import example_config, plan_of
from tenant_admission import verdicts

from gpufabric.plan import ids
from gpufabric.plan.build import Plan

CONFIGS = {name: config for name, config in golden.variants().items() if name != "stress"}
CONFIGS["fleet-mixed"] = example_config("fleet-mixed")  # two pools, two fabrics (kueue)
CONFIGS["fleet-mixed-volcano"] = example_config("fleet-mixed")
CONFIGS["fleet-mixed-volcano"]["gpufabric:scheduling"] = {"gang": "volcano"}
CONFIGS["fleet-mixed-health"] = example_config("fleet-mixed")  # the health runner, two pools
CONFIGS["fleet-mixed-health"]["gpufabric:monitoring"] = {
    "enabled": True,
    "health": {
        "inCluster": {
            "enabled": True,
            "image": "ghcr.io/example-org/gpufabric:2026.11",
            "tenant": "llm-pretrain",
            "prometheusUrl": "http://prometheus-operated.monitoring:9090",
        }
    },
}
STACKS = list(CONFIGS)


@cache
def _plan(stack: str) -> Plan:
    return plan_of(CONFIGS[stack], stack)


@pytest.mark.parametrize("stack", STACKS)
def test_catalogue_verdicts(stack: str) -> None:
    """Every tenant of the stack (each has its own networks, queue, priority and quota in
    the policies' variables), in a fleet each in every pool."""
    results = verdicts(_plan(stack))
    wrong = [
        f"{case.name}: expected {'allowed' if case.allowed else 'denied'}, got {messages}"
        for case, messages in results
        if case.allowed == bool(messages)
    ]
    assert not wrong, "\n".join(wrong)
    denied = [case for case, messages in results if messages]
    assert denied
    assert len(denied) < len(results)


def test_denial_names_the_rule() -> None:
    """A denied pod hears which rule it broke (the networks rule for another tenant's NAD)."""
    plan = _plan("ib-sriov-tenant-pkeys")
    (_case, messages) = next(
        (c, m)
        for c, m in verdicts(plan, tenants=1)
        if c.name.endswith("another tenant's namespace")
    )
    assert len(messages) == 1
    assert "networks annotation" in messages[0]


def test_objects_policy_never_judges_cluster_scoped_objects() -> None:
    """A binding's namespaceSelector does not skip cluster-scoped objects, and the policy
    denies what it finds no tenant for (failurePolicy Fail): matching every resource must be
    limited to namespaced ones, or no Node, ClusterRole or PV could be written any more."""
    plan = _plan("prod-ib")
    policy = plan.item(ids.TENANT_OBJECTS_POLICY).payload.body  # type: ignore[union-attr]
    assert policy["spec"]["failurePolicy"] == "Fail"
    for rule in policy["spec"]["matchConstraints"]["resourceRules"]:
        assert rule["scope"] == "Namespaced"
    pods = plan.item(ids.TENANT_POLICY).payload.body  # type: ignore[union-attr]
    resources = {
        r for rule in pods["spec"]["matchConstraints"]["resourceRules"] for r in rule["resources"]
    }
    assert resources <= {"pods", "pods/ephemeralcontainers"}


def test_table_counts_every_case() -> None:
    """The table `python tests/tenant_admission.py` prints: per stack, cases = denied +
    allowed and no wrong verdict."""
    from builders import example_config
    from tenant_admission import table

    header, row = table({"kind-dev": example_config("kind-dev")})
    assert header.split() == ["stack", "tenants", "cases", "denied", "allowed", "wrong"]
    name, tenants, cases, denied, allowed, wrong = row.split()
    assert name == "kind-dev"
    assert int(tenants) >= 1
    assert int(cases) == int(denied) + int(allowed) > 0
    assert wrong == "0"


RESTRICTED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
    "projected", "secret", "image",
}  # fmt: skip
"""What Pod Security "restricted" lets a pod mount (and image volumes: read-only OCI
content, as a container image is): every other source names a server, disk or the node."""


@pytest.mark.parametrize("minor", ["1.30", "1.33", "1.34"])
def test_every_direct_volume_source_of_the_api_is_denied(minor: str) -> None:
    """The pod policy names each volume source it denies (Kubernetes CEL cannot list a
    typed object's fields), so every source of the API's Volume must be denied or pod-local;
    a denied name the API lacks would not compile (and failurePolicy Fail denies every
    pod)."""
    from gpufabric.outputs import schema
    from gpufabric.plan.tenants import DIRECT_VOLUMES

    try:
        definitions = schema._definitions(schema._schema_dir(minor))["$defs"]
    except ValueError as exc:
        pytest.skip(str(exc))
    (volume,) = [d for name, d in definitions.items() if name.endswith("core.v1.Volume")]
    sources = set(volume["properties"]) - {"name"}
    assert sources - RESTRICTED_VOLUMES == set(DIRECT_VOLUMES) | {"hostPath"}


@pytest.mark.parametrize("stack", ["prod-ib", "fleet-mixed"])
def test_tenants_neither_make_nor_delete_what_gpufabric_manages(stack: str) -> None:
    """Issue 41: a tenant member could delete nccl-env and create one with the managed label,
    changing the NCCL settings acceptance and re-certification read in its namespace. Now
    every managed object of the namespace resists DELETE, a ConfigMap under an nccl-env name
    cannot be made by the tenant, labelled or not, and the platform does all three."""
    results = {
        case.name: (case.allowed, messages)
        for case, messages in verdicts(_plan(stack))
        if case.policy == "managed"
    }
    nccl = "nccl-env" if stack == "prod-ib" else "nccl-env-h100"
    prefix = "" if stack == "prod-ib" else "[h100] "
    for name, allowed in (
        (f"managed ConfigMap {nccl} deleted by the tenant", False),
        (f"{nccl} made by the tenant, labelled", False),
        (f"{nccl} made by the tenant, unlabelled", False),
        ("nccl-env-later (a pool to come) made by the tenant", False),
        ("own ConfigMap given the managed label", False),
        (f"{nccl} DELETE by the platform", True),
        (f"{nccl} CREATE by the platform", True),
        ("own ConfigMap deleted by the tenant", True),
    ):
        expected, messages = results[prefix + name]
        assert expected is allowed
        assert bool(messages) is not allowed, (name, messages)
    deleted = [n for n in results if " deleted by the tenant" in n and n.startswith(prefix + "managed")]  # fmt: skip
    kinds = {n.split()[2 if prefix else 1] for n in deleted}
    assert {"ConfigMap", "ResourceQuota"} <= kinds, kinds


def test_every_tenant_with_gpus_has_its_jobs_judged() -> None:
    """Issue 41: dgx-h100's research tenant (8 GPUs of quota) had no job case (a 16-GPU
    job was the only size), so its jobs were never judged; now a one-node job is."""
    from builders import example_config
    from tenant_admission import catalogue, job_nodes

    plan = plan_of(example_config("dgx-h100"), "dgx-h100")
    research = plan.wiring["research"]
    assert research.gpu_admissible == plan.facts.nodes.gpus_per_node
    assert job_nodes(plan, research) == 1
    for stack in STACKS:
        plan = _plan(stack)
        cases = catalogue(plan)  # a fleet: every pool, each case named "[pool] ..."
        views = [plan.for_pool(p) for p in plan.facts.pool_names] if plan.facts.fleet else [plan]
        for view in views:
            prefix = f"[{view.facts.pool}] " if view.facts.fleet else ""
            judged = {
                c.request.namespace
                for c in cases
                if c.name.startswith(prefix) and "as gpufabric writes it" in c.name
            }
            fits = view.facts.nodes.gpus_per_node
            with_gpus = {ns for ns, me in view.wiring.items() if me.gpu_admissible >= fits}
            if view.facts.operators.job_kinds:
                assert judged == with_gpus, (stack, view.facts.pool)
