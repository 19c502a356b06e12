"""Rules of the ``storage`` section and what relates it to tenants and GPUDirect Storage.

Called from :mod:`gpufabric.model.validation` with the sections that parsed; every problem
is reported by its config path.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from gpufabric.model.config import Fabric, GpuOperatorSettings, Tenant
from gpufabric.model.problems import Problem
from gpufabric.model.storage import CHECKPOINTS, ClaimSpec, Storage, StorageBackend
from gpufabric.storage import KINDS, BackendKind, kinds

OPEN_MODULES_GPUDIRECT = "dmabuf"
"""The fabric.gpuDirect value under which gpufabric runs the open kernel modules."""


def backend_kind(backend: StorageBackend) -> BackendKind | None:
    """The one kind whose key the backend sets (None: none or several)."""
    chosen = [k for k in kinds() if k.selected(backend)]
    return chosen[0] if len(chosen) == 1 else None


def claim_lists(
    storage: Storage | None, tenants: Sequence[Tenant]
) -> Iterator[tuple[str, list[ClaimSpec]]]:
    """Each list of claims with its config path: the stack's default, each tenant's own."""
    if storage is not None:
        yield "storage.claims", storage.claims
    for i, tenant in enumerate(tenants):
        if tenant.claims is not None:
            yield f"tenants[{i}].claims", tenant.claims


def backend_of(claim: ClaimSpec, storage: Storage) -> StorageBackend | None:
    """The backend a claim names, or the stack's only one."""
    if claim.backend is None:
        return storage.backends[0] if len(storage.backends) == 1 else None
    return next((b for b in storage.backends if b.name == claim.backend), None)


def storage_problems(
    storage: Storage | None, tenants: Sequence[Tenant] | None
) -> Iterator[Problem]:
    tenants = tenants or []
    if storage is None:
        for path, _ in claim_lists(None, tenants):
            yield Problem(path, "claims need a storage section (storage.backends) to come from")
        return
    yield from _backends(storage, tenants)
    yield from _shares_apart(storage)
    for path, claims in claim_lists(storage, tenants):
        yield from _claims(path, claims, storage)


def _backends(storage: Storage, tenants: Sequence[Tenant]) -> Iterator[Problem]:
    seen: dict[str, int] = {}
    checkpoint_backends = {
        b.name
        for _, claims in claim_lists(storage, tenants)
        for c in claims
        if c.name == CHECKPOINTS and (b := backend_of(c, storage)) is not None
    }
    for i, backend in enumerate(storage.backends):
        path = f"storage.backends[{i}]"
        if backend.name in seen:
            yield Problem(
                f"{path}.name", f"{backend.name!r} is already backends[{seen[backend.name]}]"
            )
        seen.setdefault(backend.name, i)
        kind = backend_kind(backend)
        if kind is None:
            yield Problem(path, f"set exactly one of {', '.join(KINDS.names())}")
            continue
        yield from kind.problems(backend, path, backend.name in checkpoint_backends)


def _shares_apart(storage: Storage) -> Iterator[Problem]:
    """Backends on one server whose shares coincide or nest. Each claim is the directory
    ``<share>/<namespace>/<claim>``, and a tenant names its claims (its role creates them):
    with ``/export/training`` and ``/export/training/research`` on one server, tenant
    ``research`` claiming ``llm-pretrain`` on the outer share gets the directory holding
    every claim of tenant ``llm-pretrain`` on the inner one. Shares apart, no claim's
    directory holds another's."""
    seen: list[tuple[int, str, str]] = []
    for i, backend in enumerate(storage.backends):
        kind = backend_kind(backend)
        if kind is None:
            continue
        where = kind.facts(backend, "")
        if where.server is None or where.share is None:
            continue
        for j, server, share in seen:
            if server != _host(where.server) or not shares_overlap(share, where.share):
                continue
            how = "is" if share == where.share else "nests with"
            yield Problem(
                f"storage.backends[{i}].{kind.key}.share",
                f"{where.share} on {server} {how} backends[{j}]'s share {share}: a tenant's "
                "claim on one would be a directory holding other tenants' claims on the "
                "other; give each backend on one server a share neither inside nor above "
                "another's (e.g. /export/a and /export/b)",
            )
        seen.append((i, _host(where.server), where.share))


def _host(server: str) -> str:
    """A server as DNS compares it (case-insensitive, trailing dot or not); an address is
    canonical already."""
    return server.lower().rstrip(".")


def shares_overlap(a: str, b: str) -> bool:
    """Two plain export paths are one, or one lies under the other."""
    a, b = a.rstrip("/") + "/", b.rstrip("/") + "/"
    return a.startswith(b) or b.startswith(a)


def _claims(path: str, claims: Sequence[ClaimSpec], storage: Storage) -> Iterator[Problem]:
    names: dict[str, int] = {}
    mounts: dict[str, int] = {}
    for j, claim in enumerate(claims):
        at = f"{path}[{j}]"
        if claim.name in names:
            yield Problem(f"{at}.name", f"{claim.name!r} is already {path}[{names[claim.name]}]")
        names.setdefault(claim.name, j)
        if claim.backend is None and len(storage.backends) > 1:
            yield Problem(f"{at}.backend", "unset, but the stack has several backends; name one")
        elif backend_of(claim, storage) is None:
            known = ", ".join(b.name for b in storage.backends)
            yield Problem(f"{at}.backend", f"{claim.backend!r} is not a backend (known: {known})")
        mount = claim.mount_path
        if mount is None:
            yield Problem(
                f"{at}.mountPath",
                f"required for a claim named {claim.name!r} (only checkpoints and datasets have a default)",
            )
            continue
        for other, k in mounts.items():
            if mount == other or mount.startswith(other + "/") or other.startswith(mount + "/"):
                yield Problem(f"{at}.mountPath", f"{mount} overlaps {path}[{k}]'s {other}")
        mounts.setdefault(mount, j)
        if claim.name == CHECKPOINTS and claim.read_only:
            yield Problem(
                f"{at}.readOnly", "true on the checkpoints claim: jobs could not write checkpoints"
            )


def gds_problems(
    gpu: GpuOperatorSettings | None,
    fabric: Fabric | None,
    storage: Storage | None,
) -> Iterator[Problem]:
    """GPUDirect Storage reads files straight into GPU memory: it needs the open kernel
    modules (nvidia-fs with them) and storage it can reach over RDMA. gpufabric does not
    switch the module type for it; a stack that asks for GDS without them is refused."""
    if gpu is None or not gpu.gds:
        return
    if fabric is not None and fabric.gpuDirect != OPEN_MODULES_GPUDIRECT:
        yield Problem(
            "gpuOperator.gds",
            f"true with fabric.gpuDirect: {fabric.gpuDirect}, which runs the proprietary kernel "
            "modules; GDS needs the open kernel modules: set fabric.gpuDirect: dmabuf, or "
            "gpuOperator.gds: false",
        )
    capable = [
        b.name
        for b in (storage.backends if storage else [])
        if (k := backend_kind(b)) is not None and k.facts(b, "").gds
    ]
    if not capable:
        yield Problem(
            "gpuOperator.gds",
            "true, but no storage backend GDS can read through: add a storage backend with "
            "nfs.transport: rdma, or an existingClass with gds: true (a file system that "
            "serves GDS, e.g. Lustre, Weka, VAST), or set gpuOperator.gds: false",
        )
