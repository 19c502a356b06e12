"""``verify nodes`` in one round trip per host: gather every fact, then judge locally.

A host's node checks read a few hundred files and run a few commands. Asked one at a time
over ssh or ``kubectl exec`` that is one network round trip each; here the facts a stack's
checks read are gathered by ONE generated POSIX ``sh`` script (:func:`gather_script`), run
on the host as a single command, and the checks of :mod:`gpufabric.verify.nodes.checks` then run
unchanged on a :class:`SnapshotProbe` that answers from what came back. The script follows
the dependencies a check follows on the host itself (the RDMA device behind a netdev, the
PCI bridges above a GPU, the kubelet's config file, the processes of the container runtime),
so one round trip answers every check on the hosts gpufabric knows. Whatever a check asks
that the script did not gather is asked in a further round trip of exactly those requests
(:func:`request_script`), at most :data:`MAX_ROUNDS` in all; a check still missing a fact
after that is ERROR, never judged on a guess.

The answer is framed so that nothing on the host can forge it: every record is a header
line that starts with a random per-run boundary (``@gf-`` and 32 hex digits, sent in the
script) and carries its key length-prefixed; file contents and command output come as
``od`` hexadecimal, which can never contain the boundary; a trailer gives the exit status;
the answer ends with the record count. Output that is truncated, malformed or that lies
about its framing is an ERROR for every check of the host (:class:`GatherError`).

The script reads the same way :class:`gpufabric.verify.nodes.probe.HostProbe` does (``od`` in
place of ``cat``, ``ls -1 -A``, ``test -e``, ``readlink -f``, commands by ``eval`` in a subshell),
so a snapshot answers exactly what the probe would have; it writes nothing on the host.
"""

from __future__ import annotations

import re
import secrets
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from gpufabric.verify.expect import Expectation, RailExpectation
from gpufabric.verify.nodes import checks as nodes
from gpufabric.verify.nodes import fabric as node_fabric
from gpufabric.verify.nodes import rails as node_rails
from gpufabric.verify.nodes import sysfs as node_sysfs
from gpufabric.verify.results import Check, error

_OFFSET = re.compile(r"^[0-9]+", re.MULTILINE)
MAX_ROUNDS = 4
"""Round trips per host at most: the prefetch, then requests for what it did not gather."""
FORMAT = "1"
Key = tuple[str, str]
"""(operation, what): ``f`` read a file, ``l`` list a directory, ``e`` test existence,
``r`` resolve symlinks, ``x`` run a command; paths are the node's own (``/sys/...``)."""
OPS = frozenset("flerx")
_OPS = {op.encode(): op for op in OPS}
HOST_TOOLS = ("od", "ls", "readlink", "tr")
"""What the script needs on the host besides sh: without one, nothing it says is trusted."""

_LIBRARY = r"""LC_ALL=C
export LC_ALL
n=0
O=
C=1
hd() {
    n=$((n + 1))
    printf '%s %s %s %s\n' "$B" "$1" "${#2}" "$2"
}
tl() {
    printf '%s = %s\n' "$B" "$1"
}
f() {
    hd f "$1"
    od -Ad -tx1 "$R$1" 2>/dev/null
    C=$?
    tl "$C"
    return "$C"
}
cap() {
    hd "$1" "$2"
    shift 2
    O=$("$@" 2>/dev/null </dev/null; echo "x$?")
    C=${O##*x}
    O=${O%x*}
    printf '%s' "$O" | od -Ad -tx1
    tl "$C"
    return "$C"
}
l() { cap l "$1" ls -1 -A -- "$R$1"; }
r() { cap r "$1" readlink -f -- "$R$1"; }
x() { cap x "$1" eval "$1"; }
e() {
    hd e "$1"
    if [ -e "$R$1" ]; then C=0; else C=1; fi
    tl "$C"
    return "$C"
}
each() {
    for ep in "$R$2"/*; do
        [ -e "$ep" ] || continue
        "$1" "$2/${ep##*/}"
    done
}
"""

_PREFETCH = r"""NL='
'
G=0
SEEN='|'
hca() {
    l "/sys/class/net/$1/device/infiniband"
    H=
    if [ "$C" = 0 ]; then H=${O%%"$NL"*}; fi
}
port() {
    e "/sys/class/infiniband/$1"
    e "/sys/class/net/$2"
    P="/sys/class/infiniband/$1/ports/1"
    e "$P"
    for pf in state phys_state rate link_layer; do f "$P/$pf"; done
}
gid1() {
    f "$1"
    gt=
    { IFS= read -r gt <"$R$1"; } 2>/dev/null
    if [ "$gt" = "RoCE v2" ]; then
        f "$P/gid_attrs/ndevs/${1##*/}"
        f "$P/gids/${1##*/}"
    fi
}
gids() { P="/sys/class/infiniband/$1/ports/1"; l "$P/gid_attrs/types"; each gid1 "$P/gid_attrs/types"; }
pkeys() { P="/sys/class/infiniband/$1/ports/1"; l "$P/pkeys"; each f "$P/pkeys"; }
vfdev() { pkeys "${1##*/}"; }
vfn() {
    case ${1##*/} in virtfn*) ;; *) return 0 ;; esac
    l "$1/infiniband"
    [ "$C" = 0 ] && each vfdev "$1/infiniband"
    return 0
}
vfpkeys() { l "/sys/class/infiniband/$1/device"; each vfn "/sys/class/infiniband/$1/device"; }
bridge() {
    case $SEEN in *"|$1|"*) return 0 ;; esac
    SEEN="$SEEN$1|"
    f "$1/config"
}
bridges() {
    case $1 in "$R"/*) bq=${1#"$R"} ;; *) return 0 ;; esac
    acc=
    cand=
    found=
    set -f
    oifs=$IFS
    IFS=/
    for part in $bq; do
        [ -n "$part" ] || continue
        acc="$acc/$part"
        case $part in
            [0-9a-f][0-9a-f][0-9a-f][0-9a-f]:[0-9a-f][0-9a-f]:[0-9a-f][0-9a-f].[0-7])
                if [ -n "$cand" ]; then found="$found$cand$NL"; fi
                cand=$acc
                ;;
        esac
    done
    IFS=$oifs
    set +f
    while IFS= read -r br; do
        if [ -n "$br" ]; then bridge "$br"; fi
    done <<EOF
$found
EOF
}
pci() {
    r "$1"
    if [ "$C" = 0 ]; then bridges "${O%"$NL"}"; fi
    if e "$1/iommu_group"; then
        G=1
        f "$1/iommu_group/type"
    fi
}
grp() { if e "$1/type"; then f "$1/type"; fi; }
kcfg() {
    ka=$(tr '\000' '\n' <"$R$1/cmdline" 2>/dev/null) || return 0
    cfg=
    prev=
    while IFS= read -r arg; do
        case $prev in --config) cfg=$arg ;; esac
        case $arg in --config=*) cfg=${arg#--config=} ;; esac
        prev=$arg
    done <<EOF
$ka
EOF
    case $cfg in
        '' | */./* | */../* | *//* | */. | */.. | */) ;;
        /*) f "$cfg" ;;
        *) f "/$cfg" ;;
    esac
}
procs() {
    x "$1"
    while IFS= read -r ln; do
        pd=${ln%/comm}
        case $pd in "$R"/proc/*) pd=${pd#"$R"} ;; *) continue ;; esac
        for pf in comm cmdline limits; do f "$pd/$pf"; done
        if [ "$2" = kubelet ]; then kcfg "$pd"; fi
    done <<EOF
$O
EOF
}
kconfig() {
    if f /proc/config.gz; then return 0; fi
    rel=
    { read -r rel <"$R/proc/sys/kernel/osrelease"; } 2>/dev/null
    if [ -z "$rel" ]; then return 0; fi
    f "/boot/config-$rel" || f "/lib/modules/$rel/config"
}
"""


@dataclass(frozen=True)
class Script:
    """A generated gather script and the boundary its answer must carry."""

    text: str
    boundary: str


class GatherError(Exception):
    """The host's answer is not a whole, well-framed answer to this run's script."""


class Answer(NamedTuple):
    """One record: the exit status and what was read (a tuple: a host has ~1,200)."""

    rc: int
    data: bytes


def new_boundary() -> str:
    """``@gf-`` and 32 random hex digits: ``@`` and ``g`` never occur in ``od`` output."""
    return "@gf-" + secrets.token_hex(16)


def _q(word: str) -> str:
    return shlex.quote(word)


def _script(body: Iterable[str], root: str, boundary: str, prefetch: bool) -> Script:
    head = [
        "# gpufabric verify nodes: gather a node's facts (read-only; generated)",
        "# Helpers are shared by every stack, which calls only those its checks need (some",
        "# through each): unreached code and unread result variables are expected.",
        "# shellcheck disable=SC2317,SC2034",
        f"B={_q(boundary)}",
        f"R={_q(root.rstrip('/'))}",
        _LIBRARY.rstrip("\n"),
    ]
    if prefetch:
        head.append(_PREFETCH.rstrip("\n"))
    tail = ['printf \'%s END %s\\n\' "$B" "$n"', "exit 0"]
    start = [
        f"for t in {' '.join(HOST_TOOLS)}; do",
        '    command -v "$t" >/dev/null 2>&1 || { printf \'%s NOTOOL %s\\n\' "$B" "$t"; exit 0; }',
        "done",
        f"printf '%s BEGIN {FORMAT}\\n' \"$B\"",
    ]
    return Script("\n".join([*head, *start, *body, *tail]) + "\n", boundary)


def node_path(path: str) -> str:
    """The key of a path: absolute, as on the node (the probe's root is added on the host)."""
    return "/" + path.lstrip("/")


def request_script(needs: Sequence[Key], root: str, boundary: str | None = None) -> Script:
    """A script answering exactly these requests (a later round trip)."""
    body = [f"{op} {_q(what)}" for op, what in needs if op in OPS]
    return _script(body, root, boundary or new_boundary(), prefetch=False)


def _rail_lines(rail: RailExpectation, kinds: set[str]) -> list[str]:
    """Prefetch for one rail: its RDMA device (named or found behind the netdev), then what
    each of its checks reads."""
    lines = [f"H={_q(rail.hca)}" if rail.hca else f"hca {_q(rail.netdev)}"]
    per_kind = {
        "hca": "",
        "port": f'port "$H" {_q(rail.netdev)}',
        "gid": 'gids "$H"',
        "pkeys": 'pkeys "$H"',
        "vfpkeys": 'vfpkeys "$H"',
    }
    guarded = [per_kind[k] for k in sorted(kinds) if per_kind.get(k)]
    if guarded:
        lines.append('if [ -n "$H" ]; then ' + "; ".join(guarded) + "; fi")
    lines.append('HCAS="$HCAS$H$NL"')
    if "mtu" in kinds:
        lines.append(f"f {_q(f'/sys/class/net/{rail.netdev}/mtu')}")
    if "pfc" in kinds:
        lines += [f"x {_q(cmd % _q(rail.netdev))}" for cmd in node_rails.PFC_COMMANDS]
    return lines


def _rail_kinds(exp: Expectation, rail: RailExpectation) -> set[str]:
    prefix = f"rail.{rail.name}."
    return {c.id[len(prefix) :] for c in nodes.node_checks(exp) if c.id.startswith(prefix)}


def _prefetch_body(exp: Expectation, root: str) -> list[str]:
    """What this stack's node checks read, in the order they read it."""
    body = [
        "e /proc/driver/nvidia",
        "l /proc/driver/nvidia/gpus",
        'GPUS=$O; [ "$C" = 0 ] || GPUS=',
        "f /proc/driver/nvidia/version",
        "f /sys/module/nvidia/version",
        "f /proc/sys/kernel/osrelease",
        "HCAS=",
    ]
    if exp.rdma and exp.gpudirect == "peermem":
        body += [f"e {_q(p)}" for p in nodes.PEERMEM_PATHS]
    elif exp.rdma:
        body.append("kconfig")
    if exp.rdma:
        body += ["l /sys/class/infiniband", "l /dev/infiniband"]
        for rail in exp.rails:
            body += _rail_lines(rail, _rail_kinds(exp, rail))
    body += [
        'while IFS= read -r d; do [ -z "$d" ] || pci "/sys/bus/pci/devices/$d"; done <<EOF',
        "$GPUS",
        "EOF",
        'while IFS= read -r d; do [ -z "$d" ] || pci "/sys/class/infiniband/$d/device"; done <<EOF',
        "$HCAS",
        "EOF",
        "f /proc/cmdline",
        "l /sys/class/iommu",
        'if [ "$G" = 0 ]; then l /sys/kernel/iommu_groups; each grp /sys/kernel/iommu_groups; fi',
    ]
    command = nodes.process_command(root)
    body.append(f"procs {_q(command % _q('kubelet'))} kubelet")
    for names in (nodes.RUNTIMES, *((r,) for r in nodes.RUNTIMES)):
        body.append(f"procs {_q(command % _q('|'.join(names)))} runtime")
    if exp.nvlink is not None:
        body += _nvlink_lines()
    return body


def _nvlink_lines() -> list[str]:
    """What the multi-node NVLink checks read: nvidia-smi's print, the IMEX channel
    devices, and the host's IMEX unit files with the ``*.wants`` directories naming it."""
    unit = node_fabric.IMEX_UNIT
    lines = [
        f"x {_q(node_fabric.NVSMI_COMMAND)}",
        f"l {_q(node_fabric.IMEX_CHANNELS_DIR)}",
        "f /proc/devices",
    ]
    lines += [f"f {_q(f'{d}/{unit}')}" for d in node_fabric.UNIT_DIRS]
    for base in node_fabric.UNIT_DIRS[:2]:
        lines += [
            f"l {_q(base)}",
            "while IFS= read -r w; do case $w in *.wants) l "
            + _q(base)
            + '"/$w" ;; esac; done <<EOF',
            "$O",
            "EOF",
        ]
    return lines


def gather_script(exp: Expectation, root: str = "/", boundary: str | None = None) -> Script:
    """The one script that gathers what this stack's node checks read on a host whose root
    file system is seen at ``root`` (``/`` on the node, ``/host`` in the probe pod)."""
    return _script(_prefetch_body(exp, root), root, boundary or new_boundary(), prefetch=True)


# ----------------------------------------------------------------------------- parsing


def _repeats(text: str) -> bytes:
    """``od -Ad -tx1`` output with ``*`` lines (a line repeated up to the next offset)."""
    data, line = bytearray(), b""
    lines = [ln for ln in text.split("\n") if ln]
    for i, raw in enumerate(lines):
        if raw == "*":
            if i + 1 >= len(lines) or not line:
                raise ValueError("a repeat mark without a line to repeat or an end")
            end = node_sysfs.ascii_int(lines[i + 1].split(" ", 1)[0])
            if end is not None and end >= len(data) + len(line):  # as often as fits
                data += line * ((end - len(data)) // len(line))
            continue
        offset, _, hexes = raw.partition(" ")
        if node_sysfs.ascii_int(offset) != len(data):
            raise ValueError(f"offset {offset} where {len(data)} bytes were read")
        line = bytes.fromhex(hexes)
        data += line
    return bytes(data)


def _num(text: bytes) -> int | None:
    """A decimal number in ASCII digits (``bytes.isdigit`` takes no other script's)."""
    return int(text) if text.isdigit() else None


def unod(chunk: bytes) -> bytes:
    """The bytes ``od -Ad -tx1`` printed: lines of a decimal offset and hex bytes, ``*``
    for repeated lines, the total length last. The length must add up."""
    body, _, length = chunk.rstrip(b"\n").rpartition(b"\n")
    if not body:  # an empty file: its length only
        data = b""
    elif b"\n" not in body:  # most files: one line and the length
        offset, _, hexes = body.partition(b" ")
        data = bytes.fromhex(hexes.decode("ascii")) if _num(offset) == 0 else b"?"
    elif b"*" in body:
        data = _repeats(chunk.decode("ascii"))
    else:
        data = bytes.fromhex(_OFFSET.sub("", body.decode("ascii")))
    if _num(length) != len(data):
        raise ValueError("its length does not add up")
    return data


def _record(head: bytes, trail: bytes, n: int) -> tuple[Key, Answer]:
    """One record from its header-and-content part (``op size key\\nHEX``) and its trailer
    part (``= rc``), the boundary already split off both."""
    op, _, rest = head.partition(b" ")
    size_text, _, rest = rest.partition(b" ")
    size = _num(size_text)
    if op not in _OPS or size is None:
        raise GatherError(f"malformed record header (record {n})")
    if len(rest) < size or rest[size : size + 1] not in (b"\n", b""):
        raise GatherError(f"a key overruns its stated length (record {n})")
    rc = _num(trail[2:]) if trail.startswith(b"= ") else None
    if rc is None:
        raise GatherError(f"malformed record trailer (record {n})")
    chunk = rest[size + 1 :]
    try:  # what a failed read printed is not used; an existence test prints nothing
        data = unod(chunk) if rc == 0 and chunk else b""
    except (UnicodeDecodeError, ValueError) as exc:
        raise GatherError(f"a record's content is not od's output ({exc}; record {n})") from exc
    key = rest[:size].decode("utf-8", "surrogateescape")
    return (_OPS[op], key), Answer(rc, data)


def _start(output: bytes, mark: bytes) -> int:
    """Where the records begin: after this run's start line."""
    begin = mark + b" BEGIN " + FORMAT.encode() + b"\n"
    at = output.find(begin)
    if at < 0 or (at > 0 and output[at - 1 : at] != b"\n"):
        tool = output.rpartition(mark + b" NOTOOL ")[2].split(b"\n", 1)[0]
        if tool.decode("latin-1") in HOST_TOOLS:
            raise GatherError(f"the host has no {tool.decode()} (the script needs it)")
        raise GatherError("no answer from the gather script (its start line is missing)")
    return at + len(begin)


def parse(output: bytes, boundary: str) -> dict[Key, Answer]:
    """Every record of a gather script's answer. Anything before the line that starts it
    is ignored (a login shell's greeting); after its end line, nothing may be. Records are
    split at the boundary, which no record content (hexadecimal) can hold."""
    return _records(_parts(output, boundary))


def _parts(output: bytes, boundary: str) -> list[bytes]:
    """The records' parts (header-and-content, trailer, ...) of a whole, well-framed answer."""
    mark = boundary.encode("ascii")
    parts = (b"\n" + output[_start(output, mark) :]).split(b"\n" + mark + b" ")
    records, last = parts[1:-1], parts[-1]
    if parts[0] or len(parts) < 2 or not last.startswith(b"END "):
        raise GatherError("the answer is truncated: it has no end line")
    if len(records) % 2 or last != f"END {len(records) // 2}\n".encode():
        raise GatherError(
            f"the answer's end line does not match its {len(records) // 2} records "
            "(truncated or forged)"
        )
    return records


_RC = {f"= {rc}".encode(): rc for rc in range(256)}
"""A trailer as the script prints it: ``=`` and the exit status, 0 to 255."""
_ZERO = b"0000000 "


def _one_line(chunk: bytes) -> bytes | None:
    """The bytes of ``od`` output that is one line at offset 0 and the length (or the length
    alone), None for anything else (:func:`unod` decodes or refuses that)."""
    body, newline, length = chunk.rpartition(b"\n")
    if not length.isdigit():
        return None
    if not newline:
        return b"" if int(length) == 0 else None
    if body[:8] != _ZERO or b"\n" in body:
        return None
    try:
        data = bytes.fromhex(body[8:].decode("ascii"))
    except ValueError:  # UnicodeDecodeError too
        return None
    return data if int(length) == len(data) else None


_FAILED = {rc: Answer(rc, b"") for rc in range(1, 256)}
"""What a failed read or command answers: its status (what it printed is not used)."""


def _records(parts: list[bytes]) -> dict[Key, Answer]:
    """The records from their parts (header-and-content, trailer, ...). The common record (a
    key without a newline, content of one ``od`` line, a plain exit status) is decoded here,
    each distinct content once (a port's 128 P_Key entries are a few texts); every other
    record, well formed or not, by :func:`_record`, which decodes it or names what is wrong.
    A record taken here is one :func:`_record` decodes to the same answer."""
    answers: dict[Key, Answer] = {}
    decoded: dict[bytes, Answer] = {b"": Answer(0, b"")}
    ops, rcs, failed = _OPS, _RC, _FAILED
    for i in range(0, len(parts), 2):
        head, trail = parts[i], parts[i + 1]
        line, _, chunk = head.partition(b"\n")
        op, _, rest = line.partition(b" ")
        size, blank, key = rest.partition(b" ")
        operation, rc = ops.get(op), rcs.get(trail)
        answer = failed.get(rc) if rc else decoded.get(chunk) if rc == 0 else None
        if answer is None and rc == 0:
            data = _one_line(chunk)
            if data is not None:
                answer = decoded[chunk] = Answer(0, data)
        if (
            operation is None
            or answer is None
            or not blank
            or not size.isdigit()
            or len(key) != int(size)
        ):
            found, answer = _record(head, trail, i // 2)
            answers[found] = answer
        else:
            answers[(operation, key.decode("utf-8", "surrogateescape"))] = answer
    return answers


# ----------------------------------------------------------------------------- judging


@dataclass
class SnapshotProbe:
    """A :class:`gpufabric.verify.nodes.probe.Probe` answering from gathered records; every
    request it cannot answer is noted in ``missing`` (and answered as absent)."""

    name: str
    root: str
    answers: dict[Key, Answer]
    missing: set[Key] = field(default_factory=set)

    def _get(self, op: str, what: str) -> Answer | None:
        key = (op, what)
        found = self.answers.get(key)
        if found is None:
            self.missing.add(key)
        return found

    def read(self, path: str) -> str | None:
        # the hot path (a port's 128 pkey entries): node_path and _get inlined
        key = ("f", path if path[:1] == "/" and path[1:2] != "/" else node_path(path))
        found = self.answers.get(key)
        if found is None:
            self.missing.add(key)
            return None
        return found.data.decode("utf-8", "replace") if found.rc == 0 else None

    def read_bytes(self, path: str) -> bytes | None:
        found = self._get("f", node_path(path))
        return found.data if found is not None and found.rc == 0 else None

    def listdir(self, path: str) -> list[str]:
        found = self._get("l", node_path(path))
        if found is None or found.rc != 0:
            return []
        return sorted(ln for ln in found.data.decode("utf-8", "replace").splitlines() if ln)

    def exists(self, path: str) -> bool:
        key = node_path(path)
        for op in ("f", "l"):  # read or listed: it exists (a failure proves nothing)
            found = self.answers.get((op, key))
            if found is not None and found.rc == 0:
                return True
        tested = self._get("e", key)
        return tested is not None and tested.rc == 0

    def realpath(self, path: str) -> str | None:
        found = self._get("r", node_path(path))
        text = found.data.decode("utf-8", "replace").strip() if found is not None else ""
        return self.unroot(text) if found is not None and found.rc == 0 and text else None

    def unroot(self, path: str) -> str | None:
        root = "/" + self.root.strip("/") if self.root.strip("/") else "/"
        if root == "/":
            return path
        if path == root or path.startswith(root + "/"):
            return "/" + path[len(root) :].lstrip("/")
        return None

    def run(self, command: str, *args: str) -> tuple[int, str]:
        key = command % tuple(shlex.quote(a) for a in args) if args else command
        found = self._get("x", key)
        if found is None:
            return 127, ""
        return found.rc, found.data.decode("utf-8", "replace")


@dataclass(frozen=True)
class NodeJudgement:
    """A host's verdicts, or what to gather next to reach them."""

    checks: tuple[Check, ...] | None
    needs: tuple[Key, ...] = ()


def unusable(name: str, exp: Expectation, why: str, hint: str = "") -> list[Check]:
    """Every check of the host as ERROR: nothing about it was verified."""
    return [error(c.id, name, why, hint) for c in nodes.node_checks(exp)]


def judge(
    name: str, root: str, exp: Expectation, rounds: Sequence[tuple[str, bytes]], last: bool
) -> NodeJudgement:
    """Judge a host from its answers so far (``(boundary, output)`` per round trip). Pure
    and picklable: it runs in a worker process. Without ``last``, missing facts come back as
    ``needs``; with it, a check that lacks one is ERROR."""
    answers: dict[Key, Answer] = {}
    try:
        for boundary, output in rounds:
            answers.update(parse(output, boundary))
    except GatherError as exc:
        return NodeJudgement(tuple(unusable(name, exp, f"the host's answer is unusable: {exc}")))
    probe = SnapshotProbe(name, root, answers)
    results: list[Check] = []
    needs: set[Key] = set()
    for check in nodes.node_checks(exp):
        probe.missing = set()
        try:
            result = check.run(probe, exp)
        except Exception as exc:
            result = error(check.id, name, f"check crashed: {type(exc).__name__}: {exc}")
        if probe.missing:
            op, what = sorted(probe.missing)[0]
            result = error(
                check.id, name, f"not gathered in {len(rounds)} round trips ({op} {what})"
            )
            needs |= probe.missing
        results.append(result)
    if needs and not last:
        return NodeJudgement(None, tuple(sorted(needs)))
    return NodeJudgement(tuple(results))
