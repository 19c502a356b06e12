"""Every Plan item id and every Pulumi resource name, in one place.

Item ids are built here and nowhere else; no module parses them back (an item that exists
for a rail or installs users' job CRDs says so in its own fields). The Pulumi names the
components register, and the URNs the runbook targets, come from the same functions, so a
``pulumi up --target`` in the runbook always names what the program registers.
"""

from __future__ import annotations

# ------------------------------------------------------------------------------ gpu

GPU_NAMESPACE = "gpu/namespace"
GPU_OPERATOR = "gpu/gpu-operator"
DRA_NAMESPACE = "gpu/dra-namespace"
DRA_DRIVER = "gpu/dra-driver-nvidia-gpu"
"""The DRA driver for NVIDIA GPUs: ComputeDomains on NVL72 pools."""


def nvidia_driver(pool: str) -> str:
    """A fleet pool's own NVIDIA driver (its NVIDIADriver resource)."""
    return f"gpu/nvidia-driver/{pool}"


# -------------------------------------------------------------------------- network

NETWORK_NAMESPACE = "network/namespace"
NETWORK_OPERATOR = "network/network-operator"
NIC_POLICY = "network/nic-cluster-policy"
UFM_SECRET = "network/ufm-secret"
MULTUS = "network/multus"
NETWORKS_NAMESPACE = "network/networks-namespace"
SRIOV_POOL = "network/sriov-rdma-exclusive"


def pool(rail: str) -> str:
    return f"network/pool/{rail}"


def sriov_policy(rail: str, pool: str | None = None) -> str:
    """A rail's SR-IOV node policy; in a fleet, one per pool that has the rail."""
    return f"network/sriov-policy/{rail}" if pool is None else f"network/sriov-policy/{pool}/{rail}"


def sriov_pool_config(pool: str) -> str:
    """A fleet pool's exclusive RDMA mode (SRIOV_POOL in a one-pool stack)."""
    return f"{SRIOV_POOL}/{pool}"


def nic_node_policy(pool: str) -> str:
    """A fleet pool's NicNodePolicy: its NIC driver and device plugins."""
    return f"network/nic-node-policy/{pool}"


def nad(rail: str, tenant: str | None = None) -> str:
    """A rail's NetworkAttachmentDefinition: one in the system namespace, or one per tenant."""
    return f"network/nad/{rail}" if tenant is None else f"network/nad/{tenant}/{rail}"


# ----------------------------------------------------------------------- monitoring

MONITORING_NAMESPACE = "monitoring/namespace"
PROMETHEUS = "monitoring/kube-prometheus-stack"
MONITORING_RULES = "monitoring/rules"
QUEUE_METRICS = "monitoring/queueing-metrics"
NODE_PROBLEM_DETECTOR = "monitoring/node-problem-detector"
HEALTH_ACCOUNT = "monitoring/health/service-account"
HEALTH_CLUSTER_ROLE = "monitoring/health/cluster-role"
HEALTH_CLUSTER_BINDING = "monitoring/health/cluster-role-binding"
HEALTH_ROLE = "monitoring/health/role"
HEALTH_BINDING = "monitoring/health/role-binding"
HEALTH_LEASE_ROLE = "monitoring/health/lease-role"
HEALTH_LEASE_BINDING = "monitoring/health/lease-role-binding"
HEALTH_RUNNER = "monitoring/health/runner"
HEALTH_NODE_POLICY = "monitoring/health/node-policy"
HEALTH_NODE_POLICY_BINDING = "monitoring/health/node-policy-binding"
NODE_ACCEPTANCE_CRD = "monitoring/node-acceptance/crd"
NODE_ACCEPTANCE_WRITER = "monitoring/node-acceptance/writer-role"
NODE_ACCEPTANCE_READER = "monitoring/node-acceptance/reader-role"
NODE_ACCEPTANCE_KSM_CONFIG = "monitoring/node-acceptance/ksm-config"


def dashboard(name: str) -> str:
    return f"monitoring/dashboard/{name}"


# ------------------------------------------------------------------------- training

MPI_OPERATOR = "training/mpi-operator"
TRAINING_OPERATOR = "training/training-operator"
TRAINER = "training/trainer"
TRAINER_NAMESPACE = "training/trainer-namespace"


def trainer_runtime(runtime: str) -> str:
    return f"training/runtime-{runtime}"


def job_operators(job_kinds: tuple[str, ...]) -> tuple[str, ...]:
    """The items that install the operators (and CRDs) serving these job kinds."""
    out: list[str] = []
    for kind in job_kinds:
        item = {"mpijob": MPI_OPERATOR, "trainjob": TRAINER}.get(kind, TRAINING_OPERATOR)
        if item not in out:
            out.append(item)
    return tuple(out)


# ----------------------------------------------------------------------- scheduling

SCHEDULING_NAMESPACE = "scheduling/namespace"
TOPOLOGY = "scheduling/topology"
FLAVOR = "scheduling/resource-flavor"


def flavor(pool: str) -> str:
    """A fleet's ResourceFlavor of one node pool (a one-pool stack has :data:`FLAVOR`)."""
    return f"{FLAVOR}/{pool}"


def authority_chart(authority: str) -> str:
    """The chart of the queueing authority (``scheduling/kueue``, ``scheduling/volcano``)."""
    return f"scheduling/{authority}"


def tenant_queue(tenant: str) -> str:
    """The tenant's cluster-level queue (a Kueue ClusterQueue, a Volcano Queue)."""
    return f"scheduling/{tenant}/queue"


def tenant_priority(tenant: str) -> str:
    return f"scheduling/{tenant}/priority"


# -------------------------------------------------------------------------- tenants

TENANT_POLICY = "tenants/pod-security-policy"
TENANT_BINDING = "tenants/pod-security-binding"
TENANT_OBJECTS_POLICY = "tenants/objects-policy"
TENANT_OBJECTS_BINDING = "tenants/objects-binding"
TENANT_MANAGED_POLICY = "tenants/managed-policy"
TENANT_MANAGED_BINDING = "tenants/managed-binding"
TENANT_ROLE = "tenants/role"


def tenant_role_binding(tenant: str) -> str:
    return f"tenants/{tenant}/role-binding"


def tenant_namespace(tenant: str) -> str:
    return f"tenants/{tenant}/namespace"


def tenant_quota(tenant: str) -> str:
    return f"tenants/{tenant}/resource-quota"


def tenant_local_queue(tenant: str) -> str:
    return f"tenants/{tenant}/local-queue"


def tenant_nccl_env(tenant: str, pool: str | None = None) -> str:
    """The tenant's ``nccl-env`` ConfigMap; in a fleet, one per pool (``pool`` named)."""
    base = f"tenants/{tenant}/nccl-env"
    return base if pool is None else f"{base}/{pool}"


# ---------------------------------------------------------------- Pulumi resources

PROJECT = "gpufabric"
"""The Pulumi project name (Pulumi.yaml): part of every URN."""


ROOT_TYPE = "gpufabric:index:TrainingFabric"
"""The root component's type (components/fabric.py)."""
LAYER_TYPE = "gpufabric:index:Layer"
TENANTS_TYPE = "gpufabric:index:Tenants"
"""The layer components' types: the tenants layer has its own (components/tenants.py)."""
PROVIDER_TYPE = "pulumi:providers:kubernetes"


def layer_type(layer: str) -> str:
    """The type of the component that parents one layer's items."""
    return TENANTS_TYPE if layer == "tenants" else LAYER_TYPE


def k8s_type(api_version: str, kind: str) -> str:
    """The pulumi-kubernetes type token of a kind (core/v1 for the core group): the type a
    Plan object is registered under."""
    group_version = "core/v1" if api_version == "v1" else api_version
    return f"kubernetes:{group_version}:{kind}"


def provider_name(cluster: str) -> str:
    """The stack's explicit Kubernetes provider."""
    return f"{cluster}-k8s"


def layer_component_name(cluster: str, layer: str) -> str:
    """The ComponentResource that parents one layer's items."""
    return f"{cluster}-{layer}"


def child_name(cluster: str, layer: str, item_id: str) -> str:
    """The Pulumi resource name of one item (unique in a stack: item ids are)."""
    return f"{layer_component_name(cluster, layer)}-{item_id}"


def urn(stack: str, type_chain: str, name: str) -> str:
    """A URN (or a ``--target`` glob when ``type_chain`` or ``name`` hold wildcards)."""
    return f"urn:pulumi:{stack}::{PROJECT}::{type_chain}::{name}"


# -------------------------------------------------------------------------- storage


def storage_driver(component: str) -> str:
    return f"storage/{component}"


def storage_driver_namespace(component: str) -> str:
    return f"storage/{component}-namespace"


def storage_class(backend: str) -> str:
    return f"storage/class/{backend}"


def tenant_storage_quota(tenant: str) -> str:
    return f"storage/quota/{tenant}"


def tenant_claim(tenant: str, claim: str) -> str:
    return f"storage/claim/{tenant}/{claim}"
