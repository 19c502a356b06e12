"""The stack model: what one environment's `gpufabric:` config section may say.

Field names are the YAML keys users write in ``stacks/Pulumi.<env>.yaml``. Each section is
a small pydantic model with ``extra="forbid"``; types and single-field rules live here,
rules that relate several fields live in :mod:`gpufabric.model.validation` so that every problem
of a stack is reported at once.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any, Literal

from msgspec import Struct
from pydantic import (
    AfterValidator,
    BeforeValidator,
    Discriminator,
    Field,
    PlainSerializer,
    Tag,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from gpufabric import authorities
from gpufabric.authorities.settings import AuthoritySettings
from gpufabric.model.fields import (
    DURATION,
    DnsLabel,
    DurationSeconds,
    LabelKey,
    LabelValue,
    Model,
    canonical_host,
    show_value,
)
from gpufabric.model.fields import matching as _matching
from gpufabric.model.fields import show_value as _show_value
from gpufabric.model.monitoring import Monitoring
from gpufabric.model.sources import Mirrors
from gpufabric.model.storage import ClaimSpec, Storage

# ---------------------------------------------------------------------------- value types

HOSTNAME_LABEL = "kubernetes.io/hostname"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_IFNAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,14}$")
_HCA = re.compile(r"^[A-Za-z0-9_]+(:[0-9]+)?$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")


# The rail name is also the pod interface name, and Linux limits those to 15 bytes.
RailName = Annotated[
    str,
    AfterValidator(
        _matching(
            "rail_name",
            _DNS_LABEL,
            15,
            "a valid rail name; expected lowercase letters, digits and '-', at most 15 characters "
            "(it becomes the pod's interface name)",
        )
    ),
]


def _not_loopback(value: str) -> str:
    if value == "lo":
        raise PydanticCustomError(
            "ifname",
            "'lo' is the loopback interface, never a rail; expected the RDMA NIC's port "
            "(e.g. ens1f0np0, ibp24s0)",
            {},
        )
    return value


IfName = Annotated[
    str,
    AfterValidator(
        _matching(
            "ifname",
            _IFNAME,
            15,
            "a valid network interface name; Linux takes 1-15 bytes without '/', ':' or "
            "whitespace, and a rail's netdev is letters, digits, '_', '.', '-', '@' "
            "(e.g. ens1f0np0, ibp24s0)",
        )
    ),
    AfterValidator(_not_loopback),
]
_KUBE_CONTEXT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:@/+=,-]*$")
_NCCL_VALUE = re.compile(r"^[A-Za-z0-9 _.,:=^%/+@~-]*$")
_USERNAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]*$")
HcaName = Annotated[
    str,
    AfterValidator(
        _matching(
            "hca",
            _HCA,
            64,
            "an RDMA device name; expected a name as `ibv_devices` shows it (e.g. mlx5_0), "
            "optionally with a port (mlx5_0:1)",
        )
    ),
]
_GPU_MODEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._()+-]*$")
_VERSION = re.compile(r"^v?\d+(\.\d+){1,3}(-[0-9A-Za-z]+([.-][0-9A-Za-z]+)*)?$")
GpuModelName = Annotated[
    str,
    AfterValidator(
        _matching(
            "gpu_model",
            _GPU_MODEL,
            64,
            "a GPU model name; expected letters, digits, spaces and . _ ( ) + - "
            "(e.g. H100-SXM5-80GB), at most 64 characters",
        )
    ),
]
VersionPin = Annotated[
    str,
    AfterValidator(
        _matching(
            "version",
            _VERSION,
            64,
            "a release version; expected e.g. 0.20.1, v26.7.2 or 1.2.3-rc.1 (no spaces, no "
            "epoch or local part)",
        )
    ),
]
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
NodeName = Annotated[
    str,
    AfterValidator(
        _matching(
            "node_name",
            _DNS_SUBDOMAIN,
            253,
            "a Kubernetes node name; expected lowercase letters, digits, '-' and '.'",
        )
    ),
]


def _network(value: Any) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    if isinstance(value, ipaddress.IPv4Network | ipaddress.IPv6Network):
        return value
    if not isinstance(value, str) or "/" not in value:
        raise PydanticCustomError(
            "cidr",
            "'{value}' is not a CIDR; expected a network like 10.10.0.0/16",
            {"value": value},
        )
    try:
        return ipaddress.ip_network(value, strict=True)
    except ValueError as exc:
        text = str(exc)
        if "host bits set" in text:
            fixed = ipaddress.ip_network(value, strict=False)
            raise PydanticCustomError(
                "cidr",
                "'{value}' has host bits set; did you mean {fixed}?",
                {"value": value, "fixed": str(fixed)},
            ) from None
        raise PydanticCustomError(
            "cidr",
            "'{value}' is not a CIDR; expected a network like 10.10.0.0/16",
            {"value": value},
        ) from None


def _address(value: Any) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    if isinstance(value, ipaddress.IPv4Address | ipaddress.IPv6Address):
        return value
    try:
        return ipaddress.ip_address(str(value))
    except ValueError:
        raise PydanticCustomError(
            "ip", "'{value}' is not an IP address; expected e.g. 10.10.0.1", {"value": value}
        ) from None


Cidr = Annotated[
    ipaddress.IPv4Network | ipaddress.IPv6Network,
    BeforeValidator(_network),
    PlainSerializer(str),
    WithJsonSchema({"type": "string"}),
]
IpAddress = Annotated[
    ipaddress.IPv4Address | ipaddress.IPv6Address,
    BeforeValidator(_address),
    PlainSerializer(str),
    WithJsonSchema({"type": "string"}),
]


MAX_GPUS = 1_000_000
"""More GPUs than any cluster has, small enough for Kueue's int64 quota accounting."""


def _quoted_version(value: Any) -> Any:
    """YAML reads an unquoted 1.30 as the number 1.3: say so instead of "1.3 is invalid"."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    raise PydanticCustomError(
        "yaml_number",
        'YAML read {value} as a number; quote the version, e.g. "1.30"',
        {"value": value},
    )


_DRIVER = re.compile(r"^[0-9]{3}\.[0-9]{2,3}(\.[0-9]{2,3})?$")


def _driver_version(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise PydanticCustomError(
            "driver_version",
            '{value} is not a driver version; expected e.g. "580.95.05" (NNN.NN[.NN])',
            {"value": _show_value(repr(value))},
        )
    if not isinstance(value, str):
        raise PydanticCustomError(
            "driver_version",
            'YAML read {value} as a number; quote the full driver version, e.g. "580.95.05" '
            "(NNN.NN[.NN]: a branch alone is no version the operator can pull)",
            {"value": value},
        )
    if not _DRIVER.match(value):
        raise PydanticCustomError(
            "driver_version",
            '{value} is not a driver version; expected NNN.NN[.NN], e.g. "580.95.05"',
            {"value": _show_value(value)},
        )
    return value


DriverVersion = Annotated[str, BeforeValidator(_driver_version)]


def _quantity(value: Any) -> str:
    text = str(value)
    if not _QUANTITY.match(text):
        raise PydanticCustomError(
            "quantity",
            "'{value}' is not a Kubernetes quantity; expected e.g. 512, 64Gi or 1500m",
            {"value": value},
        )
    return text


Quantity = Annotated[str, BeforeValidator(_quantity)]


def _pkey(value: Any) -> str:
    text = str(value).lower()
    if not re.fullmatch(r"0x[0-9a-f]{1,4}", text):
        raise PydanticCustomError(
            "pkey",
            "'{value}' is not a partition key; expected a hex value like 0x8001 "
            "(quote it in YAML so it stays a string)",
            {"value": value},
        )
    base = int(text, 16) & 0x7FFF
    if base in (0, 0x7FFF):
        raise PydanticCustomError(
            "pkey",
            "'{value}' is reserved (0x0000 is invalid, 0x7fff/0xffff is the default "
            "partition); choose a pkey between 0x0001 and 0x7ffe",
            {"value": value},
        )
    return f"0x{int(text, 16):04x}"


PKey = Annotated[str, BeforeValidator(_pkey)]


class SecretValue:
    """A value that must stay secret: Pulumi ciphertext from a stack file, or plaintext
    handed over by the Pulumi engine. Its repr never shows the value."""

    __slots__ = ("ciphertext", "plaintext")

    def __init__(self, *, ciphertext: str | None = None, plaintext: str | None = None) -> None:
        self.ciphertext = ciphertext
        self.plaintext = plaintext

    @property
    def is_encrypted(self) -> bool:
        return self.ciphertext is not None

    def __repr__(self) -> str:
        return "SecretValue(<encrypted>)" if self.is_encrypted else "SecretValue(<plaintext>)"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SecretValue) and (self.ciphertext, self.plaintext) == (
            other.ciphertext,
            other.plaintext,
        )

    def __hash__(self) -> int:
        return hash((self.ciphertext, self.plaintext))


def _secret(value: Any, info: ValidationInfo) -> SecretValue:
    if isinstance(value, SecretValue):
        return value
    if isinstance(value, dict) and set(value) == {"secure"} and isinstance(value["secure"], str):
        return SecretValue(ciphertext=value["secure"])
    if isinstance(value, str):
        if (info.context or {}).get("source") == "file":
            raise PydanticCustomError(
                "plaintext_secret",
                "a plaintext secret in the stack file; store it encrypted with "
                "`pulumi config set --secret --path 'gpufabric:<path>' <value>`",
                {},
            )
        return SecretValue(plaintext=value)
    raise PydanticCustomError(
        "secret", "expected a secret set with `pulumi config set --secret`", {}
    )


Secret = Annotated[
    SecretValue,
    BeforeValidator(_secret),
    PlainSerializer(lambda s: "<secret>"),
    WithJsonSchema({"type": "string"}),
]


# ---------------------------------------------------------------------------- sections


def _context_credentials(value: Any) -> Any:
    """A context name is no URL; one that is and carries credentials is refused unshown."""
    if isinstance(value, str) and "://" in value and "@" in value.split("://", 1)[1]:
        raise PydanticCustomError(
            "kube_context",
            "is a URL carrying credentials, not a kubeconfig context name (not shown); name "
            "a context of your kubeconfig (kubectl config get-contexts -o name), whose user "
            "holds the credentials",
        )
    return value


KubeContext = Annotated[
    str,
    BeforeValidator(_context_credentials),
    AfterValidator(
        _matching(
            "kube_context",
            _KUBE_CONTEXT,
            253,
            "a kubeconfig context name; expected letters, digits and _ . : @ / + = , - "
            "(e.g. kind-gpufabric, admin@prod, arn:aws:eks:...:cluster/prod), no spaces, "
            "quotes or control characters (it is printed into runbook commands)",
        )
    ),
]
NcclValue = Annotated[
    str,
    AfterValidator(
        _matching(
            "nccl_value",
            _NCCL_VALUE,
            1024,
            "an NCCL variable's value; expected letters, digits, spaces and _ . , : = ^ % / + "
            "@ ~ - (e.g. INFO, =mlx5_0,mlx5_1, /tmp/nccl.%h.%p), no control characters, quotes, "
            "backticks or $ (it is written into a ConfigMap and printed in runbooks)",
        )
    ),
]
UfmUser = Annotated[
    str,
    AfterValidator(
        _matching(
            "username",
            _USERNAME,
            128,
            "a UFM user name; expected letters, digits and _ . @ - (e.g. admin)",
        )
    ),
]


def _ufm_host(value: str) -> str:
    host = canonical_host(value)
    if host is None:
        raise PydanticCustomError(
            "host",
            "{value} is not a host; expected a host name or IP address without scheme or port "
            "(e.g. ufm.example.com, 10.0.0.5; the port is ufm.port)",
            {"value": _show_value(value)},
        )
    return host


class Cluster(Model):
    """The Kubernetes cluster this stack targets."""

    name: DnsLabel
    kubernetesVersion: Annotated[str, BeforeValidator(_quoted_version)] = Field(
        pattern=r"^v?1\.\d{2}(\.\d+)?$"
    )
    kubeContext: KubeContext | None = None
    podCIDR: Cidr | None = None
    serviceCIDR: Cidr | None = None

    @property
    def kubernetes_minor(self) -> str:
        """'1.33' from '1.33', 'v1.33' or '1.33.4'."""
        major, minor = self.kubernetesVersion.lstrip("v").split(".")[:2]
        return f"{major}.{minor}"


PoolName = Annotated[
    str,
    AfterValidator(
        _matching(
            "pool_name",
            _DNS_LABEL,
            20,
            "a pool name; expected lowercase letters, digits and '-', at most 20 characters "
            "(e.g. h100-ib; it names the pool's objects and Kueue flavor)",
        )
    ),
]


class Toleration(Model):
    """A taint the GPU nodes carry that training pods tolerate."""

    key: LabelKey
    operator: Literal["Exists", "Equal"] = "Exists"
    value: LabelValue | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None


NvlinkSystem = Literal["GB200-NVL72", "GB300-NVL72"]
"""Rack-scale systems whose trays share one multi-node NVLink domain (gpufabric.model.nvlink)."""


class Nvlink(Model):
    """The pool's nodes are the compute trays of NVL72 racks: 4 GPUs a tray, 18 trays a
    multi-node NVLink domain (one rack). Jobs get a ComputeDomain and every pod an IMEX
    channel; the domain of each tray is GPU Feature Discovery's ``nvidia.com/gpu.clique``."""

    system: NvlinkSystem


class GpuNodes(Model):
    """Which nodes carry GPUs and RDMA NICs, and how many the stack expects."""

    nodeSelector: dict[LabelKey, LabelValue] = Field(
        default_factory=lambda: {"feature.node.kubernetes.io/pci-10de.present": "true"}
    )
    gpusPerNode: int = Field(default=8, ge=1, le=16)
    count: int = Field(ge=1, le=100_000)
    gpuModel: GpuModelName | None = None
    tolerations: list[Toleration] = Field(default_factory=list)
    """Taints of the GPU nodes; the queue's flavor adds these tolerations to admitted jobs."""
    nvlink: Nvlink | None = None
    """The nodes are trays of NVL72 racks (multi-node NVLink, ComputeDomains)."""

    @property
    def capacity(self) -> int:
        """GPUs the stack expects in the cluster."""
        return self.count * self.gpusPerNode


class GpuDriver(Model):
    """The NVIDIA driver the GPU Operator installs on GPU nodes."""

    enabled: bool = True
    """False when the hosts already run the NVIDIA driver."""
    version: DriverVersion | None = None
    """Driver version (e.g. 595.91.07); default: the one the pinned GPU Operator ships."""
    usePrecompiled: bool = False
    useNvidiaDriverCRD: bool = False
    """Manage drivers per node pool through NVIDIADriver resources instead of the ClusterPolicy."""


class DcgmExporter(Model):
    """GPU metrics for Prometheus."""

    enabled: bool = True
    serviceMonitor: bool = False
    """Create a ServiceMonitor (needs the Prometheus Operator CRDs in the cluster)."""


class GpuOperatorSettings(Model):
    """Options of the NVIDIA GPU Operator beyond what the fabric decides."""

    driver: GpuDriver = Field(default_factory=GpuDriver)
    gdrcopy: bool = False
    """GDRCopy driver sidecar (low-latency GPU memory copies, used by UCX/NVSHMEM)."""
    gds: bool = False
    """GPUDirect Storage (nvidia-fs); needs open kernel modules."""
    dcgmExporter: DcgmExporter = Field(default_factory=DcgmExporter)
    migStrategy: Literal["none", "single", "mixed"] = "single"
    cdi: bool = True
    """The Container Device Interface in the container runtime, through the NVIDIA Container
    Toolkit (the chart's default); the DRA driver, hence an NVL72 pool, needs it."""


class RailBlock(Model):
    """The part of a routed rail under one leaf switch: its own subnet and gateway."""

    leaf: LabelValue
    """The leaf switch: the value of the narrowest switch level of scheduling.topologyLevels
    (e.g. topology.gpufabric.io/leaf: leaf-03) on the block's nodes."""
    subnet: Cidr
    """The block's subnet, inside the rail's subnet."""
    gateway: IpAddress
    """The leaf's address in the block's subnet (an SVI or routed port)."""


class Rail(Model):
    """One rail of the fabric: a NIC port on every GPU node and its subnet."""

    name: RailName
    netdev: IfName
    hca: HcaName | None = None
    subnet: Cidr
    """The rail's subnet; with blocks, the aggregate that holds every block's subnet and that
    pods route to through their block's gateway."""
    gateway: IpAddress | None = None
    exclude: list[str] = Field(default_factory=list)
    """Address ranges the pool must not hand out: 'a.b.c.d' or 'a.b.c.d-a.b.c.e'."""
    blocks: list[RailBlock] = Field(default_factory=list, max_length=256)
    """Routed rails with a subnet per leaf: one entry per leaf switch. Each block gets its own
    nv-ipam pool (for the nodes under that leaf) and network (<rail>-<leaf>)."""


class Ipam(Model):
    """IP pools for the rails, served by NVIDIA IPAM (nv-ipam)."""

    type: Literal["nv-ipam"] = "nv-ipam"
    poolType: Literal["ippool", "cidrpool"] = "ippool"
    perNodeBlockSize: int = Field(default=16, ge=2, le=65_536)
    """IPPool: addresses handed to each node."""
    perNodePrefix: int | None = Field(default=None, ge=8, le=128)
    """CIDRPool: prefix length of the block each node gets (e.g. 28)."""
    routing: Literal["perLeaf", "spanLeaves"] = "perLeaf"
    """Rails routed per leaf (fabric.rails[].blocks): perLeaf, an IPPool and a network per
    leaf block (a job runs under one leaf); spanLeaves, one CIDRPool and network per rail whose
    static allocations give each node a prefix of its leaf's block (jobs span leaves)."""


class Ufm(Model):
    """NVIDIA UFM, which programs pkeys for pods through ib-kubernetes."""

    address: Annotated[str, AfterValidator(_ufm_host)]
    port: int = Field(default=443, ge=1, le=65_535)
    httpSchema: Literal["https", "http"] = "https"
    username: UfmUser
    password: Secret


class Infiniband(Model):
    """InfiniBand-only settings."""

    pkey: PKey | None = None
    pkeyManagement: Literal["static", "ufm"] = "static"
    ufm: Ufm | None = None


class Roce(Model):
    """RoCE-only settings; they must match the switches' lossless class."""

    dscp: int = Field(default=26, ge=0, le=63)
    trafficClass: int | None = Field(default=None, ge=0, le=255)
    """Traffic class NCCL marks RDMA traffic with; unset: dscp * 4 (gpufabric.plan.resolve)."""
    pfcPriority: int = Field(default=3, ge=0, le=7)
    qpsPerConnection: int | None = Field(default=None, ge=1, le=128)
    gidIndex: int | None = Field(default=None, ge=0, le=255)
    """Leave unset: NCCL >= 2.21 picks the RoCEv2 GID itself, and fixed indices break
    with macvlan, where every pod adds its own GIDs."""


class Sriov(Model):
    """SR-IOV virtual functions carved from each rail's physical function."""

    numVfs: int = Field(ge=1, le=127)
    """VFs per physical function; each training pod takes one VF per rail."""


class NicDriver(Model):
    """Where the NIC driver (DOCA-OFED / MLNX_OFED, or the kernel's inbox driver) comes from."""

    source: Literal["host", "operator"] = "host"
    hostStack: Literal["doca", "mlnx-ofed", "inbox"] = "doca"
    """What the host runs when source is host: DOCA-OFED, MLNX_OFED (its predecessor, e.g. on
    DGX OS), or the kernel's inbox driver with rdma-core."""


FabricType = Literal["infiniband", "roce"]
RdmaMode = Literal["shared", "sriov", "hostdevice", "none"]


class Fabric(Model):
    """The RDMA fabric: its type, how pods get devices, and the rails."""

    type: FabricType
    rdma: RdmaMode = "shared"
    gpuDirect: Literal["dmabuf", "peermem"] = "dmabuf"
    nicDriver: NicDriver = Field(default_factory=NicDriver)
    mtu: int | None = None
    """Unset: the fabric's default (its link's default_mtu in gpufabric.nics)."""
    linkRateGbps: int = Field(default=400, ge=1, le=3_200)
    """Line rate of one rail's port; the NCCL verdict compares bus bandwidth to it."""
    rails: list[Rail] = Field(min_length=1, max_length=32)
    ipam: Ipam = Field(default_factory=Ipam)
    multus: Literal["thick", "network-operator"] = "thick"
    networkNamespace: DnsLabel = "gpufabric-networks"
    """Namespace of the shared NetworkAttachmentDefinitions (nadScope: system)."""
    nadScope: Literal["system", "tenant"] = "system"
    infiniband: Infiniband | None = None
    roce: Roce | None = None
    sriov: Sriov | None = None
    ncclEnv: dict[str, NcclValue] = Field(default_factory=dict)
    """Extra NCCL_* variables for every tenant; they win over computed ones."""


def _one_authority(value: Any) -> Any:
    if isinstance(value, list | tuple):
        raise PydanticCustomError(
            "gang",
            "{value} asks for several authorities; a cluster has exactly one gang/queue "
            "authority: choose kueue or volcano",
            {"value": list(value)},
        )
    return value


def _known_authority(value: str) -> str:
    known = authorities.AUTHORITIES.names()
    if value not in known:
        raise PydanticCustomError(
            "gang",
            "'{value}' is not a queueing authority; expected one of {known}",
            {"value": value, "known": " or ".join(repr(k) for k in known)},
        )
    return value


def _not_mpijob(value: Any) -> Any:
    if isinstance(value, str) and value.lower() == "mpijob":
        raise PydanticCustomError(
            "scheme",
            "'mpijob' is served by the MPI Operator (training.mpiOperator: true, MPIJob "
            "v2beta1); the Training Operator runs without its MPIJob scheme",
            {},
        )
    return value


class SchedulingBase(Model):
    """What every queueing authority reads of ``scheduling``."""

    gang: Annotated[str, BeforeValidator(_one_authority), AfterValidator(_known_authority)] = (
        "kueue"
    )
    """The queueing authority: one of the modules of gpufabric.authorities."""
    topologyLevels: list[LabelKey] = Field(default_factory=list)
    """Node labels from the widest level (e.g. a block or spine) to the narrowest. Unset with
    Kueue: the node level only (kubernetes.io/hostname)."""
    nodeTopology: dict[NodeName, dict[LabelKey, LabelValue]] = Field(default_factory=dict)
    """Where each GPU node sits in the fabric: node name -> {level label: switch}, for every
    level above the node (e.g. gpu-node-0: {topology.gpufabric.io/leaf: leaf-03}). The
    runbook prints the exact `kubectl label` commands and `verify cluster` checks the
    labels against it; unset, they are checked for presence and consistency only."""
    allOrNothingTimeout: DurationSeconds = 300
    """How long a gang may wait for all its pods to be ready before it is requeued."""


class Scheduling(AuthoritySettings, SchedulingBase):
    """The one gang-scheduling and queueing authority of the cluster: the keys every
    authority reads, then each authority's own (gpufabric.authorities.settings)."""


TrainingScheme = Annotated[
    Literal["pytorchjob", "tfjob", "jaxjob", "xgboostjob", "paddlejob"],
    BeforeValidator(_not_mpijob),
]


class TrainingOperator(Model):
    """Kubeflow Training Operator v1; MPIJob stays with the MPI Operator."""

    schemes: list[TrainingScheme] = Field(default_factory=list)


# ClusterTrainingRuntimes gpufabric writes (upstream removed its mpi-distributed runtime in
# Trainer v2.1; MPI TrainJobs run on deepspeed-distributed, an OpenMPI launcher + sshd nodes).
TrainerRuntime = Literal["torch-distributed", "deepspeed-distributed"]


def _default_runtimes() -> list[TrainerRuntime]:
    return ["torch-distributed"]


class Trainer(Model):
    """Kubeflow Trainer v2 (TrainJob)."""

    enabled: bool = False
    runtimes: list[TrainerRuntime] = Field(default_factory=_default_runtimes)


MAX_RESTARTS = 20
"""The most gang restarts a stack or job may ask: every restart loses the work since the last
checkpoint, so a job failing more often than this is broken, not unlucky."""
MAX_DEADLINE_S = 90 * 24 * 3600
_LONG_DURATION = re.compile(r"^(\d+)d$")


def deadline_seconds(value: Any) -> int:
    """A deadline: '14d', or hours/minutes/seconds as ``duration`` reads them (36h, 90m,
    seconds as a number), between 1h and 90d."""
    days = _LONG_DURATION.match(value) if isinstance(value, str) else None
    hms = DURATION.match(value) if isinstance(value, str) else None
    if days is not None:
        seconds = int(days.group(1)) * 24 * 3600
    elif hms is not None and any(hms.groups()):
        h, mi, sec = (int(g) if g else 0 for g in hms.groups())
        seconds = h * 3600 + mi * 60 + sec
    elif isinstance(value, int) and not isinstance(value, bool):
        seconds = value
    else:
        raise PydanticCustomError(
            "duration",
            "{value} is not a duration; expected e.g. 14d, 36h or 90m",
            {"value": _show_value(value)},
        )
    if not 3600 <= seconds <= MAX_DEADLINE_S:
        raise PydanticCustomError(
            "duration",
            "{value} is not between 1h and 90d; a deadline is the backstop of a run that "
            "keeps failing, e.g. 14d",
            {"value": _show_value(value)},
        )
    return seconds


DeadlineSeconds = Annotated[int, BeforeValidator(deadline_seconds)]


class FailurePolicy(Model):
    """How a training job survives failures (``training.failurePolicy``): a failure of the
    cluster (node lost, pod evicted or preempted, a process killed by a signal: OOM, NCCL
    watchdog abort) restarts the whole gang from its last checkpoint, at most ``maxRestarts``
    times; the program's own error (exit code 1-127) fails the job at once; and no job runs
    longer than ``activeDeadline``. ``gpufabric job --max-restarts/--active-deadline``
    override it per job."""

    maxRestarts: int = Field(default=3, ge=0, le=MAX_RESTARTS)
    """Gang restarts before the job fails (the reference architectures use 3-5)."""
    activeDeadline: DeadlineSeconds = 14 * 24 * 3600
    """Wall-clock backstop from the job's start, restarts included (e.g. 14d, 36h)."""


class Training(Model):
    """Which training operators the cluster runs, and how their jobs survive failures."""

    mpiOperator: bool = True
    trainingOperator: TrainingOperator = Field(default_factory=TrainingOperator)
    trainer: Trainer = Field(default_factory=Trainer)
    failurePolicy: FailurePolicy = Field(default_factory=FailurePolicy)


_GROUP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@/+=-]*$")


def _tenant_group(value: str) -> str:
    """A group of the cluster's authentication (OIDC, certificates): never one of Kubernetes'
    own ``system:`` groups, which would hand the tenant's rights to every user or node."""
    if value.startswith("system:"):
        raise PydanticCustomError(
            "tenant_group",
            "{value} is a Kubernetes system group (system:authenticated holds every user); "
            "name a group of your identity provider",
            {"value": show_value(value)},
        )
    return value


TenantGroup = Annotated[
    str,
    AfterValidator(
        _matching(
            "tenant_group",
            _GROUP_NAME,
            253,
            "a group name; expected letters, digits and . _ : @ / + = -, e.g. ml-vision",
        )
    ),
    AfterValidator(_tenant_group),
]


def default_tenant_group(namespace: str) -> str:
    """The group bound to a tenant namespace when the stack names none."""
    return f"gpufabric:tenant:{namespace}"


ONE_POOL_TAG = "one pool"
POOLS_TAG = "pools"
"""Tags of the unions that are one pool's value or a fleet's per-pool ones."""


def _per_pool_or_one(value: Any) -> str:
    return POOLS_TAG if isinstance(value, dict) else ONE_POOL_TAG


GpuCount = Annotated[int, Field(ge=0, le=MAX_GPUS)]
GpusPerPool = Annotated[
    Annotated[GpuCount, Tag(ONE_POOL_TAG)] | Annotated[dict[PoolName, GpuCount], Tag(POOLS_TAG)],
    Discriminator(_per_pool_or_one),
]
"""GPUs: a number, or a map of pool name -> GPUs (a fleet's per-pool figures)."""


class Tenant(Model):
    """A team: its namespace, its share of the GPUs and its priority."""

    namespace: DnsLabel
    gpuQuota: GpusPerPool
    """GPUs the tenant is guaranteed: a number (a one-pool stack), or per pool of a fleet
    (pool name -> GPUs; a pool left out gives the tenant none of its GPUs)."""
    cpuQuota: Quantity | None = None
    memoryQuota: Quantity | None = None
    gpuBorrowingLimit: GpusPerPool = 0
    """GPUs beyond gpuQuota the tenant may borrow while other tenants' quota is idle: a
    number (in every pool), or per pool of a fleet (a pool left out: none there)."""
    priority: int = Field(default=0, ge=0, le=1_000_000)
    """Priority of the tenant's jobs (a WorkloadPriorityClass under Kueue, a PriorityClass
    and the queue's priority under Volcano); higher reclaims borrowed GPUs from lower."""
    pkey: PKey | None = None
    """InfiniBand SR-IOV with nadScope: tenant: this tenant's own partition."""
    vlan: int | None = Field(default=None, ge=1, le=4094)
    """RoCE SR-IOV with nadScope: tenant: this tenant's own VLAN on the VFs."""
    groups: list[TenantGroup] | None = Field(default=None, max_length=32)
    """Groups whose users work in the namespace (tenant RBAC); None: the one group
    ``gpufabric:tenant:<namespace>``; []: nobody through gpufabric."""
    claims: list[ClaimSpec] | None = Field(default=None, max_length=16)
    """The tenant's own shared-storage claims; None: ``storage.claims``; []: none."""

    @property
    def gpu_quota_total(self) -> int:
        """GPUs guaranteed over every pool."""
        quota = self.gpuQuota
        return sum(quota.values()) if isinstance(quota, dict) else quota

    def quota_in(self, pool: str, only_pool: bool) -> int:
        """GPUs guaranteed in one pool (a number is the only pool's)."""
        quota = self.gpuQuota
        if isinstance(quota, dict):
            return quota.get(pool, 0)
        return quota if only_pool else 0

    def borrowing_in(self, pool: str) -> int:
        """GPUs the tenant may borrow in one pool (a number holds in every pool)."""
        limit = self.gpuBorrowingLimit
        return limit.get(pool, 0) if isinstance(limit, dict) else limit

    @field_validator("groups")
    @classmethod
    def _unique_groups(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and len(set(value)) != len(value):
            twice = sorted({g for g in value if value.count(g) > 1})
            raise PydanticCustomError(
                "tenant_groups", "lists {twice} more than once", {"twice": ", ".join(twice)}
            )
        return value


_REGISTRY_HOST = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,5})?$")
_MIRROR_PREFIX = re.compile(
    r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,5})?(/[a-z0-9]+([._-][a-z0-9]+)*)*$"
)
_CHART_URL = re.compile(r"^(https?|oci)://[^\s/@]+(/[^\s@]*)?$")
_HTTP_URL = re.compile(r"^https?://[^\s/@]+(/[^\s@]*)?$")


_CREDENTIALS_BELONG = (
    "gpufabric writes and prints URLs, so credentials never go into one: give the mirror "
    "anonymous pulls or its credentials through the cluster (registry pull secrets, a Helm "
    "repository secret) or the Pulumi secret config (`pulumi config set --secret`)"
)


def credentials_in(value: str) -> str | None:
    """What part of a URL or registry reference carries credentials, if any: userinfo
    (``user:password@`` or ``token@`` before the host), a query (``?token=``) or a
    fragment."""
    rest = value.split("://", 1)[-1]
    if "@" in rest.split("/", 1)[0]:
        return "a user name or password before the host"
    if "?" in value:
        return "a query (?...), where tokens travel"
    if "#" in value:
        return "a fragment (#...)"
    return None


def _no_credentials(value: Any) -> Any:
    """Credentials in a URL would be printed by render, runbook, images and diff: refused,
    without showing them."""
    if isinstance(value, str):
        where = credentials_in(value)
        if where is not None:
            raise PydanticCustomError(
                "url_credentials",
                "the value carries credentials ({where}); remove them: " + _CREDENTIALS_BELONG,
                {"where": where},
            )
    return value


RegistryHost = Annotated[
    str,
    BeforeValidator(_no_credentials),
    AfterValidator(
        _matching("registry", _REGISTRY_HOST, 253, "a registry host; expected e.g. nvcr.io")
    ),
]
MirrorPrefix = Annotated[
    str,
    BeforeValidator(_no_credentials),
    AfterValidator(
        _matching(
            "mirror",
            _MIRROR_PREFIX,
            255,
            "a registry mirror; expected HOST[:PORT][/PATH] without scheme or tag, "
            "e.g. registry.example.com/nvcr",
        )
    ),
]
ChartRepositoryUrl = Annotated[
    str,
    BeforeValidator(_no_credentials),
    AfterValidator(
        _matching(
            "chart_url",
            _CHART_URL,
            2048,
            "a chart repository; expected an https:// or oci:// URL",
        )
    ),
]
HttpUrl = Annotated[
    str,
    BeforeValidator(_no_credentials),
    AfterValidator(
        _matching("http_url", _HTTP_URL, 2048, "a base URL; expected https://HOST[/PATH]")
    ),
]


class Sources(Model):
    """Mirrors of everything the stack pulls, for clusters without internet access.

    ``gpufabric images --stack S`` lists the upstreams a stack uses and what each becomes."""

    registries: dict[RegistryHost, MirrorPrefix] = Field(default_factory=dict)
    """Upstream image registry -> mirror prefix (nvcr.io: registry.example.com/nvcr)."""
    charts: dict[ChartRepositoryUrl, ChartRepositoryUrl] = Field(default_factory=dict)
    """Upstream chart repository URL -> mirror repository URL (HTTP or OCI either side)."""
    manifests: HttpUrl | None = None
    """Base URL of upstream manifests: https://HOST/PATH is fetched from BASE/HOST/PATH."""
    airGapped: bool = False
    """Every upstream the stack pulls from must have a mirror (checked, by name)."""
    pullSecrets: list[DnsLabel] = Field(default_factory=list)
    """Names of the registry credentials (kubernetes.io/dockerconfigjson Secrets) the site
    creates in each system namespace; never the credentials themselves. The charts' image
    pull secrets values, the NicClusterPolicy's images and the overlays' service accounts
    reference them."""
    privateCA: bool = False
    """The image mirrors' TLS certificates are signed by the site's own CA: the runbook adds
    the containerd step that trusts it per mirror host (certs.d/<host>/hosts.toml)."""

    def mirrors(self) -> Mirrors:
        return Mirrors(
            registries={k: v.rstrip("/") for k, v in self.registries.items()},
            charts={k.rstrip("/"): v.rstrip("/") for k, v in self.charts.items()},
            manifests=self.manifests.rstrip("/") if self.manifests else None,
            pull_secrets=tuple(dict.fromkeys(self.pullSecrets)),
            air_gapped=self.airGapped,
        )


_NOT_INHERITED: dict[str, tuple[str, ...]] = {
    "type": ("infiniband", "roce"),
    "rdma": ("sriov",),
}
"""A pool that changes the key changes what the settings named after it mean: they are not
inherited from the stack's fabric (another link's, another mode's)."""


CLUSTER_WIDE_FABRIC = ("multus", "networkNamespace", "nadScope")
"""Fabric keys that exist once per cluster: never set per pool."""


class PoolFabric(Model):
    """A pool's own NIC layout: each key set here replaces the stack's ``fabric`` key of the
    same name for the pool's nodes; keys left out are the stack's. Settings of another link
    or mode are not inherited: a pool that sets ``type`` takes ``infiniband``/``roce`` only
    from here, one that sets ``rdma`` takes ``sriov`` only from here. What is cluster-wide
    (``multus``, ``networkNamespace``, ``nadScope``) stays under ``fabric``."""

    type: FabricType | None = None
    rdma: RdmaMode | None = None
    gpuDirect: Literal["dmabuf", "peermem"] | None = None
    nicDriver: NicDriver | None = None
    mtu: int | None = None
    linkRateGbps: int | None = Field(default=None, ge=1, le=3_200)
    rails: list[Rail] | None = Field(default=None, min_length=1, max_length=32)
    ipam: Ipam | None = None
    infiniband: Infiniband | None = None
    roce: Roce | None = None
    sriov: Sriov | None = None
    ncclEnv: dict[str, NcclValue] | None = None

    @model_validator(mode="before")
    @classmethod
    def _cluster_wide(cls, value: Any) -> Any:
        if isinstance(value, dict):
            shared = [key for key in CLUSTER_WIDE_FABRIC if key in value]
            if shared:
                raise PydanticCustomError(
                    "cluster_wide",
                    "{keys}: one for the whole cluster, never a pool's; set it under "
                    "gpufabric:fabric",
                    {"keys": ", ".join(shared)},
                )
        return value

    def _update(self, fabric: Fabric) -> dict[str, Any]:
        update = {key: getattr(self, key) for key in self.model_fields_set}
        for key, dependents in _NOT_INHERITED.items():
            if key in update and update[key] != getattr(fabric, key):
                for dependent in dependents:
                    update.setdefault(dependent, None)
        for key in ("rails", "ncclEnv"):
            if key in update and update[key] is None:
                del update[key]  # a null list means "the stack's"
        return update

    def over(self, fabric: Fabric) -> Fabric:
        """The pool's effective fabric: ``fabric`` with this pool's keys."""
        return fabric.model_copy(update=self._update(fabric))

    def own_keys(self, fabric: Fabric) -> frozenset[str]:
        """The fabric keys that are the pool's own: those it sets, and those of another
        link or mode that it does not inherit."""
        return frozenset(self._update(fabric))


class PoolDriver(Model):
    """A pool's own NVIDIA driver (an NVIDIADriver resource for its nodes)."""

    version: DriverVersion | None = None
    usePrecompiled: bool | None = None


DEFAULT_POOL = "default"
"""The name of the one pool of a stack whose ``gpuNodes`` is a mapping."""


class GpuPool(GpuNodes):
    """One node pool of a fleet: its nodes, GPUs and NIC layout."""

    name: PoolName
    fabric: PoolFabric | None = None
    """The pool's NIC layout where it differs from the stack's ``fabric``."""
    driver: PoolDriver | None = None
    """The pool's NVIDIA driver where it differs from ``gpuOperator.driver``."""


class NodePool(Struct, frozen=True):
    """A pool as the rest of gpufabric reads it: its nodes and its effective fabric, with
    the config paths its keys are reported under."""

    name: str
    nodes: GpuNodes
    fabric: Fabric
    path: str
    """``gpuNodes`` for a one-pool mapping, ``gpuNodes[i]`` in a list."""
    own_fabric: frozenset[str] = frozenset()
    """The fabric keys the pool sets itself (reported under ``<path>.fabric``)."""
    driver: PoolDriver | None = None

    def fabric_path(self, key: str) -> str:
        """Where a fabric key of this pool is written: the pool's own or the stack's."""
        head = key.split(".", 1)[0].split("[", 1)[0]
        return f"{self.path}.fabric.{key}" if head in self.own_fabric else f"fabric.{key}"


def _pools_or_one(value: Any) -> str:
    return POOLS_TAG if isinstance(value, list) else ONE_POOL_TAG


GpuNodesSection = Annotated[
    Annotated[GpuNodes, Tag(ONE_POOL_TAG)] | Annotated[list[GpuPool], Tag(POOLS_TAG)],
    Discriminator(_pools_or_one),
]


def node_pools(gpu_nodes: GpuNodes | list[GpuPool], fabric: Fabric) -> tuple[NodePool, ...]:
    """The stack's pools in its order: one ``default`` pool for a mapping."""
    if isinstance(gpu_nodes, GpuNodes) and not isinstance(gpu_nodes, GpuPool):
        return (NodePool(DEFAULT_POOL, gpu_nodes, fabric, "gpuNodes"),)
    pools = []
    for i, pool in enumerate(gpu_nodes if isinstance(gpu_nodes, list) else [gpu_nodes]):
        own = pool.fabric
        pools.append(
            NodePool(
                name=pool.name,
                nodes=pool,
                fabric=own.over(fabric) if own is not None else fabric,
                path=f"gpuNodes[{i}]",
                own_fabric=own.own_keys(fabric) if own is not None else frozenset(),
                driver=pool.driver,
            )
        )
    return tuple(pools)


class StackModel(Model):
    """Everything one stack (environment) says, validated."""

    cluster: Cluster
    gpuNodes: GpuNodesSection
    """One pool (a mapping), or a fleet of named pools (a list)."""
    fabric: Fabric
    """The fabric: cluster-wide settings, and the NIC layout of every pool that does not set
    its own (``gpuNodes[].fabric``)."""
    gpuOperator: GpuOperatorSettings = Field(default_factory=GpuOperatorSettings)
    scheduling: Scheduling = Field(default_factory=Scheduling)
    training: Training = Field(default_factory=Training)
    tenants: list[Tenant] = Field(default_factory=list)
    versions: dict[str, VersionPin] = Field(default_factory=dict)
    """Overrides of the pins in manifests/versions.yaml, by component name."""
    sources: Sources = Field(default_factory=Sources)
    monitoring: Monitoring = Field(default_factory=Monitoring)
    storage: Storage | None = None
    """Shared storage for checkpoints and datasets (gpufabric.model.storage)."""

    @property
    def pools(self) -> tuple[NodePool, ...]:
        """The node pools, each with its effective fabric (one for a mapping)."""
        return node_pools(self.gpuNodes, self.fabric)


SECTIONS: tuple[str, ...] = tuple(StackModel.model_fields)
"""Top-level keys of the `gpufabric:` config namespace."""
