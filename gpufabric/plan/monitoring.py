"""Monitoring layer: fleet health metrics, alerts, dashboards and node problem detection.

- Prometheus: kube-prometheus-stack at its pin (``monitoring.prometheus.install``), or an
  existing Prometheus Operator stack that selects gpufabric's objects by the stack's labels.
- GPU counters: the DCGM exporter the GPU Operator runs, with gpufabric's counters CSV
  (the GPU layer passes :attr:`MonitoringFacts.dcgm_counters_csv` to the chart, which
  creates the ConfigMap) and a ServiceMonitor that labels every series with its node.
- Port counters: node-exporter's infiniband collector (on by default; IB port counters and
  the mlx5 RoCE hw_counters such as ECN marks and CNPs, labels device and port) and, on
  lossless Ethernet, its ethtool collector for the per-priority PFC pause counters.
- Queues: a ServiceMonitor for the queueing authority's own metrics (queue wait, pending
  work; ``facts.gang.queue_metrics`` from the authority), read by the tenants dashboard.
- Alerts: one PrometheusRule (:mod:`gpufabric.plan.alerts`); dashboards: ConfigMaps the
  Grafana sidecar loads (:mod:`gpufabric.plan.dashboards`).
- node-problem-detector over its pinned manifests with gpufabric's kernel-log rules.
"""

from __future__ import annotations

import json
from typing import Any

from gpufabric.model.config import StackModel
from gpufabric.model.versions import effective_components
from gpufabric.plan import alerts, dashboards, health, ids, node_acceptance, xids
from gpufabric.plan.facts import (
    DcgmCounter,
    HealthFacts,
    InClusterHealth,
    MonitoringFacts,
    PlanContext,
    XidClass,
)
from gpufabric.plan.items import (
    Item,
    K8sObject,
    Layer,
    helm_chart,
    system_namespace,
    upstream_overlay,
)
from gpufabric.support.templates import render_object

PROMETHEUS_COMPONENT = "kube-prometheus-stack"
NPD_COMPONENT = "node-problem-detector"
DCGM_CONFIG = "gpufabric-dcgm-counters"
QUARANTINE_TAINT = "gpufabric.io/quarantine"
"""The taint a quarantined node carries (effect NoSchedule); no other fact defines one."""

DCGM_COUNTERS: tuple[DcgmCounter, ...] = (
    # Presence: one series per GPU (the GPUs-missing rule counts them per node).
    DcgmCounter("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    DcgmCounter("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    DcgmCounter("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    DcgmCounter("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    DcgmCounter("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    # Xids: the last code (gauge) and the exporter's count per code in its window.
    DcgmCounter("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    DcgmCounter("DCGM_EXP_XID_ERRORS_COUNT", "counter", "reported XIDs during last window"),
    # Memory errors.
    DcgmCounter(
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "counter",
        "Total number of single-bit volatile ECC errors.",
    ),
    DcgmCounter(
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "counter",
        "Total number of double-bit volatile ECC errors.",
    ),
    DcgmCounter(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors",
    ),
    DcgmCounter("DCGM_FI_DEV_ROW_REMAP_PENDING", "gauge", "Whether a row remap is pending"),
    DcgmCounter("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
    # Interconnects.
    DcgmCounter(
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "counter",
        "Total number of NVLink flow-control CRC errors.",
    ),
    DcgmCounter(
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink retries."
    ),
    DcgmCounter(
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
        "counter",
        "Total number of NVLink recovery errors.",
    ),
    DcgmCounter("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    # Clock event (throttle) reasons: a bitmask (DCGM 3.3+ name of the throttle reasons).
    DcgmCounter(
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge", "Current clock event (throttle) reasons."
    ),
    DcgmCounter("DCGM_FI_DRIVER_VERSION", "label", "Driver Version"),
)
"""What the DCGM exporter emits on a gpufabric cluster (its counters CSV). The upstream
default list keeps only the last Xid and leaves ECC, NVLink errors and Xid counts commented
out; these are the counters the alerts and dashboards read."""

XID_CLASSES: tuple[XidClass, ...] = xids.classes()
"""Xid classes derived from every row of NVIDIA's Xid catalog (``manifests/xid-catalog.txt``,
:mod:`gpufabric.plan.xids`): fatal or reset-required Xids quarantine, the non-fatal ones never."""


def facts(model: StackModel) -> MonitoringFacts:
    """The monitoring facts of a validated stack."""
    m = model.monitoring
    prom = m.prometheus
    namespace = effective_components(model.versions)[PROMETHEUS_COMPONENT].namespace
    # Installed: the chart's Prometheus selects by its release label (the component name).
    labels = dict(prom.selectorLabels)
    if prom.install:
        labels.setdefault("release", PROMETHEUS_COMPONENT)
    return MonitoringFacts(
        enabled=m.enabled,
        install_prometheus=prom.install,
        namespace=namespace,
        selector_labels=dict(sorted(labels.items())),
        dcgm_config=DCGM_CONFIG,
        dcgm_counters=DCGM_COUNTERS,
        xid_classes=XID_CLASSES,
        dashboards=m.dashboards,
        node_problem_detector=m.nodeProblemDetector,
        symbol_errors_per_hour=m.thresholds.symbolErrorsPerHour,
        pfc_pauses_per_second=m.thresholds.pfcPausesPerSecond,
        acceptance_max_age_s=m.thresholds.acceptanceMaxAgeHours * 3600,
        quarantine_taint=QUARANTINE_TAINT,
        health=HealthFacts(
            fatal_conditions=alerts.FATAL_CONDITIONS,
            max_quarantined=m.health.maxQuarantined,
            max_quarantined_fraction=m.health.maxQuarantinedFraction,
            median_fraction=m.health.medianFraction,
            in_cluster=_in_cluster(model),
        ),
        results=node_acceptance.facts(),
    )


def _in_cluster(model: StackModel) -> InClusterHealth | None:
    m, mirrors = model.monitoring, model.sources.mirrors()
    ic = m.health.inCluster
    if not (m.enabled and ic.enabled and ic.image and ic.tenant):
        return None  # validation names what is missing
    return InClusterHealth(
        image=mirrors.image(ic.image),
        pull_secrets=tuple(mirrors.pull_secrets),
        stacks_dir=ic.stacksDir,
        tenant=ic.tenant,
        prometheus_url=ic.prometheusUrl,
        watch=ic.watch,
        schedule=ic.schedule,
        interval_s=ic.intervalSeconds,
    )


def prometheus_values(ctx: PlanContext) -> dict[str, Any]:
    """kube-prometheus-stack values: node-exporter with the port-counter collectors and a
    node label, Grafana's dashboard sidecar on, selectors by the release label."""
    args = [
        # The infiniband collector is on by default; name it so no one turns it off unseen.
        "--collector.infiniband",
    ]
    if ctx.facts.pfc_priorities:  # any pool's RoCE fabric, not only the first's
        # mlx5 names its per-priority pause counters rx_prioN_pause / tx_prioN_pause;
        # node-exporter exports them as node_ethtool_received_prioN_pause etc.
        args += [
            "--collector.ethtool",
            "--collector.ethtool.metrics-include=^(rx|tx)_prio[0-7]_pause$",
        ]
    return {
        "prometheus-node-exporter": {
            "extraArgs": [
                "--collector.filesystem.mount-points-exclude="
                "^/(dev|proc|sys|run/containerd/.+|var/lib/docker/.+|var/lib/kubelet/.+)($|/)",
                "--collector.filesystem.fs-types-exclude=^(autofs|binfmt_misc|bpf|cgroup2?|"
                "configfs|debugfs|devpts|devtmpfs|fusectl|hugetlbfs|iso9660|mqueue|nsfs|overlay|"
                "proc|procfs|pstore|rpc_pipefs|securityfs|selinuxfs|squashfs|sysfs|tracefs|erofs)$",
                *args,
            ],
            "prometheus": {"monitor": {"relabelings": [ctx.facts.monitoring.node_relabeling]}},
        },
        "grafana": {
            "sidecar": {"dashboards": {"enabled": True, "label": "grafana_dashboard"}},
            # Its `helm test` pod pulls an image no install needs (and a mirror would lack).
            "testFramework": {"enabled": False},
        },
        # NodeAcceptance results as series (busbw per node over time on the acceptance board).
        "kube-state-metrics": node_acceptance.ksm_values(),
    }


def _rule(ctx: PlanContext) -> Item:
    m = ctx.facts.monitoring
    body = render_object(
        "monitoring/prometheus-rule.yaml.j2",
        stack=ctx.stack,
        namespace=m.namespace,
        labels=m.selector_labels,
        groups=alerts.groups(ctx.facts),
    )
    return Item(
        id=ids.MONITORING_RULES,
        layer=Layer.MONITORING,
        payload=K8sObject(body),
        depends_on=_after_prometheus(ctx),
    )


def _after_prometheus(ctx: PlanContext) -> tuple[str, ...]:
    return (ids.PROMETHEUS,) if ctx.facts.monitoring.install_prometheus else ()


def _queue_monitor(ctx: PlanContext) -> list[Item]:
    """A ServiceMonitor for the queueing authority's metrics (queue wait, pending work),
    labelled so the stack's Prometheus selects it; none when the authority exports none."""
    q = ctx.facts.gang.queue_metrics
    if q is None:
        return []
    body = render_object(
        "monitoring/service-monitor.yaml.j2",
        stack=ctx.stack,
        name=f"gpufabric-{q.component}",
        namespace=ctx.components[q.component].namespace,
        labels=ctx.facts.monitoring.selector_labels,
        service_labels=q.service_labels,
        port=q.port,
        scheme=q.scheme,
    )
    # In the authority's namespace, which its chart creates.
    after = (*_after_prometheus(ctx), ids.authority_chart(ctx.facts.gang.authority))
    return [
        Item(
            id=ids.QUEUE_METRICS, layer=Layer.MONITORING, payload=K8sObject(body), depends_on=after
        )
    ]


def _dashboards(ctx: PlanContext) -> list[Item]:
    m = ctx.facts.monitoring
    return [
        Item(
            id=ids.dashboard(name),
            layer=Layer.MONITORING,
            payload=K8sObject(
                render_object(
                    "monitoring/dashboard.yaml.j2",
                    stack=ctx.stack,
                    name=f"gpufabric-{name}",
                    namespace=m.namespace,
                    key=f"gpufabric-{name}.json",
                    dashboard=json.dumps(board, sort_keys=True, indent=1),
                )
            ),
            depends_on=_after_prometheus(ctx),
        )
        for name, board in dashboards.boards(ctx.facts).items()
    ]


def _node_problem_detector(ctx: PlanContext) -> Item:
    component = ctx.components[NPD_COMPONENT]
    return Item(
        id=ids.NODE_PROBLEM_DETECTOR,
        layer=Layer.MONITORING,
        payload=upstream_overlay(
            component,
            "overlays/node-problem-detector",
            monitor=json.dumps(alerts.kernel_monitor(ctx.facts), indent=2, sort_keys=True),
        ),
    )


def build(ctx: PlanContext) -> list[Item]:
    m = ctx.facts.monitoring
    if not m.enabled:
        return []
    items: list[Item] = []
    if m.install_prometheus:
        component = ctx.components[PROMETHEUS_COMPONENT]
        items += [
            # node-exporter runs privileged host agents (hostPID, host network).
            system_namespace(
                ctx.stack, ids.MONITORING_NAMESPACE, Layer.MONITORING, m.namespace, "privileged"
            ),
            Item(
                id=ids.PROMETHEUS,
                layer=Layer.MONITORING,
                payload=helm_chart(component, prometheus_values(ctx)),
                # Its kube-state-metrics exports NodeAcceptance: the CRD comes first.
                depends_on=(ids.MONITORING_NAMESPACE, ids.NODE_ACCEPTANCE_CRD),
                # The chart carries the Prometheus Operator CRDs: deleting it deletes every
                # ServiceMonitor and PrometheusRule in the cluster.
                protect=True,
                holds="ServiceMonitors / PodMonitors / PrometheusRules",
            ),
        ]
    items.append(_rule(ctx))
    items += node_acceptance.items(ctx)
    items += _queue_monitor(ctx)
    if m.dashboards:
        items += _dashboards(ctx)
    if m.node_problem_detector:
        items.append(_node_problem_detector(ctx))
    return items + health.items(ctx)
