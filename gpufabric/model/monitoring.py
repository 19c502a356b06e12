"""The stack's `monitoring` section: fleet health metrics, alerts, dashboards and node
problem detection.

Prometheus is either installed from the pinned kube-prometheus-stack chart or an existing
Prometheus Operator stack that selects gpufabric's ServiceMonitors, PrometheusRules and
dashboards by the labels the stack gives.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints

from gpufabric.model.fields import DnsLabel, LabelKey, LabelValue, Model

ImageRef = Annotated[
    str,
    StringConstraints(
        pattern=r"^[a-z0-9][a-z0-9._-]*(:[0-9]+)?(/[a-z0-9._-]+)+(:[A-Za-z0-9._-]{1,128})?(@sha256:[0-9a-f]{64})?$",
        max_length=255,
    ),
]
"""An image reference: registry/path[:tag][@sha256:digest] (no shell or YAML syntax)."""
CronSchedule = Annotated[
    str, StringConstraints(pattern=r"^[0-9*/,-]+( [0-9*/,A-Za-z-]+){4}$", max_length=100)
]
"""Five cron fields (minute hour day month weekday)."""


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


class InCluster(Model):
    """``gpufabric health`` run by the cluster itself: a CronJob (one pass per schedule) or,
    with ``watch``, a Deployment of one pod running ``--watch``."""

    enabled: bool = False
    image: ImageRef | None = None
    """Your gpufabric project (this repository, its stacks/ included) built into an image
    with the ``gpufabric`` command; required when enabled (gpufabric publishes none)."""
    stacksDir: str = Field(
        default="/gpufabric/stacks", pattern=r"^/[A-Za-z0-9._/-]*$", max_length=200
    )
    """Where the stack files are inside the image (``--stacks-dir``)."""
    tenant: DnsLabel | None = None
    """The tenant whose namespace runs the re-certification jobs; required when enabled."""
    prometheusUrl: str | None = Field(
        default=None, pattern=r"^https?://[A-Za-z0-9.:-]+(/[A-Za-z0-9._/-]*)?$", max_length=200
    )
    """Prometheus's in-cluster URL (``--prometheus``); none: node conditions only."""
    watch: bool = False
    """A Deployment running ``--watch`` instead of a CronJob."""
    schedule: CronSchedule = "*/10 * * * *"
    """The CronJob's schedule (one pass each time; a pass still running skips the next)."""
    intervalSeconds: int = Field(default=300, ge=30, le=86_400)
    """With ``watch``: seconds between passes."""


class Health(Model):
    """What ``gpufabric health`` may do on its own: the circuit breaker and the bar a
    quarantined node clears before it returns."""

    maxQuarantined: int = Field(default=2, ge=0, le=100_000)
    """At most this many GPU nodes quarantined at once (those already quarantined count);
    0: quarantine none, only report."""
    maxQuarantinedFraction: float = Field(default=0.1, gt=0, le=1)
    """And at most this fraction of the GPU nodes (rounded down); both limits hold."""
    medianFraction: float = Field(default=0.8, gt=0, le=1)
    """A re-certified node returns only when its bus bandwidth is at least this fraction of
    the median of the nodes it was swept with (and at the acceptance threshold)."""
    inCluster: InCluster = Field(default_factory=InCluster)


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
    health: Health = Field(default_factory=Health)


__all__ = ["Health", "InCluster", "Monitoring", "Prometheus", "Thresholds"]
