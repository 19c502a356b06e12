"""Xid classes derived from NVIDIA's Xid catalog, every row of it.

``manifests/xid-catalog.txt`` holds the catalog's facts (number, class, recommended resolution,
mnemonic) with the upstream file and commit they were taken from. The rules here decide, per
row, whether a node carrying that Xid leaves service:

- the catalog classes it ``FATAL``: quarantine;
- its resolution needs a GPU reset or a reboot (:data:`RESET_RESOLUTIONS`): quarantine, whatever
  the class column says;
- otherwise (``NONFATAL``: restart the application, ignore, follow the related Xid): never.

Everything that reads Xids (the fleet alerts, node-problem-detector's kernel-log rules, the
dashboards, ``gpufabric health`` through the node condition and the alerts' ``quarantine``
label) reads :func:`classes`, so a new catalog version changes them all at once, and the
README's table (:func:`readme_table`) shows the result.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import Literal

from msgspec import Struct

from gpufabric.plan.facts import XidClass
from gpufabric.support.templates import MANIFESTS_DIR

CATALOG_FILE = "xid-catalog.txt"
"""The catalog's facts, under ``manifests/``."""

RESET_RESOLUTIONS = frozenset({"RESET_GPU", "RESTART_BM", "RESTART_VM"})
"""Resolutions that take the GPU out of service (a GPU reset, a reboot of the machine or the
VM): the node is quarantined for them even where the catalog's class is NONFATAL."""

_ROW = re.compile(
    r"(?P<xid>[0-9]{1,5}) +(?P<cls>FATAL|NONFATAL) +(?P<res>[A-Z][A-Z0-9_]*)(?: +(?P<name>\S.*))?"
)
_META = re.compile(r"# (?P<key>source|commit|from): +(?P<value>\S.*)")


class CatalogRow(Struct, frozen=True):
    """One Xid of NVIDIA's catalog."""

    xid: int
    catalog_class: Literal["FATAL", "NONFATAL"]
    resolution: str
    mnemonic: str

    @property
    def quarantine(self) -> bool:
        """The node leaves service for it (fatal, or it needs a reset or reboot)."""
        return self.catalog_class == "FATAL" or self.resolution in RESET_RESOLUTIONS


class Catalog(Struct, frozen=True):
    """The catalog's rows, ascending by Xid, and where they were taken from."""

    rows: tuple[CatalogRow, ...]
    source: str
    commit: str
    origin: str


class CatalogError(ValueError):
    """The catalog file is malformed (a packaging or editing mistake, never user input)."""


def parse_catalog(text: str, path: str = CATALOG_FILE) -> Catalog:
    """Read the catalog file strictly: every row, numbers ascending and unique, provenance."""
    rows: list[CatalogRow] = []
    meta: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if line.startswith("#"):
            if m := _META.fullmatch(line.rstrip()):
                meta[m["key"]] = m["value"]
            continue
        m = _ROW.fullmatch(line.rstrip())
        if m is None:
            raise CatalogError(
                f"{path}:{n}: {line!r}: expected 'XID FATAL|NONFATAL RESOLUTION [MNEMONIC]'"
            )
        xid = int(m["xid"])
        if rows and xid <= rows[-1].xid:
            raise CatalogError(f"{path}:{n}: Xid {xid} after {rows[-1].xid}: rows must ascend")
        cls: Literal["FATAL", "NONFATAL"] = "FATAL" if m["cls"] == "FATAL" else "NONFATAL"
        rows.append(CatalogRow(xid, cls, m["res"], m["name"] or ""))
    missing = [k for k in ("source", "commit", "from") if k not in meta]
    if missing:
        raise CatalogError(f"{path}: no '# {missing[0]}:' line: the catalog must cite its origin")
    if not rows:
        raise CatalogError(f"{path}: no rows")
    return Catalog(tuple(rows), meta["source"], meta["commit"], meta["from"])


@functools.cache
def catalog() -> Catalog:
    """The packaged catalog, read once per process."""
    return parse_catalog((MANIFESTS_DIR / CATALOG_FILE).read_text(encoding="utf-8"))


FATAL_ACTION = (
    "fatal or reset-required in NVIDIA's Xid catalog: drain the node, reset the GPU or reboot "
    "as the catalog's resolution says, then re-certify before returning it"
)
NONFATAL_ACTION = (
    "non-fatal in NVIDIA's Xid catalog (restart the application, or informational): tell the "
    "job's owner when it recurs; never quarantine the node for it"
)


def classes_of(rows: Iterable[CatalogRow]) -> tuple[XidClass, XidClass]:
    """The fatal class (quarantine) and the non-fatal one (never), every row in one of them."""
    rows = list(rows)
    return (
        XidClass(
            "fatal",
            tuple(r.xid for r in rows if r.quarantine),
            quarantine=True,
            action=FATAL_ACTION,
        ),
        XidClass(
            "nonfatal",
            tuple(r.xid for r in rows if not r.quarantine),
            quarantine=False,
            action=NONFATAL_ACTION,
        ),
    )


def classes() -> tuple[XidClass, XidClass]:
    """The Xid classes of the packaged catalog."""
    return classes_of(catalog().rows)


def _ranges(codes: Iterable[int]) -> str:
    """``1-7, 9, 10, 12``: consecutive runs of three or more folded into a range."""
    out: list[str] = []
    run: list[int] = []
    for c in [*sorted(codes), None]:
        if c is not None and run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)))
        run = [] if c is None else [c]
    return ", ".join(out)


def readme_table(cat: Catalog | None = None) -> str:
    """The README's Xid table: every catalog row, grouped by what gpufabric does and NVIDIA's
    resolution."""
    cat = cat or catalog()
    groups: dict[tuple[bool, str, str], list[int]] = {}
    for r in cat.rows:
        groups.setdefault((r.quarantine, r.catalog_class, r.resolution), []).append(r.xid)
    lines = [
        "| gpufabric | Catalog class | NVIDIA's resolution | Xids |",
        "|---|---|---|---|",
    ]
    for (quarantine, cls, res), codes in sorted(
        groups.items(), key=lambda kv: (not kv[0][0], kv[0][1], kv[0][2])
    ):
        what = "quarantine" if quarantine else "event only"
        lines.append(f"| {what} | {cls} | `{res}` | {_ranges(codes)} |")
    lines.append("")
    lines.append(
        f"{len(cat.rows)} Xids ({cat.rows[0].xid}-{cat.rows[-1].xid}) from `{CATALOG_FILE}`: "
        f"{cat.source} at {cat.commit[:12]}."
    )
    return "\n".join(lines) + "\n"


__all__ = [
    "CATALOG_FILE",
    "FATAL_ACTION",
    "NONFATAL_ACTION",
    "RESET_RESOLUTIONS",
    "Catalog",
    "CatalogError",
    "CatalogRow",
    "catalog",
    "classes",
    "classes_of",
    "parse_catalog",
    "readme_table",
]
