"""Judge an nccl-tests run: parse its table and NCCL's INFO/WARN lines, give a verdict.

The table is read by its header row (columns vary with flags: ``-I`` adds per-iteration
columns, old builds have no ``root``), numbers may print in exponent form, ``#wrong`` may be
``N/A``, and lines may carry MPI rank prefixes. The ``-J`` JSON output is read too. The
verdict is PASS only when the expected transport is proven, nothing warned, values were in
bounds and the best bus bandwidth at >= 1 GiB reaches the threshold; a run that cannot be
judged is INCONCLUSIVE, never PASS. The "# Avg bus bandwidth" figure is reported, never
judged; its FAILED word (nccl-tests' own NCCL_TESTS_MIN_BW check) is a FAIL.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpufabric.exitcodes import Verdict, worst
from gpufabric.model.redaction import printable
from gpufabric.plan.facts import Facts
from gpufabric.plan.resolve import DEFAULT_FRACTION

GIB = 1 << 30

_PREFIXES = (
    # Open MPI 4 --tag-output ([1,0]<stdout>:), Open MPI 5 / PRRTE --output tag and
    # tag-detailed ([1,0][host:pid]<stdout>: ; the job may be a namespace name)
    re.compile(r"^\[[^\],\s]+,\d+\](?:\[[^\]\s]+:\d+\])?<std(?:out|err)>:\s?"),
    re.compile(r"^\[pod/[^\]\s]+\]\s"),  # kubectl logs --prefix
    re.compile(r"^\s*\d+:\s"),  # Slurm srun -l, padded to the widest task id
    re.compile(r"^\[\d+\]\s"),  # MPICH -prepend-rank
    re.compile(r"^\[[A-Za-z_][\w-]*?\d+\]:"),  # torchrun --tee / log prefix [default0]:
)
_MIDLINE_RANK = re.compile(r"\[\d+\]\s?")
"""MPICH prefixes every write: a row written in pieces carries them mid-line too."""
MAX_LINE = 4096
"""Lines are cut here before any pattern runs (NCCL's lines are far shorter)."""
MAX_JSON_DEPTH = 16
_NUMBER = re.compile(r"^[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?$")
_NONFINITE = re.compile(r"^[-+]?(?:nan|inf|infinity)$", re.IGNORECASE)
_HOST_PREFIX = re.compile(r"^(?P<host>[^\s:]+):(?P<pid>\d+):(?P<tid>\d+) \[\s*\d+\s*\]")
_USING_NETWORK = re.compile(r"NCCL INFO Using network (?P<net>\S+)")
_NET_IB = re.compile(r"NCCL INFO NET/IB(?:ext)? ?: ?Using (?P<devs>[^;]*)")
_NO_IB = re.compile(r"NCCL INFO NET/IB(?:ext)? ?: ?No device found")
_HCA = re.compile(r"\[\d+\](?P<hca>[^:\s]+):\d+/(?P<layer>IB|RoCE|UNSPECIFIED)")
_CHANNEL = re.compile(
    r"NCCL INFO (?:Channel \d+(?:/\d+)?|Ring \d+) : (?P<src>\d+)(?:\[\w+\])? -> "
    r"(?P<dst>\d+)(?:\[\w+\])? (?:\[(?P<dir>send|receive)\] )?via (?P<via>\S+)"
)
_GDR_DISABLED = re.compile(r"GPU Direct RDMA Disabled for HCA \d+ '(?P<hca>[^']+)'")
_INIT = re.compile(r"rank (?P<rank>\d+) nranks (?P<nranks>\d+) .*Init COMPLETE")
_NNODES = re.compile(
    r"NCCL INFO comm \S+ rank \d+ nRanks (?P<nranks>\d+) nNodes (?P<nnodes>\d+)"
    r"(?: localRanks \d+ localRank \d+ MNNVL (?P<mnnvl>\d+))?"
)
_DEVICE = re.compile(r"^#\s+Rank\s+\d+\s+Group\s+\d+\s+Pid\s+(?P<pid>\d+)\s+on\s+(?P<host>\S+)")
_OOB = re.compile(r"^#\s*Out of bounds values\s*:(?P<rest>.*)$")
_OOB_VALUE = re.compile(r"^\s*(?P<n>\d{1,18})\s+(?P<ok>OK|FAILED)\s*$")
_REDUCED = re.compile(r"^#\s*Reducing maxBytes to (?P<max>\d+) due to memory limitation")
_JSON_OUT = re.compile(r"^# Writing JSON output to (?P<path>\S.*)$")
_CHANNELS = re.compile(
    r"NCCL INFO (?P<coll>\d+) coll channels, (?P<collnet>\d+) collnet channels, "
    r"(?P<nvls>\d+) nvls channels"
)
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(?P<v>\S+)(?:\s+(?P<word>\S+))?\s*$")
"""nccl-tests' footer (common.cu): the word is empty unless NCCL_TESTS_MIN_BW is set, then
"FAILED" when the average is below 0.9 x that figure (and the binary exits EXIT_FAILURE)
or "OK"."""
_STARTING = re.compile(r"^#\s*Collective test starting:\s*(?P<name>\S+)")
_CONCLUDED = re.compile(r"^#\s*Collective test concluded:\s*(?P<name>\S+)")
_SWEEP = re.compile(
    r"^#\s*nThread \d+ nGpus \d+ minBytes (?P<min>\d+) maxBytes (?P<max>\d+) "
    r"step: (?P<step>\d+)\((?P<kind>factor|bytes)\)"
)
_FATAL = re.compile(r"Test (?:NCCL|CUDA) failure|: Test failure ")
_KILLED = re.compile(
    r"exited on signal \d+|BAD TERMINATION|mpirun noticed that process|srun: error:|"
    r"one or more processes exited with non-zero status|"
    r"Segmentation fault|core dumped|terminate called|\bKilled\b|"
    r"Primary job\s+terminated normally, but \d+ process returned"
)
MAX_SIZES = 10_000
_GDR_VIA = re.compile(r"/GDRDMA(?:\(PCI\))?(?:/Shared)?$")
"""net.cc: NET/<net>/<dev>[(<proxy>)][/GDRDMA[(PCI)]][/Shared] (NCCL 2.26+ adds (PCI))."""


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
    impossible: list[str] = field(default_factory=list)
    """Values no measurement can produce (NaN, infinite, negative)."""

    @property
    def best(self) -> float | None:
        values = [v for v in (self.busbw_oop, self.busbw_ip) if v is not None]
        return max(values) if values else None


@dataclass
class Run:
    """What one nccl-tests run (one collective test) says."""

    test: str | None = None
    source: str = ""
    rows: list[Row] = field(default_factory=list)
    expected_rows: int | None = None
    """Sizes the test announced (minBytes..maxBytes by its step), times its cycles."""
    sweep: tuple[int, int, str] | None = None
    """The announced sweep's minBytes, step and step kind (maxBytes may be reduced later)."""
    concluded: bool = False
    footer: bool = False
    """The table's footer (the out-of-bounds line) was printed."""
    out_of_bounds: int | None = None
    out_of_bounds_ok: bool | None = None
    json_output: str | None = None
    """Where the test said it wrote its -J document ("# Writing JSON output to PATH")."""
    in_network: set[str] = field(default_factory=set)
    """In-network reduction NCCL set up (CollNet, NVLS), from its channel-count line."""
    pids: set[tuple[str, int]] = field(default_factory=set)
    """(host, pid) of the ranks: matches NCCL_DEBUG_FILE lines to their test."""
    from_json: bool = False
    """Read from a -J document (a log whose first line starts with "[" is not one)."""
    debug_pids: set[tuple[str, int]] = field(default_factory=set)
    """(host, pid) that NCCL's own lines name ("host:pid:tid [dev] NCCL ...")."""
    avg_busbw: float | None = None
    avg_failed: bool = False
    """nccl-tests' own NCCL_TESTS_MIN_BW check said FAILED (text "FAILED", -J okay false)."""
    networks: set[str] = field(default_factory=set)
    link_layers: dict[str, str] = field(default_factory=dict)
    socket_in_use: bool = False
    no_ib_device: bool = False
    inter_node: list[str] = field(default_factory=list)
    gdr_disabled: list[str] = field(default_factory=list)
    nranks: int | None = None
    nnodes: int | None = None
    mnnvl: bool = False
    hosts: set[str] = field(default_factory=set)
    """Hosts of the ranks (``# Rank N ... on HOST`` lines, -J devices)."""
    warnings: list[dict[str, str]] = field(default_factory=list)
    fatal: list[str] = field(default_factory=list)
    killed: list[str] = field(default_factory=list)
    malformed: list[str] = field(default_factory=list)

    @property
    def network(self) -> str | None:
        return ", ".join(sorted(self.networks)) or None

    @property
    def nodes(self) -> int | None:
        """Nodes the run spanned: NCCL's own nNodes, else the distinct rank hosts."""
        if self.nnodes is not None:
            return self.nnodes
        return len(self.hosts) or None


def _value(token: str) -> tuple[float | None, str | None]:
    """(number, why it is impossible) of a table cell."""
    if _NONFINITE.match(token):
        return None, token
    if not _NUMBER.match(token):
        return None, None
    value = float(token)
    if value != value or value in (float("inf"), float("-inf")):
        return None, token
    if value < 0:
        return value, token
    return value, None


def strip_prefixes(raw: str) -> str:
    """A log line without the launchers' prefixes (``_PREFIXES``), cut at MAX_LINE."""
    return _clean(raw)


def _clean(raw: str) -> str:
    line = raw[:MAX_LINE].rstrip("\r\n")
    stripped = True
    while stripped:
        stripped = False
        for prefix in _PREFIXES:
            new = prefix.sub("", line, count=1)
            if new != line:
                line, stripped = new, True
    return line.strip()


def _row(line: str, columns: list[str], run: Run) -> None:
    tokens = _MIDLINE_RANK.sub(" ", line).split()
    if not tokens or not tokens[0].isdigit():
        return
    if "timestamp" in columns and len(tokens) == len(columns) + 1:
        # -S 1: the timestamp is "%Y-%m-%d %H:%M:%S", two tokens under one header
        tokens = [*tokens[:-2], " ".join(tokens[-2:])]
    if len(tokens) != len(columns):
        if "NCCL" not in line:  # a row cut or garbled: its values are not read, say so
            run.malformed.append(
                f"a table row of {len(tokens)} fields under a {len(columns)}-column header "
                f"({line[:60]!r})"
            )
        return
    busbw = [i for i, c in enumerate(columns) if c == "busbw"]
    wrong = [i for i, c in enumerate(columns) if c in ("#wrong", "error")]
    values: list[float | None] = []
    impossible: list[str] = []
    for i in busbw:
        value, bad = _value(tokens[i])
        values.append(value if bad is None else None)
        if bad is not None:
            impossible.append(f"busbw {bad} at {tokens[0]} B")
    count = 0
    for i in wrong:
        if tokens[i] == "N/A":  # -c 0
            continue
        value, bad = _value(tokens[i])
        if value is None or bad is not None or value != int(value):
            # a count is a whole number: 0.5, 1e400 or text is not one (never read as 0)
            impossible.append(f"#wrong {tokens[i]} at {tokens[0]} B")
            continue
        count += int(value)
    run.rows.append(
        Row(
            size=int(tokens[0]),
            busbw_oop=values[0] if values else None,
            busbw_ip=values[1] if len(values) > 1 else None,
            wrong=count,
            impossible=impossible,
        )
    )


def _sweep_rows(low: int, high: int, step: int, kind: str) -> int | None:
    """Sizes a test announces: minBytes to maxBytes by a factor or a byte step."""
    if low <= 0 or high < low:
        return None
    count, size = 0, low
    while size <= high and count < MAX_SIZES:
        count += 1
        if kind == "factor":
            if step <= 1:
                return None
            size *= step
        else:
            if step <= 0:
                return None
            size += step
    return count


def _json_number(value: Any, what: str, run: Run) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        run.malformed.append(f"{what} is {type(value).__name__}, not a number")
        return None
    if isinstance(value, str):
        number, bad = _value(value.strip())
        if bad is not None:
            return float("nan")
        if number is None:
            run.malformed.append(f"{what} is the string {value[:20]!r}, not a number")
        return number
    if value != value or value in (float("inf"), float("-inf")):
        return float("nan")
    return float(value)


def _json_identity(doc: dict[str, Any], run: Run) -> None:
    """The test's name (its program, from ``args``) and the ranks' hosts and pids
    (``config.devices``, where nccl-tests 2.19 writes them; a top-level list is read too)."""
    args = doc.get("args")
    if isinstance(args, list) and args and isinstance(args[0], str):
        run.test = args[0].rsplit("/", 1)[-1]
    config = doc.get("config")
    devices = config.get("devices") if isinstance(config, dict) else None
    for device in [*_list(devices), *_list(doc.get("devices"))]:
        if isinstance(device, dict) and isinstance(device.get("hostname"), str):
            run.hosts.add(device["hostname"])
            pid = device.get("pid")
            if isinstance(pid, int) and not isinstance(pid, bool):
                run.pids.add((device["hostname"], pid))


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


_JSON_BOOL = {True: True, False: False, "true": True, "false": False}
"""nccl-tests writes its booleans as the strings "true" and "false" (util.cu jsonBool)."""


@dataclass(frozen=True)
class _Part:
    """One ``out_of_place`` or ``in_place`` measurement of a -J result."""

    busbw: float | None
    wrong: int
    impossible: tuple[str, ...] = ()


def _json_part(part: Any, where: str, size: int, run: Run) -> _Part | None:
    """None (and the reason in ``run.malformed``) when ``part`` is not an object. An
    impossible bandwidth (NaN, infinite, negative) is named and read as no value; only a
    positive count of wrong elements counts."""
    if not isinstance(part, dict):
        run.malformed.append(f"{where} is not an object")
        return None
    bw = _json_number(part.get("bus_bw"), f"{where}.bus_bw", run)
    impossible: list[str] = []
    if bw is not None and (bw != bw or bw < 0):
        impossible.append(f"bus_bw {part.get('bus_bw')} at {size} B")
        bw = None
    wrong = _json_number(part.get("nwrong"), f"{where}.nwrong", run)
    count = 0
    if wrong is not None and (wrong != wrong or wrong < 0 or wrong != int(wrong)):
        impossible.append(f"nwrong {str(part.get('nwrong'))[:20]} at {size} B")
    elif wrong is not None:
        count = int(wrong)
    return _Part(bw, count, tuple(impossible))


def _json_row(i: int, item: Any, run: Run) -> Row | None:
    """One entry of ``results``; None (and the reason in ``run.malformed``) when unusable."""
    if not isinstance(item, dict):
        run.malformed.append(f"results[{i}] is not an object")
        return None
    size = item.get("size")
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        run.malformed.append(f"results[{i}].size is not a byte count")
        return None
    row = Row(size, None, None, 0)
    for key in ("out_of_place", "in_place"):
        if item.get(key) is None:
            continue
        part = _json_part(item[key], f"results[{i}].{key}", size, run)
        if part is None:
            continue
        row.impossible.extend(part.impossible)
        if key == "out_of_place":
            row.busbw_oop = part.busbw
        else:
            row.busbw_ip = part.busbw
        row.wrong += part.wrong
    return row


def _json_results(doc: dict[str, Any], run: Run) -> None:
    results = doc.get("results")
    if not isinstance(results, list):
        run.malformed.append("no results list")
        results = []
    for i, item in enumerate(results):
        row = _json_row(i, item, run)
        if row is not None:
            run.rows.append(row)


def _json_footers(doc: dict[str, Any], run: Run) -> None:
    """Out-of-bounds count, the average bus bandwidth, and whether the run ended."""
    oob = doc.get("out_of_bounds")
    if oob is not None:
        _json_out_of_bounds(oob, run)
    avg = doc.get("average_bus_bandwidth")
    if isinstance(avg, dict) and isinstance(avg.get("bandwidth"), int | float):
        run.avg_busbw = float(avg["bandwidth"])
    if isinstance(avg, dict) and "okay" in avg:
        okay = avg["okay"]  # "unchecked" without NCCL_TESTS_MIN_BW, else true/false
        if isinstance(okay, bool | str) and okay in _JSON_BOOL:
            run.avg_failed |= not _JSON_BOOL[okay]
        elif okay != "unchecked":
            run.malformed.append(
                f"average_bus_bandwidth.okay is {str(okay)[:20]!r}, not true, false or unchecked"
            )
    run.concluded = "end_time" in doc
    run.footer = run.concluded or oob is not None
    for error in _list(doc.get("errors")):
        if not isinstance(error, str):
            run.malformed.append("errors holds a non-string")
        elif error.strip():  # nccl-tests writes [""] when NCCL had no last error
            run.fatal.append(f"-J errors: {error[:200]}")


def _json_out_of_bounds(oob: Any, run: Run) -> None:
    """``{"count": N, "okay": "true"|"false"}``; a count that is not a whole number, or an
    ``okay`` that is neither boolean nor "true"/"false", is malformed (never OK)."""
    count = oob.get("count") if isinstance(oob, dict) else None
    okay = oob.get("okay") if isinstance(oob, dict) else None
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        run.malformed.append(f"out_of_bounds.count is {str(count)[:20]!r}, not a count")
        run.out_of_bounds_ok = False
        return
    if not isinstance(okay, bool | str) or okay not in _JSON_BOOL:
        run.malformed.append(f"out_of_bounds.okay is {str(okay)[:20]!r}, not true or false")
        run.out_of_bounds_ok = False
        return
    _out_of_bounds(run, count, _JSON_BOOL[okay])


def _json_config(doc: dict[str, Any], run: Run) -> None:
    """The sizes the run announced: minimum to maximum bytes by its step factor (or bytes)."""
    config = doc.get("config")
    if not isinstance(config, dict):
        return
    low, high = config.get("minimum_bytes"), config.get("maximum_bytes")
    factor, step = config.get("step_factor"), config.get("step_bytes")
    if isinstance(low, int) and isinstance(high, int):
        kind, value = ("factor", factor) if isinstance(factor, int) else ("bytes", step)
        if isinstance(value, int):
            run.expected_rows = _sweep_rows(low, high, value, kind)


JSON_STEPS: tuple[Callable[[dict[str, Any], Run], None], ...] = (
    _json_identity,
    _json_results,
    _json_footers,
    _json_config,
)
"""What :func:`_json_run` reads of a -J document, one part each."""


def _json_run(doc: Any, source: str) -> Run:
    """One nccl-tests -J document (format version 3: config, devices, results, footers)."""
    run = Run(source=source, from_json=True)
    if not isinstance(doc, dict):
        run.malformed.append("the JSON document is not an object")
        return run
    for step in JSON_STEPS:
        step(doc, run)
    return run


def parse_json(text: str, source: str = "") -> Run:
    try:
        doc = json.loads(text)
    except RecursionError:
        run = Run(source=source, from_json=True)
        run.malformed.append("JSON nested deeper than Python can read")
        return run
    if _depth(doc) > MAX_JSON_DEPTH:
        run = Run(source=source, from_json=True)
        run.malformed.append(
            f"JSON nested deeper than {MAX_JSON_DEPTH} levels: not nccl-tests -J output"
        )
        return run
    return _json_run(doc, source)


def _depth(doc: Any, level: int = 0) -> int:
    if level > MAX_JSON_DEPTH:
        return level
    if isinstance(doc, dict):
        return max((_depth(v, level + 1) for v in doc.values()), default=level + 1)
    if isinstance(doc, list):
        return max((_depth(v, level + 1) for v in doc), default=level + 1)
    return level


def _out_of_bounds(run: Run, count: int, ok: bool) -> None:
    """One out-of-bounds footer. Several in one run (old builds print no test boundaries)
    keep the worst; a count that contradicts its word ("3 OK", "0 FAILED") is not OK."""
    run.out_of_bounds = max(run.out_of_bounds or 0, count)
    agreed = ok and count == 0
    run.out_of_bounds_ok = (
        agreed if run.out_of_bounds_ok is None else run.out_of_bounds_ok and agreed
    )
    run.footer = True


def _comment(line: str, run: Run, columns: list[str] | None) -> list[str] | None:
    """A ``#`` line of nccl-tests: the column header (returned), the sweep, footers, hosts."""
    tokens = line.lstrip("#").split()
    if tokens[:1] == ["size"] and "busbw" in tokens:
        return tokens
    if m := _SWEEP.match(line):
        run.sweep = (int(m["min"]), int(m["step"]), m["kind"])
        run.expected_rows = _sweep_rows(int(m["min"]), int(m["max"]), int(m["step"]), m["kind"])
    elif (m := _REDUCED.match(line)) and run.sweep is not None:
        # the memory check lowers maxBytes after the sweep line (common.cu): fewer sizes
        low, step, kind = run.sweep
        run.expected_rows = _sweep_rows(low, int(m["max"]), step, kind)
    elif m := _CONCLUDED.match(line):
        run.concluded = True
        run.test = run.test or m["name"]
    elif m := _OOB.match(line):
        if v := _OOB_VALUE.match(m["rest"]):
            _out_of_bounds(run, int(v["n"]), v["ok"] == "OK")
        else:
            run.malformed.append(f"unreadable out-of-bounds line: {line[:80]!r}")
            _out_of_bounds(run, 0, False)
    elif m := _AVG.match(line):
        run.avg_busbw = _value(m["v"])[0]
        if m["word"] == "FAILED":
            run.avg_failed = True
        elif m["word"] not in (None, "OK"):
            run.malformed.append(f"unreadable average bus bandwidth line: {line[:80]!r}")
    elif m := _DEVICE.match(line):
        run.hosts.add(m["host"])
        run.pids.add((m["host"], int(m["pid"])))
    _scan(line, run)  # NCCL's lines glued to a '#' line (interleaved writes) still count
    return columns


def _overlong(raw: str, run: Run) -> None:
    """A line past MAX_LINE is cut: NCCL's words beyond the cut make it malformed (evidence
    not read), and a WARN or socket word there is still counted."""
    if "NCCL" in raw[MAX_LINE - 4 :]:
        run.malformed.append(f"NCCL output past column {MAX_LINE} of a {len(raw)}-character line")
    for word in ("NCCL WARN", "NET/Socket", "Using network Socket"):
        at = raw.find(word, MAX_LINE - len(word))
        if at >= 0:
            _scan(raw[max(0, at - 40) : at + MAX_LINE // 2].strip(), run)


def parse_runs(text: str, source: str = "") -> list[Run]:
    """Every collective test in one log (or the one -J document), in order."""
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            return [parse_json(stripped, source)]
        except json.JSONDecodeError:
            pass
    runs: list[Run] = [Run(source=source)]
    columns: list[str] | None = None
    json_output: str | None = None
    for raw in text.splitlines():
        line = _clean(raw)
        if m := _JSON_OUT.match(line):
            # printed before the test's "starting" line (common.cu main, then run())
            json_output = m["path"].strip()
            continue
        if m := _STARTING.match(line):
            current = runs[-1]
            if current.test is not None or current.rows:
                runs.append(Run(source=source))
            runs[-1].test, runs[-1].json_output = m["name"], json_output
            columns, json_output = None, None
            continue
        run = runs[-1]
        if len(raw) > MAX_LINE:
            _overlong(raw, run)
        if line.startswith("#"):
            columns = _comment(line, run, columns)
            continue
        if columns is not None and line[:1].isdigit():
            _row(line, columns, run)
        _scan(line, run)
    if len(runs) > 1 and runs[0].test is None and not runs[0].rows:
        # lines before the first test (launcher output, NCCL init) belong to it
        first = runs.pop(0)
        _merge_info(runs[0], first)
    return runs


def _merge_info(into: Run, other: Run) -> None:
    into.networks |= other.networks
    into.link_layers.update(other.link_layers)
    into.socket_in_use |= other.socket_in_use
    into.no_ib_device |= other.no_ib_device
    into.inter_node += other.inter_node
    into.gdr_disabled += other.gdr_disabled
    into.hosts |= other.hosts
    into.warnings += other.warnings
    into.fatal += other.fatal
    into.killed += other.killed
    into.mnnvl |= other.mnnvl
    into.in_network |= other.in_network
    into.pids |= other.pids
    into.debug_pids |= other.debug_pids
    into.malformed += other.malformed
    into.avg_failed |= other.avg_failed
    if other.nnodes is not None:
        into.nnodes = max(into.nnodes or 0, other.nnodes)
    if other.nranks is not None:
        into.nranks = max(into.nranks or 0, other.nranks)


def parse(text: str) -> Run:
    """The first run of a log (for a log of one test)."""
    return parse_runs(text)[0]


def _scan(line: str, run: Run) -> None:
    if "NCCL " in line and (m := _HOST_PREFIX.match(line)):
        run.hosts.add(m["host"])
        run.debug_pids.add((m["host"], int(m["pid"])))
    if "NCCL WARN" in line:
        diag = next((d for d in DIAGNOSES if d.pattern.search(line)), None)
        cause, check = (diag.cause, diag.check) if diag else UNKNOWN
        run.warnings.append({"line": line, "cause": cause, "check": check})
        return
    if _FATAL.search(line):
        run.fatal.append(line)
        return
    if "NCCL INFO" not in line:
        if _KILLED.search(line):
            run.killed.append(line)
        return
    if m := _USING_NETWORK.search(line):
        run.networks.add(m["net"])
        if m["net"].lower() == "socket":
            run.socket_in_use = True
    elif m := _NET_IB.search(line):
        run.link_layers.update({h["hca"]: h["layer"] for h in _HCA.finditer(m["devs"])})
    elif "NET/Socket : Using" in line:
        run.socket_in_use = True
    elif _NO_IB.search(line):
        run.no_ib_device = True
    elif m := _CHANNEL.search(line):
        if m["via"].startswith("NET/"):
            run.inter_node.append(m["via"])
    elif m := _GDR_DISABLED.search(line):
        run.gdr_disabled.append(m["hca"])
    elif m := _CHANNELS.search(line):
        run.in_network |= {n for n in ("collnet", "nvls") if int(m[n])}
    elif m := _NNODES.search(line):
        run.nnodes = max(run.nnodes or 0, int(m["nnodes"]))
        run.nranks = max(run.nranks or 0, int(m["nranks"]))
        run.mnnvl |= m["mnnvl"] not in (None, "0")
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
    line_rate_gbytes: float | None = None
    """The node's NIC line rate (rails x link rate) in GB/s: inter-node bus bandwidth above
    it by more than measurement noise is not a measurement over the NICs."""


@dataclass(frozen=True)
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


LINE_RATE_NOISE = 1.10
"""Inter-node bus bandwidth may exceed the line rate by measurement noise, not more."""


@dataclass(frozen=True)
class Finding:
    """What one rule found: a verdict contribution (FAIL or INCONCLUSIVE) and its reason."""

    verdict: Verdict
    reason: str


def _fail(reason: str) -> list[Finding]:
    return [Finding(Verdict.FAIL, reason)]


def _unsure(reason: str) -> list[Finding]:
    return [Finding(Verdict.INCONCLUSIVE, reason)]


@dataclass(frozen=True)
class Bound:
    """What one test kind's bus bandwidth can reach over the NICs, and must reach."""

    ceiling_gbps: float | None
    ceiling_source: str
    threshold_gbps: float | None
    threshold_source: str
    no_threshold: str | None
    """Why the stack gives this test kind no threshold (None when it does)."""


RING_BOUND = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")
"""Kinds whose bus bandwidth over the NICs is bounded by the node's line rate (nccl-tests
doc/PERFORMANCE.md: busbw is normalised so that it compares to the hardware's peak)."""
IN_NETWORK_KINDS = ("all_reduce",)
"""Kinds that CollNet (SHARP) and NVLS reduction speed up beyond the ring bound."""


def _kind(test: str | None) -> str | None:
    """all_reduce of "all_reduce_perf_mpi" or "./build/all_reduce_perf"."""
    if test is None:
        return None
    return test.rsplit("/", 1)[-1].split("_perf", 1)[0]


def test_bound(
    test: str | None, nranks: int | None, in_network: Sequence[str], exp: Expectation
) -> Bound:
    """The ceiling and threshold of one test kind. Ring-bound kinds (and a run whose test is
    unnamed, as old builds print) have the line rate as ceiling and the stack's threshold;
    all_reduce with in-network reduction (CollNet/SHARP, NVLS) may reach 2(n-1)/n of it;
    other kinds (alltoall, sendrecv, gather, scatter, hypercube) are not bounded by the line
    rate alone: no ceiling, and no threshold unless --min-busbw gives one."""
    kind, rate = _kind(test), exp.line_rate_gbytes
    own = exp.threshold_source.startswith("--min-busbw")
    if kind is not None and kind not in RING_BOUND:
        why = (
            f"no stack threshold for {kind}: its bus bandwidth over the NICs depends on how "
            "many ranks cross the network, not on the line rate alone (pass --min-busbw)"
        )
        threshold = exp.threshold_gbps if own else None
        source = exp.threshold_source if own else "none"
        return Bound(None, "", threshold, source, None if own else why)
    ceiling, source = rate, "line rate"
    if rate is not None and in_network and kind in IN_NETWORK_KINDS and nranks and nranks > 1:
        ceiling = round(rate * 2 * (nranks - 1) / nranks, 2)
        source = f"in-network reduction ({', '.join(in_network)}): 2(n-1)/n x line rate"
    return Bound(ceiling, source, exp.threshold_gbps, exp.threshold_source, None)


@dataclass(frozen=True)
class Evidence:
    """A run and what the rules derive from it (once, for all of them)."""

    run: Run
    nodes: int | None
    socket: bool
    """NCCL used TCP sockets (said so, or an inter-node channel went over NET/Socket)."""
    impossible: tuple[str, ...]
    gdr_channels: int
    """Inter-node channels over GPUDirect RDMA."""
    best: float | None
    """Best bus bandwidth at >= 1 GiB."""
    bound: Bound = field(default_factory=lambda: Bound(None, "", None, "none", None))
    """The test kind's bus-bandwidth ceiling and threshold (:func:`test_bound`)."""

    @property
    def multi(self) -> bool:
        return self.nodes is not None and self.nodes >= 2

    @classmethod
    def of(cls, run: Run, exp: Expectation | None = None) -> Evidence:
        large = [r.best for r in run.rows if r.size >= GIB and r.best is not None]
        exp = exp if exp is not None else Expectation()
        return cls(
            bound=test_bound(run.test, run.nranks, sorted(run.in_network), exp),
            run=run,
            nodes=run.nodes,
            socket=run.socket_in_use or any(v.startswith("NET/Socket") for v in run.inter_node),
            impossible=tuple(text for r in run.rows for text in r.impossible),
            gdr_channels=sum(1 for v in run.inter_node if _GDR_VIA.search(v)),
            best=max(large) if large else None,
        )


Rule = Callable[[Evidence, Expectation], list[Finding]]
"""One rule of the verdict: the findings it makes on a run (none when it has nothing to say)."""


def rule_test_failed(ev: Evidence, exp: Expectation) -> list[Finding]:
    return _fail(f"the test failed: {ev.run.fatal[0]}") if ev.run.fatal else []


def rule_killed(ev: Evidence, exp: Expectation) -> list[Finding]:
    return _fail(f"the run was killed or crashed: {ev.run.killed[0]}") if ev.run.killed else []


def rule_malformed(ev: Evidence, exp: Expectation) -> list[Finding]:
    malformed = ev.run.malformed
    return _unsure(f"malformed input: {'; '.join(malformed[:3])}") if malformed else []


def rule_unfinished(ev: Evidence, exp: Expectation) -> list[Finding]:
    """Fewer rows than the test announced; else a named test with rows but no end line."""
    run = ev.run
    if run.expected_rows is not None and len(run.rows) < run.expected_rows:
        return _fail(
            f"the run ended early: {len(run.rows)} of {run.expected_rows} announced sizes "
            "were printed"
        )
    if run.test is not None and run.rows and not run.concluded:
        return _fail("the run did not finish (no 'Collective test concluded' line)")
    if run.rows and not run.footer:
        return _fail("the run did not finish: the table has no out-of-bounds footer (cut?)")
    return []


def rule_no_rows(ev: Evidence, exp: Expectation) -> list[Finding]:
    return [] if ev.run.rows else _unsure("no data rows: the test printed no results table")


def rule_impossible_values(ev: Evidence, exp: Expectation) -> list[Finding]:
    if not ev.impossible:
        return []
    return _fail(f"impossible values: {', '.join(ev.impossible[:3])}")


def rule_out_of_bounds(ev: Evidence, exp: Expectation) -> list[Finding]:
    if ev.run.out_of_bounds_ok is not False:
        return []
    if not ev.run.out_of_bounds:
        return _fail("the out-of-bounds check did not say OK")
    return _fail(f"{ev.run.out_of_bounds} out-of-bounds values")


def rule_own_bandwidth_check(ev: Evidence, exp: Expectation) -> list[Finding]:
    """nccl-tests judged its own average against NCCL_TESTS_MIN_BW and exited non-zero."""
    if not ev.run.avg_failed:
        return []
    return _fail(
        f"nccl-tests' own check failed: average bus bandwidth {ev.run.avg_busbw} GB/s is "
        "below its NCCL_TESTS_MIN_BW floor (the binary exits with failure)"
    )


def rule_wrong_elements(ev: Evidence, exp: Expectation) -> list[Finding]:
    wrong = sum(r.wrong for r in ev.run.rows)
    return _fail(f"{wrong} wrong elements reported by -c 1") if wrong else []


def rule_nccl_warnings(ev: Evidence, exp: Expectation) -> list[Finding]:
    return [Finding(Verdict.FAIL, f"NCCL WARN: {w['cause']}") for w in ev.run.warnings]


def rule_socket_fallback(ev: Evidence, exp: Expectation) -> list[Finding]:
    if not (exp.rdma and ev.socket and ev.multi):
        return []
    return _fail("socket fallback: NCCL used TCP (NET/Socket) between nodes, not RDMA")


def _rdma_between_nodes(ev: Evidence, exp: Expectation) -> bool:
    """RDMA is expected between the run's nodes and NCCL did not fall back to sockets."""
    return exp.rdma and ev.multi and not ev.socket


def rule_transport_unproven(ev: Evidence, exp: Expectation) -> list[Finding]:
    if not _rdma_between_nodes(ev, exp):
        return []
    if not ev.run.networks and not ev.run.inter_node:
        return _unsure("no transport lines: rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET")
    if not ev.run.inter_node:
        return _unsure(
            "no inter-node channel lines: the transport between nodes is not proven "
            "(NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET prints them)"
        )
    return []


def rule_link_layer(ev: Evidence, exp: Expectation) -> list[Finding]:
    if not _rdma_between_nodes(ev, exp) or not exp.link_layer:
        return []
    if not ev.run.link_layers:
        return _unsure(
            f"link layer not proven: no 'NET/IB : Using' line names the HCAs' link layer "
            f"(expected {exp.link_layer})"
        )
    wrong_layer = sorted(
        f"{hca}/{layer}" for hca, layer in ev.run.link_layers.items() if layer != exp.link_layer
    )
    if not wrong_layer:
        return []
    return _fail(f"link layer {', '.join(wrong_layer)}, expected {exp.link_layer}")


def rule_gdr_disabled(ev: Evidence, exp: Expectation) -> list[Finding]:
    if not (_rdma_between_nodes(ev, exp) and exp.gdr and ev.run.gdr_disabled):
        return []
    return _fail(f"GPU Direct RDMA disabled for {', '.join(sorted(set(ev.run.gdr_disabled)))}")


def rule_staged_channels(ev: Evidence, exp: Expectation) -> list[Finding]:
    if not (_rdma_between_nodes(ev, exp) and exp.gdr):
        return []
    staged = len(ev.run.inter_node) - ev.gdr_channels
    if not staged:
        return []
    return _fail(f"{staged} inter-node channels without GDRDMA (staged through host memory)")


def rule_node_count(ev: Evidence, exp: Expectation) -> list[Finding]:
    if ev.nodes is None:
        return _unsure(
            "node count unknown: no '# Rank ... on HOST' lines and no NCCL 'nNodes' line"
        )
    if ev.nodes == 1:
        return _unsure("single node: no inter-node traffic was measured")
    return []


def rule_no_large_sizes(ev: Evidence, exp: Expectation) -> list[Finding]:
    if not ev.run.rows or ev.best is not None or ev.impossible:
        return []
    return _unsure("no results at message sizes >= 1 GiB (run with -e 8G or more)")


def rule_above_line_rate(ev: Evidence, exp: Expectation) -> list[Finding]:
    """Inter-node bandwidth above the test kind's ceiling (beyond noise) did not cross the
    NICs; multi-node NVLink (MNNVL) is exempt."""
    best, limit = ev.best, ev.bound.ceiling_gbps
    if not ev.multi or best is None or limit is None or ev.run.mnnvl:
        return []
    if best <= limit * LINE_RATE_NOISE:
        return []
    hint = (
        "a tree/NVLS algorithm? run all_reduce with NCCL_ALGO=Ring"
        if not ev.run.in_network
        else "in-network reduction was counted in the ceiling"
    )
    what = (
        f"the nodes' line rate {limit:g} GB/s"
        if ev.bound.ceiling_source == "line rate"
        else f"the ceiling {limit:g} GB/s ({ev.bound.ceiling_source})"
    )
    return _fail(
        f"best bus bandwidth {best:g} GB/s is above {what} by more than "
        f"{round((LINE_RATE_NOISE - 1) * 100)}%: not a measurement over the NICs ({hint})"
    )


def rule_no_threshold(ev: Evidence, exp: Expectation) -> list[Finding]:
    if ev.bound.threshold_gbps is not None:
        return []
    return _unsure(ev.bound.no_threshold or "no threshold: pass --stack (line rate) or --min-busbw")


def rule_below_threshold(ev: Evidence, exp: Expectation) -> list[Finding]:
    """Judged on >= 2 nodes only: one node (one rank prints busbw 0) is INCONCLUSIVE."""
    threshold = ev.bound.threshold_gbps
    if threshold is None or ev.best is None or ev.best >= threshold or not ev.multi:
        return []
    return _fail(
        f"best bus bandwidth at >= 1 GiB is {ev.best:g} GB/s, below the threshold "
        f"{threshold:g} GB/s ({ev.bound.threshold_source})"
    )


def rule_no_ib_device(ev: Evidence, exp: Expectation) -> list[Finding]:
    if not (exp.rdma and ev.multi and ev.run.no_ib_device):
        return []
    return _fail("a rank found no RDMA device ('NET/IB : No device found.')")


RULES: tuple[Rule, ...] = (
    rule_test_failed,
    rule_killed,
    rule_malformed,
    rule_unfinished,
    rule_no_rows,
    rule_impossible_values,
    rule_out_of_bounds,
    rule_own_bandwidth_check,
    rule_wrong_elements,
    rule_nccl_warnings,
    rule_socket_fallback,
    rule_no_ib_device,
    rule_transport_unproven,
    rule_link_layer,
    rule_gdr_disabled,
    rule_staged_channels,
    rule_node_count,
    rule_no_large_sizes,
    rule_above_line_rate,
    rule_no_threshold,
    rule_below_threshold,
)
"""The verdict's rules, in the order their reasons are listed (failures before doubts)."""


def findings(ev: Evidence, exp: Expectation, rules: Sequence[Rule] = RULES) -> list[Finding]:
    """Every rule's findings on the run, in rule order."""
    return [finding for rule in rules for finding in rule(ev, exp)]


def combine(found: Sequence[Finding]) -> tuple[Verdict, tuple[str, ...]]:
    """FAIL when any finding fails, else INCONCLUSIVE when any doubts, else PASS; the
    reasons list the failures first, then the doubts, each in rule order."""
    fail = [f.reason for f in found if f.verdict == Verdict.FAIL]
    unsure = [f.reason for f in found if f.verdict != Verdict.FAIL]
    verdict = Verdict.FAIL if fail else Verdict.INCONCLUSIVE if unsure else Verdict.PASS
    return verdict, tuple(fail + unsure)


def judge(run: Run, exp: Expectation, file: str = "") -> RunVerdict:
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


def expectation(
    facts: Facts | None,
    min_busbw: float | None,
    fraction: float = DEFAULT_FRACTION,
    rails: int | None = None,
) -> Expectation:
    """From the stack's resolved facts and the command line: the threshold is --min-busbw,
    or ``fraction`` of the node's line rate (the Plan's acceptance facts). With ``rails``,
    for a run restricted to that many rails: the line rate and --min-busbw scale with
    them."""
    if facts is None:
        if min_busbw is None:
            return Expectation()
        return Expectation(threshold_gbps=min_busbw, threshold_source="--min-busbw")
    acceptance = facts.acceptance.at_fraction(fraction)
    if rails is not None:
        acceptance = acceptance.on_rails(rails)
    if min_busbw is None:
        threshold, source = acceptance.threshold_gbps, acceptance.threshold_source
    elif rails is None or rails == facts.acceptance.rails:
        threshold, source = min_busbw, "--min-busbw"
    else:
        all_rails = facts.acceptance.rails
        threshold = round(min_busbw * rails / all_rails, 2)
        source = f"--min-busbw x {rails}/{all_rails} rails"
    return Expectation(
        rdma=acceptance.rdma,
        link_layer=acceptance.link_layer,
        gdr=True,
        threshold_gbps=threshold,
        threshold_source=source,
        gpus_per_node=facts.nodes.gpus_per_node,
        line_rate_gbytes=acceptance.line_rate_gbytes,
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
        _out_of_bounds(twin, doc.out_of_bounds or 0, doc.out_of_bounds_ok)


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
                _merge_info(owner, run)
            if owners:
                continue
            run.malformed.append("NCCL debug output whose processes no test's ranks name")
        out.append((label, run))
    return out


def report(files: Mapping[str, str], exp: Expectation) -> Report:
    """The verdict over every run of every log (e.g. all_reduce then all_gather): the worst."""
    runs = tuple(judge(run, exp, file=label) for label, run in collect_runs(files))
    if not runs:
        return Report(
            Verdict.INCONCLUSIVE, ("no input",), exp.threshold_gbps, exp.threshold_source, ()
        )
    return Report(
        verdict=worst(r.verdict for r in runs),
        reasons=tuple(f"{r.file}: {reason}" for r in runs for reason in r.reasons),
        threshold_gbps=exp.threshold_gbps,
        threshold_source=exp.threshold_source,
        runs=runs,
    )


def _gbps(value: float | None) -> str:
    return "-" if value is None else f"{value:g} GB/s"


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
