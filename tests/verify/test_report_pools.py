"""``gpufabric report`` on a fleet: results that name their node pool (a check's
``details.pool``, an NCCL document's or a sweep node's ``pool``) give each pool a verdict of
its own, so one pool's failure is never hidden in, nor blamed on, another's."""

from __future__ import annotations

import json
from pathlib import Path

from gpufabric.cli import main
from gpufabric.exitcodes import Verdict
from gpufabric.outputs import report
from gpufabric.verify.results import document, failed, passed


def _write(path: Path, doc: object) -> Path:
    path.write_text(json.dumps(doc))
    return path


def _storage(tmp_path: Path) -> Path:
    checks = [
        passed("storage.checkpoints.write", "h100-a", "fast", pool="h100"),
        passed("storage.checkpoints.write", "h100-b", "fast", pool="h100"),
        failed("storage.checkpoints.write", "l40s-a", "slow", "look at its NIC", pool="l40s"),
        passed("storage.checkpoints.write", "l40s-b", "fast", pool="l40s"),
    ]
    return _write(tmp_path / "storage.json", document("storage (fleet-mixed)", checks))


def _nodes(tmp_path: Path) -> Path:
    checks = [
        passed("gpu.count", "h100-a", "8 GPUs", pool="h100"),
        passed("gpu.count", "l40s-a", "4 GPUs", pool="l40s"),
    ]
    return _write(tmp_path / "nodes.json", document("nodes (fleet-mixed)", checks))


def _sweep(tmp_path: Path) -> Path:
    node = {"verdict": "GOOD", "busbw": 300.0, "pairs": [[1, "h100-b", "PASS"]]}
    doc = {"pool": "h100", "rounds": 1, "nodes": {"h100-a": node, "h100-b": node}}
    return _write(tmp_path / "sweep.json", doc)


def test_each_pool_gets_its_own_verdict(tmp_path: Path) -> None:
    files = {
        "--nodes": [_nodes(tmp_path)],
        "--storage": [_storage(tmp_path)],
        "--sweep": [_sweep(tmp_path)],
    }
    inputs = report.load(files)
    pools = {p.name: p for p in report.pools(inputs)}
    assert pools["h100"].verdict is Verdict.PASS
    assert pools["h100"].summary == "3 checks, 2 sweep nodes"
    assert pools["l40s"].verdict is Verdict.FAIL  # its slow node fails it, not h100
    assert pools["l40s"].summary == "3 checks"
    out = tmp_path / "report.html"
    argv = ["report", "--out", str(out)]
    for option, paths in files.items():
        argv += [option, str(paths[0])]
    assert main(argv) == 4  # l40s failed: the page fails
    html = out.read_text()
    assert '<table id="pools">' in html
    assert "<tr><td><code>l40s</code></td><td>" in html
    row = html.split("<tr><td><code>l40s</code></td>")[1].split("</tr>")[0]
    assert "FAIL" in row
    assert "3 checks" in row


def test_results_that_name_no_pool_give_no_pools_section(tmp_path: Path) -> None:
    doc = document("nodes (lab-roce)", [passed("gpu.count", "gpu-node-0", "8 GPUs")])
    inputs = report.load({"--nodes": [_write(tmp_path / "n.json", doc)]})
    assert report.pools(inputs) == []
    assert 'id="pools"' not in report.render_html(inputs)
