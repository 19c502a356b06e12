"""What the scheduling, training and tenants layers read: the Plan's context with the
stack's queueing authority, looked up once when the Plan is built.

The authority lives here rather than in :mod:`gpufabric.plan.facts` because the authority
protocol (:mod:`gpufabric.plan.authority`) itself reads the facts: they stay plain records.
"""

from __future__ import annotations

from gpufabric.plan.authority import Authority
from gpufabric.plan.facts import PlanContext


class LayerContext(PlanContext, frozen=True):
    """A :class:`PlanContext` with the resolved queueing authority."""

    authority: Authority


__all__ = ["LayerContext"]
