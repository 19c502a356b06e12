"""Resolve a validated stack into :class:`~gpufabric.plan.facts.Facts`: every default and
derived value, decided here once.

- Rails: one place decides what a rail's NetworkAttachmentDefinition, IP pool, pod interface
  and device-plugin resource are called, its CNI and its effective MTU, so the network
  objects, the tenant contract, the jobs and the checks can never disagree.
- NCCL settings come from the fabric (reference notes on NCCL, jobs.md section 6): bootstrap
  over the pod's primary interface, an exact HCA list when the stack names HCAs in shared
  mode, the lossless traffic class on RoCE, NCCL_IB_GID_INDEX only when the stack sets it.
- The queueing authority decides topology levels, queue names and operator flags.
- Node Feature Discovery runs exactly once: from the GPU Operator, except when the GPU
  Operator must wait for operator-managed NIC drivers (legacy peermem), where the Network
  Operator is installed first and runs it.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping, Sequence

from msgspec.structs import replace

from gpufabric import nics
from gpufabric.model import nvlink, railblocks, railspan
from gpufabric.model.config import (
    DEFAULT_POOL,
    HOSTNAME_LABEL,
    Fabric,
    GpuNodes,
    NodePool,
    Rail,
    StackModel,
    Tenant,
    default_tenant_group,
)
from gpufabric.plan import monitoring
from gpufabric.plan.authority import Authority
from gpufabric.plan.facts import (
    NCCL_ENV,
    Acceptance,
    AcceptanceKind,
    BlockFacts,
    FabricFacts,
    Facts,
    GangPolicy,
    GpuOperatorFacts,
    LeafSpanFacts,
    NodeFacts,
    NodePrefixFacts,
    NvlinkFacts,
    OperatorFacts,
    PoolFacts,
    RailFacts,
    RequeuePolicy,
    SpanBlockFacts,
    TenantContract,
)
from gpufabric.plan.failure import FailurePolicyFacts
from gpufabric.plan.storage import resolve as storage_facts
from gpufabric.plan.vocabulary import JobKind

SHM_PER_GPU_GIB = 8
"""/dev/shm size per GPU: NCCL's intra-node buffers and data-loader workers live there; the
container runtime's 64 MiB default makes NCCL fail with 'failed to extend /dev/shm'."""
DEFAULT_FRACTION = 0.9
"""Share of the line rate the acceptance test's bus bandwidth must reach."""


def effective_mtu(fabric: Fabric) -> int:
    """The stack's MTU, or its link's default (IPoIB's datagram maximum on InfiniBand,
    jumbo frames on RoCE)."""
    return fabric.mtu if fabric.mtu is not None else nics.link(fabric.type).default_mtu


def block_facts(rail: Rail, leaf_label: str | None) -> tuple[BlockFacts, ...]:
    """A routed rail's leaf blocks, each with its exclusions (gpufabric.model.railblocks)."""
    if not rail.blocks or leaf_label is None:
        return ()
    blocks = []
    for block in rail.blocks:
        name = railblocks.block_network_name(rail.name, block.leaf)
        exclude = tuple(t for t in rail.exclude if _inside(t, block.subnet))
        blocks.append(
            BlockFacts(
                leaf=block.leaf,
                leaf_label=leaf_label,
                subnet=str(block.subnet),
                gateway=str(block.gateway),
                pool=f"{name}-pool",
                nad=name,
                exclude=exclude,
            )
        )
    return tuple(blocks)


def span_facts(
    fabric: Fabric,
    rail: Rail,
    leaf_label: str | None,
    topology: Mapping[str, Mapping[str, str]],
) -> LeafSpanFacts | None:
    """A routed rail spanning leaves: each node's static prefix of its leaf's block and the
    leaf's address in it (gpufabric.model.railspan); None in the per-leaf form."""
    prefixlen = fabric.ipam.perNodePrefix
    if not (railspan.spans(fabric) and rail.blocks and leaf_label and prefixlen):
        return None
    leaves = railspan.nodes_by_leaf(topology, leaf_label)
    allocations = railspan.node_prefixes(rail, prefixlen, leaves)
    return LeafSpanFacts(
        leaf_label=leaf_label,
        gateway_index=railspan.gateway_offset(rail.blocks[0]),
        blocks=tuple(
            SpanBlockFacts(
                leaf=b.leaf,
                subnet=str(b.subnet),
                nodes=tuple(
                    NodePrefixFacts(node=a.node, prefix=a.prefix, gateway=a.gateway)
                    for a in allocations
                    if a.leaf == b.leaf
                ),
            )
            for b in rail.blocks
        ),
    )


def _inside(text: str, subnet: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bool:
    return ipaddress.ip_address(text.partition("-")[0].strip()) in subnet


def rail_facts(
    fabric: Fabric,
    rail: Rail,
    leaf_label: str | None = None,
    topology: Mapping[str, Mapping[str, str]] | None = None,
) -> RailFacts:
    mode = nics.mode(fabric.rdma)
    span = span_facts(fabric, rail, leaf_label, topology or {})
    plugin_resource = mode.device_plugin_resource(rail.name)
    return RailFacts(
        name=rail.name,
        netdev=rail.netdev,
        hca=rail.hca,
        subnet=str(rail.subnet),
        gateway=str(rail.gateway) if rail.gateway is not None else None,
        mtu=effective_mtu(fabric),
        cni=mode.cni(nics.link(fabric.type)),
        pod_interface=rail.name,
        resource=f"{mode.resource_prefix}/{plugin_resource}"
        if plugin_resource is not None
        else None,
        device_plugin_resource=plugin_resource,
        nad=rail.name,
        pool=f"{rail.name}-pool",
        pool_kind="CIDRPool" if fabric.ipam.poolType == "cidrpool" else "IPPool",
        exclude=tuple(rail.exclude),
        blocks=() if railspan.spans(fabric) else block_facts(rail, leaf_label),
        span=span,
    )


def fabric_facts(
    fabric: Fabric,
    tenants: Sequence[Tenant] = (),
    leaf_label: str | None = None,
    node_topology: Mapping[str, Mapping[str, str]] | None = None,
) -> FabricFacts:
    """The resolved fabric; ``leaf_label`` names each node's leaf switch (routed blocks),
    ``node_topology`` places the nodes under them (rails spanning leaves)."""
    link = nics.link(fabric.type)
    mode = nics.mode(fabric.rdma)
    rails = tuple(rail_facts(fabric, r, leaf_label, node_topology) for r in fabric.rails)
    resources: dict[str, int] = {}
    for rail in rails:
        if rail.resource is not None:
            resources[rail.resource] = resources.get(rail.resource, 0) + 1
    return FabricFacts(
        type=fabric.type,
        rdma=fabric.rdma,
        has_rdma=mode.has_rdma,
        gpudirect=fabric.gpuDirect,
        nic_driver=fabric.nicDriver.source,
        host_stack=fabric.nicDriver.hostStack,
        multus=fabric.multus,
        nad_scope=fabric.nadScope,
        networks_namespace=fabric.networkNamespace if fabric.nadScope == "system" else None,
        link_layer=link.sysfs_link_layer,
        nccl_link_layer=link.nccl_link_layer,
        device_link_type=link.device_link_type,
        mtu=effective_mtu(fabric),
        link_rate_gbps=fabric.linkRateGbps,
        sriov_vfs=fabric.sriov.numVfs if fabric.sriov is not None else None,
        ipam_block_size=fabric.ipam.perNodeBlockSize,
        ipam_node_prefix=fabric.ipam.perNodePrefix,
        rails=rails,
        rdma_resources=dict(sorted(resources.items())),
        roce=link.roce_facts(fabric),
        infiniband=link.infiniband_facts(fabric, tenants),
        pfc_priority=link.pfc_priority(fabric),
    )


def nccl_env(
    fabric: Fabric, facts: FabricFacts, nodes_env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Environment variables every training pod of this fabric gets (sorted by name): the
    mode's transport and device names, the link's RDMA settings, the nodes' own (an NVL72
    pool's multi-node NVLink), then the stack's own."""
    mode = nics.mode(facts.rdma)
    env = mode.nccl_env(facts.rails)
    if mode.has_rdma:
        env.update(nics.link(facts.type).nccl_env(facts))
    env.update(nodes_env or {})
    env.update(fabric.ncclEnv)
    return dict(sorted(env.items()))


def networks_annotation(
    facts: FabricFacts,
    tenant_namespace: str,
    rails: Sequence[RailFacts] | None = None,
    leaf: str | None = None,
) -> str:
    """Value of k8s.v1.cni.cncf.io/networks attaching every rail (or ``rails``) with a
    stable name; a rail routed per leaf attaches its block under ``leaf``. ValueError when
    such a rail has no block there (or no leaf is given)."""
    ns = facts.networks_namespace or tenant_namespace
    entries = [
        {"name": _rail_network(r, leaf), "namespace": ns, "interface": r.pod_interface}
        for r in (facts.rails if rails is None else rails)
    ]
    return json.dumps(entries, separators=(",", ":"))


def _rail_network(rail: RailFacts, leaf: str | None) -> str:
    if not rail.blocks:
        return rail.nad
    for block in rail.blocks:
        if block.leaf == leaf:
            return block.nad
    leaves = ", ".join(b.leaf for b in rail.blocks)
    raise ValueError(f"rail {rail.name} is routed per leaf ({leaves}): pick one of them")


def block_leaves(facts: FabricFacts) -> tuple[str, ...]:
    """The leaves every routed rail has a block under (empty without routed rails)."""
    routed = [r for r in facts.rails if r.blocks]
    if not routed:
        return ()
    common = set.intersection(*({b.leaf for b in r.blocks} for r in routed))
    return tuple(b.leaf for b in routed[0].blocks if b.leaf in common)


def leaf_wiring(facts: FabricFacts, namespace: str) -> dict[str, str]:
    """The networks annotation per leaf of a fabric with routed rails (else empty)."""
    return {leaf: networks_annotation(facts, namespace, leaf=leaf) for leaf in block_leaves(facts)}


def routed_leaf_label(facts: FabricFacts) -> str | None:
    """The node label naming the leaf of a fabric with routed rails, either form (else None)."""
    for rail in facts.rails:
        if rail.blocks:
            return rail.blocks[0].leaf_label
        if rail.span is not None:
            return rail.span.leaf_label
    return None


def span_leaves(facts: FabricFacts) -> tuple[str, ...]:
    """The leaves every rail spanning leaves has a block under (empty in the per-leaf form)."""
    spanning = [r.span for r in facts.rails if r.span is not None]
    if not spanning:
        return ()
    common = set.intersection(*({b.leaf for b in s.blocks} for s in spanning))
    return tuple(b.leaf for b in spanning[0].blocks if b.leaf in common)


def on_one_leaf(contract: TenantContract, leaf: str) -> TenantContract:
    """A tenant's pod contract pinned under one leaf of a routed fabric: a node selector on
    the leaf label and, where rails are routed per leaf, that leaf's networks (rails spanning
    leaves keep theirs). ValueError for another leaf."""
    known_leaves = tuple(contract.leaf_networks) or contract.span_leaves
    if leaf not in known_leaves or contract.leaf_label is None:
        known = ", ".join(known_leaves) or "none: no rail is routed per leaf"
        raise ValueError(f"{leaf!r} is not a leaf of this fabric's routed rails; accepted: {known}")
    return replace(
        contract,
        networks=contract.leaf_networks.get(leaf, contract.networks),
        node_selector={**contract.node_selector, contract.leaf_label: leaf},
    )


def on_one_rail(facts: FabricFacts, contract: TenantContract, rail: str) -> TenantContract:
    """A tenant's pod contract narrowed to one rail: only that rail's network and RDMA
    device are attached, so NCCL can use no other (and, where the stack pins HCA names,
    ``NCCL_IB_HCA`` names only that rail's). ValueError for a rail the fabric lacks."""
    found = [r for r in facts.rails if r.name == rail]
    if not found:
        known = ", ".join(r.name for r in facts.rails)
        raise ValueError(f"no rail {rail!r} in this fabric (rails: {known})")
    one = found[0]
    env = dict(contract.nccl_env)
    if "NCCL_IB_HCA" in env and one.hca:
        env["NCCL_IB_HCA"] = "=" + one.hca
    return replace(
        contract,
        networks=networks_annotation(facts, contract.namespace, [one], _pinned_leaf(contract)),
        rdma_resources={one.resource: 1} if one.resource is not None else {},
        nccl_env=env,
    )


def _pinned_leaf(contract: TenantContract) -> str | None:
    label = contract.leaf_label
    return contract.node_selector.get(label) if label is not None else None


def job_kinds(model: StackModel) -> tuple[JobKind, ...]:
    t = model.training
    kinds: list[JobKind] = ["mpijob"] if t.mpiOperator else []
    kinds += t.trainingOperator.schemes
    if t.trainer.enabled:
        kinds.append("trainjob")
    return tuple(kinds)


def gpu_waits_for_nic_driver(fabric: Fabric) -> bool:
    """Legacy peermem is built against the NIC driver; with operator-managed drivers the GPU
    Operator must wait for them (a known failure otherwise). DMA-BUF needs no such wait."""
    return (
        fabric.gpuDirect == "peermem"
        and nics.mode(fabric.rdma).has_rdma
        and fabric.nicDriver.source == "operator"
    )


MPI_OPERATOR_BASE_ARGS = ("-alsologtostderr", "--lock-namespace=mpi-operator")
"""The upstream MPI Operator Deployment's own arguments, kept when the overlay sets the list."""


def acceptance(fabric: FabricFacts, fraction: float = DEFAULT_FRACTION) -> Acceptance:
    """The acceptance threshold: ``fraction`` of the node's line rate (rails x link rate)."""
    rails = len(fabric.rails)
    return Acceptance(
        rdma=fabric.has_rdma,
        link_layer=fabric.nccl_link_layer,
        rails=rails,
        link_rate_gbps=fabric.link_rate_gbps,
        line_rate_gbytes=rails * fabric.link_rate_gbps / 8,
        fraction=fraction,
        threshold_gbps=0.0,
        threshold_source="",
    ).at_fraction(fraction)


def gang_policy(model: StackModel, authority: Authority, kinds: Sequence[str]) -> GangPolicy:
    """How the stack's authority admits and places gangs, with its own settings."""
    s = model.scheduling
    gfd = _gfd_levels(model)
    configured = [lv for lv in s.topologyLevels if lv != HOSTNAME_LABEL]
    if gfd:
        configured = [*configured, *gfd, HOSTNAME_LABEL]
    elif s.topologyLevels:
        configured = list(s.topologyLevels)
    levels = authority.topology_levels(configured)
    switch_levels = tuple(lv for lv in levels if lv != HOSTNAME_LABEL)
    return GangPolicy(
        gfd_levels=gfd,
        authority=authority.name,
        title=authority.title,
        topology_levels=levels,
        switch_tiers=max(len(levels) - 1, 0),
        switch_levels=switch_levels,
        node_topology={
            node: dict(sorted(labels.items())) for node, labels in sorted(s.nodeTopology.items())
        },
        preferred_topology_level=authority.preferred_topology_level(levels) if levels else None,
        all_or_nothing_timeout_s=s.allOrNothingTimeout,
        frameworks=authority.frameworks(kinds),
        cohort=s.cohort,
        requeue=RequeuePolicy(
            backoff_limit_count=s.requeuing.backoffLimitCount,
            backoff_base_s=s.requeuing.backoffBase,
            backoff_max_s=s.requeuing.backoffMax,
        ),
        discovered_topology=authority.discovered_topology(switch_levels),
        queue_metrics=authority.queue_metrics(),
    )


def _gfd_levels(model: StackModel) -> tuple[str, ...]:
    """Topology levels GPU Feature Discovery labels: the NVLink domain of NVL72 trays, when
    every pool is one (a level must be on every node of the topology's flavors)."""
    pools = model.pools
    if pools and all(pool.nodes.nvlink is not None for pool in pools):
        return (nvlink.CLIQUE_LABEL,)
    return ()


def tenant_contracts(
    model: StackModel,
    fabric: FabricFacts,
    env: Mapping[str, str],
    authority: Authority,
    pool: str = DEFAULT_POOL,
) -> dict[str, TenantContract]:
    """Each tenant's pod contract, quotas and priority on one pool, by namespace in stack
    order (quotas are the tenant's in that pool)."""
    only = len(model.pools) == 1
    quota = {t.namespace: t.quota_in(pool, only) for t in model.tenants}
    pooled = sum(quota.values())
    admissible = {
        t.namespace: authority.admissible_gpus(quota[t.namespace], t.borrowing_in(pool), pooled)
        for t in model.tenants
    }
    return {
        t.namespace: TenantContract(
            namespace=t.namespace,
            networks="" if block_leaves(fabric) else networks_annotation(fabric, t.namespace),
            leaf_networks=leaf_wiring(fabric, t.namespace),
            leaf_label=routed_leaf_label(fabric),
            span_leaves=span_leaves(fabric),
            rdma_resources=fabric.rdma_resources,
            nccl_env=env,
            queue=authority.queue_name(t.namespace),
            priority_class=authority.priority_class(t.namespace),
            gpu_quota=quota[t.namespace],
            gpu_limit=quota[t.namespace] + t.borrowing_in(pool),
            gpu_borrowing_limit=t.borrowing_in(pool),
            gpu_admissible=admissible[t.namespace][0],
            gpu_admissible_why=admissible[t.namespace][1],
            cpu_quota=t.cpuQuota,
            memory_quota=t.memoryQuota,
            priority=t.priority,
            pkey=t.pkey,
            vlan=t.vlan,
            groups=tuple(t.groups if t.groups is not None else [default_tenant_group(t.namespace)]),
            network_namespace=fabric.networks_namespace or t.namespace,
            network_names=tuple(n for r in fabric.rails for n in r.networks),
            nccl_env_name=NCCL_ENV if only else f"{NCCL_ENV}-{pool}",
        )
        for t in model.tenants
    }


def gpu_operator_facts(model: StackModel) -> GpuOperatorFacts:
    gpu = model.gpuOperator
    return GpuOperatorFacts(
        driver=gpu.driver.enabled,
        use_precompiled=gpu.driver.usePrecompiled,
        use_nvidia_driver_crd=gpu.driver.useNvidiaDriverCRD,
        gds=gpu.gds,
        gdrcopy=gpu.gdrcopy,
        mig_strategy=gpu.migStrategy,
        dcgm_exporter=gpu.dcgmExporter.enabled,
        dcgm_service_monitor=gpu.dcgmExporter.serviceMonitor,
        driver_version=gpu.driver.version,
        cdi=gpu.cdi,
    )


def operator_facts(model: StackModel, authority: Authority) -> OperatorFacts:
    """Which operator does what, and the flags the authority gives the job operators."""
    waits = any(gpu_waits_for_nic_driver(pool.fabric) for pool in model.pools)
    t = model.training
    return OperatorFacts(
        nfd_owner="network-operator" if waits else "gpu-operator",
        gpu_waits_for_nic_driver=waits,
        gpu_driver_on_host=not model.gpuOperator.driver.enabled,
        job_kinds=job_kinds(model),
        mpi_operator=t.mpiOperator,
        training_operator_schemes=tuple(t.trainingOperator.schemes),
        mpi_operator_args=(
            *MPI_OPERATOR_BASE_ARGS,
            *authority.operator_flags("mpi-operator"),
        ),
        training_operator_args=(
            *(f"--enable-scheme={s}" for s in t.trainingOperator.schemes),
            *authority.operator_flags("training-operator"),
        ),
        trainer=t.trainer.enabled,
        trainer_runtimes=tuple(t.trainer.runtimes) if t.trainer.enabled else (),
        acceptance_kind=acceptance_kind(model),
    )


def acceptance_kind(model: StackModel) -> AcceptanceKind | None:
    """The kind the NCCL acceptance test runs as (see OperatorFacts.acceptance_kind)."""
    t = model.training
    if t.mpiOperator:
        return "mpijob"
    if t.trainer.enabled:
        return "trainjob"
    return "pytorchjob" if "pytorchjob" in t.trainingOperator.schemes else None


def failure_policy(model: StackModel, authority: Authority) -> FailurePolicyFacts:
    """The stack's failure policy, with the requeue bound of its queueing authority."""
    policy = model.training.failurePolicy
    requeue = model.scheduling.requeuing.backoffLimitCount if authority.requeues_gangs else None
    return FailurePolicyFacts(
        max_restarts=policy.maxRestarts,
        active_deadline_s=policy.activeDeadline,
        requeue_limit=requeue,
    )


def node_facts(model: StackModel, pool: NodePool) -> NodeFacts:
    """One pool's nodes as jobs and checks see them."""
    nodes = pool.nodes
    driver = pool.driver
    return NodeFacts(
        count=nodes.count,
        gpus_per_node=nodes.gpusPerNode,
        gpu_model=nodes.gpuModel,
        selector=dict(nodes.nodeSelector),
        selector_text=",".join(f"{k}={v}" for k, v in sorted(nodes.nodeSelector.items())),
        tolerations=tuple(t.model_dump(exclude_none=True) for t in nodes.tolerations),
        driver_version=(driver.version if driver is not None and driver.version else None)
        or model.gpuOperator.driver.version,
        shm_gib=SHM_PER_GPU_GIB * nodes.gpusPerNode,
        pool=pool.name,
        use_precompiled=driver.usePrecompiled if driver is not None else None,
        nvlink=nvlink_facts(nodes),
    )


def nvlink_facts(nodes: GpuNodes) -> NvlinkFacts | None:
    """An NVL72 pool's domains (None: not one)."""
    if nodes.nvlink is None:
        return None
    return NvlinkFacts(
        system=nodes.nvlink.system,
        gpus_per_tray=nvlink.GPUS_PER_TRAY,
        trays_per_domain=nvlink.TRAYS_PER_DOMAIN,
        domains=nvlink.domains(nodes.count),
        clique_label=nvlink.CLIQUE_LABEL,
        min_driver=nvlink.MIN_DRIVER,
        min_nccl=nvlink.MIN_NCCL,
    )


def pool_facts(model: StackModel, pool: NodePool, authority: Authority) -> PoolFacts:
    """One pool resolved: its nodes, fabric, NCCL settings, threshold and contracts."""
    fabric = fabric_facts(
        pool.fabric,
        model.tenants,
        railblocks.leaf_level(model.scheduling.topologyLevels),
        model.scheduling.nodeTopology,
    )
    env = nccl_env(pool.fabric, fabric, nvlink.NCCL_ENV if pool.nodes.nvlink else None)
    return PoolFacts(
        name=pool.name,
        nodes=node_facts(model, pool),
        fabric=fabric,
        nccl_env=env,
        acceptance=acceptance(fabric),
        tenants=tenant_contracts(model, fabric, env, authority, pool.name),
    )


def resolve(stack: str, model: StackModel, authority: Authority) -> Facts:
    """Every fact of a validated stack whose queueing authority is ``authority``."""
    pools = tuple(pool_facts(model, pool, authority) for pool in model.pools)
    first = pools[0]
    operators = operator_facts(model, authority)
    storage_backends, storage = storage_facts(stack, model)
    return Facts(
        stack=stack,
        cluster=model.cluster.name,
        kubernetes_version=model.cluster.kubernetesVersion,
        kubernetes_minor=model.cluster.kubernetes_minor,
        kube_context=model.cluster.kubeContext,
        nodes=first.nodes,
        fabric=first.fabric,
        gang=gang_policy(model, authority, operators.job_kinds),
        tenants=first.tenants,
        nccl_env=first.nccl_env,
        acceptance=first.acceptance,
        pools=pools,
        pool=first.name,
        operators=operators,
        gpu_operator=gpu_operator_facts(model),
        monitoring=monitoring.facts(model),
        failure=failure_policy(model, authority),
        storage_backends=storage_backends,
        storage=storage,
        pull_secrets=model.sources.mirrors().pull_secrets,
    )


__all__ = [
    "DEFAULT_FRACTION",
    "SHM_PER_GPU_GIB",
    "acceptance",
    "effective_mtu",
    "fabric_facts",
    "resolve",
]
