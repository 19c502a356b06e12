"""Resolved facts: every output reads the Plan's facts, so render, runbook, verify
expectations, jobs and nccl-env agree, whatever optional setting a stack leaves out."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
from builders import SHIPPED_STACKS, example_config, model_of, plan_of

from gpufabric import nics
from gpufabric.model.problems import StackError
from gpufabric.outputs.jobs import JobRequest, job_manifest
from gpufabric.outputs.runbook import render
from gpufabric.plan.build import Plan
from gpufabric.plan.items import K8sObject
from gpufabric.plan.pulls import collect
from gpufabric.verify.expect import from_facts


def optional_paths(config: dict[str, Any]) -> Iterator[tuple[str, ...]]:
    """Paths of every mapping key in a stack's sections (first list entry included)."""

    def walk(node: Any, path: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
        if isinstance(node, dict):
            for key in node:
                yield (*path, key)
                yield from walk(node[key], (*path, key))
        elif isinstance(node, list) and node and isinstance(node[0], dict):
            yield from walk(node[0], (*path, "0"))

    for section, value in config.items():
        yield from walk(value, (section,))


def without(config: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    out = copy.deepcopy(config)
    node: Any = out
    for key in path[:-1]:
        node = node[int(key)] if isinstance(node, list) else node[key]
    del node[path[-1]]
    return out


def variants() -> Iterator[Any]:
    for name in SHIPPED_STACKS:
        config = example_config(name)
        for path in optional_paths(config):
            variant = without(config, path)
            try:
                model_of(variant)
            except StackError:
                continue  # a required key, or one another setting needs
            yield pytest.param(name, variant, id=f"{name}-without-{'.'.join(path)}")


def nads(plan: Plan) -> list[dict[str, Any]]:
    return [
        obj.body
        for _, obj in plan.objects()
        if isinstance(obj, K8sObject) and obj.kind == "NetworkAttachmentDefinition"
    ]


def _rail_owner(plan: Plan) -> dict[str, int]:
    """Network name -> the MTU of the pool whose rail it is (every pool of a fleet)."""
    out: dict[str, int] = {}
    for pool in plan.facts.pools:
        for rail in pool.fabric.rails:
            for network in rail.networks:
                out[network] = pool.fabric.mtu
    return out


def assert_outputs_agree(name: str, config: dict[str, Any]) -> None:
    model = model_of(config)
    whole = plan_of(config, name)
    text = render(whole, collect(name, model))
    mtu_of = _rail_owner(whole)
    # Every network is a rail of some pool, named as the facts name it.
    assert {json.loads(n["spec"]["config"])["name"] for n in nads(whole)} == set(mtu_of)
    # The MTU each NAD applies is the one of the pool whose rail it is.
    for nad in nads(whole):
        cni = json.loads(nad["spec"]["config"])
        if "mtu" in cni:
            assert cni["mtu"] == mtu_of[cni["name"]]
    # No unresolved value reaches the runbook.
    assert "None" not in text
    for pool in whole.facts.pool_names:
        _assert_pool_agrees(whole.for_pool(pool), text)


def _assert_pool_agrees(plan: Plan, text: str) -> None:
    """One pool's outputs (a one-pool stack's are the stack's) agree with its facts."""
    facts = plan.facts
    exp = from_facts(facts)

    # The MTU every output states is the one the NADs and VF policies apply.
    assert exp.mtu == facts.fabric.mtu
    assert isinstance(exp.mtu, int)
    assert f"MTU {facts.fabric.mtu}" in text
    selector = dict(facts.nodes.selector)
    for _, obj in plan.objects():
        node_selector = obj.body.get("spec", {}).get("nodeSelector") if obj.body else None
        if obj.kind == "SriovNetworkNodePolicy" and (not facts.fleet or node_selector == selector):
            assert obj.body["spec"]["mtu"] == facts.fabric.mtu
    # Rails: what verify expects is what the network objects are named after.
    assert [r.name for r in exp.rails] == [r.name for r in facts.fabric.rails]
    # The acceptance threshold the runbook states is the analyzer's.
    assert f"{facts.acceptance.threshold_gbps:g} GB/s" in text
    # Each tenant's nccl-env of this pool and its jobs carry the contract.
    for _, obj in plan.objects():
        contract = facts.tenants.get(str(obj.namespace))
        if obj.kind == "ConfigMap" and contract and obj.name == contract.nccl_env_name:
            assert obj.body["data"] == dict(contract.nccl_env)
            annotations = obj.body["metadata"]["annotations"]
            assert annotations["gpufabric.io/networks"] == contract.networks
            for leaf, networks in contract.leaf_networks.items():
                assert annotations[f"gpufabric.io/networks-{leaf}"] == networks
    # the first tenant whose queue admits a job of one node (a smaller quota runs none)
    per_node = facts.nodes.gpus_per_node
    tenant = next((t for t, c in facts.tenants.items() if c.gpu_admissible >= per_node), None)
    if tenant and "mpijob" in facts.operators.job_kinds:
        leaf = next(iter(facts.tenants[tenant].leaf_networks), None)
        request = JobRequest(tenant=tenant, kind="mpijob", nodes=1, leaf=leaf)
        job = job_manifest(plan, request)
        worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
        limits = worker["spec"]["containers"][0]["resources"]["limits"]
        assert {k: v for k, v in limits.items() if k != "nvidia.com/gpu"} == dict(
            facts.fabric.rdma_resources
        )
        assert worker["spec"]["volumes"][0]["emptyDir"]["sizeLimit"] == f"{exp.shm_gib}Gi"


@pytest.mark.parametrize(("name", "config"), list(variants()))
def test_outputs_agree_with_each_optional_setting_removed(
    name: str, config: dict[str, Any]
) -> None:
    assert_outputs_agree(name, config)


@pytest.mark.parametrize("name", SHIPPED_STACKS)
def test_outputs_agree_on_the_example_stacks(name: str) -> None:
    assert_outputs_agree(name, example_config(name))


def test_a_stack_without_mtu_gets_the_fabric_default_everywhere() -> None:
    """The reported bug: without fabric.mtu the NADs got 9000 but the runbook printed
    "MTU None" and verify wrote "mtu": null, so the MTU checks silently skipped."""
    config = example_config("lab-roce")
    del config["gpufabric:fabric"]["mtu"]
    model = model_of(config)
    plan = plan_of(config, "lab-roce")
    text = render(plan, collect("lab-roce", model))
    assert plan.facts.fabric.mtu == nics.link("roce").default_mtu == 9000
    assert "MTU 9000" in text
    assert "an MTU of at least 9000 end to end" in text
    assert "None" not in text
    assert json.loads(from_facts(plan.facts).to_json())["mtu"] == 9000
    for nad in nads(plan):
        assert json.loads(nad["spec"]["config"])["mtu"] == 9000


def test_infiniband_default_mtu_is_ipoib_datagram_maximum() -> None:
    config = example_config("prod-ib")
    config["gpufabric:fabric"].pop("mtu", None)
    assert plan_of(config).facts.fabric.mtu == nics.link("infiniband").default_mtu == 4092


def test_roce_traffic_class_defaults_to_dscp_times_four_in_env_and_runbook() -> None:
    config = example_config("lab-roce")
    config["gpufabric:fabric"]["roce"] = {"dscp": 24}
    plan = plan_of(config, "lab-roce")
    assert plan.facts.fabric.roce is not None
    assert plan.facts.fabric.roce.traffic_class == 96
    for contract in plan.facts.tenants.values():
        assert contract.nccl_env["NCCL_IB_TC"] == "96"
    text = render(plan, collect("lab-roce", model_of(config)))
    assert "NCCL traffic class 96" in text
