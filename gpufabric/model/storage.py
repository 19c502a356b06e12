"""The ``storage`` section: shared storage backends and the claims every tenant gets.

A backend is either NFS served through the pinned csi-driver-nfs chart (``nfs``) or a
StorageClass the cluster already has (``existingClass``: Lustre, Weka, VAST, CephFS, ...).
``storage.claims`` lists the claims each tenant gets (at least checkpoints and datasets);
a tenant may list its own (``tenants[].claims``). Rules that relate fields live in
:mod:`gpufabric.model.validation`; what each backend kind writes lives in
:mod:`gpufabric.storage`.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field
from pydantic_core import PydanticCustomError

from gpufabric.model.fields import DnsLabel, Model, canonical_host, show_value
from gpufabric.model.fields import matching as _matching

_SIZE = re.compile(r"^([1-9][0-9]{0,8})(Mi|Gi|Ti|Pi)$")
_UNITS = {"Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}
_EXPORT = re.compile(r"^/([A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*)?$")
_MOUNT_PATH = re.compile(r"^/[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$")
_MOUNT_OPTION = re.compile(r"^[A-Za-z0-9_]+(=[A-Za-z0-9_.:,-]+)?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

CHECKPOINTS = "checkpoints"
"""The claim jobs write their checkpoints to (``/checkpoints/<job name>``)."""
DATASETS = "datasets"
DEFAULT_MOUNT_PATHS = {CHECKPOINTS: "/checkpoints", DATASETS: "/data"}
"""Where a claim of these names is mounted when the stack gives no ``mountPath``."""
RESERVED_MOUNT_PATHS = ("/dev", "/proc", "/sys", "/etc", "/usr", "/bin", "/lib", "/var/run")
"""Paths a claim must not cover: the container's own system (and /dev/shm, NCCL's)."""
ENTRYPOINT_DIR = "/opt/gpufabric/entrypoint"
"""Where a job's ``--entrypoint`` files are mounted (read-only) and its programs start."""
SSH_DIR = "/root/.ssh"
"""Where the NCCL test's pods mount their SSH keys (mpirun starts the ranks over SSH)."""
JOB_MOUNT_PATHS = {
    "/dev/shm": "the job's shared memory",
    ENTRYPOINT_DIR: "the --entrypoint files",
    SSH_DIR: "the NCCL test's SSH keys",
}
"""What gpufabric itself mounts in a job's GPU container: a claim at, above or below one of
them would put two mounts at one path, or a mount point inside a tenant's share."""


def _overlaps(a: str, b: str) -> bool:
    """One normalised path is the other or lies under it."""
    return a == b or a.startswith(b.rstrip("/") + "/") or b.startswith(a.rstrip("/") + "/")


def _normal(value: str) -> str:
    """The path with '.' and '..' resolved as the kernel resolves them (never above /)."""
    normal = posixpath.normpath(value)
    return "/" + normal.lstrip("/") if normal.startswith("//") else normal


def size_bytes(size: str) -> int:
    """Bytes of a validated claim size (``10Ti``)."""
    match = _SIZE.match(size)
    if match is None:
        raise ValueError(size)
    return int(match.group(1)) * _UNITS[match.group(2)]


def show_size(total: int) -> str:
    """The largest binary unit that states ``total`` bytes exactly (``30Ti``)."""
    for unit in ("Pi", "Ti", "Gi", "Mi"):
        if total % _UNITS[unit] == 0:
            return f"{total // _UNITS[unit]}{unit}"
    return str(Decimal(total))


def _size(value: Any) -> str:
    text = str(value)
    if not _SIZE.match(text):
        raise PydanticCustomError(
            "storage_size",
            "{value} is not a claim size; expected a whole number with a binary unit "
            "Mi, Gi, Ti or Pi (e.g. 500Gi, 20Ti)",
            {"value": show_value(text)},
        )
    return text


StorageSize = Annotated[str, BeforeValidator(_size)]


def _server(value: str) -> str:
    host = canonical_host(value)
    if host is None:
        raise PydanticCustomError(
            "nfs_server",
            "{value} is not an NFS server; expected a host name or IP address without "
            "scheme, port or path (e.g. nfs.example.com, 10.20.0.10)",
            {"value": show_value(value)},
        )
    return host


def _normalised(kind: str) -> Callable[[str], str]:
    """A check that a path has no '.' or '..' component: the path a server or a container
    resolves is the path every rule judges."""

    def check(value: str) -> str:
        normal = _normal(value)
        if normal != value:
            raise PydanticCustomError(
                kind,
                "{value} is not a plain path: '.' and '..' resolve it to {normal}; "
                "expected the path without them (write {normal})",
                {"value": show_value(value), "normal": normal},
            )
        return value

    return check


ExportPath = Annotated[
    str,
    AfterValidator(
        _matching(
            "nfs_share",
            _EXPORT,
            1024,
            "an export path; expected an absolute path of letters, digits and . _ - "
            "(e.g. /export/training)",
        )
    ),
    AfterValidator(_normalised("nfs_share")),
]


def _mount_path(value: str) -> str:
    normal = _normal(value)
    resolves = "" if normal == value else f" (it resolves to {normal})"
    if normal == "/" or any(
        normal == p or normal.startswith(p + "/") for p in RESERVED_MOUNT_PATHS
    ):
        raise PydanticCustomError(
            "mount_path",
            "{value}{resolves} would hide the container's own files; expected a path of its "
            "own, e.g. /checkpoints or /data (not under {reserved})",
            {
                "value": show_value(value),
                "resolves": resolves,
                "reserved": ", ".join(RESERVED_MOUNT_PATHS),
            },
        )
    for path, what in JOB_MOUNT_PATHS.items():
        if _overlaps(normal, path):
            raise PydanticCustomError(
                "mount_path",
                "{value}{resolves} collides with {path}, where gpufabric mounts {what} in "
                "every job's GPU container; expected a path neither at, above nor under "
                "{mounts}",
                {
                    "value": show_value(value),
                    "resolves": resolves,
                    "path": path,
                    "what": what,
                    "mounts": ", ".join(JOB_MOUNT_PATHS),
                },
            )
    return _normalised("mount_path")(value)


MountPath = Annotated[
    str,
    AfterValidator(
        _matching(
            "mount_path",
            _MOUNT_PATH,
            512,
            "an absolute path in the container; expected letters, digits and . _ - "
            "(e.g. /checkpoints)",
        )
    ),
    AfterValidator(_mount_path),
]
MountOption = Annotated[
    str,
    AfterValidator(
        _matching(
            "mount_option",
            _MOUNT_OPTION,
            128,
            "an NFS mount option; expected name or name=value (e.g. hard, timeo=600)",
        )
    ),
]
ClassName = Annotated[
    str,
    AfterValidator(
        _matching(
            "storage_class",
            _SUBDOMAIN,
            253,
            "a StorageClass name; expected lowercase letters, digits, '-' and '.'",
        )
    ),
]
Provisioner = Annotated[
    str,
    AfterValidator(
        _matching(
            "provisioner",
            re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?(/[A-Za-z0-9._-]+)?$"),
            253,
            "a CSI driver name as the StorageClass's provisioner says it (e.g. "
            "cephfs.csi.ceph.com)",
        )
    ),
]


class NfsBackend(Model):
    """An NFS server gpufabric provisions sub-directories on (csi-driver-nfs)."""

    server: Annotated[str, AfterValidator(_server)]
    share: ExportPath
    """The exported path; each claim gets ``<share>/<namespace>/<claim>``."""
    transport: Literal["rdma", "tcp"] = "rdma"
    """rdma: NFS over RDMA (proto=rdma, port 20049); tcp: NFS over TCP with nconnect."""
    nfsVersion: Literal["4.1", "4.2"] = "4.1"
    nconnect: int | None = Field(default=None, ge=1, le=16)
    """TCP connections per mount (tcp only; default 8)."""
    mountOptions: list[MountOption] = Field(default_factory=list, max_length=32)
    """Extra mount options (e.g. hard, timeo=600); transport and version are set for you."""
    reclaimPolicy: Literal["Retain", "Delete"] = "Retain"
    """Retain keeps a claim's directory when the claim is deleted; a backend serving the
    checkpoints claim must retain."""


class ExistingClass(Model):
    """A StorageClass the cluster already has; gpufabric only names it in claims."""

    name: ClassName
    provisioner: Provisioner | None = None
    """Its CSI driver; render warns when it is unset or not known to offer ReadWriteMany."""
    gds: bool = False
    """Its file system serves GPUDirect Storage (e.g. Lustre, Weka, VAST, GPFS over RDMA)."""


class StorageBackend(Model):
    """One backend: exactly one of ``nfs`` or ``existingClass``."""

    name: DnsLabel
    nfs: NfsBackend | None = None
    existingClass: ExistingClass | None = None


class ClaimSpec(Model):
    """One claim a tenant gets: a ReadWriteMany PersistentVolumeClaim in its namespace."""

    name: DnsLabel = Field(max_length=56)
    """The claim's name; pods mount it as volume ``claim-<name>`` (at most 63 characters)."""
    size: StorageSize
    backend: DnsLabel | None = None
    """Unset: the stack's only backend."""
    mountPath: MountPath | None = None
    """Unset: /checkpoints for checkpoints, /data for datasets (required for other names)."""
    readOnly: bool | None = None
    """Unset: true for datasets, false otherwise."""

    @property
    def mount_path(self) -> str | None:
        return self.mountPath or DEFAULT_MOUNT_PATHS.get(self.name)

    @property
    def read_only(self) -> bool:
        return self.name == DATASETS if self.readOnly is None else self.readOnly


class Storage(Model):
    """Shared storage: where it comes from and the claims each tenant gets."""

    backends: list[StorageBackend] = Field(min_length=1, max_length=16)
    claims: list[ClaimSpec] = Field(default_factory=list, max_length=16)
    """The claims every tenant gets unless it lists its own (``tenants[].claims``)."""


__all__ = [
    "CHECKPOINTS",
    "DATASETS",
    "ClaimSpec",
    "ExistingClass",
    "NfsBackend",
    "Storage",
    "StorageBackend",
    "show_size",
    "size_bytes",
]
