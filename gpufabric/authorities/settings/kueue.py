"""Kueue's own keys of ``scheduling``: the cohort and how timed-out gangs are requeued."""

from __future__ import annotations

from pydantic import Field

from gpufabric.model.fields import DnsLabel, DurationSeconds, Model


class Requeuing(Model):
    """Kueue: how a gang that timed out waiting for its pods is requeued."""

    backoffLimitCount: int = Field(default=5, ge=0, le=1000)
    """Requeues before the workload is deactivated."""
    backoffBase: DurationSeconds = 60
    backoffMax: DurationSeconds = 3600


class KueueSettings(Model):
    """``scheduling.requeuing`` and ``scheduling.cohort``."""

    requeuing: Requeuing = Field(default_factory=Requeuing)
    cohort: DnsLabel = "gpufabric"
    """Kueue cohort of all tenants' ClusterQueues: where idle quota is lent and borrowed."""


__all__ = ["KueueSettings", "Requeuing"]
