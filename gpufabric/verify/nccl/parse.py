"""Read an nccl-tests text log: its results table and NCCL's INFO/WARN lines.

The table is read by its header row (columns vary with flags: ``-I`` adds per-iteration
columns, old builds have no ``root``), numbers may print in exponent form, ``#wrong`` may be
``N/A``, and lines may carry the launchers' rank prefixes (Open MPI, PRRTE, Slurm, MPICH,
torchrun, ``kubectl logs --prefix``). A log that is a ``-J`` document is read by
:mod:`.parse_json`. Every test of a log becomes one :class:`~.parsed.Run`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

from gpufabric.verify.nccl.parse_json import parse_json
from gpufabric.verify.nccl.parsed import (
    Row,
    Run,
    add_out_of_bounds,
    byte_value,
    cell_value,
    count_value,
    merge_info,
    sweep_rows,
)

_PREFIXES = (
    # Open MPI 4 --tag-output ([1,0]<stdout>:), Open MPI 5 / PRRTE --output tag and
    # tag-detailed ([1,0][host:pid]<stdout>: ; the job may be a namespace name)
    re.compile(r"^\[[^\],\s]+,[0-9]+\](?:\[[^\]\s]+:[0-9]+\])?<std(?:out|err)>:\s?"),
    re.compile(r"^\[pod/[^\]\s]+\]\s"),  # kubectl logs --prefix
    re.compile(r"^\s*[0-9]+:\s"),  # Slurm srun -l, padded to the widest task id
    re.compile(r"^\[[0-9]+\]\s"),  # MPICH -prepend-rank
    re.compile(r"^\[[A-Za-z_][\w-]*?[0-9]+\]:"),  # torchrun --tee / log prefix [default0]:
)
_MIDLINE_RANK = re.compile(r"\[[0-9]+\]\s?")
"""MPICH prefixes every write: a row written in pieces carries them mid-line too."""
MAX_LINE = 4096
"""Lines are cut here before any pattern runs (NCCL's lines are far shorter)."""
_HOST_PREFIX = re.compile(r"^(?P<host>[^\s:]+):(?P<pid>[0-9]+):(?P<tid>[0-9]+) \[\s*[0-9]+\s*\]")
_USING_NETWORK = re.compile(r"NCCL INFO Using network (?P<net>\S+)")
_NET_IB = re.compile(r"NCCL INFO NET/IB(?:ext)? ?: ?Using (?P<devs>[^;]*)")
_NO_IB = re.compile(r"NCCL INFO NET/IB(?:ext)? ?: ?No device found")
_SOCKET_USING = re.compile(r"NET/Socket : Using")
_HCA = re.compile(r"\[[0-9]+\](?P<hca>[^:\s]+):[0-9]+/(?P<layer>IB|RoCE|UNSPECIFIED)")
_CHANNEL = re.compile(
    r"NCCL INFO (?:Channel [0-9]+(?:/[0-9]+)?|Ring [0-9]+) : (?P<src>[0-9]+)(?:\[\w+\])? -> "
    r"(?P<dst>[0-9]+)(?:\[\w+\])? (?:\[(?P<dir>send|receive)\] )?via (?P<via>\S+)"
)
_GDR_DISABLED = re.compile(r"GPU Direct RDMA Disabled for HCA [0-9]+ '(?P<hca>[^']+)'")
_INIT = re.compile(r"rank (?P<rank>[0-9]+) nranks (?P<nranks>[0-9]+) .*Init COMPLETE")
_NNODES = re.compile(
    r"NCCL INFO comm \S+ rank [0-9]+ nRanks (?P<nranks>[0-9]+) nNodes (?P<nnodes>[0-9]+)"
    r"(?: localRanks [0-9]+ localRank [0-9]+ MNNVL (?P<mnnvl>[0-9]+))?"
)
_VERSION = re.compile(r"NCCL version (?P<v>[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,4})[+a-z]")
"""init.cc showVersion (2.25-2.30): "NCCL version %d.%d.%d<suffix>+cuda%d.%d", an INFO line
under NCCL_DEBUG=INFO, the bare VERSION line under NCCL_DEBUG=VERSION or WARN."""
_CLIQUE = re.compile(
    r"NCCL INFO MNNVL (?P<on>[0-9]+) cliqueId (?P<id>[0-9a-f]+) cliqueSize (?P<size>[0-9]+) "
    r"cliqueRank [0-9]+(?: nvlDomainSize [0-9]+)?"
)
"""mnnvl.cc: "MNNVL %d cliqueId %x cliqueSize %d cliqueRank %d" (2.25-2.29), with
" nvlDomainSize %d" from 2.30."""
_NVLS = re.compile(
    r"NCCL INFO NVLS multicast support is (?P<not>not )?available on dev [0-9]+"
    r"(?: \(NVLS_NCHANNELS [0-9]+\))?"
)
"""transport/nvls.cc: "... is %savailable on dev %d" (2.25, 2.26, 2.30), with
" (NVLS_NCHANNELS %d)" in 2.27-2.29."""
_DEVICE = re.compile(
    r"^#\s+Rank\s+[0-9]+\s+Group\s+[0-9]+\s+Pid\s+(?P<pid>[0-9]+)\s+on\s+(?P<host>\S+)"
)
_OOB = re.compile(r"^#\s*Out of bounds values\s*:(?P<rest>.*)$")
_OOB_VALUE = re.compile(r"^\s*(?P<n>[0-9]{1,18})\s+(?P<ok>OK|FAILED)\s*$")
_REDUCED = re.compile(r"^#\s*Reducing maxBytes to (?P<max>[0-9]+) due to memory limitation")
_JSON_OUT = re.compile(r"^# Writing JSON output to (?P<path>\S.*)$")
_CHANNELS = re.compile(
    r"NCCL INFO (?P<coll>[0-9]+) coll channels, (?P<collnet>[0-9]+) collnet channels, "
    r"(?P<nvls>[0-9]+) nvls channels"
)
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(?P<v>\S+)(?:\s+(?P<word>\S+))?\s*$")
"""nccl-tests' footer (common.cu): the word is empty unless NCCL_TESTS_MIN_BW is set, then
"FAILED" when the average is below 0.9 x that figure (and the binary exits EXIT_FAILURE)
or "OK"."""
_STARTING = re.compile(r"^#\s*Collective test starting:\s*(?P<name>\S+)")
_CONCLUDED = re.compile(r"^#\s*Collective test concluded:\s*(?P<name>\S+)")
_SWEEP = re.compile(
    r"^#\s*nThread [0-9]+ nGpus [0-9]+ minBytes (?P<min>[0-9]+) maxBytes (?P<max>[0-9]+) "
    r"step: (?P<step>[0-9]+)\((?P<kind>factor|bytes)\)"
)
_FATAL = re.compile(r"Test (?:NCCL|CUDA) failure|: Test failure ")
_KILLED = re.compile(
    r"exited on signal [0-9]+|BAD TERMINATION|mpirun noticed that process|srun: error:|"
    r"one or more processes exited with non-zero status|"
    r"Segmentation fault|core dumped|terminate called|\bKilled\b|"
    r"Primary job\s+terminated normally, but [0-9]+ process returned"
)


@dataclass(frozen=True)
class Diagnosis:
    pattern: re.Pattern[str]
    cause: str
    check: str


DIAGNOSES = (
    Diagnosis(
        re.compile(r"MNNVL \(cliqueSize [0-9]+\) is available but not working"),
        "multi-node NVLink is there but FABRIC memory handles fail (mnnvl.cc): the pod has no "
        "IMEX channel (no ComputeDomain channel claim) or the ComputeDomain's IMEX daemons "
        "are not connected",
        "ls /dev/nvidia-caps-imex-channels in the pod; kubectl get computedomains and the "
        "IMEX daemon pods of the job's ComputeDomain (nvidia-imex-ctl -N in one of them)",
    ),
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
    if not tokens or not tokens[0][:1].isdigit():
        return
    size = byte_value(tokens[0], "a table row's size", run)
    if size is None:
        run.unreadable_rows += 1
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
        value, bad = cell_value(tokens[i])
        values.append(value if bad is None else None)
        if bad is not None:
            impossible.append(f"busbw {bad} at {tokens[0]} B")
        elif value is None and tokens[i] != "N/A":
            run.malformed.append(f"busbw {tokens[i][:20]!r} at {size} B is not a number")
    count = 0
    for i in wrong:
        if tokens[i] == "N/A":  # -c 0
            continue
        value, bad = cell_value(tokens[i])
        if value is None or bad is not None or value != int(value):
            # a count is a whole number: 0.5, 1e400 or text is not one (never read as 0)
            impossible.append(f"#wrong {tokens[i]} at {tokens[0]} B")
            continue
        count += int(value)
    run.rows.append(
        Row(
            size=size,
            busbw_oop=values[0] if values else None,
            busbw_ip=values[1] if len(values) > 1 else None,
            wrong=count,
            impossible=impossible,
        )
    )


def _comment(line: str, run: Run, columns: list[str] | None) -> list[str] | None:
    """A ``#`` line of nccl-tests: the column header (returned), the sweep, footers, hosts."""
    tokens = line.lstrip("#").split()
    if tokens[:1] == ["size"] and "busbw" in tokens:
        return tokens
    if m := _SWEEP.match(line):
        low, high, step = (
            byte_value(m[k], f"the sweep's {k}", run) for k in ("min", "max", "step")
        )
        if low is not None and high is not None and step is not None:
            run.sweep = (low, step, m["kind"])
            run.expected_rows = sweep_rows(low, high, step, m["kind"])
    elif (m := _REDUCED.match(line)) and run.sweep is not None:
        # the memory check lowers maxBytes after the sweep line (common.cu): fewer sizes
        low, step, kind = run.sweep
        if (high := byte_value(m["max"], "the reduced maxBytes", run)) is not None:
            run.expected_rows = sweep_rows(low, high, step, kind)
    elif m := _CONCLUDED.match(line):
        run.concluded = True
        run.test = run.test or m["name"]
    elif m := _OOB.match(line):
        if v := _OOB_VALUE.match(m["rest"]):
            add_out_of_bounds(run, int(v["n"]), v["ok"] == "OK")
        else:
            run.malformed.append(f"unreadable out-of-bounds line: {line[:80]!r}")
            add_out_of_bounds(run, 0, False)
    elif m := _AVG.match(line):
        run.avg_busbw = cell_value(m["v"])[0]
        if m["word"] == "FAILED":
            run.avg_failed = True
        elif m["word"] not in (None, "OK"):
            run.malformed.append(f"unreadable average bus bandwidth line: {line[:80]!r}")
    elif m := _DEVICE.match(line):
        run.hosts.add(m["host"])
        if (pid := count_value(m["pid"], "a rank's Pid", run)) is not None:
            run.pids.add((m["host"], pid))
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
        if columns is not None and line[:1].isdigit():  # '²' too: byte_value refuses it
            _row(line, columns, run)
        _scan(line, run)
    if len(runs) > 1 and runs[0].test is None and not runs[0].rows:
        # lines before the first test (launcher output, NCCL init) belong to it
        first = runs.pop(0)
        merge_info(runs[0], first)
    return runs


def parse(text: str) -> Run:
    """The first run of a log (for a log of one test)."""
    return parse_runs(text)[0]


def _scan(line: str, run: Run) -> None:
    """What one line says of the run: the host and pid NCCL's own lines name, then by kind
    of line, a WARN (with its diagnosis), an nccl-tests failure, an INFO line (read by
    :data:`_INFO`), or a launcher's word that a rank was killed or crashed."""
    if "NCCL " in line and (m := _HOST_PREFIX.match(line)):
        run.hosts.add(m["host"])
        if (pid := count_value(m["pid"], "an NCCL line's pid", run)) is not None:
            run.debug_pids.add((m["host"], pid))
    if "NCCL version " in line and (m := _VERSION.search(line)):
        major, minor, patch = (int(x) for x in m["v"].split("."))
        run.nccl_versions.add((major, minor, patch))
    if "NCCL WARN" in line:
        run.warnings.append(_warning(line))
    elif _FATAL.search(line):
        run.fatal.append(line)
    elif "NCCL INFO" in line:
        _scan_info(line, run)
    elif _KILLED.search(line):
        run.killed.append(line)


def _warning(line: str) -> dict[str, str]:
    """A WARN line with the cause and check of the first diagnosis that matches it."""
    diag = next((d for d in DIAGNOSES if d.pattern.search(line)), None)
    cause, check = (diag.cause, diag.check) if diag else UNKNOWN
    return {"line": line, "cause": cause, "check": check}


def _scan_info(line: str, run: Run) -> None:
    """An INFO line: the first of :data:`_INFO`'s patterns that it matches says what it
    records (none when the line is not one the verdict reads)."""
    for pattern, record in _INFO:
        if m := pattern.search(line):
            record(m, run)
            return


def _on_network(m: re.Match[str], run: Run) -> None:
    run.networks.add(m["net"])
    if m["net"].lower() == "socket":
        run.socket_in_use = True


def _on_ib_devices(m: re.Match[str], run: Run) -> None:
    run.link_layers.update({h["hca"]: h["layer"] for h in _HCA.finditer(m["devs"])})


def _on_socket(m: re.Match[str], run: Run) -> None:
    run.socket_in_use = True


def _on_no_ib_device(m: re.Match[str], run: Run) -> None:
    run.no_ib_device = True


def _on_channel(m: re.Match[str], run: Run) -> None:
    if m["via"].startswith("NET/"):
        run.inter_node.append(m["via"])
    elif m["via"].startswith("P2P/MNNVL"):  # p2p.cc: "via P2P/%s%s%s", MNNVL or CUMEM
        run.mnnvl_channels += 1


def _on_clique(m: re.Match[str], run: Run) -> None:
    size = count_value(m["size"], "NCCL's cliqueSize", run)
    if size is not None and m["on"] != "0":
        run.mnnvl = True
        run.cliques[m["id"]] = max(run.cliques.get(m["id"], 0), size)


def _on_nvls(m: re.Match[str], run: Run) -> None:
    available = m["not"] is None
    run.nvls = available if run.nvls is None else run.nvls and available


def _on_gdr_disabled(m: re.Match[str], run: Run) -> None:
    run.gdr_disabled.append(m["hca"])


def _on_channel_counts(m: re.Match[str], run: Run) -> None:
    counts = {n: count_value(m[n], f"NCCL's {n} channels", run) for n in ("collnet", "nvls")}
    run.in_network |= {n for n, c in counts.items() if c}


def _on_nnodes(m: re.Match[str], run: Run) -> None:
    nnodes = count_value(m["nnodes"], "NCCL's nNodes", run)
    nranks = count_value(m["nranks"], "NCCL's nRanks", run)
    if nnodes is None or nranks is None:
        return
    run.nnodes = max(run.nnodes or 0, nnodes)
    run.nranks = max(run.nranks or 0, nranks)
    run.mnnvl |= m["mnnvl"] not in (None, "0")
    run.mnnvl_off |= m["mnnvl"] == "0"


def _on_init(m: re.Match[str], run: Run) -> None:
    if (nranks := count_value(m["nranks"], "NCCL's nranks", run)) is not None:
        run.nranks = max(run.nranks or 0, nranks)


_INFO: tuple[tuple[re.Pattern[str], Callable[[re.Match[str], Run], None]], ...] = (
    (_USING_NETWORK, _on_network),
    (_NET_IB, _on_ib_devices),
    (_SOCKET_USING, _on_socket),
    (_NO_IB, _on_no_ib_device),
    (_CHANNEL, _on_channel),
    (_GDR_DISABLED, _on_gdr_disabled),
    (_CHANNELS, _on_channel_counts),
    (_NNODES, _on_nnodes),
    (_INIT, _on_init),
    (_CLIQUE, _on_clique),
    (_NVLS, _on_nvls),
)
"""The INFO lines the verdict reads, in order, each with what it records of the run: the
first pattern a line matches is the only one read."""
