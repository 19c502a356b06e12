"""gpufabric's own RBAC, admission and health objects are compared and read back: the
training kinds tenants may run (the tenant ClusterRole), each tenant's groups (its
RoleBinding), the in-cluster health loop (its CronJob or Deployment); the many such objects
a cluster holds for itself are neither compared nor called foreign."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from builders import example_config, plan_of
from discoverseed import discovered, seeded

from gpufabric.discover.roundtrip import compare
from gpufabric.model.stackfile import load_stack
from gpufabric.plan.build import Plan


def round_trip(plan: Plan) -> tuple[dict[str, Any], list[str]]:
    config, diffs, _ = discovered(seeded(plan), plan.stack)
    return config, diffs


@pytest.mark.parametrize("stack", ["prod-ib", "fleet-mixed", "roce-sriov-volcano"])
def test_the_training_kinds_tenants_may_run_are_read_back(stack: str) -> None:
    # before: the Training Operator's schemes were not read and nothing compared the tenant
    # role: `pulumi up` would have taken PyTorchJob (and JAXJob) from every tenant, exit 0
    plan = load_stack(stack).plan
    config, diffs = round_trip(plan)
    assert diffs == []
    wanted = list(example_config(stack)["gpufabric:training"]["trainingOperator"]["schemes"])
    assert sorted(config["gpufabric:training"]["trainingOperator"]["schemes"]) == sorted(wanted)


def test_a_tenant_role_that_lost_a_kind_is_a_difference() -> None:
    plan = load_stack("prod-ib").plan
    snap = seeded(plan)
    role = next(
        r for r in snap.objects["ClusterRole"] if r["metadata"]["name"] == "gpufabric-tenant"
    )
    rule = next(r for r in role["rules"] if "kubeflow.org" in r["apiGroups"])
    rule["resources"] = [r for r in rule["resources"] if r != "jaxjobs"]
    diffs = [str(d) for d in compare(plan, snap.all()).differences]
    assert diffs == [
        'ClusterRole gpufabric-tenant: rules[4].resources: live ["mpijobs", "pytorchjobs"], '
        'rendered ["jaxjobs", "mpijobs", "pytorchjobs"]'
    ]


def test_tenant_groups_are_read_from_their_role_binding() -> None:
    # before: not read, and RoleBindings not compared: the groups vanished with exit 0
    config = example_config("prod-ib")
    config["gpufabric:tenants"][0]["groups"] = ["ml-team", "ml-admins"]
    found, diffs = round_trip(plan_of(config, "prod-ib"))
    assert diffs == []
    assert found["gpufabric:tenants"][0]["groups"] == ["ml-team", "ml-admins"]


@pytest.mark.parametrize("watch", [False, True])
def test_the_in_cluster_health_loop_is_read_back(watch: bool) -> None:
    config = example_config("roce-sriov-volcano")
    loop = config["gpufabric:monitoring"]["health"]["inCluster"]
    if watch:
        loop.update({"watch": True, "intervalSeconds": 120, "stacksDir": "/srv/stacks"})
    else:
        loop["schedule"] = "*/5 * * * *"
    found, diffs = round_trip(plan_of(config, "roce-sriov-volcano"))
    assert diffs == []
    read = found["gpufabric:monitoring"]["health"]["inCluster"]
    assert read == loop


def test_a_clusters_own_rbac_is_neither_compared_nor_foreign() -> None:
    plan = load_stack("lab-roce").plan
    snap = seeded(plan)
    theirs = copy.deepcopy(next(iter(snap.objects["ClusterRole"])))
    theirs["metadata"] = {"name": "system:controller:job-controller", "uid": "x"}
    snap.objects["ClusterRole"].append(theirs)
    gate = compare(plan, snap.all())
    assert gate.differences == []
    assert not any("job-controller" in f for f in gate.foreign)


def test_a_tenant_without_groups_stays_without() -> None:
    # groups: [] renders no binding; before, discovery wrote nothing, and the default group
    # (gpufabric:tenant:<ns>) would have been granted the namespace
    config = example_config("dgx-h100")
    config["gpufabric:tenants"][0]["groups"] = []
    found, diffs = round_trip(plan_of(config, "dgx-h100"))
    assert diffs == []
    assert found["gpufabric:tenants"][0]["groups"] == []
    assert "groups" not in found["gpufabric:tenants"][1]  # the default group: not written


def test_networks_per_tenant_come_back_with_their_vlans() -> None:
    # nadScope: tenant puts a copy of each rail's network in every tenant's namespace, its
    # VLAN in it (before: the first copy's namespace became networkNamespace, the stack
    # did not validate and the VLANs were lost)
    config = example_config("roce-sriov-volcano")
    config["gpufabric:fabric"]["nadScope"] = "tenant"
    config["gpufabric:tenants"][0]["vlan"] = 101
    config["gpufabric:tenants"][1]["vlan"] = 102
    found, diffs = round_trip(plan_of(config, "roce-sriov-volcano"))
    assert diffs == []
    assert found["gpufabric:fabric"]["nadScope"] == "tenant"
    assert "networkNamespace" not in found["gpufabric:fabric"]
    assert [t.get("vlan") for t in found["gpufabric:tenants"]] == [101, 102, None]
    assert not any("blocks" in r for r in found["gpufabric:fabric"]["rails"])


def test_networks_per_tenant_come_back_with_their_partitions() -> None:
    config = example_config("prod-ib")
    config["gpufabric:fabric"]["infiniband"].update(
        pkeyManagement="ufm",
        ufm={"address": "ufm.internal", "username": "k8s", "password": {"secure": "v1:A:B"}},
    )
    config["gpufabric:fabric"]["nadScope"] = "tenant"
    config["gpufabric:tenants"][0]["pkey"] = "0x0101"
    found, diffs = round_trip(plan_of(config, "prod-ib"))
    assert diffs == []
    assert found["gpufabric:fabric"]["infiniband"]["pkey"] == "0x8001"
    assert [t.get("pkey") for t in found["gpufabric:tenants"]][:2] == ["0x0101", None]
