"""Judge an nccl-tests run and report the verdict, as JSON and as text.

Every log (and ``-J`` document, and NCCL_DEBUG_FILE) is parsed (:mod:`.parse`,
:mod:`.parse_json`) and each run judged by :mod:`.rules`. The verdict is PASS only when the
expected transport is proven, nothing warned, values were in bounds and the best bus
bandwidth at >= 1 GiB reaches the threshold; a run that cannot be judged is INCONCLUSIVE,
never PASS. The "# Avg bus bandwidth" figure is reported, never judged; its FAILED word
(nccl-tests' own NCCL_TESTS_MIN_BW check) is a FAIL. The report over several runs is the
worst run's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpufabric.exitcodes import Verdict, worst
from gpufabric.model.redaction import printable
from gpufabric.verify.nccl.parse import parse_runs
from gpufabric.verify.nccl.parsed import Row, Run, add_out_of_bounds, merge_info
from gpufabric.verify.nccl.rules import Evidence, NcclExpectation, combine, findings


@dataclass(frozen=True, kw_only=True)
class Transport:
    """How the run's ranks talked to each other, as NCCL said."""

    network: str | None
    link_layers: Mapping[str, str]
    socket_fallback: bool
    inter_node_channels: int
    nranks: int | None
    hosts: int
    nodes: int | None
    in_network: tuple[str, ...] = ()
    """In-network reduction NCCL set up: "collnet" (SHARP), "nvls"."""


@dataclass(frozen=True)
class GdrUse:
    expected: bool
    inter_node_channels_with_gdrdma: int
    disabled_hcas: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class RunVerdict:
    """The verdict on one nccl-tests run (one log, or one test of a log)."""

    verdict: Verdict
    reasons: tuple[str, ...]
    test: str | None
    transport: Transport
    gdr: GdrUse
    busbw_max_gbps: float | None
    threshold_gbps: float | None
    threshold_source: str
    avg_busbw_gbps: float | None
    rows: tuple[Row, ...]
    warnings: tuple[Mapping[str, str], ...]
    file: str = ""
    ceiling_gbps: float | None = None
    ceiling_source: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The stable JSON shape of one run."""
        return {
            **({"file": self.file} if self.file else {}),
            "verdict": self.verdict,
            "reasons": list(self.reasons),
            "test": self.test,
            "transport": {
                "network": self.transport.network,
                "link_layers": dict(self.transport.link_layers),
                "socket_fallback": self.transport.socket_fallback,
                "inter_node_channels": self.transport.inter_node_channels,
                "nranks": self.transport.nranks,
                "hosts": self.transport.hosts,
                "nodes": self.transport.nodes,
                "in_network": list(self.transport.in_network),
            },
            "gdr": {
                "expected": self.gdr.expected,
                "inter_node_channels_with_gdrdma": self.gdr.inter_node_channels_with_gdrdma,
                "disabled_hcas": list(self.gdr.disabled_hcas),
            },
            "busbw_max_gbps": self.busbw_max_gbps,
            "threshold_gbps": self.threshold_gbps,
            "threshold_source": self.threshold_source,
            "ceiling_gbps": self.ceiling_gbps,
            "ceiling_source": self.ceiling_source,
            "avg_busbw_gbps": self.avg_busbw_gbps,
            "rows": [
                {"size": r.size, "busbw_oop": r.busbw_oop, "busbw_ip": r.busbw_ip, "wrong": r.wrong}
                for r in self.rows
            ],
            "warnings": [dict(w) for w in self.warnings],
        }


@dataclass(frozen=True)
class JobOutcome:
    """How the acceptance job itself ended (``verify nccl``)."""

    state: str  # Succeeded | Failed | Timeout
    message: str
    waited_s: float


@dataclass(frozen=True, kw_only=True)
class NcclReport:
    """The verdict over every run of an acceptance test: the worst run's."""

    verdict: Verdict
    reasons: tuple[str, ...]
    threshold_gbps: float | None
    threshold_source: str
    runs: tuple[RunVerdict, ...]
    job: JobOutcome | None = None

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "verdict": self.verdict,
            "reasons": list(self.reasons),
            "threshold_gbps": self.threshold_gbps,
            "threshold_source": self.threshold_source,
            "runs": [r.to_dict() for r in self.runs],
        }
        if self.job is not None:
            doc["job"] = {
                "state": self.job.state,
                "message": self.job.message,
                "waited_s": self.job.waited_s,
            }
        return doc


def judge(run: Run, exp: NcclExpectation, file: str = "") -> RunVerdict:
    """The verdict on one run. PASS only when the transport is proven and the threshold met
    at >= 1 GiB on >= 2 nodes; INCONCLUSIVE when it cannot be judged; FAIL when it ran and
    fell short. Every reason states what the log shows (see :data:`RULES`)."""
    ev = Evidence.of(run, exp)
    verdict, reasons = combine(findings(ev, exp))
    return RunVerdict(
        verdict=verdict,
        reasons=reasons,
        test=run.test,
        transport=Transport(
            network=run.network,
            link_layers=dict(sorted(run.link_layers.items())),
            socket_fallback=ev.socket,
            inter_node_channels=len(run.inter_node),
            nranks=run.nranks,
            hosts=len(run.hosts),
            nodes=ev.nodes,
            in_network=tuple(sorted(run.in_network)),
        ),
        gdr=GdrUse(
            expected=exp.rdma and exp.gdr,
            inter_node_channels_with_gdrdma=ev.gdr_channels,
            disabled_hcas=tuple(sorted(set(run.gdr_disabled))),
        ),
        busbw_max_gbps=ev.best,
        threshold_gbps=ev.bound.threshold_gbps,
        threshold_source=ev.bound.threshold_source,
        ceiling_gbps=ev.bound.ceiling_gbps,
        ceiling_source=ev.bound.ceiling_source,
        avg_busbw_gbps=run.avg_busbw,
        rows=tuple(run.rows),
        warnings=tuple(run.warnings),
        file=file,
    )


def _is_debug_file(run: Run) -> bool:
    """An NCCL_DEBUG_FILE: NCCL's lines of one process, no nccl-tests table or header."""
    return run.test is None and not run.rows and not run.footer and bool(run.debug_pids)


def _merge_json(twin: Run, doc: Run, name: str) -> None:
    """The -J document's evidence joins the text log's run: its rows when the log printed
    none, else its failures (wrong values, impossible numbers, errors, out of bounds)."""
    if not twin.rows:
        twin.rows, twin.expected_rows = doc.rows, doc.expected_rows
        twin.footer = twin.footer or doc.footer
    else:
        for row in doc.rows:
            if row.wrong:
                twin.fatal.append(f"{name}: {row.wrong} wrong elements at {row.size} B")
            twin.fatal.extend(f"{name}: impossible {text}" for text in row.impossible)
    twin.fatal += doc.fatal
    twin.malformed += [f"{name}: {text}" for text in doc.malformed]
    twin.avg_failed |= doc.avg_failed
    if doc.out_of_bounds_ok is not None:
        add_out_of_bounds(twin, doc.out_of_bounds or 0, doc.out_of_bounds_ok)


def _json_twin(name: str, doc: Run, logs: list[Run]) -> Run | None:
    """The text run that wrote this -J file ("# Writing JSON output to PATH", matched by file
    name), else the only text run of the same test."""
    base = name.rsplit("/", 1)[-1]
    by_path = [r for r in logs if r.json_output and r.json_output.rsplit("/", 1)[-1] == base]
    if len(by_path) == 1:
        return by_path[0]
    same = [r for r in logs if doc.test is not None and r.test == doc.test]
    return same[0] if len(same) == 1 else None


def collect_runs(files: Mapping[str, str]) -> list[tuple[str, Run]]:
    """Every run of every file, labelled. A -J document joins the text log's run that wrote
    it (the log proves the transport, not the JSON); an NCCL_DEBUG_FILE (NCCL's lines only)
    joins the runs whose ranks' (host, pid) it names."""
    labelled: list[tuple[str, Run, bool]] = []
    for name, text in files.items():
        runs = parse_runs(text, name)
        for run in runs:
            label = name if len(runs) == 1 else f"{name} ({run.test or 'unnamed test'})"
            labelled.append((label, run, run.from_json))
    logs = [run for _, run, is_json in labelled if not is_json and not _is_debug_file(run)]
    out: list[tuple[str, Run]] = []
    for label, run, is_json in labelled:
        if is_json and (twin := _json_twin(run.source, run, logs)) is not None:
            _merge_json(twin, run, run.source)
            continue
        if not is_json and _is_debug_file(run):
            owners = [r for r in logs if r.pids & run.debug_pids]
            for owner in owners:
                merge_info(owner, run)
            if owners:
                continue
            run.malformed.append("NCCL debug output whose processes no test's ranks name")
        out.append((label, run))
    return out


def report(files: Mapping[str, str], exp: NcclExpectation) -> NcclReport:
    """The verdict over every run of every log (e.g. all_reduce then all_gather): the worst."""
    runs = tuple(judge(run, exp, file=label) for label, run in collect_runs(files))
    if not runs:
        return NcclReport(
            verdict=Verdict.INCONCLUSIVE,
            reasons=("no input",),
            threshold_gbps=exp.threshold_gbps,
            threshold_source=exp.threshold_source,
            runs=(),
        )
    return NcclReport(
        verdict=worst(r.verdict for r in runs),
        reasons=tuple(f"{r.file}: {reason}" for r in runs for reason in r.reasons),
        threshold_gbps=exp.threshold_gbps,
        threshold_source=exp.threshold_source,
        runs=runs,
    )


def _gbps(value: float | None) -> str:
    return "-" if value is None else f"{value:g} GB/s"


def format_text(doc: NcclReport) -> str:
    out = [f"NCCL acceptance: {doc.verdict}"]
    if doc.threshold_gbps is not None:
        out.append(f"  threshold   {doc.threshold_gbps:g} GB/s ({doc.threshold_source})")
    for run in doc.runs:
        t = run.transport
        best = run.busbw_max_gbps
        out.append(f"  {run.file}: {run.verdict} ({run.test or 'unknown test'})")
        out.append(
            f"    transport   {t.network or '?'}"
            + (
                f", {', '.join(f'{hca}/{layer}' for hca, layer in t.link_layers.items())}"
                if t.link_layers
                else ""
            )
            + f"; inter-node channels {t.inter_node_channels}, with GDRDMA "
            f"{run.gdr.inter_node_channels_with_gdrdma}"
            + (f"; in-network reduction {', '.join(t.in_network)}" if t.in_network else "")
        )
        if run.ceiling_gbps is not None or run.threshold_gbps != doc.threshold_gbps:
            out.append(
                f"    judged      ceiling {_gbps(run.ceiling_gbps)} ({run.ceiling_source or '-'})"
                f"; threshold {_gbps(run.threshold_gbps)} ({run.threshold_source})"
            )
        out.append(
            f"    busbw       best >= 1 GiB: {best if best is not None else '-'} GB/s; "
            f"average line (not judged): {_gbps(run.avg_busbw_gbps)}"
        )
        for reason in run.reasons:
            out.append(f"    - {reason}")
        for w in run.warnings:
            out.append(
                f"    WARN {w['line']}\n      cause: {w['cause']}\n      check: {w['check']}"
            )
    return printable("\n".join(out) + "\n")  # log lines may carry terminal escapes
