"""What ``gpufabric health`` remembers about a node: one JSON annotation, written in the
same update as the taint and cordon it describes, so a run interrupted at any moment leaves
either the old state or the new one, never half of it."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from typing import Any

ANNOTATION = "health.gpufabric.io/quarantine"
QUARANTINED = "quarantined"
RETURNED = "returned"


@dataclass(frozen=True, kw_only=True)
class Record:
    """A node's quarantine as gpufabric health wrote it."""

    state: str
    """quarantined | returned"""
    reason: str
    """The fault that quarantined it, in words."""
    source: str
    """condition | alert"""
    since: str
    """When it was quarantined (UTC, RFC 3339)."""
    cordoned: bool
    """gpufabric cordoned it (it was schedulable before): returning it uncordons it; a node
    someone else cordoned stays cordoned."""
    check: str = ""
    """The re-certification check that failed last (empty: none failed yet)."""
    checked: str = ""
    """When it was last re-certified (UTC, RFC 3339)."""
    returned: str = ""
    """When it passed re-certification and returned, with the evidence."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    def with_(self, **changes: Any) -> Record:
        return replace(self, **changes)


def read(annotations: Any) -> Record | None:
    """The node's record; None when there is none or it is not one gpufabric wrote (a
    record someone edited by hand is not trusted: the node counts as not quarantined by
    gpufabric, and a person decides)."""
    if not isinstance(annotations, dict):
        return None
    raw = annotations.get(ANNOTATION)
    if not isinstance(raw, str):
        return None
    try:
        data = json.loads(raw)
        rec = Record(**data)
    except (ValueError, TypeError, RecursionError):
        return None
    texts = (rec.state, rec.reason, rec.source, rec.since, rec.check, rec.checked, rec.returned)
    if not all(isinstance(t, str) for t in texts) or not isinstance(rec.cordoned, bool):
        return None
    return rec if rec.state in (QUARANTINED, RETURNED) else None


__all__ = ["ANNOTATION", "QUARANTINED", "RETURNED", "Record", "read"]
