"""The monitoring layer against the real upstream: `helm template` over kube-prometheus-stack
with the stack's values and over the GPU Operator with its DCGM exporter configuration,
`kubectl kustomize` over the node-problem-detector overlay, and gpufabric's own
PrometheusRule and dashboards validated strictly against the Prometheus Operator CRDs at the
pin (../shared/upstream/crds-pending). Skipped cleanly where those are absent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import example_config, plan_of
from upstream import UPSTREAM, helm_template, kustomize

from gpufabric.outputs.schema import validate_objects
from gpufabric.plan import alerts, ids, node_acceptance
from gpufabric.plan.build import Plan
from gpufabric.plan.items import HelmChart, K8sObject, KustomizeOverlay

pytestmark = pytest.mark.conformance

PENDING = UPSTREAM / "crds-pending" / "prometheus-operator-0.93.1"


def _pending_crds() -> Path:
    if not PENDING.is_dir():
        pytest.skip("the Prometheus Operator CRDs (../shared/upstream/crds-pending) are absent")
    return PENDING


def _plan(stack: str) -> Plan:
    return plan_of(example_config(stack), stack)


def _chart(plan: Plan, item_id: str) -> HelmChart:
    payload = plan.item(item_id).payload
    assert isinstance(payload, HelmChart)
    return payload


@pytest.mark.parametrize("stack", ["roce-sriov-volcano", "prod-ib"])
def test_rules_and_dashboards_validate_against_the_prometheus_operator_crds(stack: str) -> None:
    plan = _plan(stack)
    objects = [
        dict(it.payload.body)
        for it in plan.items
        if it.id.startswith("monitoring/") and isinstance(it.payload, K8sObject)
    ]
    assert any(o["kind"] == "PrometheusRule" for o in objects)
    report = validate_objects(objects, plan.facts.kubernetes_minor, _pending_crds())
    assert report.ok, [str(e) for e in report.errors[:5]]
    assert not report.unchecked, sorted(report.unchecked_reasons)


def _rendered(plan: Plan, item_id: str) -> list[dict[str, Any]]:
    return helm_template(_chart(plan, item_id), plan.facts.kubernetes_minor)


def test_gpu_operator_runs_the_dcgm_exporter_with_gpufabrics_counters() -> None:
    plan = _plan("roce-sriov-volcano")
    objects = _rendered(plan, ids.GPU_OPERATOR)
    cm = next(
        o
        for o in objects
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == plan.facts.monitoring.dcgm_config
    )
    assert cm["data"]["dcgm-metrics.csv"].strip() == plan.facts.monitoring.dcgm_counters_csv.strip()
    policy = next(o for o in objects if o["kind"] == "ClusterPolicy")
    exporter = policy["spec"]["dcgmExporter"]
    assert exporter["config"]["name"] == plan.facts.monitoring.dcgm_config
    monitor = exporter["serviceMonitor"]
    assert monitor["enabled"] is True
    assert monitor["additionalLabels"] == {"release": "kube-prometheus-stack"}
    assert monitor["relabelings"][0]["targetLabel"] == "node"


def test_kube_prometheus_stack_runs_node_exporter_with_the_port_counter_collectors() -> None:
    plan = _plan("roce-sriov-volcano")
    objects = _rendered(plan, ids.PROMETHEUS)
    ds = next(
        o for o in objects if o["kind"] == "DaemonSet" and "node-exporter" in o["metadata"]["name"]
    )
    args = ds["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--collector.infiniband" in args
    assert "--collector.ethtool" in args
    assert "--collector.ethtool.metrics-include=^(rx|tx)_prio[0-7]_pause$" in args
    monitors = [
        o
        for o in objects
        if o["kind"] == "ServiceMonitor" and "node-exporter" in o["metadata"]["name"]
    ]
    assert monitors
    assert monitors[0]["spec"]["endpoints"][0]["relabelings"][0]["targetLabel"] == "node"
    prom = next(o for o in objects if o["kind"] == "Prometheus")
    # The installed Prometheus selects rules and monitors by the release label gpufabric sets.
    release = plan.facts.monitoring.selector_labels["release"]
    assert prom["spec"]["ruleSelector"] == {"matchLabels": {"release": release}}
    assert prom["spec"]["serviceMonitorSelector"] == {"matchLabels": {"release": release}}
    sidecar = next(
        c
        for o in objects
        if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("grafana")
        for c in o["spec"]["template"]["spec"]["containers"]
        if "dashboard" in c["name"]
    )
    env = {e["name"]: e.get("value") for e in sidecar["env"]}
    assert env["LABEL"] == "grafana_dashboard"


def test_node_problem_detector_runs_gpufabrics_kernel_monitor() -> None:
    plan = _plan("roce-sriov-volcano")
    overlay = plan.item(ids.NODE_PROBLEM_DETECTOR).payload
    assert isinstance(overlay, KustomizeOverlay)
    objects = kustomize(overlay)
    cm = next(o for o in objects if o["kind"] == "ConfigMap")
    monitor = json.loads(cm["data"]["gpufabric-monitor.json"])
    assert monitor == alerts.kernel_monitor(plan.facts)
    ds = next(o for o in objects if o["kind"] == "DaemonSet")
    container = ds["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == plan.components["node-problem-detector"].image_ref
    assert any(a.endswith(",/config/gpufabric-monitor.json") for a in container["command"])
    items = next(v for v in ds["spec"]["template"]["spec"]["volumes"] if v["name"] == "config")
    assert {"key": "gpufabric-monitor.json", "path": "gpufabric-monitor.json"} in items[
        "configMap"
    ]["items"]


@pytest.mark.parametrize("stack", ["prod-ib", "roce-sriov-volcano"])
def test_the_authority_monitor_selects_its_charts_metrics_service(stack: str) -> None:
    """The real chart of the stack's queueing authority, with the stack's values, renders
    exactly one Service the ServiceMonitor selects, with the port it scrapes, in the
    namespace it looks in; the chart's own monitor (unlabelled for our Prometheus) is off."""
    plan = _plan(stack)
    q = plan.facts.gang.queue_metrics
    assert q is not None
    monitor = plan.item(ids.QUEUE_METRICS).payload
    assert isinstance(monitor, K8sObject)
    spec = monitor.body["spec"]
    objects = _rendered(plan, ids.authority_chart(plan.facts.gang.authority))
    selected = [
        o
        for o in objects
        if o["kind"] == "Service"
        and spec["selector"]["matchLabels"].items() <= o["metadata"].get("labels", {}).items()
    ]
    assert len(selected) == 1, [o["metadata"]["name"] for o in selected]
    service = selected[0]
    assert (
        service["metadata"].get("namespace", plan.components[q.component].namespace)
        in (spec["namespaceSelector"]["matchNames"])
    )
    ports = {p["name"] for p in service["spec"]["ports"]}
    assert spec["endpoints"][0]["port"] in ports
    assert not [o for o in objects if o["kind"] == "ServiceMonitor"]


def test_installed_prometheus_may_read_kueues_authorized_metrics_endpoint() -> None:
    """Kueue's metrics endpoint authorizes the scraper's token for GET /metrics: the
    Prometheus kube-prometheus-stack installs runs with a role that grants it."""
    plan = _plan("roce-sriov-volcano")
    objects = _rendered(plan, ids.PROMETHEUS)
    role = next(
        o
        for o in objects
        if o["kind"] == "ClusterRole" and o["metadata"]["name"].endswith("-prometheus")
    )
    assert any(
        "/metrics" in r.get("nonResourceURLs", []) and "get" in r["verbs"] for r in role["rules"]
    )


def test_kube_state_metrics_exports_node_acceptance_from_the_charts_own_keys() -> None:
    """The real kube-prometheus-stack with the stack's values: its kube-state-metrics reads
    gpufabric's custom-resource-state configuration (mounted from the chart's ConfigMap),
    names nodeacceptances in --resources (else it ignores a custom resource), and its
    ClusterRole may list and watch them and the CRDs."""
    plan = _plan("roce-sriov-volcano")
    objects = _rendered(plan, ids.PROMETHEUS)
    ksm = next(
        o
        for o in objects
        if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("kube-state-metrics")
    )
    pod = ksm["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    config_arg = next(a for a in args if a.startswith("--custom-resource-state-config-file="))
    mount_dir, key = config_arg.split("=", 1)[1].rsplit("/", 1)
    resources = next(a for a in args if a.startswith("--resources=")).split("=", 1)[1]
    assert node_acceptance.PLURAL in resources.split(",")
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["mountPath"] == mount_dir)
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    cm = next(
        o
        for o in objects
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == volume["configMap"]["name"]
    )
    assert yaml.safe_load(cm["data"][key]) == node_acceptance.ksm_config()
    account = pod["serviceAccountName"]
    binding = next(
        o
        for o in objects
        if o["kind"] == "ClusterRoleBinding"
        and any(s["name"] == account for s in o.get("subjects", []))
    )
    role = next(
        o
        for o in objects
        if o["kind"] == "ClusterRole" and o["metadata"]["name"] == binding["roleRef"]["name"]
    )
    granted = {
        (g, r, v)
        for rule in role["rules"]
        for g in rule.get("apiGroups", [])
        for r in rule.get("resources", [])
        for v in rule.get("verbs", [])
    }
    for group, resource in (
        (node_acceptance.GROUP, node_acceptance.PLURAL),
        ("apiextensions.k8s.io", "customresourcedefinitions"),
    ):
        assert {(group, resource, "list"), (group, resource, "watch")} <= granted, resource
