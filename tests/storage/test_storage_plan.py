"""The storage layer as users rely on it: the StorageClass each transport gets (mount
options, subDir, reclaim policy), claims and quota per tenant, the facts verify storage and
gpufabric job read, and every bad value named by its config path."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import example_config, sections

from gpufabric.model.problems import StackError
from gpufabric.model.stackfile import model_from_config, stack_warnings
from gpufabric.plan.build import Plan, build_plan
from gpufabric.plan.items import HelmChart, K8sObject, Layer

NFS = {"server": "10.40.0.10", "share": "/export/training"}


def plan_of(config: dict[str, Any]) -> Plan:
    return build_plan("t", model_from_config(sections(config), "t", from_file=True))


def problems_of(config: dict[str, Any]) -> list[str]:
    with pytest.raises(StackError) as err:
        model_from_config(sections(config), "t", from_file=True)
    return [str(p) for p in err.value.problems]


def with_storage(lab: dict[str, Any], **nfs: Any) -> dict[str, Any]:
    lab["gpufabric:storage"] = {
        "backends": [{"name": "fs", "nfs": {**NFS, **nfs}}],
        "claims": [
            {"name": "checkpoints", "size": "10Ti"},
            {"name": "datasets", "size": "20Ti"},
        ],
    }
    return lab


def objects(plan: Plan, kind: str) -> list[dict[str, Any]]:
    return [dict(o.body) for _, o in plan.objects() if o.kind == kind]


def test_nfs_over_rdma_storage_class(lab: dict[str, Any]) -> None:
    plan = plan_of(with_storage(lab, nfsVersion="4.2", mountOptions=["hard"]))
    (sc,) = objects(plan, "StorageClass")
    assert sc["metadata"]["name"] == "gpufabric-fs"
    assert sc["provisioner"] == "nfs.csi.k8s.io"
    assert sc["mountOptions"] == ["nfsvers=4.2", "proto=rdma", "port=20049", "hard"]
    assert sc["parameters"] == {
        "server": "10.40.0.10",
        "share": "/export/training",
        # one directory per tenant and claim, filled in by the provisioner
        "subDir": "${pvc.metadata.namespace}/${pvc.metadata.name}",
        "onDelete": "retain",
    }
    assert sc["reclaimPolicy"] == "Retain"


def test_nfs_over_tcp_uses_nconnect(lab: dict[str, Any]) -> None:
    (sc,) = objects(plan_of(with_storage(lab, transport="tcp")), "StorageClass")
    assert sc["mountOptions"] == ["nfsvers=4.1", "proto=tcp", "nconnect=8"]
    (sc,) = objects(plan_of(with_storage(lab, transport="tcp", nconnect=4)), "StorageClass")
    assert "nconnect=4" in sc["mountOptions"]


def test_the_driver_chart_is_installed_for_nfs_only(lab: dict[str, Any]) -> None:
    plan = plan_of(with_storage(lab))
    charts = [it.payload for it in plan.layer(Layer.STORAGE) if isinstance(it.payload, HelmChart)]
    (chart,) = charts
    assert (chart.chart, chart.version) == ("csi-driver-nfs", "4.13.4")
    # gpufabric writes the StorageClass itself and takes no snapshots
    assert chart.values["storageClass"] == {"create": False}
    assert chart.values["controller"]["enableSnapshotter"] is False
    existing = plan_of(example_config("lab-roce"))
    assert not [it for it in existing.layer(Layer.STORAGE) if isinstance(it.payload, HelmChart)]
    assert not objects(existing, "StorageClass")


def test_claims_and_quota_per_tenant(lab: dict[str, Any]) -> None:
    plan = plan_of(with_storage(lab))
    tenants = [t["namespace"] for t in lab["gpufabric:tenants"]]
    claims = objects(plan, "PersistentVolumeClaim")
    assert sorted((c["metadata"]["namespace"], c["metadata"]["name"]) for c in claims) == sorted(
        (t, n) for t in tenants for n in ("checkpoints", "datasets")
    )
    for c in claims:
        assert c["spec"]["accessModes"] == ["ReadWriteMany"]
        assert c["spec"]["storageClassName"] == "gpufabric-fs"
    quotas = [
        q for q in objects(plan, "ResourceQuota") if q["metadata"]["name"] == "gpufabric-storage"
    ]
    assert {q["metadata"]["namespace"] for q in quotas} == set(tenants)
    for q in quotas:
        assert q["spec"]["hard"] == {"requests.storage": "30Ti", "persistentvolumeclaims": "2"}


def test_existing_class_claims_name_it(lab: dict[str, Any]) -> None:
    plan = plan_of(lab)
    for c in objects(plan, "PersistentVolumeClaim"):
        assert c["spec"]["storageClassName"] == "cephfs-rwx"
    (fact,) = plan.facts.storage_backends
    assert fact.transport is None


def test_facts_for_verify_storage(lab: dict[str, Any]) -> None:
    lab["gpufabric:tenants"][0]["claims"] = [
        {"name": "checkpoints", "size": "1Ti"},
        {"name": "datasets", "size": "512Gi"},
        {"name": "scratch", "size": "512Gi", "mountPath": "/scratch"},
    ]
    lab["gpufabric:tenants"][1]["claims"] = []
    plan = plan_of(with_storage(lab))
    first = lab["gpufabric:tenants"][0]["namespace"]
    assert [t.namespace for t in plan.facts.storage] == [first]  # the other has no claims
    storage = plan.facts.storage_of(first)
    assert storage is not None
    assert storage.quota_storage == "2Ti"
    assert storage.quota_claims == 3
    got = {
        c.name: (c.namespace, c.mount_path, c.read_only, c.transport, c.storage_class)
        for c in storage.claims
    }
    assert got == {
        "checkpoints": (first, "/checkpoints", False, "rdma", "gpufabric-fs"),
        "datasets": (first, "/data", True, "rdma", "gpufabric-fs"),
        "scratch": (first, "/scratch", False, "rdma", "gpufabric-fs"),
    }
    assert storage.checkpoint_claim is not None
    assert storage.checkpoint_claim.name == "checkpoints"


@pytest.mark.parametrize(
    ("change", "path", "words"),
    [
        (
            lambda s: s["backends"][0]["nfs"].update(nconnect=4),
            "storage.backends[0].nfs.nconnect",
            "transport: tcp",
        ),
        (
            lambda s: s["backends"][0]["nfs"].update(mountOptions=["proto=tcp"]),
            "storage.backends[0].nfs.mountOptions[0]",
            "set by transport",
        ),
        (
            lambda s: s["backends"][0]["nfs"].update(reclaimPolicy="Delete"),
            "storage.backends[0].nfs.reclaimPolicy",
            "expected Retain",
        ),
        (
            lambda s: s["backends"][0]["nfs"].update(server="nfs://x"),
            "storage.backends[0].nfs.server",
            "not an NFS server",
        ),
        (
            lambda s: s["backends"][0]["nfs"].update(share="export"),
            "storage.backends[0].nfs.share",
            "absolute path",
        ),
        (
            lambda s: s["backends"][0].update(existingClass={"name": "x"}),
            "storage.backends[0]",
            "exactly one of nfs, existingClass",
        ),
        (
            lambda s: s["claims"][0].update(size="10TB"),
            "storage.claims[0].size",
            "Mi, Gi, Ti or Pi",
        ),
        (
            lambda s: s["claims"][0].update(backend="nope"),
            "storage.claims[0].backend",
            "'nope' is not a backend",
        ),
        (
            lambda s: s["claims"].append({"name": "scratch", "size": "1Ti"}),
            "storage.claims[2].mountPath",
            "required",
        ),
        (
            lambda s: s["claims"].append(
                {"name": "more", "size": "1Ti", "mountPath": "/data/more"}
            ),
            "storage.claims[2].mountPath",
            "overlaps",
        ),
        (
            lambda s: s["claims"].append({"name": "etc", "size": "1Ti", "mountPath": "/etc/x"}),
            "storage.claims[2].mountPath",
            "hide the container",
        ),
        (
            # normalised before the reserved-path rule: it is /etc
            lambda s: s["claims"].append(
                {"name": "etc", "size": "1Ti", "mountPath": "/scratch/../etc"}
            ),
            "storage.claims[2].mountPath",
            "(it resolves to /etc) would hide the container",
        ),
        (
            lambda s: s["claims"].append({"name": "x", "size": "1Ti", "mountPath": "/scratch/./x"}),
            "storage.claims[2].mountPath",
            "write /scratch/x",
        ),
        (
            # gpufabric mounts --entrypoint's files there: one mountPath twice in a pod
            lambda s: s["claims"].append(
                {"name": "code", "size": "1Ti", "mountPath": "/opt/gpufabric/entrypoint"}
            ),
            "storage.claims[2].mountPath",
            "collides with /opt/gpufabric/entrypoint",
        ),
        (
            lambda s: s["claims"].append({"name": "opt", "size": "1Ti", "mountPath": "/opt"}),
            "storage.claims[2].mountPath",
            "collides with /opt/gpufabric/entrypoint",
        ),
        (
            lambda s: s["claims"].append(
                {"name": "keys", "size": "1Ti", "mountPath": "/root/.ssh/more"}
            ),
            "storage.claims[2].mountPath",
            "collides with /root/.ssh",
        ),
        (
            lambda s: s["backends"][0]["nfs"].update(share="/export/x/../training"),
            "storage.backends[0].nfs.share",
            "resolve it to /export/training",
        ),
        (
            lambda s: s["claims"][0].update(readOnly=True),
            "storage.claims[0].readOnly",
            "could not write",
        ),
        (
            lambda s: s["claims"].append({"name": "datasets", "size": "1Ti"}),
            "storage.claims[2].name",
            "already",
        ),
    ],
)
def test_bad_storage_is_named_by_path(
    lab: dict[str, Any], change: Any, path: str, words: str
) -> None:
    config = with_storage(lab)
    change(config["gpufabric:storage"])
    found = [
        p
        for p in problems_of(config)
        if p.startswith((f"gpufabric:storage.{path.removeprefix('storage.')}", path))
    ]
    assert found, problems_of(config)
    assert any(words in p for p in found), found


@pytest.mark.parametrize(
    ("outer", "inner", "server", "refused"),
    [
        ("/export/training", "/export/training/research", "10.40.0.10", True),
        ("/export/training/research", "/export/training", "10.40.0.10", True),
        ("/export/training", "/export/training", "10.40.0.10", True),
        ("/", "/export/training", "10.40.0.10", True),
        # the same server, written another way
        ("/export/training", "/export/training/research", "fd00:0:0::10", True),
        ("/export/training", "/export/training-research", "10.40.0.10", False),
        ("/export/training", "/export/training/research", "10.40.0.11", False),
    ],
)
def test_nfs_shares_on_one_server_never_nest(
    lab: dict[str, Any], outer: str, inner: str, server: str, refused: bool
) -> None:
    """Issue 41: with /export/training and /export/training/research on one server, tenant
    research's claim llm-pretrain on the outer backend is the directory holding all of
    tenant llm-pretrain's claims on the inner one (each claim is
    <share>/<namespace>/<claim>, and a tenant names the claims it creates)."""
    first = "fd00::10" if ":" in server else "10.40.0.10"
    config = with_storage(lab, share=outer, server=first)
    config["gpufabric:storage"]["backends"].append(
        {"name": "inner", "nfs": {"server": server, "share": inner}}
    )
    for claim in config["gpufabric:storage"]["claims"]:
        claim["backend"] = "fs"
    if not refused:
        plan_of(config)
        return
    found = [p for p in problems_of(config) if "backends[1].nfs.share" in p]
    assert len(found) == 1, problems_of(config)
    assert f"backends[0]'s share {outer}" in found[0]
    assert "neither inside nor above" in found[0]


def test_tenant_claims_without_storage_are_refused(lab: dict[str, Any]) -> None:
    del lab["gpufabric:storage"]
    lab["gpufabric:tenants"][0]["claims"] = [{"name": "checkpoints", "size": "1Ti"}]
    assert any(p.startswith("tenants[0].claims") for p in problems_of(lab))


def test_unknown_rwx_provisioner_warns(lab: dict[str, Any]) -> None:
    lab["gpufabric:storage"]["backends"][0]["existingClass"]["provisioner"] = "ebs.csi.aws.com"
    model = model_from_config(sections(lab), "t", from_file=True)
    (warning,) = [w for w in stack_warnings(model) if w.path.startswith("storage.")]
    assert warning.path == "storage.backends[0].existingClass.provisioner"
    assert "ReadWriteMany" in warning.message
    lab["gpufabric:storage"]["backends"][0]["existingClass"]["provisioner"] = "cephfs.csi.ceph.com"
    model = model_from_config(sections(lab), "t", from_file=True)
    assert not [w for w in stack_warnings(model) if w.path.startswith("storage.")]


# GPUDirect Storage: refused without open kernel modules and a transport it reads through.


def test_gds_with_peermem_is_refused_not_forced(lab: dict[str, Any]) -> None:
    """Before: gds silently switched kernelModuleType to open under peermem."""
    config = with_storage(lab)
    config["gpufabric:fabric"]["gpuDirect"] = "peermem"
    config["gpufabric:gpuOperator"] = {"gds": True}
    (problem,) = [p for p in problems_of(config) if p.startswith("gpuOperator.gds")]
    assert "open kernel modules" in problem
    assert "peermem" in problem


def test_gds_needs_a_storage_transport_it_supports(lab: dict[str, Any]) -> None:
    lab["gpufabric:gpuOperator"] = {"gds": True}
    # lab-roce's backend is a bring-your-own CephFS class not marked as serving GDS
    (problem,) = [p for p in problems_of(lab) if p.startswith("gpuOperator.gds")]
    assert "no storage backend GDS can read through" in problem
    tcp = with_storage(example_config("lab-roce"), transport="tcp")
    tcp["gpufabric:gpuOperator"] = {"gds": True}
    assert any(p.startswith("gpuOperator.gds") for p in problems_of(tcp))
    rdma = with_storage(example_config("lab-roce"))
    rdma["gpufabric:gpuOperator"] = {"gds": True}
    values = next(it.payload for it in plan_of(rdma).items if it.id == "gpu/gpu-operator")
    assert isinstance(values, HelmChart)
    assert values.values["gds"] == {"enabled": True}
    assert values.values["driver"]["kernelModuleType"] == "open"
    lab["gpufabric:storage"]["backends"][0]["existingClass"]["gds"] = True
    assert plan_of(lab).facts.gpu_operator.gds


def test_objects_render_once_per_item(lab: dict[str, Any]) -> None:
    plan = plan_of(with_storage(lab))
    for it in plan.layer(Layer.STORAGE):
        if isinstance(it.payload, K8sObject) and it.payload.kind == "PersistentVolumeClaim":
            # a claim holds checkpoints: dropping it from the stack leaves it in the cluster
            assert it.retain_on_delete
