"""The monitoring layer as a user relies on it: the DCGM exporter emits the health counters,
the Prometheus (installed or the site's own) selects gpufabric's rules and monitors, the
dashboards load, and node-problem-detector turns kernel lines into node conditions."""

from __future__ import annotations

import json
import re
from typing import Any

from gpufabric.plan import alerts, ids
from gpufabric.plan.items import HelmChart, KustomizeOverlay, Layer
from gpufabric.verify.defaults import NCCL_JOB_NAME
from tests.builders import (
    body,
    chart,
    example_config,
    plan_of,
    problems_of,
    two_roce_classes_config,
)
from tests.npdmatch import reasons_after_each_line


def _monitored(**monitoring: Any) -> dict[str, Any]:
    config = example_config("kind-dev")
    config["gpufabric:monitoring"] = {"enabled": True, **monitoring}
    return config


def test_the_dcgm_exporter_emits_the_health_counters_through_its_own_configmap() -> None:
    """Upstream's default list keeps only the last Xid; the stack's CSV carries Xid counts,
    ECC, row remap, NVLink, PCIe and clock-event counters, and the chart creates it."""
    plan = plan_of(example_config("roce-sriov-volcano"), "roce-sriov-volcano")
    dcgm = chart(plan, ids.GPU_OPERATOR).values["dcgmExporter"]
    assert dcgm["enabled"] is True
    assert dcgm["config"]["create"] is True
    assert dcgm["config"]["name"] == "gpufabric-dcgm-counters"
    fields = {
        line.split(",")[0]
        for line in dcgm["config"]["data"].splitlines()
        if not line.startswith("#")
    }
    for needed in (
        "DCGM_EXP_XID_ERRORS_COUNT",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
    ):
        assert needed in fields
    monitor = dcgm["serviceMonitor"]
    assert monitor["enabled"] is True
    assert monitor["additionalLabels"] == {"release": "kube-prometheus-stack"}
    assert monitor["relabelings"][0]["targetLabel"] == "node"


def test_installed_prometheus_selects_rules_by_the_release_label() -> None:
    plan = plan_of(example_config("roce-sriov-volcano"), "roce-sriov-volcano")
    kps = chart(plan, ids.PROMETHEUS)
    assert (kps.chart, kps.version, kps.namespace) == (
        "kube-prometheus-stack",
        "88.5.3",
        "monitoring",
    )
    rule = body(plan, ids.MONITORING_RULES)
    assert rule["metadata"]["labels"]["release"] == kps.release
    assert rule["metadata"]["namespace"] == kps.namespace
    assert ids.PROMETHEUS in plan.item(ids.MONITORING_RULES).depends_on
    args = kps.values["prometheus-node-exporter"]["extraArgs"]
    # RoCE: the ethtool collector reads the PFC pause counters of the lossless priority.
    assert "--collector.ethtool" in args
    assert "--collector.infiniband" in args


def test_an_existing_prometheus_gets_rules_with_its_selector_labels_and_no_chart() -> None:
    plan = plan_of(example_config("prod-ib"), "prod-ib")
    assert not any(
        isinstance(it.payload, HelmChart) and it.id == ids.PROMETHEUS for it in plan.items
    )
    rule = body(plan, ids.MONITORING_RULES)
    assert rule["metadata"]["labels"]["prometheus"] == "site"
    assert "release" not in rule["metadata"]["labels"]
    dcgm = chart(plan, ids.GPU_OPERATOR).values["dcgmExporter"]["serviceMonitor"]
    assert dcgm["additionalLabels"] == {"prometheus": "site"}
    # InfiniBand has no lossless Ethernet class: no PFC storm rule.
    assert "PfcStorm" not in {c.alert for c in alerts.classes(plan.facts)}


def test_monitoring_off_changes_nothing() -> None:
    plan = plan_of(example_config("kind-dev"), "kind-dev")
    assert plan.layer(Layer.MONITORING) == ()
    assert "config" not in chart(plan, ids.GPU_OPERATOR).values["dcgmExporter"]


def test_gpus_missing_is_judged_against_the_stacks_gpus_per_node() -> None:
    config = _monitored()
    config["gpufabric:gpuNodes"]["gpusPerNode"] = 4
    plan = plan_of(config)
    rule = next(c for c in alerts.classes(plan.facts) if c.alert == "GpusMissing")
    assert rule.expr.endswith("< 4")


def test_non_fatal_xids_never_quarantine_and_fatal_ones_do() -> None:
    plan = plan_of(example_config("roce-sriov-volcano"), "roce-sriov-volcano")
    by = {c.alert: c for c in alerts.classes(plan.facts)}
    assert by["GpuFatalXid"].quarantine
    assert not by["GpuNonFatalXid"].quarantine
    assert re.search(r'xid=~"[^"]*\b79\b', by["GpuFatalXid"].expr)
    for code in ("13", "31", "43", "45", "92"):
        assert not re.search(rf"\b{code}\b", by["GpuFatalXid"].expr)


def test_dashboards_load_through_the_grafana_sidecar() -> None:
    plan = plan_of(example_config("roce-sriov-volcano"), "roce-sriov-volcano")
    names = [it.id for it in plan.items if it.id.startswith("monitoring/dashboard/")]
    assert names == [ids.dashboard(n) for n in ("fleet", "fabric", "tenants", "acceptance")]
    fabric = body(plan, ids.dashboard("fabric"))
    assert fabric["metadata"]["labels"]["grafana_dashboard"] == "1"
    board = json.loads(next(iter(fabric["data"].values())))
    titles = [p["title"] for p in board["panels"]]
    assert any(t.startswith("rail rail0 (mlx5_0)") for t in titles)
    tenants = json.loads(next(iter(body(plan, ids.dashboard("tenants"))["data"].values())))
    assert [p["title"] for p in tenants["panels"]] == [
        *(f"{ns}: GPUs in use against quota" for ns in sorted(plan.facts.tenants)),
        "Queue wait (p50 / p90 over the range, seconds)",
        "Work pending",
    ]
    assert len(plan.facts.tenants) >= 2


def test_node_problem_detector_sets_conditions_for_fatal_xids_only() -> None:
    plan = plan_of(example_config("roce-sriov-volcano"), "roce-sriov-volcano")
    overlay = plan.item(ids.NODE_PROBLEM_DETECTOR).payload
    assert isinstance(overlay, KustomizeOverlay)
    config = json.loads(overlay.parameters["monitor"])
    permanent = {r["reason"] for r in config["rules"] if r["type"] == "permanent"}
    fatal = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
    nonfatal = "NVRM: Xid (PCI:0000:3b:00): 13, pid=1234, name=python, Graphics Exception: ESR 0x5"
    mlx5 = "mlx5_core 0000:17:00.0 ens1f0np0: Link down"
    # node-problem-detector's own matching (tests/npdmatch.py); every driver line in
    # tests/plan/test_kernel_lines.py.
    got = reasons_after_each_line(config, [fatal, nonfatal, mlx5])
    assert got == [["FatalXid"], ["NonFatalXid"], ["RailLinkDown"]]
    assert permanent == {"FatalXid", "Mlx5FatalError"}
    assert {c["type"] for c in config["conditions"]} == {"GpuFatalXid", "NicFatalError"}


def test_acceptance_staleness_reads_the_job_verify_nccl_runs() -> None:
    assert NCCL_JOB_NAME == alerts.ACCEPTANCE_JOB


def test_an_existing_prometheus_needs_its_selector_labels() -> None:
    problems = problems_of(_monitored(prometheus={"install": False}))
    assert "monitoring.prometheus.selectorLabels" in problems
    assert "install is false" in problems["monitoring.prometheus.selectorLabels"]


def test_monitoring_needs_the_dcgm_exporter() -> None:
    config = _monitored()
    config["gpufabric:gpuOperator"] = {"dcgmExporter": {"enabled": False}}
    problems = problems_of(config)
    assert "gpuOperator.dcgmExporter.enabled" in problems["monitoring.enabled"]


def test_bad_monitoring_values_are_named_by_path() -> None:
    problems = problems_of(
        _monitored(
            prometheus={"selectorLabels": {"bad key!": "x"}}, thresholds={"symbolErrorsPerHour": 0}
        )
    )
    assert any(p.startswith("monitoring.prometheus.selectorLabels") for p in problems)
    assert "monitoring.thresholds.symbolErrorsPerHour" in problems


def _tenants_board(plan: Any) -> dict[str, Any]:
    return json.loads(body(plan, ids.dashboard("tenants"))["data"]["gpufabric-tenants.json"])


def test_the_queueing_authority_is_scraped_by_the_stacks_prometheus() -> None:
    """Kueue's metrics Service is selected by a ServiceMonitor in its namespace carrying the
    labels the site's Prometheus selects monitors by (prod-ib: an existing Prometheus)."""
    plan = plan_of(example_config("prod-ib"), "prod-ib")
    monitor = body(plan, ids.QUEUE_METRICS)
    assert monitor["kind"] == "ServiceMonitor"
    for key, value in plan.facts.monitoring.selector_labels.items():
        assert monitor["metadata"]["labels"][key] == value
    namespace = plan.components["kueue"].namespace
    assert monitor["metadata"]["namespace"] == namespace
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [namespace]}
    assert monitor["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "kueue",
        "app.kubernetes.io/component": "metrics-service",
    }
    (endpoint,) = monitor["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["scheme"]) == ("https", "https")
    assert endpoint["bearerTokenFile"].endswith("serviceaccount/token")
    # Applied once the Kueue chart has made its namespace.
    assert ids.authority_chart("kueue") in plan.item(ids.QUEUE_METRICS).depends_on


def test_volcano_is_scraped_over_its_schedulers_metrics_port() -> None:
    plan = plan_of(example_config("roce-sriov-volcano"), "roce-sriov-volcano")
    monitor = body(plan, ids.QUEUE_METRICS)
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["selector"]["matchLabels"] == {"app": "volcano-scheduler"}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["scheme"]) == ("metrics", "http")
    assert "bearerTokenFile" not in endpoint


def test_no_queue_monitor_without_monitoring() -> None:
    config = example_config("prod-ib")
    config["gpufabric:monitoring"] = {"enabled": False}
    plan = plan_of(config, "prod-ib")
    assert not any(it.id == ids.QUEUE_METRICS for it in plan.items)


def test_tenants_board_shows_kueue_queue_wait_percentiles_and_pending_workloads() -> None:
    plan = plan_of(example_config("prod-ib"), "prod-ib")
    panels = {p["title"]: p for p in _tenants_board(plan)["panels"]}
    wait = panels["Queue wait (p50 / p90 over the range, seconds)"]
    exprs = [t["expr"] for t in wait["targets"]]
    assert [e.split(",")[0] for e in exprs] == [
        "histogram_quantile(0.5",
        "histogram_quantile(0.9",
    ]
    assert all("by (cluster_queue, le)" in e and "[$__range]" in e for e in exprs)
    pending = panels["Work pending"]
    assert [t["expr"] for t in pending["targets"]] == [
        "sum by (cluster_queue, status) (kueue_pending_workloads)"
    ]
    assert "admission" in wait["description"]


def test_tenants_board_says_volcano_has_no_queue_wait_metric() -> None:
    plan = plan_of(example_config("roce-sriov-volcano"), "roce-sriov-volcano")
    panels = {p["title"]: p for p in _tenants_board(plan)["panels"]}
    wait = panels["Queue wait (p50 / p90 over the range, seconds)"]
    assert wait["description"].startswith("Volcano exports no queue wait metric")
    assert all(t["expr"].startswith("quantile by (queue)") for t in wait["targets"])
    ids_seen = [p["id"] for p in _tenants_board(plan)["panels"]]
    assert len(ids_seen) == len(set(ids_seen))


def test_a_fleets_roce_pool_is_watched_though_it_is_not_the_first() -> None:
    # fleet-mixed: the stack's fabric is InfiniBand, the l40s pool's RoCE (before: only the
    # stack's fabric was asked for a PFC priority, so the RoCE pool got no PfcStorm alert, no
    # PFC dashboard panel and no ethtool collector)
    config = example_config("fleet-mixed")
    config["gpufabric:monitoring"] = {"enabled": True}
    config["gpufabric:gpuNodes"][1]["fabric"]["roce"] = {"pfcPriority": 4}
    plan = plan_of(config, "fleet-mixed")
    storm = next(c for c in alerts.classes(plan.facts) if c.alert == "PfcStorm")
    assert storm.expr == "rate(node_ethtool_received_prio4_pause[5m]) > 10000"
    args = chart(plan, ids.PROMETHEUS).values["prometheus-node-exporter"]["extraArgs"]
    assert "--collector.ethtool" in args
    fabric_board = json.dumps(body(plan, ids.dashboard("fabric")))
    assert "node_ethtool_received_prio4_pause" in fabric_board


def test_roce_pools_on_two_classes_are_watched_on_both() -> None:
    config = two_roce_classes_config()
    plan = plan_of(config, "fleet-mixed")
    storm = next(c for c in alerts.classes(plan.facts) if c.alert == "PfcStorm")
    assert storm.expr == (
        "rate(node_ethtool_received_prio4_pause[5m]) > 10000 or "
        "rate(node_ethtool_received_prio5_pause[5m]) > 10000"
    )
    # each rail's board shows its own pool's class only
    board = json.loads(body(plan, ids.dashboard("fabric"))["data"]["gpufabric-fabric.json"])
    roce_panels = sorted(p["title"] for p in board["panels"] if "RoCE" in p["title"])
    assert roce_panels == [
        "rail hroce0 (mlx5_0) (priority 5): RoCE congestion control",
        "rail hroce1 (mlx5_1) (priority 5): RoCE congestion control",
        "rail roce0 (mlx5_0) (priority 4): RoCE congestion control",
        "rail roce1 (mlx5_1) (priority 4): RoCE congestion control",
    ]


def test_every_pools_rails_are_watched_and_shown() -> None:
    # before: RailDown and the fabric board took the stack fabric's rails only, so a fleet's
    # second pool's ports were never alerted on nor shown
    config = example_config("fleet-mixed")
    config["gpufabric:monitoring"] = {"enabled": True}
    plan = plan_of(config, "fleet-mixed")
    down = next(c for c in alerts.classes(plan.facts) if c.alert == "RailDown")
    pools = plan.facts.pools
    for rail in pools[1].fabric.rails:
        assert rail.hca
        assert rail.hca in down.expr
        assert f"rail {rail.name} ({rail.hca})" in json.dumps(body(plan, ids.dashboard("fabric")))
