"""Judge an nccl-tests run: parse its table and NCCL's INFO/WARN lines, give a verdict.

The table is read by its header row (columns vary with flags: ``-I`` adds per-iteration
columns, old builds have no ``root``), numbers may print in exponent form, ``#wrong`` may be
``N/A``, and lines may carry MPI rank prefixes. The ``-J`` JSON output is read too. The
verdict is PASS only when the expected transport is proven, nothing warned, values were in
bounds and the best bus bandwidth at >= 1 GiB reaches the threshold; a run that cannot be
judged is INCONCLUSIVE, never PASS. The "# Avg bus bandwidth" line is reported, never judged.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from gpufabric.exitcodes import ExitCode
from gpufabric.plan.facts import Facts
from gpufabric.plan.resolve import DEFAULT_FRACTION

Verdict = Literal["PASS", "FAIL", "INCONCLUSIVE"]
GIB = 1 << 30

_PREFIX = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err)>:|\[\d+\]\s)")
_NUMBER = re.compile(r"^[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?$")
_HOST_PREFIX = re.compile(r"^(?P<host>[^\s:]+):(?P<pid>\d+):(?P<tid>\d+) \[\s*\d+\s*\]")
_USING_NETWORK = re.compile(r"NCCL INFO Using network (?P<net>.+?)\s*$")
_NET_IB = re.compile(r"NCCL INFO NET/IB ?: ?Using (?P<devs>.*?)(?:; OOB|$)")
_HCA = re.compile(r"\[\d+\](?P<hca>[^:\s]+):\d+/(?P<layer>IB|RoCE|UNSPECIFIED)")
_CHANNEL = re.compile(
    r"NCCL INFO (?:Channel \d+(?:/\d+)?|Ring \d+) : (?P<src>\d+)(?:\[\w+\])? -> "
    r"(?P<dst>\d+)(?:\[\w+\])? (?:\[(?P<dir>send|receive)\] )?via (?P<via>\S+)"
)
_GDR_DISABLED = re.compile(r"GPU Direct RDMA Disabled for HCA \d+ '(?P<hca>[^']+)'")
_INIT = re.compile(r"rank (?P<rank>\d+) nranks (?P<nranks>\d+).*Init COMPLETE")
_DEVICE = re.compile(r"^#\s+Rank\s+\d+\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(?P<host>\S+)")
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(?P<n>\d+)\s+(?P<ok>OK|FAILED)")
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(?P<v>\S+)")
_TEST = re.compile(r"^#\s*Collective test (?:starting|concluded):\s*(?P<name>\S+)")
_FATAL = re.compile(r"Test (?:NCCL|CUDA) failure|: Test failure ")


@dataclass(frozen=True)
class Diagnosis:
    pattern: re.Pattern[str]
    cause: str
    check: str


DIAGNOSES = (
    Diagnosis(
        re.compile(r"Got completion"),
        "RDMA work completion error: on RoCE usually the wrong GID index or traffic class "
        "(lossless class not matched), else a flapping link or PCIe ACS redirecting peer traffic",
        "gpufabric verify nodes (port state, RoCEv2 GID, PFC, ACS); compare NCCL_IB_GID_INDEX and "
        "NCCL_IB_TC in the tenant's nccl-env with `show_gids` and the switch's lossless class",
    ),
    Diagnosis(
        re.compile(r"ibv_reg_mr\S* failed with error Cannot allocate memory"),
        "memory registration refused: the locked-memory limit is too low (IPC_LOCK missing or "
        "memlock not unlimited)",
        "`ulimit -l` in the pod must print unlimited; the pod needs capabilities.add [IPC_LOCK]",
    ),
    Diagnosis(
        re.compile(r"ibv_reg_dmabuf_mr failed"),
        "DMA-BUF registration unsupported: GPU driver without open kernel modules or kernel < 5.12",
        "gpufabric verify nodes (GPUDirect prerequisites for dmabuf); or set NCCL_DMABUF_ENABLE=0 "
        "and use nvidia-peermem",
    ),
    Diagnosis(
        re.compile(r"ibv_modify_qp failed with error Network is unreachable"),
        "queue pair could not reach its peer: wrong GID (IPv4 vs IPv6, RoCE v1 vs v2) or no route on "
        "the rail",
        "`show_gids` in the pod and the rail's IP pool routes; NCCL_IB_GID_INDEX",
    ),
    Diagnosis(
        re.compile(r"/dev/shm|posix_fallocate"),
        "shared memory exhausted: /dev/shm is the container default (64 MiB)",
        "`df -h /dev/shm` in the pod; mount an emptyDir with medium: Memory at /dev/shm",
    ),
    Diagnosis(
        re.compile(r"libibverbs"),
        "the image has no RDMA userspace (rdma-core / libibverbs)",
        "`ls /usr/lib/*/libibverbs.so*` in the image; use an image with rdma-core",
    ),
)
UNKNOWN = ("NCCL warned; see the line", "rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET")


@dataclass
class Row:
    size: int
    busbw_oop: float | None
    busbw_ip: float | None
    wrong: int

    @property
    def best(self) -> float | None:
        values = [v for v in (self.busbw_oop, self.busbw_ip) if v is not None]
        return max(values) if values else None


@dataclass
class Run:
    """What one log says."""

    test: str | None = None
    rows: list[Row] = field(default_factory=list)
    out_of_bounds: int | None = None
    out_of_bounds_ok: bool | None = None
    avg_busbw: float | None = None
    network: str | None = None
    link_layers: dict[str, str] = field(default_factory=dict)
    socket_in_use: bool = False
    no_ib_device: bool = False
    inter_node: list[str] = field(default_factory=list)
    gdr_disabled: list[str] = field(default_factory=list)
    nranks: int | None = None
    hosts: set[str] = field(default_factory=set)
    warnings: list[dict[str, str]] = field(default_factory=list)
    fatal: list[str] = field(default_factory=list)


def _number(token: str) -> float | None:
    return float(token) if _NUMBER.match(token) else None


def _table(lines: list[str], run: Run) -> None:
    columns: list[str] | None = None
    for line in lines:
        if line.startswith("#"):
            tokens = line.lstrip("#").split()
            if tokens[:1] == ["size"] and "busbw" in tokens:
                columns = tokens
            continue
        tokens = line.split()
        if columns is None or len(tokens) != len(columns) or not tokens[0].isdigit():
            continue
        busbw = [i for i, c in enumerate(columns) if c == "busbw"]
        wrong = [i for i, c in enumerate(columns) if c in ("#wrong", "error")]
        values = [_number(tokens[i]) for i in busbw]
        bad = sum(int(v) for i in wrong if (v := _number(tokens[i])) is not None)
        run.rows.append(
            Row(
                size=int(tokens[0]),
                busbw_oop=values[0] if values else None,
                busbw_ip=values[1] if len(values) > 1 else None,
                wrong=bad,
            )
        )


def _json_rows(doc: Any, run: Run) -> None:
    """Rows from nccl-tests -J output: any list of objects with a size and bus bandwidths."""
    if isinstance(doc, dict):
        if "size" in doc and ("out_of_place" in doc or "in_place" in doc):
            oop, ip = doc.get("out_of_place") or {}, doc.get("in_place") or {}
            wrong = sum(int(p.get("nwrong") or 0) for p in (oop, ip))
            run.rows.append(Row(int(doc["size"]), oop.get("bus_bw"), ip.get("bus_bw"), wrong))
            return
        for key, value in doc.items():
            if key == "out_of_bounds" and isinstance(value, dict):
                run.out_of_bounds = int(value.get("count", 0))
                run.out_of_bounds_ok = value.get("okay") in (True, "true", "OK")
            elif key == "average_bus_bandwidth" and isinstance(value, dict):
                run.avg_busbw = value.get("bandwidth")
            else:
                _json_rows(value, run)
    elif isinstance(doc, list):
        for item in doc:
            _json_rows(item, run)


def parse(text: str) -> Run:
    run = Run()
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            _json_rows(json.loads(stripped), run)
            return run
        except json.JSONDecodeError:
            pass
    lines = [_PREFIX.sub("", raw.rstrip("\n")).strip() for raw in text.splitlines()]
    _table(lines, run)
    for line in lines:
        _scan(line, run)
    return run


def _scan(line: str, run: Run) -> None:
    if m := _TEST.match(line):
        run.test = m["name"]
    elif m := _OOB.match(line):
        run.out_of_bounds, run.out_of_bounds_ok = int(m["n"]), m["ok"] == "OK"
    elif m := _AVG.match(line):
        run.avg_busbw = _number(m["v"])
    elif m := _DEVICE.match(line):
        run.hosts.add(m["host"])
    if "NCCL WARN" in line:
        diag = next((d for d in DIAGNOSES if d.pattern.search(line)), None)
        cause, check = (diag.cause, diag.check) if diag else UNKNOWN
        run.warnings.append({"line": line, "cause": cause, "check": check})
        return
    if _FATAL.search(line):
        run.fatal.append(line)
        return
    if "NCCL INFO" not in line:
        return
    if m := _HOST_PREFIX.match(line):
        run.hosts.add(m["host"])
    if m := _USING_NETWORK.search(line):
        run.network = m["net"]
    elif m := _NET_IB.search(line):
        run.link_layers.update({h["hca"]: h["layer"] for h in _HCA.finditer(m["devs"])})
    elif "NET/Socket : Using" in line:
        run.socket_in_use = True
    elif "NET/IB : No device found" in line:
        run.no_ib_device = True
    elif m := _CHANNEL.search(line):
        if m["via"].startswith("NET/"):
            run.inter_node.append(m["via"])
    elif m := _GDR_DISABLED.search(line):
        run.gdr_disabled.append(m["hca"])
    elif m := _INIT.search(line):
        run.nranks = max(run.nranks or 0, int(m["nranks"]))


@dataclass(frozen=True)
class Expectation:
    """What the stack expects of a run."""

    rdma: bool = True
    link_layer: str | None = None  # "IB" or "RoCE"
    gdr: bool = True
    threshold_gbps: float | None = None
    threshold_source: str = "none"
    gpus_per_node: int | None = None


@dataclass(frozen=True)
class Transport:
    """How the run's ranks talked to each other, as NCCL said."""

    network: str | None
    link_layers: Mapping[str, str]
    socket_fallback: bool
    inter_node_channels: int
    nranks: int | None
    hosts: int


@dataclass(frozen=True)
class GdrUse:
    expected: bool
    inter_node_channels_with_gdrdma: int
    disabled_hcas: tuple[str, ...]


@dataclass(frozen=True)
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
            },
            "gdr": {
                "expected": self.gdr.expected,
                "inter_node_channels_with_gdrdma": self.gdr.inter_node_channels_with_gdrdma,
                "disabled_hcas": list(self.gdr.disabled_hcas),
            },
            "busbw_max_gbps": self.busbw_max_gbps,
            "threshold_gbps": self.threshold_gbps,
            "threshold_source": self.threshold_source,
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


@dataclass(frozen=True)
class Report:
    """The verdict over every run of an acceptance test: the worst run's."""

    verdict: Verdict
    reasons: tuple[str, ...]
    threshold_gbps: float | None
    threshold_source: str
    runs: tuple[RunVerdict, ...]
    job: JobOutcome | None = None

    @property
    def exit_code(self) -> int:
        return VERDICT_EXIT[self.verdict]

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


def judge(run: Run, exp: Expectation, file: str = "") -> RunVerdict:
    fail: list[str] = []
    unsure: list[str] = []
    if run.fatal:
        fail.append(f"the test failed: {run.fatal[0]}")
    if not run.rows:
        unsure.append("no data rows: the test printed no results table")
    if run.out_of_bounds_ok is False:
        fail.append(f"{run.out_of_bounds} out-of-bounds values")
    if any(r.wrong for r in run.rows):
        fail.append(f"{sum(r.wrong for r in run.rows)} wrong elements reported by -c 1")
    for w in run.warnings:
        fail.append(f"NCCL WARN: {w['cause']}")
    socket = (
        run.socket_in_use
        or (run.network or "").lower() == "socket"
        or any(v.startswith("NET/Socket") for v in run.inter_node)
    )
    if exp.rdma:
        if socket:
            fail.append("socket fallback: NCCL used TCP (NET/Socket), not RDMA")
        elif run.network is None and not run.inter_node:
            unsure.append(
                "no transport lines: rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET"
            )
        wrong_layer = sorted(
            f"{hca}/{layer}"
            for hca, layer in run.link_layers.items()
            if exp.link_layer and layer != exp.link_layer
        )
        if wrong_layer:
            fail.append(f"link layer {', '.join(wrong_layer)}, expected {exp.link_layer}")
    gdr_channels = [v for v in run.inter_node if v.endswith("/GDRDMA")]
    if exp.rdma and exp.gdr and not socket:
        if run.gdr_disabled:
            fail.append(f"GPU Direct RDMA disabled for {', '.join(sorted(set(run.gdr_disabled)))}")
        staged = len(run.inter_node) - len(gdr_channels)
        if staged:
            fail.append(f"{staged} inter-node channels without GDRDMA (staged through host memory)")
    single = len(run.hosts) == 1 or (
        exp.gpus_per_node is not None and run.nranks is not None and run.nranks <= exp.gpus_per_node
    )
    if single:
        unsure.append("single node: no inter-node traffic was measured")
    large = [r.best for r in run.rows if r.size >= GIB and r.best is not None]
    best = max(large) if large else None
    if run.rows and best is None:
        unsure.append("no results at message sizes >= 1 GiB (run with -e 8G or more)")
    if exp.threshold_gbps is None:
        unsure.append("no threshold: pass --stack (line rate) or --min-busbw")
    elif best is not None and best < exp.threshold_gbps:
        fail.append(
            f"best bus bandwidth at >= 1 GiB is {best:g} GB/s, below the threshold "
            f"{exp.threshold_gbps:g} GB/s ({exp.threshold_source})"
        )
    verdict: Verdict = "FAIL" if fail else "INCONCLUSIVE" if unsure else "PASS"
    return RunVerdict(
        verdict=verdict,
        reasons=tuple(fail + unsure),
        test=run.test,
        transport=Transport(
            network=run.network,
            link_layers=dict(sorted(run.link_layers.items())),
            socket_fallback=socket,
            inter_node_channels=len(run.inter_node),
            nranks=run.nranks,
            hosts=len(run.hosts),
        ),
        gdr=GdrUse(
            expected=exp.rdma and exp.gdr,
            inter_node_channels_with_gdrdma=len(gdr_channels),
            disabled_hcas=tuple(sorted(set(run.gdr_disabled))),
        ),
        busbw_max_gbps=best,
        threshold_gbps=exp.threshold_gbps,
        threshold_source=exp.threshold_source,
        avg_busbw_gbps=run.avg_busbw,
        rows=tuple(run.rows),
        warnings=tuple(run.warnings),
        file=file,
    )


def expectation(
    facts: Facts | None, min_busbw: float | None, fraction: float = DEFAULT_FRACTION
) -> Expectation:
    """From the stack's resolved facts and the command line: the threshold is --min-busbw,
    or ``fraction`` of the node's line rate (the Plan's acceptance facts)."""
    if facts is None:
        if min_busbw is None:
            return Expectation()
        return Expectation(threshold_gbps=min_busbw, threshold_source="--min-busbw")
    acceptance = facts.acceptance.at_fraction(fraction)
    if min_busbw is not None:
        threshold, source = min_busbw, "--min-busbw"
    else:
        threshold, source = acceptance.threshold_gbps, acceptance.threshold_source
    return Expectation(
        rdma=acceptance.rdma,
        link_layer=acceptance.link_layer,
        gdr=True,
        threshold_gbps=threshold,
        threshold_source=source,
        gpus_per_node=facts.nodes.gpus_per_node,
    )


def add_threshold_args(p: argparse.ArgumentParser) -> None:
    """--min-busbw / --fraction, shared by ``nccl-report`` and ``verify nccl``."""
    p.add_argument("--min-busbw", type=float, metavar="GBPS", help="explicit threshold in GB/s")
    p.add_argument(
        "--fraction",
        type=float,
        default=DEFAULT_FRACTION,
        help="threshold as a fraction of the line rate (default 0.9)",
    )


SEVERITY: Mapping[Verdict, int] = {"PASS": 0, "INCONCLUSIVE": 1, "FAIL": 2}
VERDICT_EXIT: Mapping[Verdict, int] = {
    "PASS": ExitCode.OK,
    "FAIL": ExitCode.FAIL,
    "INCONCLUSIVE": ExitCode.INCONCLUSIVE,
}


def report(files: Mapping[str, str], exp: Expectation) -> Report:
    """The verdict over several logs (e.g. all_reduce then all_gather): the worst one."""
    runs = tuple(judge(parse(text), exp, file=name) for name, text in files.items())
    worst = max(runs, key=lambda r: SEVERITY[r.verdict])
    return Report(
        verdict=worst.verdict,
        reasons=tuple(f"{r.file}: {reason}" for r in runs for reason in r.reasons),
        threshold_gbps=exp.threshold_gbps,
        threshold_source=exp.threshold_source,
        runs=runs,
    )


def format_text(doc: Report) -> str:
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
        )
        out.append(
            f"    busbw       best >= 1 GiB: {best if best is not None else '-'} GB/s; "
            f"average line (not judged): {run.avg_busbw_gbps}"
        )
        for reason in run.reasons:
            out.append(f"    - {reason}")
        for w in run.warnings:
            out.append(
                f"    WARN {w['line']}\n      cause: {w['cause']}\n      check: {w['check']}"
            )
    return "\n".join(out) + "\n"
