"""The health runner's node writes, narrowed by admission (issue 41, item 3): its
ClusterRole may update any node, so gpufabric-health-nodes lets its service account change
only the quarantine taint (NoSchedule), its annotation and spec.unschedulable, and only on
the nodes of a GPU pool that are not control plane. Evaluated with a real CEL engine against
the catalogue's health cases (tests/tenant_admission.py)."""

from __future__ import annotations

from functools import cache

import pytest
from builders import example_config, plan_of
from tenant_admission import verdicts

from gpufabric.health import record
from gpufabric.plan import health, ids
from gpufabric.plan.build import Plan
from gpufabric.plan.monitoring import QUARANTINE_TAINT


def _fleet_with_health() -> dict[str, object]:
    config = example_config("fleet-mixed")
    config["gpufabric:monitoring"] = {
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
    return config


@cache
def _plan(stack: str) -> Plan:
    config = _fleet_with_health() if stack == "fleet-mixed" else example_config(stack)
    return plan_of(config, stack)


def _health(stack: str) -> dict[str, tuple[bool, list[str]]]:
    return {
        case.name: (case.allowed, messages)
        for case, messages in verdicts(_plan(stack), tenants=0)
        if case.policy == "health"
    }


@pytest.mark.parametrize("stack", ["roce-sriov-volcano", "fleet-mixed"])
def test_health_runner_changes_only_quarantine_on_pool_nodes(stack: str) -> None:
    results = _health(stack)
    pools = [p.name for p in _plan(stack).facts.pools]
    assert len(results) == 12 * len(pools) + 2
    wrong = [f"{n}: {m}" for n, (allowed, m) in results.items() if allowed == bool(m)]
    assert not wrong, wrong
    for pool in pools:
        for name in ("quarantined (taint, annotation, cordon)", "kept quarantined (annotation)",
                     "released (untaint, uncordon, annotation)"):  # fmt: skip
            assert results[f"health: {pool} node {name}"] == (True, [])
        for name in ("given another taint", "given the quarantine taint as NoExecute",
                     "relabelled", "given another annotation", "with another providerID"):  # fmt: skip
            assert results[f"health: {pool} node {name}"][1]
    control = results["health: control-plane node quarantined"][1]
    assert control
    assert "never a control-plane node" in control[0]
    assert results["health: node of no pool quarantined"][1]


def test_fleet_policy_names_every_pool() -> None:
    body = _plan("fleet-mixed").item(ids.HEALTH_NODE_POLICY).payload.body  # type: ignore[union-attr]
    pools = next(v for v in body["spec"]["variables"] if v["name"] == "pools")
    assert pools["expression"] == (
        '[{"nvidia.com/gpu.product":"NVIDIA-H100-80GB-HBM3"},'
        '{"nvidia.com/gpu.product":"NVIDIA-L40S"}]'
    )
    (condition,) = body["spec"]["matchConditions"]
    assert condition["expression"] == (
        "request.userInfo.username == 'system:serviceaccount:monitoring:gpufabric-health'"
    )


def test_runner_is_bound_only_after_the_policy() -> None:
    """The ClusterRoleBinding that lets the account update nodes waits for the policy's
    binding; without inCluster health neither is rendered."""
    plan = _plan("roce-sriov-volcano")
    assert ids.HEALTH_NODE_POLICY_BINDING in plan.item(ids.HEALTH_CLUSTER_BINDING).depends_on
    assert ids.HEALTH_NODE_POLICY in plan.item(ids.HEALTH_NODE_POLICY_BINDING).depends_on
    assert not any(it.id == ids.HEALTH_NODE_POLICY for it in _plan("prod-ib").items)


def test_policy_reads_what_health_writes() -> None:
    assert health.QUARANTINE_ANNOTATION == record.ANNOTATION
    body = _plan("roce-sriov-volcano").item(ids.HEALTH_NODE_POLICY).payload.body  # type: ignore[union-attr]
    assert QUARANTINE_TAINT in str(body["spec"]["validations"])


@pytest.mark.parametrize("minor", ["1.30", "1.33", "1.34"])
def test_compared_spec_fields_are_the_node_schema(minor: str) -> None:
    """Every NodeSpec field but taints and unschedulable is held equal; a field named that
    the API lacks would not compile (failurePolicy Fail would then deny every update)."""
    from gpufabric.outputs import schema

    try:
        definitions = schema._definitions(schema._schema_dir(minor))["$defs"]
    except ValueError as exc:
        pytest.skip(str(exc))
    (spec,) = [d for name, d in definitions.items() if name.endswith("core.v1.NodeSpec")]
    assert set(spec["properties"]) - {"taints", "unschedulable"} == set(health.NODE_SPEC_FIELDS)
