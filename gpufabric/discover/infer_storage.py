"""Storage from the claims gpufabric wrote: each claim's backend (its
``gpufabric.io/storage-backend`` label) and StorageClass, the NFS classes gpufabric made
(server, share, transport, version, options, reclaim policy), and the claims every tenant
gets (``storage.claims``) or a tenant's own (``tenants[].claims``)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from gpufabric.discover.infer import Context, labels, meta, spec
from gpufabric.model.storage import DEFAULT_MOUNT_PATHS
from gpufabric.storage import nfs as nfs_driver

BACKEND = "gpufabric.io/storage-backend"
Claims = tuple[tuple[str, str, str | None], ...]
"""A tenant's claims: (name, size, backend) in name order."""


def storage(ctx: Context, namespaces: list[str]) -> tuple[dict[str, Any], dict[str, Claims]]:
    """(the storage section, each tenant's claims where they differ from the section's)."""
    pvcs = [p for p in ctx.managed("PersistentVolumeClaim") if BACKEND in labels(p)]
    if not pvcs:
        return {}, {}
    backends: dict[str, str] = {}
    for pvc in pvcs:
        backends.setdefault(labels(pvc)[BACKEND], str(spec(pvc).get("storageClassName", "")))
    several = len(backends) > 1
    per_ns: dict[str, Claims] = {}
    for ns in namespaces:
        mine = sorted(
            (p for p in pvcs if meta(p).get("namespace") == ns), key=lambda p: meta(p)["name"]
        )
        per_ns[ns] = tuple(
            (
                str(meta(p)["name"]),
                str(((spec(p).get("resources") or {}).get("requests") or {}).get("storage")),
                labels(p)[BACKEND] if several else None,
            )
            for p in mine
        )
    common = Counter(per_ns.values()).most_common(1)[0][0] if per_ns else ()
    section: dict[str, Any] = {
        "backends": [_backend(ctx, name, cls) for name, cls in sorted(backends.items())]
    }
    if common:
        section["claims"] = [_claim(ctx, c) for c in common]
    return section, {ns: c for ns, c in per_ns.items() if c != common}


def claims(ctx: Context, own: Claims) -> list[dict[str, Any]]:
    return [_claim(ctx, c) for c in own]


def _claim(ctx: Context, claim: tuple[str, str, str | None]) -> dict[str, Any]:
    name, size, backend = claim
    out: dict[str, Any] = {"name": name, "size": size}
    if name not in DEFAULT_MOUNT_PATHS:
        # where jobs mount a claim is in no live object: the pods gpufabric job writes
        out["mountPath"] = f"/{name}"
        ctx.notes.unmapped.append(
            f"PersistentVolumeClaim */{name}: mountPath: on no live object; written /{name}, "
            "set storage.claims[].mountPath (or tenants[].claims[].mountPath) to the real one"
        )
    if backend is not None:
        out["backend"] = backend
    return out


def _backend(ctx: Context, name: str, class_name: str) -> dict[str, Any]:
    sc = ctx.named("StorageClass", class_name)
    if sc is None or labels(sc).get(BACKEND) != name:
        existing: dict[str, Any] = {"name": class_name}
        if sc is not None and sc.get("provisioner"):
            existing["provisioner"] = sc["provisioner"]
        return {"name": name, "existingClass": existing}
    params = dict(sc.get("parameters") or {})
    nfs: dict[str, Any] = {"server": params.get("server"), "share": params.get("share")}
    options = [str(o) for o in sc.get("mountOptions") or []]
    own = [o for o in options if o.split("=")[0] not in nfs_driver.OWNED_OPTIONS]
    owned = dict(o.partition("=")[::2] for o in options if o not in own)
    if owned.get("proto") == "tcp":
        nfs["transport"] = "tcp"
        if owned.get("nconnect") and int(owned["nconnect"]) != nfs_driver.DEFAULT_NCONNECT:
            nfs["nconnect"] = int(owned["nconnect"])
    if owned.get("nfsvers", "4.1") != "4.1":
        nfs["nfsVersion"] = owned["nfsvers"]
    if own:
        nfs["mountOptions"] = own
    if sc.get("reclaimPolicy", "Retain") != "Retain":
        nfs["reclaimPolicy"] = sc["reclaimPolicy"]
    return {"name": name, "nfs": nfs}
