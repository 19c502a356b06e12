"""The storage layer against the real tools: `helm template` of the pinned csi-driver-nfs
chart with the values gpufabric computes, every object (the chart's and gpufabric's own
StorageClass, claims and quota) validated strictly, and their effect asserted: the class
names the driver the chart registers, that driver's provisioner fills in the subDir
template, the mounts carry the transport's options, checkpoints are retained."""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest
from builders import example_config, plan_of
from upstream import helm_template

from gpufabric.model.storage import size_bytes
from gpufabric.outputs.schema import validate_objects
from gpufabric.plan.build import Plan
from gpufabric.plan.items import HelmChart, Layer

pytestmark = pytest.mark.conformance

STACK = "prod-ib"
"""The example with an NFS-over-RDMA backend."""


@cache
def plan() -> Plan:
    return plan_of(example_config(STACK), STACK)


@cache
def chart_objects() -> list[dict[str, Any]]:
    p = plan()
    (chart,) = [it.payload for it in p.layer(Layer.STORAGE) if isinstance(it.payload, HelmChart)]
    return helm_template(chart, p.facts.kubernetes_minor)


def own_objects(kind: str) -> list[dict[str, Any]]:
    return [
        dict(o.body) for it, o in plan().objects() if it.layer == Layer.STORAGE and o.kind == kind
    ]


def containers(kind: str, name: str) -> dict[str, dict[str, Any]]:
    (obj,) = [o for o in chart_objects() if o["kind"] == kind and o["metadata"]["name"] == name]
    return {c["name"]: c for c in obj["spec"]["template"]["spec"]["containers"]}


def test_every_storage_object_validates_strictly() -> None:
    p = plan()
    ours = [dict(o.body) for it, o in p.objects() if it.layer == Layer.STORAGE]
    everything = chart_objects() + ours
    report = validate_objects(everything, p.facts.kubernetes_minor)
    assert report.ok, [str(e) for e in report.errors[:5]]
    assert not report.unchecked, sorted(report.unchecked_reasons)
    assert report.checked_core == len(everything)


def test_the_class_names_the_driver_the_chart_registers() -> None:
    (driver,) = [o for o in chart_objects() if o["kind"] == "CSIDriver"]
    (sc,) = own_objects("StorageClass")
    assert sc["provisioner"] == driver["metadata"]["name"]
    # the chart writes no class of its own: the only class is gpufabric's
    assert not [o for o in chart_objects() if o["kind"] == "StorageClass"]


def test_the_provisioner_fills_in_the_per_tenant_sub_directory() -> None:
    """The driver substitutes ${pvc.metadata.namespace}/${pvc.metadata.name} only from the
    metadata the external provisioner passes with --extra-create-metadata."""
    provisioner = containers("Deployment", "csi-nfs-controller")["csi-provisioner"]
    assert "--extra-create-metadata=true" in provisioner["args"]
    (sc,) = own_objects("StorageClass")
    assert sc["parameters"]["subDir"] == "${pvc.metadata.namespace}/${pvc.metadata.name}"


def test_no_snapshot_machinery_runs() -> None:
    assert "csi-snapshotter" not in containers("Deployment", "csi-nfs-controller")
    assert not [o for o in chart_objects() if o["metadata"]["name"] == "snapshot-controller"]


def test_the_node_plugin_runs_on_tainted_gpu_nodes() -> None:
    (ds,) = [o for o in chart_objects() if o["kind"] == "DaemonSet"]
    tolerations = ds["spec"]["template"]["spec"]["tolerations"]
    assert {"operator": "Exists"} in tolerations


def test_mounts_reclaim_and_claims_take_effect() -> None:
    (sc,) = own_objects("StorageClass")
    options = sc["mountOptions"]
    assert {"proto=rdma", "port=20049"} <= set(options)
    assert any(o in options for o in ("nfsvers=4.1", "nfsvers=4.2"))
    assert sc["reclaimPolicy"] == "Retain"
    assert sc["parameters"]["onDelete"] == "retain"
    claims = own_objects("PersistentVolumeClaim")
    assert claims
    assert {c["spec"]["storageClassName"] for c in claims} == {sc["metadata"]["name"]}
    for quota in own_objects("ResourceQuota"):
        ns = quota["metadata"]["namespace"]
        mine = [c for c in claims if c["metadata"]["namespace"] == ns]
        total = sum(size_bytes(c["spec"]["resources"]["requests"]["storage"]) for c in mine)
        assert size_bytes(quota["spec"]["hard"]["requests.storage"]) == total
        assert quota["spec"]["hard"]["persistentvolumeclaims"] == str(len(mine))
