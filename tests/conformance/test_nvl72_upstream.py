"""NVL72 stacks proven against the real upstream: the pinned DRA driver chart (0.4.0) and the
GPU Operator chart rendered by the real `helm` with the stacks' values; every object they
render, and every ComputeDomain and job a 36-tray (and an acceptance) run carries, validated
strictly against the pinned CRDs and the Kubernetes 1.34 schemas. Then what the driver reads:
its kubelet plugin only on the trays, GPUs left to the device plugin, the
ComputeDomain DeviceClasses served through resource.k8s.io/v1. Skipped cleanly without helm
and the pinned charts."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import plan_of
from nvl72variants import gb200, gb300
from upstream import CRDS, helm_template

from gpufabric.outputs.jobs import JobRequest, job_objects
from gpufabric.outputs.schema import validate_objects
from gpufabric.plan import ids
from gpufabric.plan.build import Plan
from gpufabric.plan.items import HelmChart
from gpufabric.verify.nccl import job as nccl_job

pytestmark = pytest.mark.conformance

VARIANTS: dict[str, Callable[[], dict[str, Any]]] = {"gb200-nvl72": gb200, "gb300-nvl72": gb300}


@cache
def plan(variant: str) -> Plan:
    return plan_of(VARIANTS[variant](), variant)


@cache
def rendered(variant: str, item_id: str) -> list[dict[str, Any]]:
    p = plan(variant)
    (item,) = [i for i in p.items if i.id == item_id]
    assert isinstance(item.payload, HelmChart)
    return helm_template(item.payload, p.facts.kubernetes_minor)


def crd_dir(into: Path) -> Path:
    if not CRDS.is_dir():
        pytest.skip(f"no pinned CRDs in {CRDS}")
    for folder in sorted(CRDS.iterdir()):
        if folder.name.startswith("network-operator-"):
            continue
        shutil.copytree(folder, into / folder.name)
    return into


def jobs(variant: str) -> list[dict[str, Any]]:
    """A 36-tray job of every kind the stack runs (with its ComputeDomain), and an
    acceptance run's job and ComputeDomain."""
    p = plan(variant)
    out: list[dict[str, Any]] = []
    for kind in ("mpijob", "pytorchjob"):
        if kind in p.facts.operators.job_kinds:
            out += job_objects(p, JobRequest(tenant="frontier-pretrain", kind=kind, nodes=36))
    accept = nccl_job.acceptance_job(p, "frontier-pretrain", nodes=18)
    out.append(accept)
    meta = accept["metadata"]
    owner = {**accept, "metadata": {**meta, "uid": "0b5b7a4e-0000-4000-8000-000000000001"}}
    out.append(nccl_job.compute_domain(meta["namespace"], meta["name"], 18, owner))
    return out


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_charts_and_the_jobs_objects_validate_strictly(variant: str) -> None:
    p = plan(variant)
    objects = (
        rendered(variant, ids.DRA_DRIVER) + rendered(variant, ids.GPU_OPERATOR) + jobs(variant)
    )
    with tempfile.TemporaryDirectory() as tmp:
        report = validate_objects(objects, p.facts.kubernetes_minor, crd_dir(Path(tmp)))
    assert report.ok, [str(e) for e in report.errors[:5]]
    assert not report.unchecked, sorted(report.unchecked_reasons)
    kinds = [o["kind"] for o in objects]
    assert kinds.count("ComputeDomain") == sum(
        1 for o in jobs(variant) if o["kind"] == "ComputeDomain"
    )
    assert "DeviceClass" in kinds
    assert "DaemonSet" in kinds


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_driver_serves_compute_domains_on_the_trays_only(variant: str) -> None:
    objects = rendered(variant, ids.DRA_DRIVER)
    classes = {o["metadata"]["name"]: o for o in objects if o["kind"] == "DeviceClass"}
    assert "compute-domain-default-channel.nvidia.com" in classes
    assert "gpu.nvidia.com" not in classes  # GPUs stay with the device plugin
    assert {o["apiVersion"] for o in classes.values()} == {"resource.k8s.io/v1"}
    (plugin,) = [o for o in objects if o["kind"] == "DaemonSet"]
    spec = plugin["spec"]["template"]["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [
        {
            "matchExpressions": [
                {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}
            ]
        }
    ]
    names = [c["name"] for c in spec["containers"]]
    assert names == ["compute-domains"], names
    crds = {o["spec"]["names"]["kind"] for o in objects if o["kind"] == "CustomResourceDefinition"}
    assert {"ComputeDomain", "ComputeDomainClique"} <= crds


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_gpu_operator_runs_cdi_and_gfd(variant: str) -> None:
    objects = rendered(variant, ids.GPU_OPERATOR)
    (policy,) = [o for o in objects if o["kind"] == "ClusterPolicy"]
    assert policy["spec"]["cdi"]["enabled"] is True
    assert policy["spec"]["gfd"]["enabled"] is True


def test_the_pinned_crds_are_the_charts() -> None:
    objects = rendered("gb200-nvl72", ids.DRA_DRIVER)
    chart = {o["metadata"]["name"]: o["spec"] for o in objects if o["kind"] == "CustomResourceDefinition"}  # fmt: skip
    folder = CRDS / "dra-driver-nvidia-gpu-v0.4.0"
    if not folder.is_dir():
        pytest.skip(f"no pinned CRDs in {folder}")
    pinned = {}
    for f in sorted(folder.glob("*.yaml")):
        doc = yaml.safe_load(f.read_text())
        pinned[doc["metadata"]["name"]] = doc["spec"]
    assert chart == pinned
