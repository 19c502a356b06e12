"""The protocol every queueing authority implements, and what they share."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from gpufabric.model.config import Tenant
from gpufabric.plan.facts import GPU_RESOURCE, GangPolicy, PlanContext, TenantContract
from gpufabric.plan.items import Item

JOB_OPERATORS = ("mpi-operator", "training-operator")
"""Operators started with an authority's gang flags (Trainer runtimes carry theirs)."""


class Authority(ABC):
    """One gang-scheduling and queueing authority: everything that differs between them."""

    name: ClassVar[str]
    """The value of ``scheduling.gang`` and the module's name."""
    title: ClassVar[str]
    component: ClassVar[str]
    """Its pinned Helm chart in manifests/versions.yaml."""
    holds: ClassVar[str]
    """Users' objects its CRDs hold (removing its chart deletes them)."""
    job_operators_first: ClassVar[bool]
    """True: its chart is installed after the job operators (it watches their CRDs when it
    starts); False: the job operators follow it (they create its objects)."""
    runbook_fragment: ClassVar[str]
    """Template under manifests/runbooks/ with its bring-up, checks and triage text."""
    readiness: ClassVar[Mapping[str, tuple[str, str]]]
    """Objects it serves and how ``verify cluster`` reads them ready: kind -> ("condition",
    type) for a True condition, or ("state", value) for ``.status.state``."""

    # ------------------------------------------------------------------- facts

    @abstractmethod
    def topology_levels(self, configured: Sequence[str]) -> tuple[str, ...]:
        """Node-label levels it places on, widest first, the node level last."""

    def preferred_topology_level(self, levels: Sequence[str]) -> str | None:
        """The level a per-pod-set placement hint names (None: it takes no hint)."""
        return None

    def frameworks(self, job_kinds: Sequence[str]) -> tuple[str, ...]:
        """Job integrations it must be configured with for these job kinds."""
        return ()

    @abstractmethod
    def queue_name(self, tenant: str) -> str:
        """The queue a tenant's jobs name."""

    def priority_class(self, tenant: str) -> str:
        return f"tenant-{tenant}"

    def operator_flags(self, operator: str) -> tuple[str, ...]:
        """Extra flags of a job operator (one of :data:`JOB_OPERATORS`)."""
        return ()

    # -------------------------------------------------------------------- plan

    @abstractmethod
    def chart_values(self, ctx: PlanContext) -> dict[str, Any]:
        """Values of its Helm chart."""

    @abstractmethod
    def cluster_items(self, ctx: PlanContext, chart_id: str) -> list[Item]:
        """Cluster-wide objects besides the chart (topologies, flavors)."""

    @abstractmethod
    def tenant_items(self, ctx: PlanContext, tenant: Tenant, chart_id: str) -> list[Item]:
        """A tenant's queue and priority objects (scheduling layer)."""

    def namespace_annotations(self, contract: TenantContract) -> dict[str, str]:
        """Annotations of the tenant namespace that route its jobs."""
        return {}

    def namespace_items(self, ctx: PlanContext, tenant: Tenant, namespace_id: str) -> list[Item]:
        """Objects inside the tenant namespace (tenants layer)."""
        return []

    def trainer_pod_group_policy(self, gang: GangPolicy) -> dict[str, Any] | None:
        """``podGroupPolicy`` of the Trainer runtimes (None: none)."""
        return None

    # -------------------------------------------------------------------- jobs

    def job_labels(self, contract: TenantContract) -> dict[str, str]:
        return {}

    def job_annotations(self, contract: TenantContract) -> dict[str, str]:
        return {}

    def pod_annotations(self, gang: GangPolicy) -> dict[str, str]:
        """Annotations on every pod template of a job."""
        return {}

    def scheduling_policy(
        self, contract: TenantContract, min_available: int
    ) -> dict[str, Any] | None:
        """``runPolicy.schedulingPolicy`` of a Kubeflow job gang of ``min_available`` pods."""
        return None

    def trainjob_template_metadata(self, contract: TenantContract) -> dict[str, Any] | None:
        """Metadata the TrainJob's JobSet template needs (through runtimePatches)."""
        return None


def tolerations(ctx: PlanContext) -> list[dict[str, Any]]:
    return [dict(t) for t in ctx.facts.nodes.tolerations]


__all__ = ["GPU_RESOURCE", "JOB_OPERATORS", "Authority", "tolerations"]
