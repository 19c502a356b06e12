"""``gpufabric report``: the acceptance page built from what the verify commands write.

Inputs are produced by the real code paths (tests/verify/reportdocs.py); hostile values
go through the same writers (results.document, nccl_report.report, sweep_document). The
page is checked as text, and where a Chromium is installed as a browser lays it out: the
DOM it builds and the pixels of the verdict banner.
"""

from __future__ import annotations

import copy
import json
import random
import shlex
import shutil
import struct
import subprocess
import zlib
from pathlib import Path
from typing import Any

import pytest
import reportdocs
from nccllogs import IB_8X400, Log, text

from gpufabric.cli import main
from gpufabric.exitcodes import Verdict
from gpufabric.model.problems import StackError
from gpufabric.outputs import report
from gpufabric.verify.nccl import report as nccl_report
from gpufabric.verify.results import document, failed, passed
from gpufabric.verify.sweep import run as sweep
from gpufabric.verify.sweep import session

HOSTILE = "<script>alert(1)</script>\"'><img src=x onerror=alert(2)>"


@pytest.fixture(scope="module")
def sick(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return reportdocs.write_all(tmp_path_factory.mktemp("sick"))


@pytest.fixture(scope="module")
def well(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return reportdocs.write_all(tmp_path_factory.mktemp("well"), sick=None)


def args_for(files: dict[str, Path], *skip: str) -> list[str]:
    out = []
    for name, path in files.items():
        if name not in skip:
            out += [f"--{name}", str(path)]
    return out


def page(tmp_path: Path, argv: list[str], expect_code: int) -> str:
    out = tmp_path / "report.html"
    assert main(["report", *argv, "--out", str(out)]) == expect_code
    return out.read_text(encoding="utf-8")


def test_a_sick_cluster_fails_with_every_failure_and_its_fix(
    tmp_path: Path, sick: dict[str, Path]
) -> None:
    html = page(tmp_path, args_for(sick), 4)
    assert "<title>GPU cluster acceptance: FAIL</title>" in html
    assert 'class="banner fail"' in html
    inputs = report.load({f"--{k}": [v] for k, v in sick.items()})
    found = {(f.section, f.check) for f in report.failures(inputs)}
    assert found == {
        ("Node checks", "rail.rail1.port"),
        ("Node checks", "limits.memlock"),
        ("Cluster checks", "workloads.network/network-operator"),
        ("NCCL acceptance", "nccl allreduce-node2-node3.log"),
        ("NCCL sweep", "nccl.sweep"),
    }
    assert "rail1 fails alone: check the cable, transceiver and switch port" in html
    assert "LimitMEMLOCK=infinity" in html
    assert [s.verdict for s in inputs.sections] == [Verdict.FAIL] * 4


def test_a_healthy_cluster_with_every_input_passes(tmp_path: Path, well: dict[str, Path]) -> None:
    html = page(tmp_path, args_for(well), 0)
    assert "GPU cluster acceptance: PASS" in html
    assert "Every input was given and passed." in html
    assert "Nothing failed." in html


@pytest.mark.parametrize("left_out", ["nodes", "cluster", "nccl", "sweep"])
def test_a_missing_input_is_not_a_pass(
    tmp_path: Path, well: dict[str, Path], left_out: str
) -> None:
    html = page(tmp_path, args_for(well, left_out), 5)
    assert "GPU cluster acceptance: INCONCLUSIVE" in html
    assert f"not provided (--{left_out})" in html


def test_no_input_at_all_is_inconclusive(tmp_path: Path) -> None:
    html = page(tmp_path, [], 5)
    assert html.count("not provided (--") == 4


def test_the_same_inputs_give_the_same_bytes(tmp_path: Path, sick: dict[str, Path]) -> None:
    first = page(tmp_path / "a", args_for(sick), 4)
    second = page(tmp_path / "b", args_for(sick), 4)
    assert first == second


def hostile_docs(tmp_path: Path) -> dict[str, Path]:
    """Attacker-controlled names and messages, written by the commands' own writers."""
    checks = [
        failed("rail.x.port", HOSTILE, HOSTILE, HOSTILE),
        passed("gpu.count", f"node-{HOSTILE}", "8 GPUs"),
    ]
    log = text(Log(hosts=(HOSTILE, "b")))
    nccl = nccl_report.report({f"{HOSTILE}.log": log}, IB_8X400).to_dict()

    def run_pair(pair: tuple[str, str], round_: int, index: int) -> nccl_report.NcclReport:
        busbw = 100.0 if HOSTILE in pair else 370.0
        return nccl_report.report({"x": text(Log(hosts=pair, busbw=busbw))}, IB_8X400)

    swept = sweep.sweep([HOSTILE, "n1", "n2", "n3"], run_pair, concurrency=2)
    docs: dict[str, Any] = {
        "nodes": document(f"nodes ({HOSTILE})", checks),
        "cluster": document("cluster", checks),
        "nccl": nccl,
        "sweep": session.sweep_document(swept, {HOSTILE: [HOSTILE]}),
    }
    paths = {}
    for name, doc in docs.items():
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(json.dumps(doc), encoding="utf-8")
    return paths


def test_every_value_is_escaped(tmp_path: Path) -> None:
    docs = hostile_docs(tmp_path)
    html = page(tmp_path, [*args_for(docs), "--title", HOSTILE], 4)
    lowered = html.lower()
    assert "<script" not in lowered
    assert "<img" not in lowered
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&#34;&#39;&gt;&lt;img" in html
    assert "default-src 'none'" in html  # nothing loads or runs even if escaping slipped


def test_garbled_entries_and_impossible_numbers_are_said_not_passed(tmp_path: Path) -> None:
    checks = document("nodes", [passed("gpu.count", "n0", "8 GPUs")])
    checks["checks"].append({"check": "x", "status": "MAYBE"})
    checks["checks"].append("not an object")
    nccl = nccl_report.report({"a.log": text(Log())}, IB_8X400).to_dict()
    nccl["runs"][0]["rows"][0]["busbw_oop"] = float("nan")
    nccl["runs"][0]["busbw_max_gbps"] = float("inf")
    nccl["verdict"] = "SURE"
    files = {"nodes": tmp_path / "n.json", "nccl": tmp_path / "c.json"}
    files["nodes"].write_text(json.dumps(checks))
    files["nccl"].write_text(json.dumps(nccl))  # NaN / Infinity as Python writes them
    inputs = report.load({"--nodes": [files["nodes"]], "--nccl": [files["nccl"]]})
    nodes_section, nccl_section = inputs.sections[0], inputs.sections[2]
    assert nodes_section.verdict is Verdict.INCONCLUSIVE
    assert "2 check entries could not be read" in nodes_section.notes
    assert nccl_section.verdict is Verdict.INCONCLUSIVE
    assert inputs.runs[0].busbw_max is None
    html = report.render_html(inputs)
    assert "NaN" not in html
    assert "inf GB/s" not in html


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (None, "no such file"),
        ("{not json", "not JSON"),
        ('{"runs": []}', "no 'checks' list at the top level"),
        ("[1, 2]", "no 'checks' list at the top level"),
        ("\udcff", "not JSON"),
        ("[" * 100_000 + "]" * 100_000, "JSON nested deeper than Python reads"),
    ],
)
def test_a_file_that_is_not_the_document_is_a_usage_error_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, why: str
) -> None:
    path = tmp_path / "nodes.json"
    if content is not None:
        path.write_bytes(content.encode("utf-8", "surrogateescape"))
    out = tmp_path / "report.html"
    assert main(["report", "--nodes", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--nodes: {path}: {why}" in err
    assert "gpufabric verify nodes --json" in err
    assert "Traceback" not in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("option", "suite", "why"),
    [
        (
            "--nodes",
            "cluster (lab-roce)",
            "its suite is 'cluster (lab-roce)', the document --cluster takes",
        ),
        (
            "--cluster",
            "nodes (lab-roce)",
            "its suite is 'nodes (lab-roce)', the document --nodes takes",
        ),
        ("--storage", "pods (lab-roce)", "its suite is 'pods (lab-roce)', not 'storage (STACK)'"),
        ("--nodes", None, "it has no 'suite', not 'nodes (STACK)'"),
    ],
)
def test_another_commands_document_under_an_option_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, suite: str | None, why: str
) -> None:
    """`report --nodes cluster.json` used to render a page whose node section was the
    cluster's checks (exit 4); every checks input now takes only its command's document."""
    doc = document(suite or "x", [passed("gpu.count", "n0", "8 GPUs")])
    if suite is None:
        del doc["suite"]
    path = tmp_path / "in.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    out = tmp_path / "report.html"
    assert main(["report", option, str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{option}: {path}: {why}; expected the JSON that `gpufabric verify" in err
    assert "Traceback" not in err
    assert not out.exists()


def test_inputs_from_two_stacks_are_refused_naming_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes, cluster = tmp_path / "nodes.json", tmp_path / "cluster.json"
    checks = [passed("gpu.count", "n0", "8 GPUs")]
    nodes.write_text(json.dumps(document("nodes (lab-roce)", checks)), encoding="utf-8")
    cluster.write_text(json.dumps(document("cluster (prod-ib, layers gpu)", checks)))
    out = tmp_path / "report.html"
    argv = ["report", "--nodes", str(nodes), "--cluster", str(cluster), "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert (
        f"--cluster: {cluster}: from stack 'prod-ib', but --nodes {nodes} is from stack 'lab-roce'"
        in err
    )
    assert not out.exists()
    cluster.write_text(json.dumps(document("cluster (lab-roce, layers gpu)", checks)))
    assert main(argv) == 5  # one stack: accepted (inconclusive: --nccl, --sweep not given)


def test_the_chart_draws_the_threshold_where_the_value_is() -> None:
    doc = nccl_report.report({"a.log": text(Log())}, IB_8X400).to_dict()
    _section, runs = report.nccl_section(
        report.Source(option="--nccl", title="NCCL", command="x"), doc
    )
    chart = report.chart(runs[0])
    assert chart is not None
    assert len(chart.dots) == len(doc["runs"][0]["rows"])
    best = max(runs[0].points, key=lambda p: p.busbw)
    best_y = min(y for _x, y in chart.dots)
    assert chart.threshold_y is not None
    # 360 GB/s threshold sits below (a larger y than) the best 370 GB/s point, above zero
    assert best.busbw > 360.0
    assert best_y < chart.threshold_y < chart.bottom
    assert [label for _x, label in chart.x_ticks] == ["1G", "2G", "4G", "8G"]


# ---------------------------------------------------------------------- in a browser


def browser() -> str | None:
    return next(
        (b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None
    )


needs_browser = pytest.mark.skipif(browser() is None, reason="no Chromium installed")


def headless(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [str(browser()), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=120, check=True)


def png_pixel(path: Path, x: int, y: int) -> tuple[int, int, int]:
    """One pixel of an 8-bit RGB/RGBA non-interlaced PNG (what Chromium writes)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, _height, depth, color, _c, _f, interlace = struct.unpack(">IIBBBBB", header)
    assert (depth, interlace) == (8, 0)
    bpp = {2: 3, 6: 4}[color]
    raw, stride = zlib.decompress(idat), width * bpp
    prev = bytearray(stride)
    for row in range(y + 1):
        start = row * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            p = a + b - c
            pred = (
                a
                if abs(p - a) <= abs(p - b) and abs(p - a) <= abs(p - c)
                else b
                if abs(p - b) <= abs(p - c)
                else c
            )
            line[i] = (line[i] + (0, a, b, (a + b) // 2, pred)[kind]) & 0xFF
        prev = line
    return prev[x * bpp], prev[x * bpp + 1], prev[x * bpp + 2]


BANNER = {
    "FAIL": (0xCF, 0x22, 0x2E),
    "PASS": (0x1A, 0x7F, 0x37),
    "INCONCLUSIVE": (0x9A, 0x67, 0x00),
}


@needs_browser
@pytest.mark.parametrize(
    ("which", "skip", "verdict"),
    [
        ("sick", (), "FAIL"),
        ("well", (), "PASS"),
        ("well", ("sweep",), "INCONCLUSIVE"),
    ],
)
def test_the_browser_shows_the_verdict_banner_in_its_colour(
    tmp_path: Path, request: pytest.FixtureRequest, which: str, skip: tuple[str, ...], verdict: str
) -> None:
    files = request.getfixturevalue(which)
    out = tmp_path / "report.html"
    main(["report", *args_for(files, *skip), "--out", str(out)])
    shot = tmp_path / "shot.png"
    headless("--window-size=800,600", f"--screenshot={shot}", out.as_uri())
    for x, y in ((5, 5), (700, 40)):
        assert png_pixel(shot, x, y) == BANNER[verdict]
    assert png_pixel(shot, 5, 400) == (255, 255, 255)


@needs_browser
def test_the_browser_lays_out_hostile_text_as_text(tmp_path: Path) -> None:
    docs = hostile_docs(tmp_path)
    out = tmp_path / "report.html"
    main(["report", *args_for(docs), "--out", str(out)])
    dom = headless("--dump-dom", out.as_uri()).stdout
    assert "<script" not in dom.lower()
    assert "<img" not in dom.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom
    assert "GPU cluster acceptance: FAIL" in dom
    assert dom.count("<svg") == 1  # the one run's chart, drawn inline
    assert 'class="threshold"' in dom


EXAMPLES = Path(__file__).resolve().parents[2] / "docs/examples/report"


def test_the_committed_examples_are_what_the_code_writes(sick: dict[str, Path]) -> None:
    """docs/examples/report/ is the output of reportdocs.write_all: regenerate it with
    ``python tests/verify/reportdocs.py docs/examples/report`` when a writer changes."""
    for name, path in sick.items():
        assert (EXAMPLES / f"{name}.json").read_text() == path.read_text(), name


def test_the_readme_example_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The example command docs/user/verify.md prints, as printed, runs on the committed
    example inputs (only its --out is pointed elsewhere)."""
    repo = EXAMPLES.parents[2]
    page = (repo / "docs/user/verify.md").read_text().replace("\\\n", " ")
    line = next(ln for ln in page.splitlines() if "gpufabric report --nodes docs/examples" in ln)
    argv = shlex.split(line.split("gpufabric ", 1)[1])
    assert argv[:3] == ["report", "--nodes", "docs/examples/report/nodes.json"]
    assert argv[-2:] == ["--out", "report.html"]
    monkeypatch.chdir(repo)
    out = tmp_path / "report.html"
    assert main([*argv[:-1], str(out)]) == 4
    assert "lab-roce acceptance: FAIL" in out.read_text()


ODD: tuple[Any, ...] = (
    None,
    True,
    0,
    -1,
    -1e300,
    1e308,
    10**40,
    0.5,
    "",
    "NaN",
    HOSTILE,
    [],
    {},
    [1, "x"],
    {"verdict": "PASS"},
)


def _mutate(doc: Any, rng: random.Random) -> Any:
    """One value somewhere in the document replaced by an odd one."""
    if isinstance(doc, dict) and doc:
        key = rng.choice(sorted(doc))
        doc[key] = rng.choice(ODD) if rng.random() < 0.3 else _mutate(doc[key], rng)
    elif isinstance(doc, list) and doc:
        i = rng.randrange(len(doc))
        doc[i] = rng.choice(ODD) if rng.random() < 0.3 else _mutate(doc[i], rng)
    else:
        return rng.choice(ODD)
    return doc


def test_mutated_documents_never_crash_and_never_pass(
    tmp_path: Path, well: dict[str, Path]
) -> None:
    """Any value of any input replaced by an odd one: the page renders (or the file is
    refused as a usage error), escapes what it shows, and a refused or garbled input is
    never counted as a pass it did not state."""
    rng = random.Random(5)
    pristine = {name: json.loads(path.read_text()) for name, path in well.items()}
    for i in range(120):
        name = rng.choice(sorted(pristine))
        doc = _mutate(copy.deepcopy(pristine[name]), rng)
        path = tmp_path / f"{i}.json"
        path.write_text(json.dumps(doc))
        files = {f"--{n}": [p] for n, p in well.items()}
        files[f"--{name}"] = [path]
        refused = None
        try:
            inputs = report.load(files)
        except StackError as err:
            refused = err.report()
        if refused is not None:
            assert f"--{name}: {path}" in refused
            continue
        html = report.render_html(inputs)
        assert "<script" not in html.lower()
        if report.overall(inputs) is Verdict.PASS and name != "sweep":
            assert doc["verdict"] == "PASS"


@pytest.mark.parametrize("value", [-5.0, 1e308, 0.0])
def test_impossible_bandwidths_are_left_out_of_the_chart(value: float) -> None:
    doc = nccl_report.report({"a.log": text(Log())}, IB_8X400).to_dict()
    for row in doc["runs"][0]["rows"]:
        row["busbw_oop"] = row["busbw_ip"] = value
    doc["runs"][0]["threshold_gbps"] = value
    _section, runs = report.nccl_section(
        report.Source(option="--nccl", title="NCCL", command="x"), doc
    )
    chart = report.chart(runs[0])
    if value == 0.0:
        assert chart is not None
        assert chart.threshold_y is None
    else:
        assert chart is None
    html = report.render_html(report.Inputs(runs=runs))
    assert ("No size rows to draw" in html) is (value != 0.0)


def _storage_doc(tmp_path: Path, fell_back: bool) -> Path:
    """A `verify storage --json` document, as the shared verify results write it."""
    checks = [passed("storage.team-a.checkpoints.transport", "gpu-node-1", "over rdma")]
    if fell_back:
        checks.append(
            failed(
                "storage.team-a.checkpoints.transport",
                "gpu-node-2",
                "/checkpoints runs over tcp, not rdma (fell back)",
                "load rpcrdma on the node; nfsd must listen on 20049",
            )
        )
    path = tmp_path / f"storage-{fell_back}.json"
    path.write_text(json.dumps(document("storage (lab-roce)", checks)), encoding="utf-8")
    return path


def test_storage_checks_join_the_report_when_given(tmp_path: Path, well: dict[str, Path]) -> None:
    """Stacks with shared storage hand `verify storage --json` over too: a mount that fell
    back to TCP fails the page with its fix; a stack without storage needs no such input."""
    ok = page(tmp_path, [*args_for(well), "--storage", str(_storage_doc(tmp_path, False))], 0)
    assert "Storage checks" in ok
    bad = page(tmp_path, [*args_for(well), "--storage", str(_storage_doc(tmp_path, True))], 4)
    assert "runs over tcp, not rdma (fell back)" in bad
    assert "load rpcrdma on the node" in bad
    assert "Storage checks" not in page(tmp_path, args_for(well), 0)


def test_a_flaky_node_and_a_path_fault_fail_the_sweep_section() -> None:
    """A sweep that drains nothing but names a FLAKY node and a faulted uplink is not a pass:
    each is listed with its own words and fix (before: FLAKY read as UNKNOWN, the uplink
    was not shown)."""
    doc = {
        "rounds": 4,
        "nodes": {
            "a": {"verdict": "GOOD", "pairs": [[1, "b", "PASS"]]},
            "b": {"verdict": "FLAKY", "pairs": [[1, "a", "PASS"], [2, "c", "FAIL"]]},
        },
        "pathFaults": [{"words": "uplink of leaf=leaf-2: all 6 jobs leaving it failed"}],
    }
    source = report.Source(
        option="--sweep", title="NCCL sweep", command="gpufabric verify nccl --sweep --json"
    )
    section, nodes = report.sweep_section(source, doc)
    assert section.verdict is Verdict.FAIL
    assert "uplink of leaf=leaf-2: all 6 jobs leaving it failed" in section.notes
    inputs = report.Inputs(sweep=nodes)
    (failure,) = report.failures(inputs)
    assert failure.status == "FAIL"
    assert failure.hint == report.FLAKY_HINT
    html = report.render_html(report.Inputs(sections=[section], sweep=nodes))
    assert '<span class="badge fail">FLAKY</span>' in html


def test_control_characters_never_reach_the_page(tmp_path: Path, well: dict[str, Path]) -> None:
    """`--title` passed a raw ESC into <title>; a message from a document could too."""
    doc = json.loads(well["nodes"].read_text())
    doc["checks"][0]["message"] = "bad\x1b[2Jnode\x07"
    nodes = tmp_path / "nodes.json"
    nodes.write_text(json.dumps(doc), encoding="utf-8")
    files = {**well, "nodes": nodes}
    html = page(tmp_path, [*args_for(files), "--title", "lab\x1b[31m\nacceptance\x9b"], 0)
    assert not report.CONTROL.search(html)
    assert "<title>lab[31m acceptance" in html
    assert "bad[2Jnode" in html
    assert report.page_title("\x1b\x00 ") == "GPU cluster acceptance"


@pytest.mark.parametrize(
    ("option", "change", "field"),
    [
        ("nodes", lambda d: d["checks"][0].update(status=["PASS"]), "checks[0].status"),
        ("nodes", lambda d: d.update(verdict={"PASS": 1}), "verdict"),
        ("nccl", lambda d: d["runs"][0].update(busbw_max_gbps=10**400), "runs[0].busbw_max_gbps"),
        ("nccl", lambda d: d.update(threshold_gbps=-(10**309)), "threshold_gbps"),
        (
            "nccl",
            lambda d: d["runs"][0]["rows"][0].update(busbw_ip=10**500),
            "runs[0].rows[0].busbw_ip",
        ),
        ("sweep", lambda d: d.update(rounds=10**400), "rounds"),
        (
            "sweep",
            lambda d: next(iter(d["nodes"].values())).update(verdict=["BAD"]),
            "].verdict",
        ),
    ],
)
def test_a_huge_integer_or_a_list_for_a_status_exits_2_naming_the_field(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    well: dict[str, Path],
    option: str,
    change: Any,
    field: str,
) -> None:
    """Issue 41: an integer beyond any float crashed the report with a traceback
    (OverflowError), and a list where a status belongs did too (unhashable)."""
    doc = json.loads(well[option].read_text())
    change(doc)
    path = tmp_path / f"{option}.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    out = tmp_path / "report.html"
    assert main(["report", f"--{option}", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--{option}: {path}: " in err
    assert field in err
    assert "Traceback" not in err
    assert not out.exists()


def test_control_characters_leave_node_rail_and_reason_names(
    tmp_path: Path, well: dict[str, Path]
) -> None:
    """Issue 41: node and rail names (JSON keys) and the sweep's skip reasons kept their
    control characters, which the README says the report removes."""
    doc = json.loads(well["sweep"].read_text())
    name, node = next(iter(doc["nodes"].items()))
    node["rails"] = {"rail\x1b[2J0": {"verdict": "GOOD", "busbw": 40.0, "partner": "x"}}
    doc["nodes"] = {name + "\x1b]0;pwn\x07": node, **doc["nodes"]}
    doc["skipped"] = {"cordoned\x1b[31m": ["gpu\x07-9"]}
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    files = {**well, "sweep": path}
    html = page(tmp_path, args_for(files), report_code(tmp_path, files))
    assert not report.CONTROL.search(html)
    inputs = report.load({f"--{k}": [v] for k, v in files.items()})
    texts = [n.name for n in inputs.sweep] + [r[0] for n in inputs.sweep for r in n.rails]
    texts += [t for pair in inputs.skipped for t in pair]
    assert not any(report.CONTROL.search(t) for t in texts), texts


def report_code(tmp_path: Path, files: dict[str, Path]) -> int:
    out = tmp_path / "probe.html"
    return main(["report", *args_for(files), "--out", str(out)])
