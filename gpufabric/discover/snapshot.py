"""Reading the cluster: every collection of :data:`~.sources.SOURCES`, listed page by page
through :class:`gpufabric.verify.kube.Kube` (get/list only, never a write), within one
deadline for the whole read."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from gpufabric.discover.sources import SOURCES
from gpufabric.verify.kube import Forbidden, Kube, Malformed, collection_path, describe

MAPS = (("metadata", "labels"), ("metadata", "annotations"), ("spec",), ("data",), ("status",))
"""Fields every reader takes as a mapping (``data`` and the metadata maps: of strings). The
API server leaves an empty one out; null reads as absent, anything else is malformed."""
STRING_MAPS = (("metadata", "labels"), ("metadata", "annotations"), ("data",))


@dataclass
class Snapshot:
    """The live objects discovery read, by kind (server-set fields still in them)."""

    objects: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    seconds: float = 0.0
    requests: int = 0
    unserved: list[str] = field(default_factory=list)
    """``apiVersion Kind`` of each collection the API does not serve (read as empty)."""
    unserved_unknown: str = ""
    """Why which collections are served could not be asked (discovery forbidden)."""

    def of(self, kind: str) -> list[dict[str, Any]]:
        return self.objects.get(kind, [])

    @property
    def nodes(self) -> list[dict[str, Any]]:
        return self.of("Node")

    def all(self) -> list[dict[str, Any]]:
        return [obj for src in SOURCES for obj in self.of(src.kind)]


def read(kube: Kube, timeout: float) -> Snapshot:
    """List every source collection (a collection the API does not serve reads as empty:
    its operator is not installed), all within ``timeout`` seconds (``--timeout``)."""
    start = time.monotonic()
    kube.set_timeout(timeout, "--timeout")
    snap = Snapshot()
    for src in SOURCES:
        path = collection_path(src.api_version, src.kind)
        items = [checked(item, path) for item in kube.list(path)]
        for item in items:
            item.setdefault("apiVersion", src.api_version)
            item.setdefault("kind", src.kind)
        snap.objects[src.kind] = sorted(items, key=_key)
    _unserved(kube, snap)
    snap.seconds = time.monotonic() - start
    return snap


def _unserved(kube: Kube, snap: Snapshot) -> None:
    """Which of the empty collections the API does not serve at all (one discovery GET per
    group version): their operator is not installed, or serves another version."""
    empty = [src for src in SOURCES if not snap.objects.get(src.kind)]
    served: dict[str, set[str] | None] = {}
    for src in empty:
        if src.api_version not in served:
            try:
                served[src.api_version] = kube.served(src.api_version)
            except Forbidden as exc:  # discovery forbidden: the lists themselves were read
                snap.unserved_unknown = str(exc)
                return
        if src.plural not in (served[src.api_version] or set()):
            snap.unserved.append(f"{src.api_version} {src.kind}")


def checked(obj: dict[str, Any], path: str = "") -> dict[str, Any]:
    """``obj`` with each field of :data:`MAPS` that is null left out (as the API server
    leaves an empty one out); :class:`Malformed` naming the object and field when one is not
    a mapping (``data``, labels and annotations: of strings), so no reader meets it."""
    for keys in MAPS:
        parent = obj if len(keys) == 1 else obj.get(keys[0])
        if not isinstance(parent, dict) or keys[-1] not in parent:
            continue
        value = parent[keys[-1]]
        dotted = ".".join(keys)
        where = f"GET {path}: " if path else ""
        if value is None:
            del parent[keys[-1]]
        elif not isinstance(value, dict):
            got = type(value).__name__
            raise Malformed(f"{where}{describe(obj)}: {dotted} is a {got}, not an object")
        elif keys in STRING_MAPS and not all(isinstance(v, str) for v in value.values()):
            bad = next(k for k, v in value.items() if not isinstance(v, str))
            raise Malformed(f"{where}{describe(obj)}: {dotted}.{bad} is not a string")
    return obj


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
