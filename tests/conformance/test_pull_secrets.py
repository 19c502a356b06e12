"""Registry credentials by name (sources.pullSecrets), proven with the real tools: every pod
the pinned charts and overlays run, every GPU Operator operand and every NicClusterPolicy
image references the named Secrets, so a mirror that requires a login serves them all.

Skipped cleanly without helm/kubectl and the pinned charts (../shared/upstream).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from typing import Any

import pytest
from builders import SHIPPED_STACKS, example_config, plan_of
from upstream import helm_template, kustomize

from gpufabric.plan import ids
from gpufabric.plan.build import Plan
from gpufabric.plan.items import HelmChart, K8sObject, KustomizeOverlay

pytestmark = pytest.mark.conformance

SECRETS = ["site-registry", "site-registry-2"]
WORKLOADS = ("Deployment", "DaemonSet", "StatefulSet", "Job", "CronJob")


@cache
def plan(stack: str) -> Plan:
    config = example_config(stack)
    config.setdefault("gpufabric:sources", {})["pullSecrets"] = list(SECRETS)
    return plan_of(config, stack)


def _pod_specs(obj: dict[str, Any]) -> Iterator[dict[str, Any]]:
    spec = obj.get("spec") or {}
    if obj["kind"] == "CronJob":
        spec = spec.get("jobTemplate", {}).get("spec", {})
    yield spec.get("template", {}).get("spec", {})


def _names(refs: Any) -> list[str]:
    return [r["name"] if isinstance(r, dict) else r for r in refs or []]


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_every_chart_pod_references_the_pull_secrets(stack: str) -> None:
    p = plan(stack)
    checked = 0
    for item in p.items:
        if not isinstance(item.payload, HelmChart):
            continue
        for obj in helm_template(item.payload, p.facts.kubernetes_minor):
            if obj["kind"] not in WORKLOADS:
                continue
            for pod in _pod_specs(obj):
                name = f"{item.id}: {obj['kind']} {obj['metadata']['name']}"
                # Volcano's chart takes one secret: the first.
                want = SECRETS[:1] if item.id == ids.authority_chart("volcano") else SECRETS
                assert _names(pod.get("imagePullSecrets")) == want, name
                checked += 1
    assert checked


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_gpu_operator_operands_reference_the_pull_secrets(stack: str) -> None:
    (policy,) = [
        o
        for o in helm_template(plan(stack).item(ids.GPU_OPERATOR).payload, "1.34")  # type: ignore[arg-type]
        if o["kind"] == "ClusterPolicy"
    ]
    for operand in ("driver", "toolkit", "devicePlugin", "dcgmExporter", "gfd", "validator"):
        assert _names(policy["spec"][operand].get("imagePullSecrets")) == SECRETS, operand


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_overlay_service_accounts_reference_the_pull_secrets(stack: str) -> None:
    p = plan(stack)
    accounts = []
    for item in p.items:
        if isinstance(item.payload, KustomizeOverlay):
            accounts += [o for o in kustomize(item.payload) if o["kind"] == "ServiceAccount"]
    assert accounts
    for sa in accounts:
        assert _names(sa.get("imagePullSecrets")) == SECRETS, sa["metadata"]["name"]


def _image_specs(body: Any) -> Iterator[dict[str, Any]]:
    if isinstance(body, dict):
        if "image" in body and "repository" in body and "version" in body:
            yield body
        for value in body.values():
            yield from _image_specs(value)


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_nic_cluster_policy_images_reference_the_pull_secrets(stack: str) -> None:
    payload = plan(stack).item(ids.NIC_POLICY).payload
    assert isinstance(payload, K8sObject)
    specs = list(_image_specs(payload.body))
    assert specs
    for spec in specs:
        assert spec["imagePullSecrets"] == SECRETS, spec["image"]


def test_without_pull_secrets_nothing_references_one() -> None:
    payload = plan_of(example_config("prod-ib")).item(ids.NIC_POLICY).payload
    assert isinstance(payload, K8sObject)
    assert all("imagePullSecrets" not in s for s in _image_specs(payload.body))
