"""Each rule of `gpufabric diff`'s classification, alone: it fires on its condition and is
silent otherwise; then how `classify` walks the rules."""

from __future__ import annotations

from typing import Any

import pytest

from gpufabric.outputs.diff import (
    DISRUPTIVE_ANNOTATION,
    FIELD_RULES,
    ITEM_RULES,
    Change,
    ChangedPair,
    FieldChange,
    chart_identity_change,
    claim_change,
    claim_removed,
    classify,
    declared_disruptive,
    gpu_driver_change,
    identity_change,
    immutable_configmap_data,
    immutable_field,
    mtu_change,
    nic_driver_change,
    operator_removed,
    rail_removed,
    storage_class_change,
    subnet_change,
)


def pair(
    change: Change = "changed",
    old: dict[str, Any] | None = None,
    new: dict[str, Any] | None = None,
    fields: list[FieldChange] | None = None,
    **item: Any,
) -> ChangedPair:
    return ChangedPair(
        item={"id": "x", **item}, change=change, old=old or {}, new=new or {}, fields=fields or []
    )


def field(path: str, old: Any = 1, new: Any = 2) -> FieldChange:
    return FieldChange(path, old, new)


def annotated(note: str) -> dict[str, Any]:
    return {"object": {"metadata": {"annotations": {DISRUPTIVE_ANNOTATION: note}}}}


# ------------------------------------------------------------------------- item rules


def test_declared_disruptive_fires_on_added_and_removed_annotated_objects() -> None:
    assert declared_disruptive(pair("added", new=annotated("VFs reboot"))) == (
        "disruptive",
        "VFs reboot",
    )
    assert declared_disruptive(pair("removed", old=annotated("VFs reboot"))) == (
        "disruptive",
        "VFs reboot",
    )


def test_declared_disruptive_on_a_change_needs_more_than_annotations() -> None:
    spec = [field("object.spec.numVfs")]
    notes = [field("object.metadata.annotations.other")]
    assert declared_disruptive(pair(new=annotated("n"), fields=spec)) == ("disruptive", "n")
    assert declared_disruptive(pair(new=annotated("n"), fields=notes)) is None
    assert declared_disruptive(pair(old=annotated("n"), fields=spec)) == ("disruptive", "n")


def test_declared_disruptive_is_silent_without_the_annotation() -> None:
    assert declared_disruptive(pair("added", new={"object": {"metadata": {}}})) is None
    assert declared_disruptive(pair("added", new=annotated(""))) is None


def test_operator_removed_fires_only_for_a_removed_item_holding_users_objects() -> None:
    reason = "removing the operator deletes its CRDs and with them every MPIJob"
    assert operator_removed(pair("removed", holds="MPIJob")) == ("disruptive", reason)
    assert operator_removed(pair("changed", holds="MPIJob")) is None
    assert operator_removed(pair("added", holds="MPIJob")) is None
    assert operator_removed(pair("removed")) is None


def test_rail_removed_fires_only_for_a_removed_rail_nad() -> None:
    nad = {"kind": "NetworkAttachmentDefinition", "rail": "rail-0"}
    assert rail_removed(pair("removed", **nad)) == (
        "disruptive",
        "rail rail-0 removed: pods requesting it no longer start and jobs lose that rail "
        "when they restart",
    )
    assert rail_removed(pair("changed", **nad)) is None
    assert rail_removed(pair("removed", kind="NetworkAttachmentDefinition")) is None
    assert rail_removed(pair("removed", kind="IPPool", rail="rail-0")) is None


# ------------------------------------------------------------------------ field rules


@pytest.mark.parametrize(
    "path",
    ["chart.version", "values.driver.version", "values.driver.rdma.useHostMofed"],
)
def test_gpu_driver_change_fires_on_the_gpu_operators_driver(path: str) -> None:
    verdict = gpu_driver_change(pair(component="gpu-operator"), field(path))
    assert verdict is not None
    assert verdict[0] == "disruptive"
    assert verdict[1].startswith(f"GPU driver change ({path}): ")


def test_gpu_driver_change_is_silent_elsewhere() -> None:
    assert gpu_driver_change(pair(component="gpu-operator"), field("values.dcgm.version")) is None
    assert gpu_driver_change(pair(component="network-operator"), field("chart.version")) is None
    assert gpu_driver_change(pair(), field("values.driver.version")) is None


def test_nic_driver_change_fires_on_the_nic_cluster_policys_ofed_driver() -> None:
    nic = pair(kind="NicClusterPolicy")
    verdict = nic_driver_change(nic, field("object.spec.ofedDriver.version"))
    assert verdict is not None
    assert verdict[0] == "disruptive"
    assert verdict[1].startswith("NIC driver change (object.spec.ofedDriver.version): ")
    assert nic_driver_change(nic, field("object.spec.rdmaSharedDevicePlugin.image")) is None
    assert nic_driver_change(pair(kind="Other"), field("object.spec.ofedDriver.version")) is None


def test_mtu_change_fires_on_any_mtu_of_the_network_layer() -> None:
    net = pair(layer="network", rail="rail-1")
    assert mtu_change(net, field("object.spec.config.mtu", 4092, 2044)) == (
        "disruptive",
        "MTU change on rail-1 (4092 -> 2044): interfaces are reconfigured and both ends and "
        "the switches must match, or RDMA traffic stalls",
    )
    verdict = mtu_change(pair(layer="network", name="pf0"), field("mtu"))
    assert verdict is not None
    assert "MTU change on pf0 " in verdict[1]
    assert mtu_change(net, field("object.spec.mtuish")) is None
    assert mtu_change(pair(layer="gpu"), field("object.spec.mtu")) is None


@pytest.mark.parametrize("kind", ["IPPool", "CIDRPool"])
def test_subnet_change_fires_on_a_pools_subnet(kind: str) -> None:
    verdict = subnet_change(pair(kind=kind), field("object.spec.cidr", "a", "b"))
    assert verdict == (
        "disruptive",
        "rail subnet change (object.spec.cidr: a -> b): pods get new addresses; running jobs "
        "lose their peers",
    )
    assert subnet_change(pair(kind=kind), field("object.spec.exclusions")) is None


def test_subnet_change_is_silent_for_other_kinds() -> None:
    assert (
        subnet_change(pair(kind="NetworkAttachmentDefinition"), field("object.spec.subnet")) is None
    )


@pytest.mark.parametrize(
    "path",
    ["object.apiVersion", "object.kind", "object.metadata.name", "object.metadata.namespace"],
)
def test_identity_change_fires_on_the_objects_identity(path: str) -> None:
    body = path.removeprefix("object.")
    assert identity_change(pair(), field(path)) == (
        "replacing",
        f"{body} changed: Pulumi replaces the object",
    )


def test_identity_change_is_silent_on_other_fields() -> None:
    assert identity_change(pair(), field("object.metadata.labels.a")) is None
    assert identity_change(pair(), field("chart.namespace")) is None


def test_immutable_field_fires_on_fields_the_pinned_crds_freeze() -> None:
    assert immutable_field(pair(kind="Topology"), field("object.spec.levels[x].nodeLabel")) == (
        "replacing",
        "spec.levels[x].nodeLabel is immutable: Pulumi replaces the Topology",
    )
    assert immutable_field(pair(kind="LocalQueue"), field("object.spec.clusterQueue")) == (
        "replacing",
        "spec.clusterQueue is immutable: Pulumi replaces the LocalQueue",
    )
    assert immutable_field(pair(kind="LocalQueue"), field("object.spec.stopPolicy")) is None
    assert immutable_field(pair(kind="ClusterQueue"), field("object.spec.levels")) is None


@pytest.mark.parametrize("path", ["chart.namespace", "chart.release", "chart.chart"])
def test_chart_identity_change_fires_on_what_names_the_charts_objects(path: str) -> None:
    assert chart_identity_change(pair(), field(path)) == (
        "replacing",
        f"{path} changed: the chart's objects are deleted and created again",
    )


def test_chart_identity_change_is_silent_on_a_repository_change() -> None:
    assert chart_identity_change(pair(), field("chart.repository")) is None
    assert chart_identity_change(pair(), field("chart.version")) is None


def test_immutable_configmap_data_fires_only_on_an_immutable_configmaps_data() -> None:
    frozen = {"object": {"immutable": True}}
    reason = ("replacing", "immutable ConfigMap data changed: Pulumi replaces it")
    assert immutable_configmap_data(pair(kind="ConfigMap", new=frozen), field("object.data.a")) == (
        reason
    )
    assert immutable_configmap_data(pair(kind="ConfigMap"), field("object.data.a")) is None
    assert (
        immutable_configmap_data(pair(kind="ConfigMap", new=frozen), field("object.metadata.x"))
        is None
    )
    assert immutable_configmap_data(pair(kind="Secret", new=frozen), field("object.data.a")) is None


# ------------------------------------------------------------------------- classify


def test_every_rule_is_walked() -> None:
    assert (declared_disruptive, operator_removed, rail_removed, claim_removed) == ITEM_RULES
    assert (
        gpu_driver_change,
        nic_driver_change,
        mtu_change,
        subnet_change,
        identity_change,
        immutable_field,
        chart_identity_change,
        immutable_configmap_data,
        storage_class_change,
        claim_change,
    ) == FIELD_RULES


def test_classify_without_findings_is_a_plain_update() -> None:
    assert classify({"id": "x"}, "changed", {}, {}, [field("object.spec.a")]) == ("update", [])


def test_classify_lists_disruptions_before_replacements_without_repeats() -> None:
    item = {"id": "x", "kind": "IPPool", "layer": "network", "rail": "r"}
    fields = [field("object.metadata.name"), field("object.spec.subnet", "a", "b")] * 2
    klass, reasons = classify(item, "changed", {}, {}, fields)
    assert klass == "disruptive"
    assert reasons == [
        "rail subnet change (object.spec.subnet: a -> b): pods get new addresses; running "
        "jobs lose their peers",
        "metadata.name changed: Pulumi replaces the object",
    ]


def test_classify_takes_the_first_rule_of_each_class_per_field() -> None:
    # A NicClusterPolicy in the network layer: its driver's mtu is a NIC driver change
    # (the earlier rule), not also an MTU change.
    item = {"id": "x", "kind": "NicClusterPolicy", "layer": "network"}
    klass, reasons = classify(item, "changed", {}, {}, [field("object.spec.ofedDriver.mtu")])
    assert klass == "disruptive"
    assert len(reasons) == 1
    assert reasons[0].startswith("NIC driver change")


def test_classify_replacing_only() -> None:
    assert classify({"id": "x"}, "changed", {}, {}, [field("chart.release")]) == (
        "replacing",
        ["chart.release changed: the chart's objects are deleted and created again"],
    )
