"""Reading the cluster: every collection of :data:`~.sources.SOURCES`, listed page by page
through :class:`gpufabric.verify.kube.Kube` (get/list only, never a write), within one
deadline for the whole read."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from gpufabric.discover.sources import SOURCES
from gpufabric.verify.kube import Kube, collection_path


@dataclass
class Snapshot:
    """The live objects discovery read, by kind (server-set fields still in them)."""

    objects: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    seconds: float = 0.0
    requests: int = 0

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
        items = kube.list(collection_path(src.api_version, src.kind))
        for item in items:
            item.setdefault("apiVersion", src.api_version)
            item.setdefault("kind", src.kind)
        snap.objects[src.kind] = sorted(items, key=_key)
    snap.seconds = time.monotonic() - start
    return snap


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
