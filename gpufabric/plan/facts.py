"""Resolved facts: every value an output needs, computed once from the stack.

The stack model says what a user wrote; defaults and derived values (a rail's effective MTU,
its CNI and pod resource, the topology levels the queueing authority places on, each
tenant's pod contract, the acceptance threshold, which operator runs Node Feature Discovery)
are resolved by :mod:`gpufabric.plan.resolve` into these frozen records and carried on the
Plan. The layer builders, ``render``, the runbook, ``verify``, ``gpufabric job``, ``images``
and ``diff`` read them from there and never re-derive them from the raw model, so they
cannot disagree with what ``pulumi up`` applies.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from msgspec import Struct, field
from msgspec.structs import replace

from gpufabric.model.config import Ufm
from gpufabric.model.versions import Component
from gpufabric.plan.failure import FailurePolicyFacts
from gpufabric.plan.vocabulary import (
    DeviceLinkType,
    FabricType,
    GpuDirect,
    HostStack,
    JobKind,
    LinkLayer,
    MetricsScheme,
    MigStrategy,
    MultusMode,
    NadScope,
    NcclLinkLayer,
    NfdOwner,
    NfsVersion,
    NicDriverSource,
    NvlinkSystem,
    PartitionMembership,
    PkeyManagement,
    PoolKind,
    RailCni,
    RdmaMode,
    ReclaimPolicy,
    StorageTransport,
    TrainerRuntime,
    TrainingScheme,
    XidAction,
)

GPU_RESOURCE = "nvidia.com/gpu"
"""The extended resource the GPU Operator's device plugin advertises."""
NCCL_ENV = "nccl-env"
"""The ConfigMap of a tenant's NCCL settings (a fleet's pools: ``nccl-env-<pool>``)."""


class BlockFacts(Struct, frozen=True):
    """One leaf block of a routed rail: its own subnet, gateway, pool and network."""

    leaf: str
    """The leaf switch, as the value of ``leaf_label`` on the block's nodes."""
    leaf_label: str
    """The node label naming the leaf (narrowest switch level of the topology)."""
    subnet: str
    gateway: str
    pool: str
    """nv-ipam IPPool name: serves only the nodes under the leaf."""
    nad: str
    """NetworkAttachmentDefinition (and CNI network) name: <rail>-<leaf>."""
    exclude: tuple[str, ...] = ()
    """The rail's exclusions inside this block's subnet."""


class NodePrefixFacts(Struct, frozen=True):
    """One GPU node's static allocation on a rail spanning leaves."""

    node: str
    prefix: str
    """The node's prefix, carved from its leaf's block."""
    gateway: str
    """The leaf's address in that prefix: the node's pods route the rail through it."""


class SpanBlockFacts(Struct, frozen=True):
    """One leaf's block of a rail spanning leaves, and its nodes' prefixes."""

    leaf: str
    subnet: str
    nodes: tuple[NodePrefixFacts, ...]


class LeafSpanFacts(Struct, frozen=True):
    """A routed rail whose one network spans leaves (fabric.ipam.routing: spanLeaves): one
    CIDRPool whose static allocations give each node a prefix of its leaf's block."""

    leaf_label: str
    """The node label naming the leaf (narrowest switch level of the topology)."""
    gateway_index: int
    """Offset of the leaf's address in every node prefix (the CIDRPool's gatewayIndex)."""
    blocks: tuple[SpanBlockFacts, ...]

    @property
    def nodes(self) -> tuple[NodePrefixFacts, ...]:
        """Every node's allocation, leaf by leaf."""
        return tuple(n for b in self.blocks for n in b.nodes)


class RailFacts(Struct, frozen=True):
    """One rail as every layer and check sees it."""

    name: str
    netdev: str
    """Host netdev (the PF for SR-IOV, the IPoIB or Ethernet port otherwise)."""
    hca: str | None
    """RDMA device when the stack names it; None means: found from the netdev."""
    subnet: str
    gateway: str | None
    mtu: int
    """Effective MTU of the pod interface (the stack's, or the fabric's default)."""
    cni: RailCni
    """CNI plugin of the rail's network: macvlan, ipoib, sriov, ib-sriov or host-device."""
    pod_interface: str
    """Interface name inside pods (<= 15 characters)."""
    resource: str | None
    """Extended resource a pod requests for the rail's RDMA device (None without RDMA)."""
    device_plugin_resource: str | None
    """The device plugin's own resourceName (the part after the prefix)."""
    nad: str
    """NetworkAttachmentDefinition name."""
    pool: str
    """nv-ipam pool name."""
    pool_kind: PoolKind
    """IPPool or CIDRPool."""
    exclude: tuple[str, ...] = ()
    """Addresses the pool must not hand out: 'a.b.c.d' or 'a.b.c.d-a.b.c.e'."""
    blocks: tuple[BlockFacts, ...] = ()
    """Routed rail with a subnet per leaf: one pool and network per block instead of the
    rail's own (``subnet`` is then the aggregate pods route to through their gateway)."""
    span: LeafSpanFacts | None = None
    """Routed rail spanning leaves: its own pool and network, a prefix per node of its leaf's
    block (``subnet`` is then the aggregate pods route to through their node's gateway)."""

    @property
    def networks(self) -> tuple[str, ...]:
        """Every NetworkAttachmentDefinition of the rail: its own, or one per block."""
        return tuple(b.nad for b in self.blocks) if self.blocks else (self.nad,)


class RoceFacts(Struct, frozen=True):
    """The lossless class RDMA traffic uses; must match the switches."""

    dscp: int
    traffic_class: int
    """NCCL_IB_TC: the stack's, or DSCP x 4."""
    pfc_priority: int
    qps_per_connection: int | None
    gid_index: int | None
    """None: NCCL picks the RoCEv2 GID itself."""
    pfc_vector: str
    """mlnx_qos --pfc argument: 1 on the PFC priority, 0 elsewhere."""


class Partition(Struct, frozen=True):
    """One InfiniBand partition the rails' networks put pods in: what the subnet manager
    (OpenSM partitions.conf or UFM) must define and every rail port must be a member of."""

    name: str
    """The partition's name in the subnet manager's configuration."""
    pkey: str
    """The key as the networks carry it (0x8010: full-membership bit set)."""
    tenants: tuple[str, ...]
    """Tenant namespaces whose pods use it."""
    membership: PartitionMembership = "full"
    """What every GPU node's rail port must be: full (pods on the VFs talk to each other)."""

    @property
    def base(self) -> int:
        """The low 15 bits: the partition's identity, whatever the membership bit."""
        return int(self.pkey, 16) & 0x7FFF

    @property
    def full_member(self) -> str:
        """The entry a full member's port shows in /sys/class/infiniband/*/ports/*/pkeys/."""
        return f"0x{self.base | 0x8000:04x}"


class InfinibandFacts(Struct, frozen=True):
    pkey: str | None
    pkey_management: PkeyManagement
    ufm: Ufm | None = None
    """UFM that ib-kubernetes adds pod GUIDs through (pkeyManagement: ufm)."""
    partitions: tuple[Partition, ...] = ()
    """Every partition the rails' networks use, the default partition (0x7fff) included
    when a tenant's networks carry no key of their own; empty: the networks carry no pkey
    (shared IPoIB devices, whose partition is the rail netdev's)."""

    @property
    def partitions_conf(self) -> tuple[str, ...]:
        """OpenSM partitions.conf lines for these partitions (docs/decisions/
        security-and-tenants.md, "InfiniBand partitions that isolate").

        static: a VF's GUID is set on the host, not known to the subnet manager's
        configuration, so only ``ALL`` reaches the VFs: every VF is a full member of every
        partition listed, which is why per-tenant keys are refused with static management
        and every tenant shares these partitions. ufm: ib-kubernetes adds each pod's VF GUID
        to its network's key (full membership) through UFM, and no other port belongs there;
        the default partition keeps every end port, VFs included, a limited member (two
        limited members cannot talk), so no two tenants' VFs share a partition."""
        if not self.partitions:
            return ()
        if self.pkey_management == "ufm":
            lines = ["Default=0x7fff, ipoib : ALL=limited, ALL_SWITCHES=full, SELF=full;"]
            lines += [
                f"# {p.name}={p.pkey}: only the VF GUIDs ib-kubernetes adds through UFM (full)"
                for p in self.partitions
                if p.pkey != "0xffff"
            ]
            return tuple(lines)
        lines = ["Default=0x7fff, ipoib, defmember=full : ALL, ALL_SWITCHES=full, SELF=full;"]
        lines += [
            f"{p.name}={p.pkey}, ipoib, defmember=full : ALL;"
            for p in self.partitions
            if p.pkey != "0xffff"
        ]
        return tuple(lines)


class FabricFacts(Struct, frozen=True):
    """The fabric as resolved: types, modes, rails and the values each layer sets."""

    type: FabricType
    """infiniband or roce."""
    rdma: RdmaMode
    """shared, sriov, hostdevice or none."""
    has_rdma: bool
    gpudirect: GpuDirect
    """dmabuf or peermem."""
    nic_driver: NicDriverSource
    """host or operator."""
    host_stack: HostStack
    """doca, mlnx-ofed or inbox (when the NIC driver comes from the host)."""
    multus: MultusMode
    nad_scope: NadScope
    networks_namespace: str | None
    """Namespace of the shared NetworkAttachmentDefinitions (None when per tenant)."""
    link_layer: LinkLayer
    """The rail ports' sysfs link_layer: InfiniBand or Ethernet."""
    nccl_link_layer: NcclLinkLayer
    """How NCCL names it in its NET/IB lines: IB or RoCE."""
    device_link_type: DeviceLinkType
    """Device plugin selectors' linkTypes: infiniband or ether."""
    mtu: int
    link_rate_gbps: int
    sriov_vfs: int | None
    ipam_block_size: int
    """IPPool: addresses handed to each node."""
    ipam_node_prefix: int | None
    """CIDRPool: prefix length of each node's block."""
    rails: tuple[RailFacts, ...]
    rdma_resources: Mapping[str, int]
    """Extended resources (and counts) one pod requests for its rails."""
    roce: RoceFacts | None
    infiniband: InfinibandFacts | None
    pfc_priority: int | None = None
    """The priority RDMA traffic pauses on (None: the link has no lossless Ethernet class)."""


class NvlinkFacts(Struct, frozen=True):
    """An NVL72 pool's NVLink domains (gpufabric.model.nvlink): trays of ``gpus_per_tray``
    GPUs, ``trays_per_domain`` to a rack, each tray labelled with its domain by GFD."""

    system: NvlinkSystem
    gpus_per_tray: int
    trays_per_domain: int
    domains: int
    """Racks the pool's trays fill (a partial one counted)."""
    clique_label: str
    min_driver: str
    min_nccl: str

    def fits_one_domain(self, nodes: int) -> bool:
        """A job of ``nodes`` trays fits inside one rack's NVLink domain."""
        return nodes <= self.trays_per_domain


class NodeFacts(Struct, frozen=True):
    """The GPU nodes of one pool."""

    count: int
    gpus_per_node: int
    gpu_model: str | None
    selector: Mapping[str, str]
    selector_text: str
    """The selector as ``kubectl -l`` takes it (k=v,k=v, sorted)."""
    tolerations: tuple[Mapping[str, Any], ...]
    driver_version: str | None
    """The pinned NVIDIA driver version, when the stack pins one."""
    shm_gib: int
    """/dev/shm every training pod gets (per GPU: NCCL buffers, data loaders)."""
    pool: str = "default"
    """The pool's name."""
    use_precompiled: bool | None = None
    """The pool's own driver choice (None: the stack's gpuOperator.driver)."""
    nvlink: NvlinkFacts | None = None
    """The pool's trays' NVLink domains (None: not an NVL72 pool)."""


class RequeuePolicy(Struct, frozen=True):
    """How a gang that timed out waiting for its pods is requeued (Kueue's backoff)."""

    backoff_limit_count: int
    """Requeues before the workload is deactivated."""
    backoff_base_s: int
    backoff_max_s: int


class DiscoveredTopology(Struct, frozen=True):
    """Objects the authority discovers from the topology-level node labels (Volcano's
    HyperNodes): one per switch, labelled ``<level>=<switch>``, ``spec.tierName`` the level,
    the narrowest level's members the nodes by name, each wider level's the narrower objects."""

    api_version: str
    kind: str
    selector: str
    """Label selector of the discovered objects (as ``kubectl -l`` takes it)."""


class QueueMetrics(Struct, frozen=True):
    """What the queueing authority's own metrics tell about waiting work, and where it serves
    them: the tenants dashboard reads the queries, a ServiceMonitor scrapes the endpoint."""

    component: str
    """Its pinned chart: the metrics Service is in that component's namespace."""
    service_labels: Mapping[str, str]
    """Labels of the Service in front of its metrics endpoint."""
    port: str
    """That Service's port name."""
    scheme: MetricsScheme
    """``https``: the endpoint authorizes the scraper's service account token."""
    wait: tuple[tuple[str, str], ...]
    """Queries (PromQL, legend) of the wait of work in each queue, in seconds, over the
    dashboard's time range (Grafana's ``$__range``)."""
    pending: tuple[tuple[str, str], ...]
    """Queries (PromQL, legend) of the work waiting now."""
    note: str
    """What the wait measures and what it misses (the panels' description)."""


class GangPolicy(Struct, frozen=True):
    """How the cluster's one queueing authority admits and places gangs."""

    authority: str
    """Name of the authority module (kueue, volcano)."""
    title: str
    topology_levels: tuple[str, ...]
    """Node-label levels, widest first, the node level last; empty: no topology."""
    switch_tiers: int
    """Levels above the node."""
    switch_levels: tuple[str, ...]
    """The level labels above the node (each GPU node must carry every one)."""
    node_topology: Mapping[str, Mapping[str, str]]
    """Node -> {level label: switch} when the stack gives the table (else empty)."""
    preferred_topology_level: str | None
    """The level pods are packed under when the authority takes a hint per pod set."""
    all_or_nothing_timeout_s: int
    frameworks: tuple[str, ...]
    """Job integrations the authority is configured for (empty when it needs none)."""
    cohort: str
    """Where the tenants' queues lend and borrow idle quota (Kueue's cohort)."""
    requeue: RequeuePolicy
    discovered_topology: DiscoveredTopology | None = None
    """What ``verify cluster`` checks the topology's objects in (None: the authority places
    by the node labels alone)."""
    queue_metrics: QueueMetrics | None = None
    """Its queue wait and pending work metrics (None: it exports none)."""
    gfd_levels: tuple[str, ...] = ()
    """Switch levels GPU Feature Discovery labels (an NVL72 tray's ``nvidia.com/gpu.clique``):
    never labelled by hand, checked like the others."""

    @property
    def hand_levels(self) -> tuple[str, ...]:
        """The switch levels a person labels (those GFD does not)."""
        return tuple(lv for lv in self.switch_levels if lv not in self.gfd_levels)

    def nodes_under(self, label: str, switch: str) -> int:
        """GPU nodes the node table puts under ``switch`` at level ``label`` (0 without one)."""
        return sum(1 for labels in self.node_topology.values() if labels.get(label) == switch)


class TenantContract(Struct, frozen=True):
    """What a training pod in one tenant namespace gets and must carry."""

    namespace: str
    networks: str
    """Value of the pod annotation k8s.v1.cni.cncf.io/networks (all rails)."""
    rdma_resources: Mapping[str, int]
    """Extended resources (and counts) each pod requests for its rails."""
    nccl_env: Mapping[str, str]
    queue: str
    """The queue the tenant's jobs name (LocalQueue name, Volcano Queue name)."""
    priority_class: str
    gpu_quota: int
    gpu_limit: int
    """GPUs the tenant may hold at once: quota plus borrowing limit."""
    gpu_borrowing_limit: int
    """GPUs beyond its quota the tenant may borrow while others' quota is idle."""
    gpu_admissible: int
    """The most GPUs one job of the tenant can ever be admitted with (the queueing
    authority's rule over its quota, borrowing limit and what the others lend): a larger
    job waits in its queue forever."""
    gpu_admissible_why: str
    """How the authority comes to ``gpu_admissible`` (for the error that refuses a job)."""
    cpu_quota: str | None
    """CPU quota (a Kubernetes quantity); None: not limited."""
    memory_quota: str | None
    """Memory quota (a Kubernetes quantity); None: not limited."""
    priority: int
    """Priority of the tenant's jobs; higher reclaims borrowed GPUs from lower."""
    pkey: str | None = None
    """The tenant's own InfiniBand partition on its per-tenant networks."""
    vlan: int | None = None
    """The tenant's own VLAN on its per-tenant RoCE networks."""
    groups: tuple[str, ...] = ()
    """Groups bound to the tenant's role in its namespace."""
    network_namespace: str = ""
    """Namespace of the NetworkAttachmentDefinitions its pods may attach."""
    network_names: tuple[str, ...] = ()
    """The NetworkAttachmentDefinitions (one per rail) its pods may attach."""
    leaf_networks: Mapping[str, str] = field(default_factory=dict)
    """Routed rail blocks: the networks annotation per leaf (a pod attaches its leaf's
    blocks and runs under that leaf); ``networks`` is then empty and a job must pick a
    leaf (``on_one_leaf``)."""
    leaf_label: str | None = None
    """The node label naming the leaf, where ``leaf_networks`` or ``span_leaves`` is set."""
    span_leaves: tuple[str, ...] = ()
    """Routed rails spanning leaves: the leaves a job may be pinned under (``networks`` stay
    the same under each)."""
    node_selector: Mapping[str, str] = field(default_factory=dict)
    """Node labels the tenant's pods must carry beyond the GPU nodes' (a pinned leaf)."""
    nccl_env_name: str = NCCL_ENV
    """The ConfigMap in the tenant namespace that holds these NCCL settings and pod wiring
    (``envFrom``): ``nccl-env``, or in a fleet the pool's own ``nccl-env-<pool>``."""


class Acceptance(Struct, frozen=True):
    """What the NCCL acceptance test must reach on this fabric."""

    rdma: bool
    link_layer: NcclLinkLayer
    """IB or RoCE, as NCCL prints it."""
    rails: int
    link_rate_gbps: int
    line_rate_gbytes: float
    """Rails x link rate, in GB/s (bus bandwidth's unit)."""
    fraction: float
    threshold_gbps: float
    threshold_source: str

    def on_rails(self, rails: int) -> Acceptance:
        """The same fabric when a run may use only ``rails`` of its rails (a sweep's
        one-rail jobs): the line rate, and so the threshold, scale with them."""
        one = replace(self, rails=rails, line_rate_gbytes=rails * self.link_rate_gbps / 8)
        return one.at_fraction(self.fraction)

    def at_fraction(self, fraction: float) -> Acceptance:
        """The same fabric judged against another share of its line rate."""
        return replace(
            self,
            fraction=fraction,
            threshold_gbps=round(fraction * self.line_rate_gbytes, 2),
            threshold_source=(
                f"{fraction:g} x line rate {self.line_rate_gbytes:g} GB/s "
                f"({self.rails} rail{'s' if self.rails != 1 else ''} x {self.link_rate_gbps} Gb/s)"
            ),
        )


class GpuOperatorFacts(Struct, frozen=True):
    """The GPU Operator's settings as the stack gives them."""

    driver: bool
    """The operator installs the NVIDIA driver (False: the hosts bring it)."""
    use_precompiled: bool
    use_nvidia_driver_crd: bool
    gds: bool
    gdrcopy: bool
    mig_strategy: MigStrategy
    dcgm_exporter: bool
    dcgm_service_monitor: bool
    driver_version: str | None = None
    """The stack's driver version (``gpuOperator.driver.version``; a pool may pin its own)."""
    cdi: bool = True
    """CDI in the container runtime (``gpuOperator.cdi``)."""


class DcgmCounter(Struct, frozen=True):
    """One line of the DCGM exporter's counters CSV: a DCGM field (or an exporter field)
    and the Prometheus type it is exported as."""

    field: str
    type: Literal["gauge", "counter", "label"]
    help: str


class XidClass(Struct, frozen=True):
    """Xid codes that call for one action (NVIDIA's Xid catalogue)."""

    name: XidAction
    codes: tuple[int, ...]
    quarantine: bool
    """The node leaves service until a reset/reboot and re-certification."""
    action: str


class InClusterHealth(Struct, frozen=True):
    """``gpufabric health`` run in the cluster (monitoring.health.inCluster)."""

    image: str
    """As pulled (through the stack's mirrors)."""
    pull_secrets: tuple[str, ...]
    stacks_dir: str
    tenant: str
    prometheus_url: str | None
    watch: bool
    schedule: str
    interval_s: int


class HealthFacts(Struct, frozen=True):
    """What ``gpufabric health`` reads: the node conditions that quarantine, the breaker,
    the bar for returning a node."""

    fatal_conditions: tuple[str, ...]
    """Node condition types (set by node-problem-detector's rules) whose status True
    quarantines the node."""
    max_quarantined: int
    max_quarantined_fraction: float
    median_fraction: float
    in_cluster: InClusterHealth | None = None
    """None: not rendered."""


class AcceptanceResults(Struct, frozen=True):
    """Where each GPU node's last acceptance result lives (gpufabric.plan.node_acceptance):
    its NodeAcceptance object, the roles to write and read them, and the kube-state-metrics
    configuration that makes series of them."""

    kind: str
    plural: str
    crd: str
    writer_role: str
    reader_role: str
    ksm_config_map: str
    """The ConfigMap holding the configuration (an existing Prometheus only)."""
    ksm_config_key: str
    busbw_metric: str


class MonitoringFacts(Struct, frozen=True):
    """The monitoring layer as resolved: where rules and dashboards go, which counters the
    DCGM exporter emits, the alert thresholds and the quarantine taint."""

    enabled: bool
    install_prometheus: bool
    """kube-prometheus-stack is installed by gpufabric (else an existing Prometheus)."""
    namespace: str
    """Namespace of the PrometheusRules and dashboards (the Prometheus's own)."""
    selector_labels: Mapping[str, str]
    """Labels on every ServiceMonitor and PrometheusRule so that the Prometheus selects them."""
    dcgm_config: str
    """The ConfigMap the GPU Operator creates with the counters CSV (dcgm-metrics.csv)."""
    dcgm_counters: tuple[DcgmCounter, ...]
    xid_classes: tuple[XidClass, ...]
    dashboards: bool
    node_problem_detector: bool
    symbol_errors_per_hour: int
    pfc_pauses_per_second: int
    acceptance_max_age_s: int
    quarantine_taint: str
    """Taint key a quarantined node carries (effect NoSchedule)."""
    health: HealthFacts
    results: AcceptanceResults
    node_label: str = "node"
    """The label every series gpufabric's rules and dashboards read names its node by."""

    @property
    def node_relabeling(self) -> dict[str, Any]:
        """The ServiceMonitor relabeling that names each series' node in ``node_label``."""
        return {
            "sourceLabels": ["__meta_kubernetes_pod_node_name"],
            "targetLabel": self.node_label,
            "action": "replace",
        }

    @property
    def dcgm_counters_csv(self) -> str:
        lines = ["# DCGM FIELD, Prometheus metric type, help message (written by gpufabric)"]
        lines += [f"{c.field}, {c.type}, {c.help}" for c in self.dcgm_counters]
        return "\n".join(lines) + "\n"


CHECKPOINT_DIR_ENV = "GPUFABRIC_CHECKPOINT_DIR"
"""The variable every job ``gpufabric job`` writes sets to its checkpoint directory."""


class BackendFacts(Struct, frozen=True):
    """One storage backend as every output sees it (computed by its kind in
    :mod:`gpufabric.storage`)."""

    name: str
    """The stack's name of it (``storage.backends[].name``)."""
    title: str
    """What it is, for people (``NFS over RDMA from 10.0.0.5:/export``)."""
    storage_class: str
    """The StorageClass its claims name."""
    provisioner: str | None
    """The CSI driver that provisions its volumes (None: the stack does not say)."""
    transport: StorageTransport | None
    """What its mounts must use; None: not gpufabric's choice (a bring-your-own class)."""
    gds: bool
    """GPUDirect Storage can read through it (NFS over RDMA, or a class the stack marks)."""
    class_parameters: Mapping[str, str] | None = None
    """The StorageClass gpufabric writes: its parameters (None: the class exists already)."""
    mount_options: tuple[str, ...] = ()
    reclaim_policy: ReclaimPolicy | None = "Retain"
    """None: the class exists already (its own policy)."""
    driver: str | None = None
    """The pinned component (versions.yaml) gpufabric installs to serve it, if any."""
    driver_values: Mapping[str, Any] = field(default_factory=dict)
    """That chart's values."""
    runbook: str | None = None
    """Its runbook fragment (manifests/runbooks/), if it has server prerequisites."""
    driver_controller: str | None = None
    """The driver chart's values key of a controller that mounts the share itself, with the
    class's options (csi-driver-nfs's ``controller``: it creates each claim's directory):
    gpufabric places it on the GPU nodes, which the share is exported to and which reach the
    server over the stack's transport. None: no such controller."""
    server: str | None = None
    share: str | None = None
    nfs_version: NfsVersion | None = None


class ClaimFacts(Struct, frozen=True):
    """One PersistentVolumeClaim a tenant gets, and where its training pods mount it.

    This is the interface ``gpufabric verify storage`` reads: it mounts each claim at
    ``mount_path`` in a short-lived pod of ``namespace`` and proves the transport."""

    name: str
    """The claim's (PersistentVolumeClaim's) name, e.g. ``checkpoints``."""
    namespace: str
    """The tenant namespace the claim lives in."""
    mount_path: str
    """Where training pods mount it (``/checkpoints``, ``/data``)."""
    read_only: bool
    """Training pods mount it read-only (datasets by default)."""
    transport: StorageTransport | None
    """What its mounts must use: ``rdma`` (mountstats ``xprt: rdma``), ``tcp``; None for a
    bring-your-own StorageClass, whose transport gpufabric does not choose."""
    storage_class: str
    """The StorageClass the claim names."""
    size: str
    """The requested capacity (a Kubernetes quantity, e.g. ``10Ti``)."""
    backend: str = ""
    """The stack's name of the backend (``storage.backends[].name``) that serves it."""
    checkpoints: bool = False
    """Jobs write their checkpoints under it (``<mount_path>/<job name>``)."""


class TenantStorage(Struct, frozen=True):
    """A tenant's shared storage: its claims and the quota that bounds them."""

    namespace: str
    claims: tuple[ClaimFacts, ...]
    """In the stack's order; names unique within the tenant."""
    quota_storage: str
    """ResourceQuota ``requests.storage``: the sum the tenant's claims may request."""
    quota_claims: int
    """ResourceQuota ``persistentvolumeclaims``: how many claims the tenant may hold."""

    @property
    def checkpoint_claim(self) -> ClaimFacts | None:
        """The claim jobs checkpoint to, if the tenant has one."""
        return next((c for c in self.claims if c.checkpoints), None)


AcceptanceKind = Literal["mpijob", "trainjob", "pytorchjob"]
"""The job kinds the NCCL acceptance test runs as."""


class OperatorFacts(Struct, frozen=True):
    """Which operator does what, and the flags the job operators run with."""

    nfd_owner: NfdOwner
    """Component that runs Node Feature Discovery: gpu-operator or network-operator."""
    gpu_waits_for_nic_driver: bool
    """Legacy peermem with operator-managed NIC drivers: the GPU Operator goes second."""
    gpu_driver_on_host: bool
    """The hosts bring the NVIDIA driver (and, with peermem, load nvidia-peermem themselves)."""
    job_kinds: tuple[JobKind, ...]
    """Job kinds the cluster serves: mpijob, pytorchjob, ..., trainjob."""
    mpi_operator: bool
    training_operator_schemes: tuple[TrainingScheme, ...]
    """Training Operator v1 kinds (empty: the Training Operator is not installed)."""
    mpi_operator_args: tuple[str, ...]
    training_operator_args: tuple[str, ...]
    trainer: bool
    """Kubeflow Trainer v2 (TrainJob) is installed."""
    trainer_runtimes: tuple[TrainerRuntime, ...]
    acceptance_kind: AcceptanceKind | None
    """The kind the NCCL acceptance test (verify nccl) runs as: mpijob with the MPI Operator,
    else trainjob (mpirun through gpufabric's nccl-tests ClusterTrainingRuntime) with the
    Trainer, else pytorchjob (the Master runs mpirun over sshd Workers, with SSH keys verify
    mints per run) with the Training Operator's PyTorchJob; None for a stack with none of
    them."""


class PoolFacts(Struct, frozen=True):
    """One node pool of the stack, resolved: its nodes, its fabric (NIC layout, rails,
    resources), the NCCL settings its pods get, its acceptance threshold and each tenant's
    pod contract on it. A one-pool stack has one, named ``default``."""

    name: str
    nodes: NodeFacts
    fabric: FabricFacts
    nccl_env: Mapping[str, str]
    acceptance: Acceptance
    tenants: Mapping[str, TenantContract]


class Facts(Struct, frozen=True):
    stack: str
    cluster: str
    kubernetes_version: str
    """As the stack writes it (1.33, v1.33.4)."""
    kubernetes_minor: str
    kube_context: str | None
    nodes: NodeFacts
    fabric: FabricFacts
    gang: GangPolicy
    tenants: Mapping[str, TenantContract]
    nccl_env: Mapping[str, str]
    """The NCCL variables every tenant's pods get (nccl-env)."""
    acceptance: Acceptance
    operators: OperatorFacts
    gpu_operator: GpuOperatorFacts
    monitoring: MonitoringFacts
    failure: FailurePolicyFacts
    """How training jobs survive failures (training.failurePolicy), for every job kind."""
    storage_backends: tuple[BackendFacts, ...] = ()
    """The stack's storage backends, in its order (empty: no ``storage`` section)."""
    storage: tuple[TenantStorage, ...] = ()
    """Per tenant with claims, sorted by namespace: a tuple of :class:`TenantStorage`
    (``storage_of(namespace)`` finds one). Empty when the stack has no ``storage`` section;
    tenants without claims are absent."""
    pull_secrets: tuple[str, ...] = ()
    """The image pull Secrets (``sources.pullSecrets``) every pod pulling from the mirrors
    names: the system namespaces', the tenants' jobs, acceptance, sweep and re-certification
    pods, the storage check's pods, the health runner's."""

    pools: tuple[PoolFacts, ...] = ()
    """Every node pool, in the stack's order. ``nodes``, ``fabric``, ``nccl_env``,
    ``acceptance`` and ``tenants`` above are one pool's: the first, or the one
    :meth:`for_pool` narrowed these facts to (``pool``)."""
    pool: str = "default"
    """The pool ``nodes``, ``fabric``, ``nccl_env``, ``acceptance`` and ``tenants`` are of."""

    def storage_of(self, namespace: str) -> TenantStorage | None:
        """The storage of one tenant namespace (None: it has no claims)."""
        return next((t for t in self.storage if t.namespace == namespace), None)

    @property
    def fleet(self) -> bool:
        """More than one pool."""
        return len(self.pools) > 1

    @property
    def pfc_priorities(self) -> tuple[int, ...]:
        """The PFC priorities RDMA traffic pauses on, over every pool's fabric (a fleet's
        RoCE pool need not be its first), each once, in order."""
        fabrics = [p.fabric for p in self.pools] or [self.fabric]
        return tuple(sorted({f.pfc_priority for f in fabrics if f.pfc_priority is not None}))

    @property
    def nvl72_pools(self) -> tuple[PoolFacts, ...]:
        """The pools of NVL72 trays (``gpuNodes[].nvlink``), in the stack's order."""
        return tuple(p for p in self.pools if p.nodes.nvlink is not None)

    @property
    def pool_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.pools)

    def pool_facts(self, name: str) -> PoolFacts:
        """One pool's facts; KeyError naming the pools for another name."""
        for pool in self.pools:
            if pool.name == name:
                return pool
        raise KeyError(f"no pool {name!r}; pools: {', '.join(self.pool_names)}")

    def tenant_in_pools(self, namespace: str) -> tuple[tuple[str, TenantContract], ...]:
        """One tenant's contract in every pool (pool name, contract), in the stack's order."""
        if not self.pools:
            return ((self.pool, self.tenants[namespace]),)
        return tuple((p.name, p.tenants[namespace]) for p in self.pools)

    def tenant_gpu_limit(self, namespace: str) -> int:
        """GPUs the tenant's pods may hold at once over every pool (its namespace's
        ResourceQuota): each pool's quota plus borrowing limit, summed."""
        return sum(c.gpu_limit for _, c in self.tenant_in_pools(namespace))

    def for_pool(self, name: str) -> Facts:
        """These facts as one pool's jobs and checks read them: its nodes, fabric, NCCL
        settings, acceptance threshold and tenant contracts."""
        pool = self.pool_facts(name)
        return replace(
            self,
            nodes=pool.nodes,
            fabric=pool.fabric,
            nccl_env=pool.nccl_env,
            acceptance=pool.acceptance,
            tenants=pool.tenants,
            pool=pool.name,
        )


class PlanContext(Struct, frozen=True):
    """What layer builders read: the stack's name, the effective pins and the resolved facts
    (never the stack model: what a builder needs is resolved into the facts first)."""

    stack: str
    components: Mapping[str, Component]
    facts: Facts


__all__ = [
    "CHECKPOINT_DIR_ENV",
    "NCCL_ENV",
    "Acceptance",
    "AcceptanceKind",
    "BackendFacts",
    "ClaimFacts",
    "DcgmCounter",
    "DiscoveredTopology",
    "FabricFacts",
    "Facts",
    "GangPolicy",
    "GpuOperatorFacts",
    "HealthFacts",
    "InfinibandFacts",
    "MonitoringFacts",
    "NodeFacts",
    "NvlinkFacts",
    "OperatorFacts",
    "Partition",
    "PlanContext",
    "PoolFacts",
    "QueueMetrics",
    "RailFacts",
    "RequeuePolicy",
    "RoceFacts",
    "StorageTransport",
    "TenantContract",
    "TenantStorage",
    "XidClass",
]
