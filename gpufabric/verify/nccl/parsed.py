"""What one nccl-tests run says: :class:`Run` and its table's :class:`Row`, the records
that :mod:`.parse` (the text log) and :mod:`.parse_json` (the ``-J`` document) fill, and
the readings both parsers share: a table cell, the sizes a sweep announces, the
out-of-bounds footer, and one run's NCCL lines joining another's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_NUMBER = re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?$")
_NONFINITE = re.compile(r"^[-+]?(?:nan|inf|infinity)$", re.IGNORECASE)
MAX_SIZES = 10_000


@dataclass(kw_only=True)
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


@dataclass(kw_only=True)
class Run:
    """What one nccl-tests run (one collective test) says."""

    test: str | None = None
    source: str = ""
    rows: list[Row] = field(default_factory=list)
    expected_rows: int | None = None
    """Sizes the test announced (minBytes..maxBytes by its step), times its cycles."""
    sweep: tuple[int, int, str] | None = None
    """The announced sweep's minBytes, step and step kind (maxBytes may be reduced later)."""
    unreadable_rows: int = 0
    """Table rows printed whose size is not a byte count (in ``malformed``): printed, not read,
    so they neither count as missing sizes nor add values."""
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
    mnnvl_off: bool = False
    """A rank's ``comm ... MNNVL 0`` line: NCCL said it runs without multi-node NVLink."""
    nccl_versions: set[tuple[int, int, int]] = field(default_factory=set)
    """Every ``NCCL version X.Y.Z`` the ranks printed."""
    cliques: dict[str, int] = field(default_factory=dict)
    """MNNVL clique id -> its size, from each rank's ``MNNVL 1 cliqueId .. cliqueSize ..``."""
    mnnvl_channels: int = 0
    """Channels NCCL set up ``via P2P/MNNVL`` (over NVLink between trays)."""
    nvls: bool | None = None
    """``NVLS multicast support is [not ]available``: None when no rank said."""
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


def cell_value(token: str) -> tuple[float | None, str | None]:
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


def sweep_rows(low: int, high: int, step: int, kind: str) -> int | None:
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


MAX_COUNT_DIGITS = 7
"""Counts NCCL and nccl-tests print (nodes, ranks, channels) have at most this many digits:
ten million nodes is no fleet; a longer one is crafted or garbled, never read as a count."""
MAX_BYTES = 1 << 64
"""Sizes are ``size_t``: nccl-tests prints none at or past 2**64."""


def _shown(token: str) -> str:
    return f"{token[:20]}... ({len(token)} characters)" if len(token) > 24 else token


def ascii_digits(token: str) -> bool:
    """Only 0-9: ``str.isdigit`` also takes '²', '①' and other scripts' digits."""
    return token.isascii() and token.isdigit()


def count_value(token: str, what: str, run: Run) -> int | None:
    """A count NCCL printed, or None with the reason in ``run.malformed`` (not 0-9 digits, or
    more than :data:`MAX_COUNT_DIGITS` of them)."""
    if not ascii_digits(token) or len(token) > MAX_COUNT_DIGITS:
        run.malformed.append(f"{what} {_shown(token)!r} is not a count")
        return None
    return int(token)


def byte_value(token: str, what: str, run: Run) -> int | None:
    """A size in bytes nccl-tests printed, or None with the reason in ``run.malformed``."""
    if not ascii_digits(token) or len(token) > 20 or int(token) >= MAX_BYTES:
        run.malformed.append(f"{what} {_shown(token)!r} is not a byte count")
        return None
    return int(token)


def add_out_of_bounds(run: Run, count: int, ok: bool) -> None:
    """One out-of-bounds footer. Several in one run (old builds print no test boundaries)
    keep the worst; a count that contradicts its word ("3 OK", "0 FAILED") is not OK."""
    run.out_of_bounds = max(run.out_of_bounds or 0, count)
    agreed = ok and count == 0
    run.out_of_bounds_ok = (
        agreed if run.out_of_bounds_ok is None else run.out_of_bounds_ok and agreed
    )
    run.footer = True


def merge_info(into: Run, other: Run) -> None:
    """NCCL's own evidence in ``other`` (lines before a log's first test, an
    NCCL_DEBUG_FILE) joins the run ``into``: transport, hosts, warnings, failures."""
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
    into.mnnvl_off |= other.mnnvl_off
    into.nccl_versions |= other.nccl_versions
    into.cliques.update(other.cliques)
    into.mnnvl_channels += other.mnnvl_channels
    if other.nvls is not None:
        into.nvls = other.nvls if into.nvls is None else into.nvls and other.nvls
    into.in_network |= other.in_network
    into.pids |= other.pids
    into.debug_pids |= other.debug_pids
    into.malformed += other.malformed
    into.avg_failed |= other.avg_failed
    if other.nnodes is not None:
        into.nnodes = max(into.nnodes or 0, other.nnodes)
    if other.nranks is not None:
        into.nranks = max(into.nranks or 0, other.nranks)
