"""NodeAcceptance, gpufabric's own per-node acceptance result: the CRD the monitoring layer
installs (strictly valid, and what the schema checker validates results against), the
kube-state-metrics custom-resource-state configuration that turns it into series (in the
installed kube-prometheus-stack's values, or a ConfigMap and a ClusterRole for an existing
Prometheus), and the order: the CRD before anything reads or writes it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from builders import body, chart, example_config, plan_of

from gpufabric.outputs.schema import validate_objects
from gpufabric.plan import ids
from gpufabric.plan import node_acceptance as na
from gpufabric.plan.build import Plan
from gpufabric.support import yamlcodec

INSTALLED, EXISTING = "roce-sriov-volcano", "prod-ib"


def _plan(stack: str) -> Plan:
    return plan_of(example_config(stack), stack)


def result(node: str = "gpu-01", **status: Any) -> dict[str, Any]:
    base = {
        "verdict": "GOOD",
        "busbwGbps": 371.5,
        "thresholdGbps": 360.0,
        "source": "sweep",
        "jobName": "gpufabric-nccl",
        "stack": INSTALLED,
        "lastRunTime": "2026-11-25T01:00:00Z",
    }
    return na.result_object(node, INSTALLED, {**base, **status})


@pytest.mark.parametrize("stack", [INSTALLED, EXISTING])
def test_the_crd_is_cluster_scoped_with_a_status_subresource_and_valid(stack: str) -> None:
    plan = _plan(stack)
    crd = body(plan, ids.NODE_ACCEPTANCE_CRD)
    assert crd["metadata"]["name"] == "nodeacceptances.gpufabric.io"
    assert crd["spec"]["scope"] == "Cluster"
    (version,) = crd["spec"]["versions"]
    assert version["name"] == "v1alpha1"
    assert version["subresources"] == {"status": {}}
    assert plan.item(ids.NODE_ACCEPTANCE_CRD).protect  # deleting it deletes every result
    report = validate_objects([crd], plan.facts.kubernetes_minor)
    assert report.ok, [str(e) for e in report.errors]
    assert report.checked_core == 1


def test_a_stack_without_monitoring_has_no_crd() -> None:
    plan = _plan("kind-dev")
    assert not plan.facts.monitoring.enabled
    assert not [i.id for i in plan.items if "node-acceptance" in i.id]


def test_results_are_validated_against_the_rendered_crd() -> None:
    """Without a CRD directory, a NodeAcceptance was left unchecked: the schema checker now
    reads the CRD rendered with the objects."""
    plan = _plan(INSTALLED)
    crd = body(plan, ids.NODE_ACCEPTANCE_CRD)
    good = validate_objects([crd, result(), result("gpu-02", verdict="UNKNOWN")], "1.33")
    assert good.ok, [str(e) for e in good.errors]
    assert good.checked_custom == 2
    assert not good.unchecked
    bad = validate_objects(
        [crd, result(verdict="MAYBE"), result("gpu-03", busbwGbps=-1), result("gpu-04", extra=1)],
        "1.33",
    )
    where = sorted((e.where, e.path) for e in bad.errors)
    assert where == [
        ("NodeAcceptance/gpu-01", "status.verdict"),
        ("NodeAcceptance/gpu-03", "status.busbwGbps"),
        ("NodeAcceptance/gpu-04", "status"),
    ]


def test_the_installed_stacks_kube_state_metrics_exports_node_acceptance() -> None:
    plan = _plan(INSTALLED)
    ksm = chart(plan, ids.PROMETHEUS).values["kube-state-metrics"]
    assert ksm["customResourceState"] == {"enabled": True, "config": na.ksm_config()}
    # the chart passes its collectors as --resources: a custom resource must be named there
    assert ksm["collectorsExtra"] == ["nodeacceptances"]
    assert {"apiGroups": ["gpufabric.io"], "resources": ["nodeacceptances"], "verbs": ["list", "watch"]} in ksm["rbac"]["extraRules"]  # fmt: skip
    assert ids.NODE_ACCEPTANCE_CRD in plan.item(ids.PROMETHEUS).depends_on
    # the chart carries the configuration: no ConfigMap or reader role of ours
    assert ids.NODE_ACCEPTANCE_KSM_CONFIG not in {i.id for i in plan.items}


def test_an_existing_prometheus_gets_the_configuration_and_a_reader_role() -> None:
    plan = _plan(EXISTING)
    assert not plan.facts.monitoring.install_prometheus
    cm = body(plan, ids.NODE_ACCEPTANCE_KSM_CONFIG)
    assert cm["metadata"]["namespace"] == plan.facts.monitoring.namespace
    assert yamlcodec.load(cm["data"][na.KSM_CONFIG_KEY]) == na.ksm_config()
    reader = body(plan, ids.NODE_ACCEPTANCE_READER)
    assert reader["rules"] == [
        {
            "apiGroups": ["gpufabric.io"],
            "resources": ["nodeacceptances"],
            "verbs": ["list", "watch"],
        }
    ]
    report = validate_objects([cm, reader], plan.facts.kubernetes_minor)
    assert report.ok, [str(e) for e in report.errors]


@pytest.mark.parametrize("stack", [INSTALLED, EXISTING])
def test_the_writer_role_allows_exactly_the_create_or_update_of_results(stack: str) -> None:
    role = body(_plan(stack), ids.NODE_ACCEPTANCE_WRITER)
    assert role["kind"] == "ClusterRole"
    assert role["metadata"]["name"] == "gpufabric-node-acceptance-writer"
    assert role["rules"] == [
        {
            "apiGroups": ["gpufabric.io"],
            "resources": ["nodeacceptances"],
            "verbs": ["get", "create", "update"],
        },
        {
            "apiGroups": ["gpufabric.io"],
            "resources": ["nodeacceptances/status"],
            "verbs": ["get", "update"],
        },
    ]


def test_every_series_is_labelled_with_its_node_and_the_verdicts_are_the_crds() -> None:
    config = na.ksm_config()
    (resource,) = config["spec"]["resources"]
    assert resource["groupVersionKind"] == {"group": "gpufabric.io", "version": "v1alpha1", "kind": "NodeAcceptance"}  # fmt: skip
    assert resource["labelsFromPath"] == {"node": ["metadata", "name"]}
    crd = body(_plan(INSTALLED), ids.NODE_ACCEPTANCE_CRD)
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    (stateset,) = [m for m in resource["metrics"] if m["each"]["type"] == "StateSet"]
    assert stateset["each"]["stateSet"]["list"] == status["properties"]["verdict"]["enum"]
    # every path a metric reads is a field of the CRD's status
    for metric in resource["metrics"]:
        each = metric["each"]
        spec = each[{"Gauge": "gauge", "StateSet": "stateSet", "Info": "info"}[each["type"]]]
        paths = [spec["path"]] if "path" in spec else list(spec["labelsFromPath"].values())
        for path in paths:
            assert path[0] == "status"
            assert path[1] in status["properties"], path


def test_the_acceptance_board_graphs_busbw_per_node_against_the_threshold() -> None:
    plan = _plan(INSTALLED)
    board = json.loads(body(plan, ids.dashboard("acceptance"))["data"]["gpufabric-acceptance.json"])
    (panel,) = [p for p in board["panels"] if p["title"].startswith("Bus bandwidth per node")]
    assert panel["type"] == "timeseries"
    exprs = {t["legendFormat"]: t["expr"] for t in panel["targets"]}
    assert exprs == {
        "{{node}}": "max by (node) (gpufabric_node_acceptance_busbw_gbps)",
        "threshold": "max(gpufabric_node_acceptance_threshold_gbps)",
    }
