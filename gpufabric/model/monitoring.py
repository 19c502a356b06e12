"""The stack's `monitoring` section: fleet health metrics, alerts, dashboards and node
problem detection.

Prometheus is either installed from the pinned kube-prometheus-stack chart or an existing
Prometheus Operator stack that selects gpufabric's ServiceMonitors, PrometheusRules and
dashboards by the labels the stack gives.
"""

from __future__ import annotations

from pydantic import Field

from gpufabric.model.fields import LabelKey, LabelValue, Model


class Prometheus(Model):
    """Which Prometheus scrapes the exporters and evaluates the rules."""

    install: bool = True
    """Install kube-prometheus-stack at its pin (Prometheus, Alertmanager, Grafana,
    node-exporter, kube-state-metrics); false: an existing Prometheus Operator stack."""
    selectorLabels: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=16)
    """Labels every ServiceMonitor and PrometheusRule gpufabric writes carries, so that the
    Prometheus selects them (its serviceMonitorSelector / ruleSelector). Required when
    ``install`` is false; with ``install`` the installed Prometheus selects them by the
    chart's release label, which gpufabric adds itself."""


class Thresholds(Model):
    """Where a counter turns into an alert."""

    symbolErrorsPerHour: int = Field(default=10, ge=1, le=1_000_000)
    """Physical-layer symbol errors per port and hour above which a link is degraded."""
    pfcPausesPerSecond: int = Field(default=10_000, ge=1, le=100_000_000)
    """Received PFC pause frames per port and second (RoCE) above which a PFC storm is
    declared."""
    acceptanceMaxAgeHours: int = Field(default=168, ge=1, le=8_760)
    """Hours after which the last successful NCCL acceptance run is stale."""


class Monitoring(Model):
    """Fleet health: DCGM and port counters, alerts, dashboards, node-problem-detector."""

    enabled: bool = False
    prometheus: Prometheus = Field(default_factory=Prometheus)
    dashboards: bool = True
    """Grafana dashboards as ConfigMaps the Grafana sidecar loads (label grafana_dashboard)."""
    nodeProblemDetector: bool = True
    """node-problem-detector on the GPU nodes with gpufabric's kernel-log rules (NVRM Xid,
    mlx5 link errors) setting node conditions."""
    thresholds: Thresholds = Field(default_factory=Thresholds)


__all__ = ["Monitoring", "Prometheus", "Thresholds"]
