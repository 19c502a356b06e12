"""Xid rules derived from NVIDIA's Xid catalog, read together with the catalog table.

``manifests/xid-catalog.txt`` carries the catalog's facts (and the upstream commit they were
taken from); every rule that reads Xids (the alerts, node-problem-detector's rules, the
dashboards, the README's table) is checked against every row, so a new catalog version shows
as a diff here.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
from pathlib import Path

import pytest

from gpufabric.plan import alerts, ids, xids
from gpufabric.plan.items import KustomizeOverlay
from tests.builders import REPO, body, example_config, plan_of
from tests.conftest import SHARED
from tests.npdmatch import reasons_after_each_line

CATALOG = xids.catalog()
ROWS = {r.xid: r for r in CATALOG.rows}
FATAL, NONFATAL = xids.classes()


def _plan():  # type: ignore[no-untyped-def]
    return plan_of(example_config("roce-sriov-volcano"), "roce-sriov-volcano")


def test_the_catalog_has_every_xid_it_numbers_and_cites_its_origin() -> None:
    assert [r.xid for r in CATALOG.rows] == list(range(1, 163))
    assert CATALOG.source.startswith("NVIDIA/NVSentinel ")
    assert CATALOG.source.endswith("/xiderrorsmapping.csv")
    assert re.fullmatch(r"[0-9a-f]{40}", CATALOG.commit)
    assert "docs.nvidia.com/deploy/xid-errors" in CATALOG.origin


def test_every_row_is_in_exactly_one_class() -> None:
    assert set(FATAL.codes) | set(NONFATAL.codes) == set(ROWS)
    assert not set(FATAL.codes) & set(NONFATAL.codes)
    assert FATAL.quarantine
    assert not NONFATAL.quarantine


@pytest.mark.parametrize("row", CATALOG.rows, ids=lambda r: f"xid{r.xid}")
def test_fatal_and_reset_rows_quarantine_and_non_fatal_rows_never(row: xids.CatalogRow) -> None:
    quarantine = row.catalog_class == "FATAL" or row.resolution in {
        "RESET_GPU",
        "RESTART_BM",
        "RESTART_VM",
    }
    assert (row.xid in FATAL.codes) is quarantine
    assert (row.xid in NONFATAL.codes) is not quarantine


def test_the_rows_issue_40_names() -> None:
    # Fatal in the catalog and missed before: 140 (ECC escape) and 144-150 (NVLink 5).
    for x in (140, *range(144, 151)):
        assert ROWS[x].catalog_class == "FATAL"
        assert x in FATAL.codes
    # 92 (excessive single-bit ECC interrupts) is IGNORE / NONFATAL: never quarantined.
    assert (ROWS[92].catalog_class, ROWS[92].resolution) == ("NONFATAL", "IGNORE")
    assert 92 in NONFATAL.codes
    # The catalog marks these as needing a GPU reset: they quarantine.
    for x in (46, 136, 143, 155, 156, 158):
        assert ROWS[x].resolution == "RESET_GPU"
        assert x in FATAL.codes


def _alert_codes(expr: str) -> set[int]:
    m = re.search(r'xid=~"([0-9|]+)"', expr)
    assert m, expr
    return {int(c) for c in m[1].split("|")}


def test_the_alerts_carry_every_row_of_their_class() -> None:
    by = {c.alert: c for c in alerts.classes(_plan().facts)}
    assert _alert_codes(by["GpuFatalXid"].expr) == set(FATAL.codes)
    assert _alert_codes(by["GpuNonFatalXid"].expr) == set(NONFATAL.codes)
    assert by["GpuFatalXid"].quarantine
    assert by["GpuFatalXid"].severity == "critical"
    assert not by["GpuNonFatalXid"].quarantine
    assert "GpuApplicationXid" not in by


def test_node_problem_detector_sets_the_condition_for_each_fatal_row_only() -> None:
    overlay = _plan().item(ids.NODE_PROBLEM_DETECTOR).payload
    assert isinstance(overlay, KustomizeOverlay)
    config = json.loads(overlay.parameters["monitor"])
    lines = [
        f"NVRM: Xid (PCI:0000:3b:00): {r.xid}, pid='<unknown>', name=<unknown>, x"
        for r in CATALOG.rows
    ]
    got = reasons_after_each_line(config, lines)
    for row, reasons in zip(CATALOG.rows, got, strict=True):
        expected = ["FatalXid"] if row.quarantine else ["NonFatalXid"]
        assert reasons == expected, (row, reasons)


def test_the_dashboard_splits_xids_by_the_catalog() -> None:
    text = next(iter(body(_plan(), ids.dashboard("fleet"))["data"].values()))
    assert "|".join(map(str, FATAL.codes)) in text
    assert "|".join(map(str, NONFATAL.codes)) in text


def test_the_readme_shows_the_catalog_driven_table() -> None:
    readme = (REPO / "README.md").read_text()
    m = re.search(r"<!-- xid-table:begin -->\n(.*?)<!-- xid-table:end -->", readme, re.S)
    assert m, "README.md: no <!-- xid-table:begin --> ... <!-- xid-table:end --> section"
    assert m[1] == xids.readme_table(), (
        "README.md's Xid table is out of date: paste "
        "`python -c 'from gpufabric.plan import xids; print(xids.readme_table(), end=\"\")'`"
    )
    listed: set[int] = set()
    for row in re.findall(r"^\| (?:quarantine|event only) \|.*\| ([0-9, -]+) \|$", m[1], re.M):
        for part in row.split(", "):
            lo, _, hi = part.partition("-")
            listed |= set(range(int(lo), int(hi or lo) + 1))
    assert listed == set(ROWS)


def _upstream_csv() -> Path | None:
    explicit = os.environ.get("GPUFABRIC_XID_CATALOG")
    if explicit:
        return Path(explicit)
    found = sorted(SHARED.glob("upstream/src/*/**/xiderrorsmapping.csv"))
    return found[0] if found else None


def test_the_catalog_file_holds_the_upstream_csv_row_for_row() -> None:
    path = _upstream_csv()
    if path is None or not path.is_file():
        pytest.skip("NVSentinel's xiderrorsmapping.csv is not here (GPUFABRIC_XID_CATALOG)")
    upstream: dict[int, tuple[str, str, str]] = {}
    for rec in csv.reader(io.StringIO(path.read_text())):
        if not rec:
            continue
        xid, name, res, cls = (f.strip() for f in rec)
        if " " in res:  # a sentence in place of a resolution token (Xid 154)
            res = "FOLLOW_RELATED_XID"
        upstream[int(xid)] = (cls, res, name)
    ours = {r.xid: (r.catalog_class, r.resolution, r.mnemonic) for r in CATALOG.rows}
    diff = [
        f"Xid {x}: ours {ours.get(x)} upstream {upstream.get(x)}"
        for x in sorted(set(ours) | set(upstream))
        if ours.get(x) != upstream.get(x)
    ]
    assert not diff, "catalog changed upstream:\n" + "\n".join(diff)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("# source: s\n# commit: c\n# from: f\n1 FATAL RESET_GPU X\nx FATAL A B\n", ":5: 'x"),
        ("# source: s\n# commit: c\n# from: f\n2 FATAL A\n1 FATAL A\n", "Xid 1 after 2"),
        ("# source: s\n# from: f\n1 FATAL A\n", "no '# commit:' line"),
        ("# source: s\n# commit: c\n# from: f\n1 fatal A\n", "expected 'XID FATAL|NONFATAL"),
        ("# source: s\n# commit: c\n# from: f\n", "no rows"),
    ],
)
def test_a_malformed_catalog_is_refused_by_line(text: str, why: str) -> None:
    with pytest.raises(xids.CatalogError, match=re.escape(why)):
        xids.parse_catalog(text)
