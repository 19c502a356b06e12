"""The Plan: every item a stack installs, in apply order, with its dependencies and the
resolved facts every output reads.

A Plan is computed once from the stack model by pure functions (no I/O besides reading the
templates and pins shipped with the project, no clock, no randomness), and everything else
reads it: the Pulumi components register its items, ``gpufabric render`` writes them to
files, the runbook describes them and ``verify`` checks a cluster against them.

Modules: :mod:`~gpufabric.plan.items` (what items are), :mod:`~gpufabric.plan.ids` (their
ids and Pulumi names), :mod:`~gpufabric.plan.facts` and :mod:`~gpufabric.plan.resolve` (the
resolved facts), one builder module per layer, and :mod:`~gpufabric.plan.build`.
"""

from __future__ import annotations

from gpufabric.plan.build import LAYER_BUILDERS, Plan, build_plan
from gpufabric.plan.facts import Facts, PlanContext, TenantContract
from gpufabric.plan.items import (
    LAYER_ORDER,
    STATE_READY,
    HelmChart,
    Item,
    K8sObject,
    KustomizeOverlay,
    Layer,
    Payload,
    PlanError,
    SecretRef,
    helm_chart,
    object_item,
    order_items,
    system_namespace,
    upstream_overlay,
)

__all__ = [
    "LAYER_BUILDERS",
    "LAYER_ORDER",
    "STATE_READY",
    "Facts",
    "HelmChart",
    "Item",
    "K8sObject",
    "KustomizeOverlay",
    "Layer",
    "Payload",
    "Plan",
    "PlanContext",
    "PlanError",
    "SecretRef",
    "TenantContract",
    "build_plan",
    "helm_chart",
    "object_item",
    "order_items",
    "system_namespace",
    "upstream_overlay",
]
