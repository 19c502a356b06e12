"""A fleet proven against the real upstream: the pinned Network Operator (26.4.1) and GPU
Operator charts rendered by the real `helm` with the fleet's values, the Multus overlay by
the real `kubectl kustomize`, and every object of the network and GPU layers (NicNodePolicy
per pool, the cluster-wide NicClusterPolicy, IP pools, networks, SR-IOV policies,
NVIDIADrivers) validated strictly against the pinned CRDs. Then the rules the operators
apply to them: a NicClusterPolicy section is never also in a NicNodePolicy, no two node
policies (or NVIDIADrivers) select one node, and the chart's default NVIDIADriver is the
only default. Skipped cleanly without helm/kubectl and the pinned charts."""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import plan_of
from fleetvariants import fleet_mixed, fleet_sriov_drivers
from upstream import CRDS, helm_template, kustomize

from gpufabric.outputs.schema import validate_objects
from gpufabric.plan import ids
from gpufabric.plan.build import Plan
from gpufabric.plan.items import HelmChart, K8sObject, KustomizeOverlay, Layer

pytestmark = pytest.mark.conformance

VARIANTS: dict[str, Callable[[], dict[str, Any]]] = {
    "fleet-mixed": fleet_mixed,
    "fleet-sriov-drivers": fleet_sriov_drivers,
}
NODE_SECTIONS = ("ofedDriver", "rdmaSharedDevicePlugin", "sriovDevicePlugin")
_ROOT = Path(tempfile.mkdtemp(prefix="gpufabric-fleet-crds-"))
atexit.register(shutil.rmtree, _ROOT, True)


@cache
def plan(variant: str) -> Plan:
    return plan_of(VARIANTS[variant](), variant)


@cache
def rendered(variant: str) -> dict[str, list[dict[str, Any]]]:
    """item id -> the objects the real tool renders for it (charts and overlays)."""
    p = plan(variant)
    out: dict[str, list[dict[str, Any]]] = {}
    for item in p.items:
        if item.layer not in (Layer.GPU, Layer.NETWORK):
            continue
        if isinstance(item.payload, HelmChart):
            out[item.id] = helm_template(item.payload, p.facts.kubernetes_minor)
        elif isinstance(item.payload, KustomizeOverlay):
            out[item.id] = kustomize(item.payload)
    return out


def own_objects(variant: str, kind: str | None = None) -> list[dict[str, Any]]:
    """gpufabric's own objects of the network and GPU layers (of one kind)."""
    return [
        item.payload.body
        for item in plan(variant).items
        if item.layer in (Layer.GPU, Layer.NETWORK)
        and isinstance(item.payload, K8sObject)
        and (kind is None or item.payload.body["kind"] == kind)
    ]


@cache
def crd_dir(variant: str) -> Path:
    """The CRDs pinned at the stack's versions (only the pinned Network Operator's) plus the
    CRDs the charts carry."""
    if not CRDS.is_dir():
        pytest.skip(f"no pinned CRDs in {CRDS}")
    network = (
        f"network-operator-v{plan(variant).components['network-operator'].version.lstrip('v')}"
    )
    into = _ROOT / variant
    for folder in sorted(CRDS.iterdir()):
        if folder.name.startswith("network-operator-") and folder.name != network:
            continue
        shutil.copytree(folder, into / "pinned" / folder.name)
    assert (into / "pinned" / network).is_dir(), f"no CRDs pinned for {network}"
    every = [o for objs in rendered(variant).values() for o in objs]
    (into / "rendered").mkdir(parents=True, exist_ok=True)
    for i, obj in enumerate(o for o in every if o["kind"] == "CustomResourceDefinition"):
        (into / "rendered" / f"crd-{i}.yaml").write_text(yaml.safe_dump(obj))
    return into


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_network_and_gpu_object_validates_against_the_pinned_crds(variant: str) -> None:
    p = plan(variant)
    objects = [o for objs in rendered(variant).values() for o in objs] + own_objects(variant)
    report = validate_objects(objects, p.facts.kubernetes_minor, crd_dir(variant))
    assert report.ok, [str(e) for e in report.errors[:5]]
    assert not report.unchecked, sorted(report.unchecked_reasons)
    kinds = {o["kind"] for o in own_objects(variant)}
    assert {"NicNodePolicy", "NicClusterPolicy", "NetworkAttachmentDefinition", "IPPool"} <= kinds


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_pinned_network_operator_serves_nic_node_policies(variant: str) -> None:
    objects = rendered(variant)[ids.NETWORK_OPERATOR]
    crds = {o["spec"]["names"]["kind"] for o in objects if o["kind"] == "CustomResourceDefinition"}
    assert {"NicNodePolicy", "NicClusterPolicy"} <= crds
    (operator,) = [
        o
        for o in objects
        if o["kind"] == "Deployment" and o["metadata"]["name"] == "network-operator"
    ]
    image = operator["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image.endswith(":v26.4.1"), image


@pytest.mark.parametrize("variant", VARIANTS)
def test_no_section_is_in_both_policies_and_no_node_in_two(variant: str) -> None:
    """What the operator's webhook and NicNodePolicy controller refuse (Mellanox/network-
    operator v26.4.1 pkg/policyoverlap): a section in the NicClusterPolicy and a
    NicNodePolicy, and two NicNodePolicies selecting one node."""
    (cluster,) = own_objects(variant, "NicClusterPolicy")
    node_policies = own_objects(variant, "NicNodePolicy")
    assert node_policies
    for policy in node_policies:
        assert not set(NODE_SECTIONS) & set(policy["spec"]) & set(cluster["spec"])
        assert len(policy["metadata"]["name"]) <= 30  # the webhook's name limit
    facts = plan(variant).facts
    nodes = {  # one node of each pool, labelled as the pool's selector says
        pool.name: dict(pool.nodes.selector) for pool in facts.pools
    }
    for pool, labels in nodes.items():
        selecting = [
            p["metadata"]["name"]
            for p in node_policies
            if all(labels.get(k) == v for k, v in p["spec"]["nodeSelector"].items())
        ]
        assert len(selecting) <= 1, (pool, selecting)
        if selecting:
            assert selecting == [pool]


def test_each_pool_policy_carries_its_own_device_plugin_and_resources() -> None:
    node_policies = {p["metadata"]["name"]: p for p in own_objects("fleet-mixed", "NicNodePolicy")}
    facts = plan("fleet-mixed").facts
    for pool in facts.pools:
        spec = node_policies[pool.name]["spec"]
        assert spec["nodeSelector"] == dict(pool.nodes.selector)
        config = json.loads(spec["rdmaSharedDevicePlugin"]["config"])["configList"]
        assert [c["resourceName"] for c in config] == [
            r.device_plugin_resource for r in pool.fabric.rails
        ]
        assert [c["selectors"]["ifNames"] for c in config] == [
            [r.netdev] for r in pool.fabric.rails
        ]
        assert {c["selectors"]["linkTypes"][0] for c in config} == {pool.fabric.device_link_type}
    nads = {
        n["metadata"]["name"]: n for n in own_objects("fleet-mixed", "NetworkAttachmentDefinition")
    }
    for pool in facts.pools:
        for rail in pool.fabric.rails:
            annotations = nads[rail.nad]["metadata"]["annotations"]
            assert annotations["k8s.v1.cni.cncf.io/resourceName"] == rail.resource
            assert json.loads(nads[rail.nad]["spec"]["config"])["ipam"]["poolName"] == rail.pool


def test_sriov_policies_select_only_their_pools_nodes() -> None:
    facts = plan("fleet-sriov-drivers").facts
    l40s = facts.pool_facts("l40s")
    policies = own_objects("fleet-sriov-drivers", "SriovNetworkNodePolicy")
    assert sorted(p["spec"]["resourceName"] for p in policies) == sorted(
        r.device_plugin_resource for r in l40s.fabric.rails
    )
    for policy in policies:
        assert policy["spec"]["nodeSelector"] == dict(l40s.nodes.selector)
    objects = rendered("fleet-sriov-drivers")[ids.NETWORK_OPERATOR]
    assert any(
        o["kind"] == "Deployment" and "sriov-network-operator" in o["metadata"]["name"]
        for o in objects
    )


def test_nvidia_drivers_one_default_from_the_chart_and_one_per_pool() -> None:
    chart_drivers = [
        o for o in rendered("fleet-sriov-drivers")[ids.GPU_OPERATOR] if o["kind"] == "NVIDIADriver"
    ]
    (default,) = chart_drivers
    assert default["spec"]["default"] is True
    assert not default["spec"].get("nodeSelector")
    (policy,) = [
        o for o in rendered("fleet-sriov-drivers")[ids.GPU_OPERATOR] if o["kind"] == "ClusterPolicy"
    ]
    assert policy["spec"]["driver"]["useNvidiaDriverCRD"] is True
    pools = {
        o["metadata"]["name"]: o["spec"] for o in own_objects("fleet-sriov-drivers", "NVIDIADriver")
    }
    assert sorted(pools) == ["h200", "l40s"]
    facts = plan("fleet-sriov-drivers").facts
    for pool in facts.pools:  # the operator refuses a node two non-default drivers select
        labels = dict(pool.nodes.selector)
        matching = [
            name
            for name, spec in pools.items()
            if all(labels.get(k) == v for k, v in spec["nodeSelector"].items())
        ]
        assert matching == ([pool.name] if pool.name in pools else [])
    assert pools["l40s"]["version"] == "580.95.05"
    assert default["spec"]["repository"] == pools["l40s"]["repository"]
    assert default["spec"]["image"] == pools["l40s"]["image"]
