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

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace

from gpufabric.model.config import HOSTNAME_LABEL, Fabric, Rail, Roce, StackModel
from gpufabric.plan.authority import Authority
from gpufabric.plan.facts import (
    Acceptance,
    FabricFacts,
    Facts,
    GangPolicy,
    GpuOperatorFacts,
    InfinibandFacts,
    NodeFacts,
    OperatorFacts,
    RailFacts,
    RequeuePolicy,
    RoceFacts,
    TenantContract,
)

DEFAULT_MTU = {"infiniband": 4092, "roce": 9000}
"""MTU of the rails when the stack sets none: IPoIB's datagram maximum on InfiniBand,
jumbo frames on RoCE."""
DSCP_TO_TRAFFIC_CLASS = 4
"""NCCL_IB_TC carries the DSCP in its upper six bits."""
SHARED_RESOURCE_PREFIX = "rdma"
SRIOV_RESOURCE_PREFIX = "nvidia.com"
BOOTSTRAP_INTERFACE = "eth0"
SHM_PER_GPU_GIB = 8
"""/dev/shm size per GPU: NCCL's intra-node buffers and data-loader workers live there; the
container runtime's 64 MiB default makes NCCL fail with 'failed to extend /dev/shm'."""
DEFAULT_FRACTION = 0.9
"""Share of the line rate the acceptance test's bus bandwidth must reach."""


def effective_mtu(fabric: Fabric) -> int:
    return fabric.mtu if fabric.mtu is not None else DEFAULT_MTU[fabric.type]


def _cni(fabric: Fabric) -> str:
    if fabric.rdma in ("shared", "none"):
        return "ipoib" if fabric.type == "infiniband" else "macvlan"
    if fabric.rdma == "hostdevice":
        return "host-device"
    return "ib-sriov" if fabric.type == "infiniband" else "sriov"


def _device_plugin_resource(fabric: Fabric, rail: Rail) -> str | None:
    # Device-plugin resource names allow letters, digits and '_'.
    base = rail.name.replace("-", "_")
    return {"shared": base, "sriov": f"sriov_{base}", "hostdevice": f"hostdev_{base}"}.get(
        fabric.rdma
    )


def _resource(fabric: Fabric, rail: Rail) -> str | None:
    name = _device_plugin_resource(fabric, rail)
    if name is None:
        return None
    prefix = SHARED_RESOURCE_PREFIX if fabric.rdma == "shared" else SRIOV_RESOURCE_PREFIX
    return f"{prefix}/{name}"


def rail_facts(fabric: Fabric, rail: Rail) -> RailFacts:
    return RailFacts(
        name=rail.name,
        netdev=rail.netdev,
        hca=rail.hca,
        subnet=str(rail.subnet),
        gateway=str(rail.gateway) if rail.gateway is not None else None,
        mtu=effective_mtu(fabric),
        cni=_cni(fabric),
        pod_interface=rail.name,
        resource=_resource(fabric, rail),
        device_plugin_resource=_device_plugin_resource(fabric, rail),
        nad=rail.name,
        pool=f"{rail.name}-pool",
        pool_kind="CIDRPool" if fabric.ipam.poolType == "cidrpool" else "IPPool",
    )


def _roce(fabric: Fabric) -> RoceFacts | None:
    if fabric.type != "roce":
        return None
    roce = fabric.roce or Roce()
    pfc = ["0"] * 8
    pfc[roce.pfcPriority] = "1"
    return RoceFacts(
        dscp=roce.dscp,
        traffic_class=roce.trafficClass
        if roce.trafficClass is not None
        else roce.dscp * DSCP_TO_TRAFFIC_CLASS,
        pfc_priority=roce.pfcPriority,
        qps_per_connection=roce.qpsPerConnection,
        gid_index=roce.gidIndex,
        pfc_vector=",".join(pfc),
    )


def _infiniband(fabric: Fabric) -> InfinibandFacts | None:
    if fabric.type != "infiniband":
        return None
    ib = fabric.infiniband
    return InfinibandFacts(
        pkey=ib.pkey if ib else None,
        pkey_management=ib.pkeyManagement if ib else "static",
    )


def fabric_facts(fabric: Fabric) -> FabricFacts:
    rails = tuple(rail_facts(fabric, r) for r in fabric.rails)
    resources: dict[str, int] = {}
    for rail in rails:
        if rail.resource is not None:
            resources[rail.resource] = resources.get(rail.resource, 0) + 1
    ib = fabric.type == "infiniband"
    return FabricFacts(
        type=fabric.type,
        rdma=fabric.rdma,
        has_rdma=fabric.rdma != "none",
        gpudirect=fabric.gpuDirect,
        nic_driver=fabric.nicDriver.source,
        host_stack=fabric.nicDriver.hostStack,
        multus=fabric.multus,
        nad_scope=fabric.nadScope,
        networks_namespace=fabric.networkNamespace if fabric.nadScope == "system" else None,
        link_layer="InfiniBand" if ib else "Ethernet",
        nccl_link_layer="IB" if ib else "RoCE",
        device_link_type="infiniband" if ib else "ether",
        mtu=effective_mtu(fabric),
        link_rate_gbps=fabric.linkRateGbps,
        sriov_vfs=fabric.sriov.numVfs if fabric.sriov is not None else None,
        rails=rails,
        rdma_resources=dict(sorted(resources.items())),
        roce=_roce(fabric),
        infiniband=_infiniband(fabric),
    )


def nccl_env(fabric: Fabric, facts: FabricFacts) -> dict[str, str]:
    """Environment variables every training pod of this fabric gets (sorted by name)."""
    env: dict[str, str] = {}
    if not facts.has_rdma:
        # No RDMA devices: NCCL's socket transport carries data over the rail interfaces.
        env["NCCL_IB_DISABLE"] = "1"
        env["NCCL_SOCKET_IFNAME"] = "=" + ",".join(r.pod_interface for r in facts.rails)
    else:
        # Out-of-band bootstrap over the cluster network; data goes over the RDMA devices.
        env["NCCL_SOCKET_IFNAME"] = f"={BOOTSTRAP_INTERFACE}"
        env["NCCL_IB_DISABLE"] = "0"
        hcas = [r.hca for r in facts.rails]
        # With shared devices a pod sees the host's HCAs under their host names; VFs and
        # host devices get other names inside the pod, so only pin names in shared mode.
        if facts.rdma == "shared" and all(hcas):
            env["NCCL_IB_HCA"] = "=" + ",".join(h for h in hcas if h)
    if facts.roce is not None and facts.has_rdma:
        env["NCCL_IB_TC"] = str(facts.roce.traffic_class)
        if facts.roce.qps_per_connection is not None:
            env["NCCL_IB_QPS_PER_CONNECTION"] = str(facts.roce.qps_per_connection)
        if facts.roce.gid_index is not None:
            env["NCCL_IB_GID_INDEX"] = str(facts.roce.gid_index)
    env.update(fabric.ncclEnv)
    return dict(sorted(env.items()))


def networks_annotation(
    facts: FabricFacts, tenant_namespace: str, rails: Sequence[RailFacts] | None = None
) -> str:
    """Value of k8s.v1.cni.cncf.io/networks attaching every rail (or ``rails``) with a
    stable name."""
    ns = facts.networks_namespace or tenant_namespace
    entries = [
        {"name": r.nad, "namespace": ns, "interface": r.pod_interface}
        for r in (facts.rails if rails is None else rails)
    ]
    return json.dumps(entries, separators=(",", ":"))


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
        networks=networks_annotation(facts, contract.namespace, [one]),
        rdma_resources={one.resource: 1} if one.resource is not None else {},
        nccl_env=env,
    )


def job_kinds(model: StackModel) -> tuple[str, ...]:
    t = model.training
    kinds: list[str] = ["mpijob"] if t.mpiOperator else []
    kinds += t.trainingOperator.schemes
    if t.trainer.enabled:
        kinds.append("trainjob")
    return tuple(kinds)


def gpu_waits_for_nic_driver(fabric: Fabric) -> bool:
    """Legacy peermem is built against the NIC driver; with operator-managed drivers the GPU
    Operator must wait for them (a known failure otherwise). DMA-BUF needs no such wait."""
    return (
        fabric.gpuDirect == "peermem"
        and fabric.rdma != "none"
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
    levels = authority.topology_levels(s.topologyLevels)
    return GangPolicy(
        authority=authority.name,
        title=authority.title,
        topology_levels=levels,
        switch_tiers=max(len(levels) - 1, 0),
        switch_levels=tuple(lv for lv in levels if lv != HOSTNAME_LABEL),
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
    )


def tenant_contracts(
    model: StackModel, fabric: FabricFacts, env: Mapping[str, str], authority: Authority
) -> dict[str, TenantContract]:
    """Each tenant's pod contract, quotas and priority, by namespace in stack order."""
    return {
        t.namespace: TenantContract(
            namespace=t.namespace,
            networks=networks_annotation(fabric, t.namespace),
            rdma_resources=fabric.rdma_resources,
            nccl_env=env,
            queue=authority.queue_name(t.namespace),
            priority_class=authority.priority_class(t.namespace),
            gpu_quota=t.gpuQuota,
            gpu_limit=t.gpuQuota + t.gpuBorrowingLimit,
            gpu_borrowing_limit=t.gpuBorrowingLimit,
            cpu_quota=t.cpuQuota,
            memory_quota=t.memoryQuota,
            priority=t.priority,
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
    )


def operator_facts(model: StackModel, authority: Authority) -> OperatorFacts:
    """Which operator does what, and the flags the authority gives the job operators."""
    waits = gpu_waits_for_nic_driver(model.fabric)
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
    )


def resolve(stack: str, model: StackModel, authority: Authority) -> Facts:
    """Every fact of a validated stack whose queueing authority is ``authority``."""
    fabric = fabric_facts(model.fabric)
    env = nccl_env(model.fabric, fabric)
    operators = operator_facts(model, authority)
    nodes = model.gpuNodes
    return Facts(
        stack=stack,
        cluster=model.cluster.name,
        kubernetes_version=model.cluster.kubernetesVersion,
        kubernetes_minor=model.cluster.kubernetes_minor,
        kube_context=model.cluster.kubeContext,
        nodes=NodeFacts(
            count=nodes.count,
            gpus_per_node=nodes.gpusPerNode,
            gpu_model=nodes.gpuModel,
            selector=dict(nodes.nodeSelector),
            selector_text=",".join(f"{k}={v}" for k, v in sorted(nodes.nodeSelector.items())),
            tolerations=tuple(t.model_dump(exclude_none=True) for t in nodes.tolerations),
            driver_version=model.gpuOperator.driver.version,
            shm_gib=SHM_PER_GPU_GIB * nodes.gpusPerNode,
        ),
        fabric=fabric,
        gang=gang_policy(model, authority, operators.job_kinds),
        tenants=tenant_contracts(model, fabric, env, authority),
        nccl_env=env,
        acceptance=acceptance(fabric),
        operators=operators,
        gpu_operator=gpu_operator_facts(model),
    )


__all__ = [
    "DEFAULT_FRACTION",
    "DEFAULT_MTU",
    "SHM_PER_GPU_GIB",
    "acceptance",
    "effective_mtu",
    "fabric_facts",
    "resolve",
]
