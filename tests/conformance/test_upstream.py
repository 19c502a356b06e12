"""Proven against the real upstream: `helm template` over the pinned charts and `kubectl
kustomize` over the overlays with the pinned upstream manifests, for every example stack.

Every rendered object validates strictly (core schemas of the stack's Kubernetes version,
CRDs at the pinned versions and those the charts carry), and every value and patch gpufabric
sets has its intended effect on the object the controller reads. Skipped cleanly without
helm/kubectl and the pinned charts (../shared/upstream, GPUFABRIC_SHARED or PATH).
"""

from __future__ import annotations

import atexit
import json
import re
import shutil
import tempfile
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import SHIPPED_STACKS, example_config, model_of, plan_of
from upstream import LOCAL_BASES, UPSTREAM, crd_dir_with, helm_template, kustomize

from gpufabric.model.sources import full_name
from gpufabric.outputs.schema import validate_objects
from gpufabric.plan import authority as registry
from gpufabric.plan import ids
from gpufabric.plan.build import Plan
from gpufabric.plan.items import HelmChart, KustomizeOverlay
from gpufabric.plan.pulls import collect

pytestmark = pytest.mark.conformance

WORKLOADS = ("Deployment", "DaemonSet", "StatefulSet", "Job", "CronJob", "Pod")
_IMAGE_LIKE = re.compile(r"^[a-z0-9.-]+\.[a-z]+(:\d+)?/[\w./-]+(:[\w.-]+)?(@sha256:[0-9a-f]+)?$")


@cache
def plan(stack: str) -> Plan:
    return plan_of(example_config(stack), stack)


def item_ids(stack: str) -> set[str]:
    """Ids of the stack's items (known without rendering: parametrization never runs a tool)."""
    return {it.id for it in plan(stack).items}


@cache
def rendered(stack: str) -> dict[str, list[dict[str, Any]]]:
    """item id -> the objects the real tool renders for it."""
    p = plan(stack)
    out: dict[str, list[dict[str, Any]]] = {}
    for item in p.items:
        if isinstance(item.payload, HelmChart):
            out[item.id] = helm_template(item.payload, p.facts.kubernetes_minor)
        elif isinstance(item.payload, KustomizeOverlay):
            out[item.id] = kustomize(item.payload)
    return out


RENDERS = [
    (stack, item.id)
    for stack in SHIPPED_STACKS
    for item in plan(stack).items
    if isinstance(item.payload, HelmChart | KustomizeOverlay)
]


def kinds(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def named(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert found, f"no {kind} {name} in the render"
    return found[0]


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec = obj["spec"]
    if obj["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    return spec if obj["kind"] == "Pod" else spec["template"]["spec"]


def images_of(objects: list[dict[str, Any]]) -> Iterator[tuple[str, str]]:
    """(where, image) of every image a workload can pull: containers, init containers, and
    image references passed to operators through env."""
    for obj in objects:
        if obj["kind"] not in WORKLOADS:
            continue
        spec = pod_spec(obj)
        for c in [*spec.get("initContainers", []), *spec.get("containers", [])]:
            where = f"{obj['kind']} {obj['metadata']['name']}/{c['name']}"
            yield where, c["image"]
            for env in c.get("env", []) or []:
                value = env.get("value")
                if isinstance(value, str) and _IMAGE_LIKE.match(value):
                    yield f"{where} env {env['name']}", value


# ------------------------------------------------------------------- every object valid


_CRD_ROOT = Path(tempfile.mkdtemp(prefix="gpufabric-conformance-crds-"))
atexit.register(shutil.rmtree, _CRD_ROOT, True)


@cache
def crd_dir(stack: str) -> Path:
    """The pinned CRDs plus every CRD the stack's renders carry (one directory per stack,
    so their schemas are loaded once)."""
    every = [o for objs in rendered(stack).values() for o in objs]
    return crd_dir_with(every, _CRD_ROOT / stack)


@pytest.mark.parametrize(("stack", "item_id"), RENDERS)
def test_every_rendered_object_validates(stack: str, item_id: str) -> None:
    objects = rendered(stack)[item_id]
    assert objects, f"{item_id} renders nothing"
    report = validate_objects(objects, plan(stack).facts.kubernetes_minor, crd_dir(stack))
    assert report.ok, [str(e) for e in report.errors[:5]]
    assert not report.unchecked, sorted(report.unchecked_reasons)


# ------------------------------------------------------------------ values take effect


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_gpu_operator_cluster_policy_carries_the_values(stack: str) -> None:
    values = plan(stack).item(ids.GPU_OPERATOR).payload.values  # type: ignore[union-attr]
    objects = rendered(stack)[ids.GPU_OPERATOR]
    (policy,) = kinds(objects, "ClusterPolicy")
    driver = policy["spec"]["driver"]
    assert driver["enabled"] is values["driver"]["enabled"]
    assert driver["kernelModuleType"] == values["driver"]["kernelModuleType"]
    assert driver["rdma"]["enabled"] is values["driver"]["rdma"]["enabled"]
    assert driver["rdma"]["useHostMofed"] is values["driver"]["rdma"]["useHostMofed"]
    assert driver["usePrecompiled"] is values["driver"]["usePrecompiled"]
    assert policy["spec"]["gdrcopy"]["enabled"] is values["gdrcopy"]["enabled"]
    assert policy["spec"]["gds"]["enabled"] is values["gds"]["enabled"]
    assert policy["spec"]["mig"]["strategy"] == values["mig"]["strategy"]
    assert policy["spec"]["dcgmExporter"]["enabled"] is values["dcgmExporter"]["enabled"]
    nfd = [
        d for d in kinds(objects, "DaemonSet") if "node-feature-discovery" in d["metadata"]["name"]
    ]
    assert bool(nfd) is values["nfd"]["enabled"]


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_network_operator_runs_exactly_what_the_stack_needs(stack: str) -> None:
    values = plan(stack).item(ids.NETWORK_OPERATOR).payload.values  # type: ignore[union-attr]
    objects = rendered(stack)[ids.NETWORK_OPERATOR]
    names = {
        o["metadata"]["name"] for o in kinds(objects, "Deployment") + kinds(objects, "DaemonSet")
    }
    assert any("node-feature-discovery" in n for n in names) is values["nfd"]["enabled"]
    sriov = any("sriov-network-operator" in n for n in names)
    assert sriov is values["sriovNetworkOperator"]["enabled"]
    # exactly one NFD in the cluster: from whichever operator the facts name
    gpu_values = plan(stack).item(ids.GPU_OPERATOR).payload.values  # type: ignore[union-attr]
    assert values["nfd"]["enabled"] != gpu_values["nfd"]["enabled"]


def _authority_chart(stack: str) -> str:
    return ids.authority_chart(plan(stack).facts.gang.authority)


@pytest.mark.parametrize(
    "stack", [s for s in SHIPPED_STACKS if plan(s).facts.gang.authority == "kueue"]
)
def test_kueue_loads_the_configuration_gpufabric_computes(stack: str) -> None:
    p = plan(stack)
    values = p.item(_authority_chart(stack)).payload.values  # type: ignore[union-attr]
    objects = rendered(stack)[_authority_chart(stack)]
    cm = named(objects, "ConfigMap", "kueue-manager-config")
    loaded = yaml.safe_load(cm["data"]["controller_manager_config.yaml"])
    ours = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
    # every key gpufabric sets is what Kueue loads (the chart may add its own, e.g. certs)
    assert {k: loaded.get(k) for k in ours} == ours
    assert loaded["integrations"]["frameworks"] == list(p.facts.gang.frameworks)
    (manager,) = [
        d
        for d in kinds(objects, "Deployment")
        if d["metadata"]["name"].endswith("controller-manager")
    ]
    image = pod_spec(manager)["containers"][0]["image"]
    assert image == p.components["kueue"].image_ref.replace("{version}", "") or image.endswith(
        ":v" + p.components["kueue"].version.lstrip("v")
    )


@pytest.mark.parametrize(
    "stack", [s for s in SHIPPED_STACKS if plan(s).facts.gang.authority == "volcano"]
)
def test_volcano_loads_its_scheduler_and_controller_configuration(stack: str) -> None:
    """Both ConfigMaps parsed as Volcano's loaders parse them (YAML into their config
    structs): the controller's must be a mapping, not a string encoded twice."""
    p = plan(stack)
    volcano = registry.get("volcano")
    objects = rendered(stack)[_authority_chart(stack)]
    scheduler = yaml.safe_load(
        named(objects, "ConfigMap", "volcano-scheduler-configmap")["data"]["volcano-scheduler.conf"]
    )
    assert scheduler == volcano.scheduler_config(p.facts.gang)  # type: ignore[attr-defined]
    controller = yaml.safe_load(
        named(objects, "ConfigMap", "volcano-controller-configmap")["data"][
            "volcano-controller.conf"
        ]
    )
    assert isinstance(controller, dict), f"volcano-controller.conf is {type(controller).__name__}"
    assert controller == volcano.controller_config(p.facts.gang)  # type: ignore[attr-defined]
    levels = controller["networkTopologyDiscovery"][0]["config"]["networkTopologyTypes"][
        "gpufabric"
    ]
    assert [lv["nodeLabel"] for lv in levels] == list(p.facts.gang.topology_levels)


# --------------------------------------------------------------------------- overlays


@pytest.mark.parametrize("stack", [s for s in SHIPPED_STACKS if ids.MPI_OPERATOR in item_ids(s)])
def test_mpi_operator_runs_the_pinned_image_with_the_gang_flags(stack: str) -> None:
    p = plan(stack)
    objects = rendered(stack)[ids.MPI_OPERATOR]
    container = pod_spec(named(objects, "Deployment", "mpi-operator"))["containers"][0]
    assert container["args"] == list(p.facts.operators.mpi_operator_args)
    assert container["image"] == p.components["mpi-operator"].image_ref
    assert [c["metadata"]["name"] for c in kinds(objects, "CustomResourceDefinition")] == [
        "mpijobs.kubeflow.org"
    ]


@pytest.mark.parametrize(
    "stack", [s for s in SHIPPED_STACKS if ids.TRAINING_OPERATOR in item_ids(s)]
)
def test_training_operator_without_mpijob_and_with_exactly_the_schemes(stack: str) -> None:
    p = plan(stack)
    objects = rendered(stack)[ids.TRAINING_OPERATOR]
    crds = {c["metadata"]["name"] for c in kinds(objects, "CustomResourceDefinition")}
    assert "mpijobs.kubeflow.org" not in crds
    container = pod_spec(named(objects, "Deployment", "training-operator"))["containers"][0]
    schemes = [a.split("=", 1)[1] for a in container["args"] if a.startswith("--enable-scheme=")]
    assert schemes == list(p.facts.operators.training_operator_schemes)
    for scheme in schemes:
        assert f"{scheme}s.kubeflow.org" in crds
    gang = [a for a in container["args"] if a.startswith("--gang-scheduler-name")]
    assert bool(gang) is (p.facts.gang.authority == "volcano")


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_multus_runs_the_pinned_thick_image(stack: str) -> None:
    p = plan(stack)
    if ids.MULTUS not in rendered(stack):
        pytest.skip("Multus comes from the NicClusterPolicy in this stack")
    (ds,) = kinds(rendered(stack)[ids.MULTUS], "DaemonSet")
    images = {
        c["image"] for c in pod_spec(ds)["containers"] + pod_spec(ds).get("initContainers", [])
    }
    assert images == {p.components["multus"].image_ref}


# ------------------------------------------------------------------------------ air gap


def _mirrors(stack: str) -> tuple[str, ...]:
    return tuple(
        v.rstrip("/") + "/"
        for v in model_of(example_config(stack)).sources.mirrors().registries.values()
    )


@pytest.mark.parametrize(
    "stack", [s for s in SHIPPED_STACKS if model_of(example_config(s)).sources.airGapped]
)
def test_air_gapped_stacks_pull_every_image_through_their_mirrors(stack: str) -> None:
    mirrors = _mirrors(stack)
    upstream = [
        f"{item_id}: {where}: {image}"
        for item_id, objects in rendered(stack).items()
        for where, image in images_of(objects)
        if not image.startswith(mirrors)
    ]
    assert upstream == []
    # ClusterPolicy / NicClusterPolicy image specs the operators pull from
    for objects in rendered(stack).values():
        for policy in kinds(objects, "ClusterPolicy"):
            for name, spec in policy["spec"].items():
                if (
                    isinstance(spec, dict)
                    and isinstance(spec.get("repository"), str)
                    and spec.get("image")
                ):
                    assert spec["repository"].startswith(mirrors), (
                        f"ClusterPolicy {name}: {spec['repository']}"
                    )


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_gpufabric_images_lists_every_image_the_renders_pull(stack: str) -> None:
    listed = {full_name(i.pulled) for i in collect(stack, model_of(example_config(stack))).images}
    pulled = {
        full_name(image) for objects in rendered(stack).values() for _, image in images_of(objects)
    }
    missing = sorted(pulled - listed)
    assert missing == [], "pulled by rendered workloads but not listed by gpufabric images"


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_multus_isolates_namespaces(stack: str) -> None:
    """The daemon configuration kustomize builds turns namespace isolation on (a pod cannot
    name another tenant's NAD), lets every pod reach the shared networks' namespace, and
    keeps every setting of the pinned upstream configuration."""
    p = plan(stack)
    if ids.MULTUS not in rendered(stack):
        pytest.skip("Multus comes from the NicClusterPolicy in this stack")
    (cm,) = [
        o
        for o in kinds(rendered(stack)[ids.MULTUS], "ConfigMap")
        if o["metadata"]["name"] == "multus-daemon-config"
    ]
    config = json.loads(cm["data"]["daemon-config.json"])
    assert config["namespaceIsolation"] is True
    shared = p.facts.fabric.networks_namespace
    assert config.get("globalNamespaces") == shared
    upstream_text = (UPSTREAM / "src" / LOCAL_BASES["multus"]).read_text()
    (upstream_cm,) = [
        d
        for d in yaml.safe_load_all(upstream_text)
        if d and d.get("kind") == "ConfigMap" and d["metadata"]["name"] == "multus-daemon-config"
    ]
    upstream = json.loads(upstream_cm["data"]["daemon-config.json"])
    assert {k: config[k] for k in upstream} == upstream
