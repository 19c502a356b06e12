"""``gpufabric report``: the JSON outputs of the verify commands as one acceptance page.

A cluster owner hands the page over: the verdicts first (overall and per input), the checks
that failed grouped with their fix, each NCCL run's bus bandwidth against message size with
the threshold drawn, the sweep as a per-node table and a pair map, then every check. The
page is self-contained (inline CSS and SVG, no script, a Content-Security-Policy that loads
nothing) and the same inputs give the same bytes.

Each input is the document one command writes, read defensively: an input not given, or an
entry that cannot be read, is said so on the page and makes the verdict INCONCLUSIVE, never
PASS. Every value that reaches the page is escaped (the template autoescapes): node names
and messages come from the cluster.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import jinja2

from gpufabric.exitcodes import Verdict, worst
from gpufabric.model.problems import Problem, StackError
from gpufabric.support.templates import MANIFESTS_DIR

MAX_INPUT_BYTES = 64 << 20
"""The verify commands' documents are kilobytes to a few megabytes; more is not one."""
STATUS_VERDICT: Mapping[str, Verdict] = {
    "PASS": Verdict.PASS,
    "SKIP": Verdict.PASS,
    "FAIL": Verdict.FAIL,
    "ERROR": Verdict.INCONCLUSIVE,
}
"""What a check's status counts as in its input's verdict (results.verdict's rule)."""
SWEEP_VERDICT: Mapping[str, Verdict] = {
    "GOOD": Verdict.PASS,
    "BAD": Verdict.FAIL,
    "FLAKY": Verdict.FAIL,
    "UNKNOWN": Verdict.INCONCLUSIVE,
}
SWEEP_HINT = "drain the node and look at its NICs, cables and GPUs"
FLAKY_HINT = "failed and passed: not drained on this record; re-run it with proven partners"


@dataclass(frozen=True, kw_only=True)
class Source:
    """One input: the option it came from, the file, its SHA-256 (None: not given)."""

    option: str
    title: str
    command: str
    path: str | None = None
    sha256: str | None = None


@dataclass(frozen=True, kw_only=True)
class CheckRow:
    check: str
    target: str
    status: str
    message: str
    hint: str = ""
    pool: str = ""
    """The node pool of a fleet the check is of (its ``details.pool``); "" none."""
    clique: str = ""
    """The NVLink domain (GFD's ``nvidia.com/gpu.clique``) the check is of (its
    ``details.clique``); "" none."""


@dataclass(frozen=True, kw_only=True)
class Section:
    """The verdict one input gives, and why."""

    source: Source
    verdict: Verdict
    summary: str
    notes: tuple[str, ...] = ()
    checks: tuple[CheckRow, ...] = ()


@dataclass(frozen=True)
class Point:
    size: int
    busbw: float


@dataclass(frozen=True)
class NcclRun:
    label: str
    verdict: Verdict
    test: str
    busbw_max: float | None
    threshold: float | None
    threshold_source: str
    network: str
    reasons: tuple[str, ...]
    points: tuple[Point, ...]
    pool: str = ""
    """The node pool the run tested (the document's ``pool``); "" none."""


@dataclass(frozen=True)
class SweepNode:
    name: str
    verdict: str
    busbw: float | None
    network: str
    pairs: tuple[tuple[int, str, str], ...]
    rails: tuple[tuple[str, str, float | None, str], ...]
    """(rail, verdict, busbw, partner) of each rail run alone."""
    diagnosis: str
    pool: str = ""
    """The node's pool (its entry's ``pool``, else the sweep document's); "" none."""
    clique: str = ""
    """The NVL72 tray's NVLink domain (its entry's ``clique``); "" none."""


@dataclass(frozen=True, kw_only=True)
class PoolVerdict:
    """One node pool of a fleet: the verdict of the results that name it."""

    name: str
    verdict: Verdict
    summary: str


@dataclass
class Inputs:
    """What the page is built from; a section is None when its input was not given."""

    title: str = "GPU cluster acceptance"
    sections: list[Section] = field(default_factory=list)
    runs: list[NcclRun] = field(default_factory=list)
    sweep: list[SweepNode] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """(node, why) the sweep left out."""
    faulted_domains: list[str] = field(default_factory=list)
    """NVLink domains (cliques) a sweep named as faulted as a whole (its ``domainFaults``)."""


# ------------------------------------------------------------------ defensive reading


CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
"""Control characters other than tab and line breaks: not text, and HTML forbids them (an
ESC in a title or a message would reach the page, and a terminal printing it, raw)."""


def _text(value: Any) -> str:
    return CONTROL.sub("", value) if isinstance(value, str) else ""


def page_title(title: str | None) -> str:
    """``--title`` on one line without control characters (default when nothing is left)."""
    text = " ".join(CONTROL.sub("", title or "").split())
    return text or Inputs.title


class Malformed(ValueError):
    """A field of an input holding what no gpufabric command writes there (a list where a
    status belongs, an integer beyond any float): the input is refused, naming the field."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"{field}: {why}")
        self.field = field
        self.why = why


def _number(value: Any, field: str = "a number") -> float | None:
    """A finite number (JSON's NaN and Infinity, booleans and strings are not); Malformed for
    an integer no float holds."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        raise Malformed(field, f"an integer of {len(str(abs(value)))} digits") from None
    return number if math.isfinite(number) else None


def _word(value: Any, field: str) -> Any:
    """A verdict or status as written: absent or a string; Malformed for any other type."""
    if value is not None and not isinstance(value, str):
        raise Malformed(field, f"a JSON {_json_type(value)} where a status belongs")
    return value


def _json_type(value: Any) -> str:
    return {dict: "object", list: "list", bool: "boolean", int: "number", float: "number"}.get(
        type(value), type(value).__name__
    )


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _stated(doc: Mapping[str, Any], field: str = "verdict") -> Verdict:
    """The verdict a document states; one it does not state (or garbles) is not a PASS."""
    word = _word(doc.get("verdict"), field)
    return Verdict(word) if word in tuple(Verdict) else Verdict.INCONCLUSIVE


# ---------------------------------------------------------------------------- inputs


def read_document(
    source: Source, path: Path, required: str, kind: type
) -> tuple[dict[str, Any], str]:
    """The JSON document in ``path`` and the SHA-256 of its bytes; a StackError naming the option, the file and what
    is accepted when it is not one the command writes."""

    def bad(why: str) -> StackError:
        accepted = f"the JSON that `{source.command}` writes"
        return StackError(
            "gpufabric report", [Problem(source.option, f"{path}: {why}; expected {accepted}")]
        )

    if not path.is_file():
        raise bad("no such file" if not path.exists() else "not a regular file")
    try:
        with path.open("rb") as f:
            data = f.read(MAX_INPUT_BYTES + 1)
    except OSError as err:
        raise bad(err.strerror or str(err)) from None
    if len(data) > MAX_INPUT_BYTES:
        raise bad(f"larger than {MAX_INPUT_BYTES} bytes")
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise bad(f"not JSON ({type(err).__name__})") from None
    except RecursionError:
        raise bad("JSON nested deeper than Python reads") from None
    if not isinstance(doc, dict) or not isinstance(doc.get(required), kind):
        raise bad(f"no '{required}' {'list' if kind is list else 'object'} at the top level")
    return doc, hashlib.sha256(data).hexdigest()


def _check_row(entry: Any, index: int) -> CheckRow | None:
    e = _dict(entry)
    status = _word(e.get("status"), f"checks[{index}].status")
    if status not in STATUS_VERDICT or not _text(e.get("check")):
        return None
    return CheckRow(
        check=_text(e.get("check")),
        target=_text(e.get("target")),
        status=str(status),
        message=_text(e.get("message")),
        hint=_text(e.get("hint")),
        pool=_text(_dict(e.get("details")).get("pool")),
        clique=_text(_dict(e.get("details")).get("clique")),
    )


def checks_section(source: Source, doc: Mapping[str, Any]) -> Section:
    """``verify nodes|cluster|pods --json``: the worst of what it states and what its
    checks say; an unreadable entry or no check at all is INCONCLUSIVE."""
    rows = [_check_row(e, i) for i, e in enumerate(_list(doc.get("checks")))]
    checks = tuple(r for r in rows if r is not None)
    notes = []
    if len(checks) < len(rows):
        notes.append(f"{len(rows) - len(checks)} check entries could not be read")
    if not checks:
        notes.append("no check ran")
    verdicts = [STATUS_VERDICT[c.status] for c in checks]
    verdicts.append(_stated(doc))
    if notes:
        verdicts.append(Verdict.INCONCLUSIVE)
    counts = {s: sum(c.status == s for c in checks) for s in STATUS_VERDICT}
    summary = ", ".join(f"{n} {s.lower()}" for s, n in counts.items() if n) or "no checks"
    suite = _text(doc.get("suite"))
    return Section(
        source=source,
        verdict=worst(verdicts),
        summary=f"{suite}: {summary}" if suite else summary,
        notes=tuple(notes),
        checks=checks,
    )


def _points(rows: Iterable[Any], where: str) -> tuple[Point, ...]:
    points = []
    for i, row in enumerate(rows):
        r = _dict(row)
        size = r.get("size")
        _number(size, f"{where}.rows[{i}].size")
        values = [
            v
            for key in ("busbw_oop", "busbw_ip")
            if (v := _number(r.get(key), f"{where}.rows[{i}].{key}")) is not None
        ]
        if isinstance(size, int) and not isinstance(size, bool) and size > 0 and values:
            points.append(Point(size, max(values)))
    return tuple(points)


def _nccl_run(doc: Mapping[str, Any], entry: Any, index: int) -> NcclRun:
    r = _dict(entry)
    where = f"runs[{index}]"
    stated = _number(doc.get("threshold_gbps"), "threshold_gbps")
    threshold = _number(r.get("threshold_gbps"), f"{where}.threshold_gbps")
    if threshold is None:
        threshold = stated
    return NcclRun(
        label=_text(r.get("file")) or _text(r.get("test")) or f"run {index + 1}",
        verdict=_stated(r, f"{where}.verdict"),
        test=_text(r.get("test")),
        busbw_max=_number(r.get("busbw_max_gbps"), f"{where}.busbw_max_gbps"),
        threshold=threshold,
        threshold_source=_text(r.get("threshold_source")) or _text(doc.get("threshold_source")),
        network=_text(_dict(r.get("transport")).get("network")),
        reasons=tuple(_text(x) for x in _list(r.get("reasons")) if _text(x)),
        points=_points(_list(r.get("rows")), where),
        pool=_text(r.get("pool")) or _text(doc.get("pool")),
    )


def nccl_section(source: Source, doc: Mapping[str, Any]) -> tuple[Section, list[NcclRun]]:
    """``nccl-report --json`` or ``verify nccl --json``: its verdict and every run."""
    runs = [_nccl_run(doc, e, i) for i, e in enumerate(_list(doc.get("runs")))]
    notes = [_text(x) for x in _list(doc.get("reasons")) if _text(x)]
    job = _dict(doc.get("job"))
    if job:
        notes.append(f"job {_text(job.get('state')) or '?'}: {_text(job.get('message'))}")
    verdicts = [_stated(doc), *(r.verdict for r in runs)]
    if not runs:
        verdicts.append(Verdict.INCONCLUSIVE)
        notes.append("no nccl-tests run in the document")
    best = [r.busbw_max for r in runs if r.busbw_max is not None]
    summary = f"{len(runs)} runs" + (f", best bus bandwidth {max(best):g} GB/s" if best else "")
    return Section(
        source=source, verdict=worst(verdicts), summary=summary, notes=tuple(notes)
    ), runs


def _sweep_node(name: str, entry: Any, pool: str = "") -> SweepNode:
    n = _dict(entry)
    where = f"nodes[{name!r}]"
    pairs = []
    for pair in _list(n.get("pairs")):
        p = _list(pair)
        if len(p) == 3 and isinstance(p[0], int) and not isinstance(p[0], bool):
            pairs.append((p[0], _text(p[1]), _text(p[2])))
    rails = []
    for rail, res in sorted(_dict(n.get("rails")).items()):
        r = _dict(res)
        at = f"{where}.rails[{rail!r}]"
        _word(r.get("verdict"), f"{at}.verdict")
        busbw = _number(r.get("busbw"), f"{at}.busbw")
        rails.append((_text(rail), _text(r.get("verdict")), busbw, _text(r.get("partner"))))
    verdict = _text(_word(n.get("verdict"), f"{where}.verdict"))
    return SweepNode(
        name=_text(name),
        verdict=verdict if verdict in SWEEP_VERDICT else "UNKNOWN",
        busbw=_number(n.get("busbw"), f"{where}.busbw"),
        network=_text(n.get("network")),
        pairs=tuple(sorted(pairs)),
        rails=tuple(rails),
        diagnosis=_text(n.get("diagnosis")),
        pool=_text(n.get("pool")) or pool,
        clique=_text(n.get("clique")),
    )


def sweep_section(source: Source, doc: Mapping[str, Any]) -> tuple[Section, list[SweepNode]]:
    """``verify nccl --sweep --json``: BAD nodes fail, nodes not localized are
    INCONCLUSIVE, a sweep over no node is INCONCLUSIVE."""
    pool = _text(doc.get("pool"))
    nodes = [_sweep_node(name, e, pool) for name, e in sorted(_dict(doc.get("nodes")).items())]
    verdicts = [SWEEP_VERDICT[n.verdict] for n in nodes]
    notes = []
    if not nodes:
        verdicts.append(Verdict.INCONCLUSIVE)
        notes.append("the sweep judged no node")
    for fault in _list(doc.get("pathFaults")):  # an uplink at fault: no node drained for it
        verdicts.append(Verdict.FAIL)
        notes.append(_text(_dict(fault).get("words")) or "a path fault")
    for fault in _list(doc.get("domainFaults")):  # an NVL72 rack at fault: no tray drained
        verdicts.append(Verdict.FAIL)
        notes.append(_text(_dict(fault).get("words")) or "an NVLink domain fault")
    bad = [n.name for n in nodes if n.verdict == "BAD"]
    rounds = _number(doc.get("rounds"), "rounds")
    summary = f"{len(nodes)} nodes" + (f" in {rounds:g} rounds" if rounds is not None else "")
    if bad:
        summary += f"; drain {', '.join(bad)}"
    rail_threshold = _number(doc.get("railThreshold"), "railThreshold")
    if rail_threshold is not None and any(n.rails for n in nodes):
        summary += f"; rails alone judged against {rail_threshold:g} GB/s"
    return Section(
        source=source, verdict=worst(verdicts), summary=summary, notes=tuple(notes)
    ), nodes


def sweep_skipped(doc: Mapping[str, Any]) -> list[tuple[str, str]]:
    return sorted(
        (_text(n), _text(why))
        for why, names in _dict(doc.get("skipped")).items()
        for n in _list(names)
    )


# ------------------------------------------------------------------------------ page


@dataclass(frozen=True, kw_only=True)
class FailureGroup:
    """Checks that did not pass for one reason, with the fix they share."""

    section: str
    check: str
    status: str
    hint: str
    where: tuple[tuple[str, str], ...]
    """(target, message) of each."""


def failures(inputs: Inputs) -> list[FailureGroup]:
    """What did not pass, grouped by (input, check, status, fix): failures before what
    could not be verified."""
    groups: dict[tuple[str, str, str, str], list[tuple[str, str]]] = {}
    for section in inputs.sections:
        for c in section.checks:
            if c.status in ("FAIL", "ERROR"):
                key = (section.source.title, c.check, c.status, c.hint)
                groups.setdefault(key, []).append((c.target, c.message))
    for run in inputs.runs:
        if run.verdict is not Verdict.PASS:
            status = "FAIL" if run.verdict is Verdict.FAIL else "ERROR"
            key = ("NCCL acceptance", f"nccl {run.label}", status, "")
            groups.setdefault(key, []).append((run.test or run.label, "; ".join(run.reasons)))
    for node in inputs.sweep:
        if node.verdict != "GOOD":
            status = "ERROR" if node.verdict == "UNKNOWN" else "FAIL"
            hint = {"BAD": node.diagnosis or SWEEP_HINT, "FLAKY": FLAKY_HINT}.get(node.verdict, "")
            pairs = "; ".join(f"round {r} with {p}: {v}" for r, p, v in node.pairs)
            key = ("NCCL sweep", "nccl.sweep", status, hint)
            groups.setdefault(key, []).append((node.name, pairs or "no pair ran"))
    order = {title: i for i, (_o, title, _c) in enumerate(INPUTS + OPTIONAL_INPUTS)}
    out = [
        FailureGroup(section=s, check=c, status=st, hint=h, where=tuple(sorted(w)))
        for (s, c, st, h), w in groups.items()
    ]
    return sorted(out, key=lambda f: (f.status != "FAIL", order[f.section], f.check, f.hint))


PAIR_CLASS: Mapping[str, str] = {"PASS": "pass", "FAIL": "fail", "INCONCLUSIVE": "inconclusive"}


def pair_map(nodes: Sequence[SweepNode]) -> list[tuple[str, list[tuple[str, str]]]]:
    """Rows of the node x node map: each cell (CSS class, title) from the pair's last
    round's verdict; ("self", "") on the diagonal, ("", "") for nodes never paired."""
    names = [n.name for n in nodes]
    last: dict[tuple[str, str], tuple[int, str]] = {}
    for n in nodes:
        for round_, partner, verdict in n.pairs:
            for key in ((n.name, partner), (partner, n.name)):
                if key not in last or last[key][0] <= round_:
                    last[key] = (round_, verdict)

    def cell(a: str, b: str) -> tuple[str, str]:
        if a == b:
            return "self", ""
        if (a, b) not in last:
            return "", ""
        round_, verdict = last[(a, b)]
        return PAIR_CLASS.get(verdict, "inconclusive"), f"{a} + {b}: round {round_} {verdict}"

    return [(a, [cell(a, b) for b in names]) for a in names]


Tagged = tuple[str, str, Verdict]
"""(group name, what the result is, its verdict); an empty name belongs to no group."""


def _grouped(results: list[Tagged]) -> list[PoolVerdict]:
    """Each named group's verdict (the worst of its results) and its tally, in name order."""
    verdicts: dict[str, list[Verdict]] = {}
    counts: dict[str, dict[str, int]] = {}
    for name, what, verdict in results:
        if name:
            verdicts.setdefault(name, []).append(verdict)
            tally = counts.setdefault(name, {})
            tally[what] = tally.get(what, 0) + 1
    return [
        PoolVerdict(
            name=name,
            verdict=worst(verdicts[name]),
            summary=", ".join(f"{n} {what}" for what, n in counts[name].items()),
        )
        for name in sorted(verdicts)
    ]


def pools(inputs: Inputs) -> list[PoolVerdict]:
    """A fleet's pools, each with the verdict of the results that name it (checks,
    NCCL runs, sweep nodes), in name order; none when no result names a pool."""
    checks = [c for section in inputs.sections for c in section.checks]
    return _grouped(
        [(c.pool, "checks", STATUS_VERDICT[c.status]) for c in checks]
        + [(run.pool, "NCCL runs", run.verdict) for run in inputs.runs]
        + [(node.pool, "sweep nodes", SWEEP_VERDICT[node.verdict]) for node in inputs.sweep]
    )


def domains(inputs: Inputs) -> list[PoolVerdict]:
    """NVLink domains (NVL72 racks, by clique), each with the verdict of the results that
    name it (checks with ``details.clique``, sweep trays) and FAIL when a sweep named it
    faulted as a whole, in name order; none when no result names a clique."""
    checks = [c for section in inputs.sections for c in section.checks]
    return _grouped(
        [(c.clique, "checks", STATUS_VERDICT[c.status]) for c in checks]
        + [(node.clique, "sweep trays", SWEEP_VERDICT[node.verdict]) for node in inputs.sweep]
        + [(clique, "rack faults", Verdict.FAIL) for clique in inputs.faulted_domains]
    )


def overall(inputs: Inputs) -> Verdict:
    """The worst input's verdict; PASS only when every input was given and passed."""
    return worst(s.verdict for s in inputs.sections) if inputs.sections else Verdict.INCONCLUSIVE


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(MANIFESTS_DIR / "report"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals["chart"] = chart
    env.filters["num"] = lambda v, unit="": "-" if v is None else f"{v:g}{unit}"
    return env


def render_html(inputs: Inputs) -> str:
    """The page: the same inputs give the same bytes."""
    return (
        _environment()
        .get_template("report.html.j2")
        .render(
            title=inputs.title,
            verdict=overall(inputs),
            sections=inputs.sections,
            pools=pools(inputs),
            domains=domains(inputs),
            failures=failures(inputs),
            runs=inputs.runs,
            sweep=inputs.sweep,
            pairs=pair_map(inputs.sweep),
            skipped=inputs.skipped,
        )
    )


# ----------------------------------------------------------------------------- chart


@dataclass(frozen=True, kw_only=True)
class BandwidthChart:
    """One run's bus bandwidth against message size, laid out for an inline SVG."""

    width: int
    height: int
    line: str
    """The polyline's points ("x,y x,y ...")."""
    dots: tuple[tuple[float, float], ...]
    threshold_y: float | None
    x_ticks: tuple[tuple[float, str], ...]
    y_ticks: tuple[tuple[float, str], ...]
    left: int
    right: int
    top: int
    bottom: int


CHART_MAX_GBPS = 1e6
"""Bus bandwidth the chart's axis holds; a larger (or negative) value is not a measurement
and is left out of the drawing (the run's verdict already says so)."""


def _size_label(size: int) -> str:
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if size >= 1 << shift:
            value = size / (1 << shift)
            return f"{value:g}{unit}"
    return f"{size}B"


def _nice_step(top: float) -> float:
    raw = top / 5
    magnitude = 10.0 ** math.floor(math.log10(raw))
    return float(next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw))


def chart(run: NcclRun, width: int = 640, height: int = 240) -> BandwidthChart | None:
    """None when the run has no row to draw (or only values no axis can hold)."""
    points = [p for p in run.points if 0 <= p.busbw < CHART_MAX_GBPS]
    if not points:
        return None
    left, right, top, bottom = 56, width - 16, 12, height - 36
    xs = [math.log2(p.size) for p in points]
    lo, hi = min(xs), max(xs)
    span = hi - lo or 1.0
    limit = run.threshold if run.threshold is not None and 0 < run.threshold < CHART_MAX_GBPS else 0
    ymax = max([p.busbw for p in points] + [limit]) * 1.1 or 1.0
    step = _nice_step(ymax)

    def x_of(v: float) -> float:
        return round(left + (v - lo) / span * (right - left), 1)

    def y_of(v: float) -> float:
        return round(bottom - v / ymax * (bottom - top), 1)

    dots = tuple((x_of(x), y_of(p.busbw)) for x, p in zip(xs, points, strict=True))
    every = max(1, math.ceil((hi - lo + 1) / 8))
    x_ticks = tuple(
        (x_of(e), _size_label(1 << int(e))) for e in range(math.ceil(lo), math.floor(hi) + 1, every)
    )
    y_ticks = tuple((y_of(i * step), f"{i * step:g}") for i in range(int(ymax // step) + 1))
    threshold = y_of(limit) if limit else None
    line = " ".join(f"{x:g},{y:g}" for x, y in dots)
    return BandwidthChart(
        width=width,
        height=height,
        line=line,
        dots=dots,
        threshold_y=threshold,
        x_ticks=x_ticks,
        y_ticks=y_ticks,
        left=left,
        right=right,
        top=top,
        bottom=bottom,
    )


# ---------------------------------------------------------------------------- entry


INPUTS: tuple[tuple[str, str, str], ...] = (
    ("--nodes", "Node checks", "gpufabric verify nodes --json"),
    ("--cluster", "Cluster checks", "gpufabric verify cluster --json"),
    ("--nccl", "NCCL acceptance", "gpufabric nccl-report --json"),
    ("--sweep", "NCCL sweep", "gpufabric verify nccl --sweep --json"),
)
"""Every input the page has a place for: option, title, the command that writes it."""
OPTIONAL_INPUTS: tuple[tuple[str, str, str], ...] = (
    ("--storage", "Storage checks", "gpufabric verify storage --json"),
)
"""Inputs only some stacks have (shared storage): a section when given, nothing when not."""


def _missing(source: Source) -> Section:
    return Section(
        source=source,
        verdict=Verdict.INCONCLUSIVE,
        summary="not provided",
        notes=(f"run `{source.command} > FILE` and pass {source.option} FILE",),
    )


def load(files: Mapping[str, Sequence[Path]], title: str | None = None) -> Inputs:
    """Read every given input (option -> files); an input not given is a section that
    says so. Raises StackError for a file that is not the document its option takes, and
    for inputs from different stacks (one page hands over one stack)."""
    inputs = Inputs(title=page_title(title))
    first: tuple[str, Path, str] | None = None  # option, file, stack of the first named stack
    for option, name, command in INPUTS + OPTIONAL_INPUTS:
        paths = list(files.get(option) or [])
        if not paths and (option, name, command) in INPUTS:
            inputs.sections.append(_missing(Source(option=option, title=name, command=command)))
        for path in paths:
            source = Source(option=option, title=name, command=command, path=str(path), sha256=None)
            stack = _add(inputs, source, path)
            if stack is not None and first is not None and stack != first[2]:
                raise StackError(
                    "gpufabric report",
                    [
                        Problem(
                            option,
                            f"{path}: from stack {stack!r}, but {first[0]} {first[1]} is from "
                            f"stack {first[2]!r}; one report hands over one stack: give the "
                            "inputs of one stack",
                        )
                    ],
                )
            if stack is not None and first is None:
                first = (option, path, stack)
    return inputs


SUITE = re.compile(r"(?P<kind>[a-z]+)(?: \((?P<stack>[^,]+?)(?:, .*)?\))?", re.DOTALL)
"""The ``suite`` a verify command writes: ``nodes (lab-roce)``, ``cluster (prod-ib, layers
gpu)``, ``storage (prod-ib, threshold ...)``: its kind and its stack."""
CHECKS_KIND = {"--nodes": "nodes", "--cluster": "cluster", "--storage": "storage"}
"""The suite kind each checks input takes."""


def _checks_kind(source: Source, path: Path, doc: Mapping[str, Any]) -> str | None:
    """The stack a checks document was written for (None: it does not say); StackError
    when it is another command's document."""
    want = CHECKS_KIND.get(source.option, source.option.lstrip("-"))
    suite = doc.get("suite")
    m = SUITE.fullmatch(suite) if isinstance(suite, str) else None
    if m is not None and m["kind"] == want:
        return m["stack"]
    other = {kind: opt for opt, kind in CHECKS_KIND.items()}.get(m["kind"] if m else "")
    seen = f"its suite is {str(suite)[:80]!r}" if suite is not None else "it has no 'suite'"
    why = f"{seen}, the document {other} takes" if other else f"{seen}, not '{want} (STACK)'"
    raise StackError(
        "gpufabric report",
        [
            Problem(
                source.option, f"{path}: {why}; expected the JSON that `{source.command}` writes"
            )
        ],
    )


def _add(inputs: Inputs, source: Source, path: Path) -> str | None:
    """Read one input into its section; the stack it names (None: it does not say)."""
    required, kind = {"--nccl": ("runs", list), "--sweep": ("nodes", dict)}.get(
        source.option, ("checks", list)
    )
    doc, digest = read_document(source, path, required, kind)
    source = replace(source, sha256=digest)
    try:
        return _read_section(inputs, source, path, doc)
    except Malformed as err:
        why = f"{path}: {_text(err.field)}: {err.why}; expected the JSON that `{source.command}` writes"
        raise StackError("gpufabric report", [Problem(source.option, why)]) from None


def _read_section(inputs: Inputs, source: Source, path: Path, doc: dict[str, Any]) -> str | None:
    stack = None
    if source.option == "--nccl":
        section, runs = nccl_section(source, doc)
        inputs.runs += runs
    elif source.option == "--sweep":
        section, nodes = sweep_section(source, doc)
        inputs.sweep += nodes
        inputs.skipped += sweep_skipped(doc)
        inputs.faulted_domains += [
            _text(_dict(f).get("clique")) for f in _list(doc.get("domainFaults"))
        ]
    else:
        stack = _checks_kind(source, path, doc)
        section = checks_section(source, doc)
    inputs.sections.append(section)
    return stack


__all__ = [
    "INPUTS",
    "OPTIONAL_INPUTS",
    "Inputs",
    "chart",
    "checks_section",
    "domains",
    "failures",
    "load",
    "nccl_section",
    "overall",
    "pair_map",
    "pools",
    "render_html",
    "sweep_section",
]
