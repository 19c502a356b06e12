"""The protocol of a queueing authority, as the Plan asks it, and the lookup by name.

The plan owns this interface (its builders, the runbook, ``gpufabric job`` and ``verify``
call it); the authorities in :mod:`gpufabric.authorities` implement it. Keeping it here
means nothing the ``gpufabric.plan`` package imports has to import the authorities back:
:func:`get` finds an authority by name in the room's registry,
:data:`gpufabric.authorities.AUTHORITIES`, which imports its module on first use.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar

from gpufabric import authorities
from gpufabric.model.config import Scheduling
from gpufabric.model.problems import Problem
from gpufabric.plan.facts import (
    DiscoveredTopology,
    GangPolicy,
    PlanContext,
    QueueMetrics,
    TenantContract,
)
from gpufabric.plan.items import Item


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
    runbook_macros: ClassVar[tuple[str, ...]] = (
        "ready",
        "tenant_objects",
        "tenant_queue",
        "triage",
    )
    """Macros every fragment defines (the runbook imports it as ``queueing`` and calls them):
    ``ready()`` its readiness after the scheduling phase, ``tenant_objects()`` the kinds to
    add to a tenant namespace's ``kubectl get``, ``tenant_queue(t)`` what a tenant namespace
    holds for its queue, ``triage()`` its rows of the triage table."""
    pod_scheduler_name: ClassVar[str | None] = None
    """``schedulerName`` gpufabric writes on job pods; None: left to the cluster's default
    scheduler or set by the job operators (started with the authority's flags)."""
    readiness: ClassVar[Mapping[str, tuple[str, str]]]
    """Objects it serves and how ``verify cluster`` reads them ready: kind -> ("condition",
    type) for a True condition, or ("state", value) for ``.status.state``."""

    requeues_gangs: ClassVar[bool] = False
    """True: a gang whose pods are not all ready in time (at start, or after a restart) is
    evicted and requeued, a bounded number of times (``scheduling.requeuing``); False: a gang
    waits in its queue and is never requeued."""

    admits_only_quota: ClassVar[bool] = False
    """True: GPUs that no tenant's quota holds are never admitted (Kueue: a ClusterQueue
    borrows only the unused nominal quota of its cohort); False: a queue may grow into idle
    GPUs up to its capability (Volcano)."""

    quota_per_pool: ClassVar[bool] = False
    """True: a tenant's queue holds its ``gpuQuota`` in each node pool of a fleet apart (Kueue:
    a flavor per pool); False: one amount per resource over every pool (the split a
    ``gpuQuota`` map writes is kept by ``gpufabric job`` and ``verify`` only, a warning)."""

    own_queues: ClassVar[frozenset[str]] = frozenset()
    """Queues the authority creates itself at start: no tenant's queue may take one's name
    (it would reshape every tenant's scheduling)."""

    ignored_settings: ClassVar[Mapping[str, str]] = {}
    """Keys of ``scheduling`` this authority does not read -> why; a stack that sets one
    gets a warning naming it (never a setting silently without effect)."""

    # -------------------------------------------------------------- validation

    def scheduling_problems(self, scheduling: Scheduling) -> Iterator[Problem]:
        """What this authority alone requires of ``scheduling`` (its own keys, and how it
        reads the shared ones), by config path; stack validation asks the chosen one."""
        return iter(())

    def failure_problems(self, scheduling: Scheduling, max_restarts: int) -> Iterator[Problem]:
        """Where its requeuing contradicts ``training.failurePolicy`` (by config path)."""
        return iter(())

    # ------------------------------------------------------------------- facts

    @abstractmethod
    def topology_levels(self, configured: Sequence[str]) -> tuple[str, ...]:
        """Node-label levels it places on, widest first, the node level last."""

    def discovered_topology(self, switch_levels: Sequence[str]) -> DiscoveredTopology | None:
        """Objects it builds from the switch levels' node labels (None: none)."""
        return None

    def queue_metrics(self) -> QueueMetrics | None:
        """Its metrics of queue wait and pending work, and the Service that serves them."""
        return None

    def preferred_topology_level(self, levels: Sequence[str]) -> str | None:
        """The level a per-pod-set placement hint names (None: it takes no hint)."""
        return None

    def frameworks(self, job_kinds: Sequence[str]) -> tuple[str, ...]:
        """Job integrations it must be configured with for these job kinds."""
        return ()

    @abstractmethod
    def queue_name(self, tenant: str) -> str:
        """The queue a tenant's jobs name."""

    def admissible_gpus(self, quota: int, borrowing_limit: int, pooled: int) -> tuple[int, str]:
        """The most GPUs one job of a tenant can ever be admitted with, and why: its queue's
        hard cap (``quota`` + ``borrowing_limit``, which the tenant namespace's
        ResourceQuota also holds its pods to). ``pooled``: the GPU quota of all tenants
        together. What it may borrow depends on others' use at the time, so a job up to
        the cap may wait but is admitted once others' quota is idle."""
        return quota + borrowing_limit, (
            f"gpuQuota {quota} + gpuBorrowingLimit {borrowing_limit}: the most its queue and "
            "its namespace's ResourceQuota ever admit"
        )

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
    def tenant_items(self, ctx: PlanContext, tenant: TenantContract, chart_id: str) -> list[Item]:
        """A tenant's queue and priority objects (scheduling layer), from its contract."""

    def namespace_annotations(self, contract: TenantContract) -> dict[str, str]:
        """Annotations of the tenant namespace that route its jobs."""
        return {}

    def namespace_items(
        self, ctx: PlanContext, tenant: TenantContract, namespace_id: str
    ) -> list[Item]:
        """Objects inside the tenant namespace (tenants layer), from its contract."""
        return []

    def admission_rules(self) -> list[dict[str, str]]:
        """Validations (``expression``, ``message``, ``reason``) of the admission policy over
        every object created or updated in a tenant namespace: where this authority reads a
        queue or a priority from an object, it must be the tenant's own
        (``variables.tenant.queue``, ``variables.tenant.priorityClass``)."""
        return []

    def tenant_rbac_rules(self) -> list[dict[str, Any]]:
        """RBAC rules (read-only) on its objects a tenant may see in its namespace."""
        return []

    def trainer_pod_group_policy(self, gang: GangPolicy) -> dict[str, Any] | None:
        """``podGroupPolicy`` of the Trainer runtimes (None: none)."""
        return None

    # -------------------------------------------------------------------- jobs

    def job_labels(self, contract: TenantContract) -> dict[str, str]:
        """Labels on a job object (e.g. the queue it is admitted through)."""
        return {}

    def job_annotations(self, contract: TenantContract) -> dict[str, str]:
        """Annotations on a job object."""
        return {}

    def pod_labels(self, contract: TenantContract) -> dict[str, str]:
        """Labels on every pod template of a job."""
        return {}

    def pod_annotations(self, gang: GangPolicy, within: str | None = None) -> dict[str, str]:
        """Annotations on every pod template of a job; ``within``: a topology level the job
        must fit under one value of (an NVL72 job of at most one rack's trays: the clique)."""
        return {}

    def scheduling_policy(
        self, contract: TenantContract, min_available: int
    ) -> dict[str, Any] | None:
        """``runPolicy.schedulingPolicy`` of a Kubeflow job gang of ``min_available`` pods."""
        return None

    def trainjob_template_metadata(self, contract: TenantContract) -> dict[str, Any] | None:
        """Metadata the TrainJob's JobSet template needs (through runtimePatches)."""
        return None


def get(name: str) -> Authority:
    """The authority of that name; UnknownChoice for any other name (never a fallback)."""
    found: Authority = authorities.AUTHORITIES.member(name)
    return found


__all__ = ["Authority", "get"]
