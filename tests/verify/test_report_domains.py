"""``gpufabric report`` on NVL72 racks: results that name their NVLink domain (a sweep
tray's ``clique``, a check's ``details.clique``) give each domain a verdict of its own, and a
rack the sweep named faulted as a whole (its ``domainFaults``) fails its domain; inputs that
name no clique give no domains section (the page is as before)."""

from __future__ import annotations

import json
from pathlib import Path

from gpufabric.cli import main
from gpufabric.exitcodes import Verdict
from gpufabric.outputs import report
from gpufabric.verify.results import document, failed, passed
from gpufabric.verify.sweep import run as sweep
from gpufabric.verify.sweep.domains import DomainFault
from gpufabric.verify.sweep.judge import NodeVerdict
from gpufabric.verify.sweep.session import sweep_document

A, B = "4357d722.1", "4357d722.2"


def _write(path: Path, doc: object) -> Path:
    path.write_text(json.dumps(doc))
    return path


def _sweep(tmp_path: Path) -> Path:
    """The document ``verify nccl --sweep --json`` writes for 2 racks of 2 trays, rack B
    named faulted as a whole."""
    trays = {"r1-t0": A, "r1-t1": A, "r2-t0": B, "r2-t1": B}
    nodes = {
        n: sweep.NodeResult(node=n, verdict=NodeVerdict.GOOD, busbw=95.0, pairs=[(2, "x", "PASS")])
        for n in trays
    }
    fault = DomainFault(
        clique=B, key=("leaf", B), trays=("r2-t0", "r2-t1"), failed=3, across=("r2-t0", "r2-t1")
    )
    doc = sweep_document(
        sweep.SweepReport(nodes=nodes, rounds=4, domains=[fault], cliques=trays),
        {"cordoned": [], "notReady": []},
    )
    return _write(tmp_path / "sweep.json", doc)


def _nodes(tmp_path: Path) -> Path:
    checks = [
        passed("nvlink.fabric", "r1-t0", "State Completed", clique=A),
        failed("nvlink.fabric", "r1-t1", "State In Progress", "see the fabric manager", clique=A),
    ]
    return _write(tmp_path / "nodes.json", document("nodes (gb200)", checks))


def test_each_nvlink_domain_gets_its_own_verdict(tmp_path: Path) -> None:
    files = {"--sweep": [_sweep(tmp_path)], "--nodes": [_nodes(tmp_path)]}
    inputs = report.load(files)
    domains = {d.name: d for d in report.domains(inputs)}
    assert domains[A].verdict is Verdict.FAIL  # its tray's failing check, not B's rack
    assert domains[A].summary == "2 checks, 2 sweep trays"
    assert domains[B].verdict is Verdict.FAIL  # the rack fault, though its trays are GOOD
    assert domains[B].summary == "2 sweep trays, 1 rack faults"
    assert report.pools(inputs) == []
    sweep_section = next(s for s in inputs.sections if s.source.option == "--sweep")
    assert sweep_section.verdict is Verdict.FAIL
    assert any(
        n.startswith(f"NVLink domain nvidia.com/gpu.clique={B}") for n in sweep_section.notes
    )
    out = tmp_path / "report.html"
    argv = ["report", "--out", str(out)]
    for option, paths in files.items():
        argv += [option, str(paths[0])]
    assert main(argv) == 4
    html = out.read_text()
    assert '<table id="domains">' in html
    row = html.split(f"<tr><td><code>{B}</code></td>")[1].split("</tr>")[0]
    assert "FAIL" in row
    assert "1 rack faults" in row


def test_a_sweep_without_cliques_gives_no_domains_section(tmp_path: Path) -> None:
    node = {"verdict": "GOOD", "busbw": 300.0, "pairs": [[1, "b", "PASS"]]}
    doc = {"rounds": 1, "nodes": {"a": node, "b": node}}
    inputs = report.load({"--sweep": [_write(tmp_path / "s.json", doc)]})
    assert report.domains(inputs) == []
    assert 'id="domains"' not in report.render_html(inputs)
