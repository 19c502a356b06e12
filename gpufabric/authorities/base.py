"""What the queueing authorities share: the protocol they implement (owned by the plan,
:class:`gpufabric.plan.authority.Authority`) and helpers."""

from __future__ import annotations

from typing import Any

from gpufabric.plan.authority import Authority
from gpufabric.plan.facts import GPU_RESOURCE, PlanContext

JOB_OPERATORS = ("mpi-operator", "training-operator")
"""Operators started with an authority's gang flags (Trainer runtimes carry theirs)."""


def tolerations(ctx: PlanContext) -> list[dict[str, Any]]:
    return [dict(t) for t in ctx.facts.nodes.tolerations]


__all__ = ["GPU_RESOURCE", "JOB_OPERATORS", "Authority", "tolerations"]
