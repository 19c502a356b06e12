"""``/proc/self/mountstats``, read strictly: which RPC transport each NFS mount uses.

The kernel writes one block per mount. Its first line comes from ``show_vfsstat``
(fs/proc_namespace.c): ``device SERVER:/EXPORT mounted on /PATH with fstype nfs4`` followed,
for NFS, by ``nfs_show_stats`` (fs/nfs/super.c): ``statvers=1.1``, then tab-indented lines:
``opts:`` (the mount options as mounted, ``proto=rdma`` or ``proto=tcp`` among them),
``age:``, ``caps:``, ``sec:``, ``events:``, ``bytes:``, and through ``rpc_clnt_show_stats``
(net/sunrpc/stats.c) one ``xprt:`` line per transport connection, printed by the transport's
own ``print_stats``: ``xprt:\\trdma ...`` (net/sunrpc/xprtrdma/transport.c,
``xprt_rdma_print_stats``) or ``xprt:\\ttcp ...`` (net/sunrpc/xprtsock.c,
``xs_tcp_print_stats``), each followed by counters (ten common to every transport first).
``nconnect`` gives one ``xprt:`` line per connection.

A mount asked for RDMA that the kernel connected over TCP (rpcrdma not loaded, the server
not listening on 20049, a mount helper retrying without ``proto=rdma``) shows ``xprt: tcp``
and ``proto=tcp``: exactly what :func:`transport_of` reports.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_DEVICE = re.compile(
    r"^(?:device (?P<device>\S+)|no device) mounted on (?P<path>\S+) "
    r"with fstype (?P<fstype>\S+)(?: (?P<stats>.*))?$"
)
_XPRT = re.compile(r"^\txprt:\t(?P<name>[a-z0-9-]+) (?P<counters>[0-9 ]+)$")
_OCTAL = re.compile(r"\\([0-7]{3})")
COMMON_COUNTERS = 10
"""Counters every transport prints first (port, binds, connects, connect time, idle time,
sends, receives, bad XIDs, request and backlog utilization)."""


class MountstatsError(ValueError):
    """The text is not /proc/self/mountstats as the kernel writes it."""


@dataclass(frozen=True, kw_only=True)
class Mount:
    device: str
    path: str
    """Where it is mounted (the kernel's octal escapes undone)."""
    fstype: str
    options: tuple[str, ...] = ()
    """The ``opts:`` line's options (NFS only)."""
    transports: tuple[str, ...] = ()
    """One name per ``xprt:`` line (NFS only), in the kernel's order."""

    @property
    def is_nfs(self) -> bool:
        return self.fstype.startswith("nfs")  # nfs (v2/v3) and nfs4

    def option(self, name: str) -> str | None:
        """The value of ``name=value`` among the options (None when absent)."""
        for opt in self.options:
            key, _, value = opt.partition("=")
            if key == name:
                return value
        return None


def _unescape(path: str) -> str:
    """Undo ``seq_path``'s escapes of space, tab, newline and backslash (``\\040``)."""
    return _OCTAL.sub(lambda m: chr(int(m[1], 8)), path)


def parse(text: str) -> list[Mount]:
    """Every mount of the text, in order; MountstatsError naming the line when a line is
    neither a block's first line nor one of its tab-indented lines, or an ``xprt:`` line
    is cut short."""
    mounts: list[Mount] = []
    current: dict[str, object] | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        head = _DEVICE.match(line)
        if head is not None:
            if current is not None:
                mounts.append(_mount(current))
            current = {
                "device": head["device"] or "",
                "path": _unescape(head["path"]),
                "fstype": head["fstype"],
                "options": (),
                "transports": [],
            }
            continue
        if current is None or not line.startswith("\t"):
            raise MountstatsError(f"line {number}: not a mountstats line: {line[:80]!r}")
        _detail(current, line, number)
    if current is not None:
        mounts.append(_mount(current))
    return mounts


def _detail(current: dict[str, object], line: str, number: int) -> None:
    if line.startswith("\topts:\t"):
        current["options"] = tuple(line.removeprefix("\topts:\t").split(","))
    elif line.startswith("\txprt:"):
        m = _XPRT.match(line)
        if m is None or len(m["counters"].split()) < COMMON_COUNTERS:
            raise MountstatsError(f"line {number}: a cut or unknown xprt line: {line[:80]!r}")
        transports = current["transports"]
        assert isinstance(transports, list)
        transports.append(m["name"])


def _mount(fields: dict[str, object]) -> Mount:
    transports = fields["transports"]
    options = fields["options"]
    assert isinstance(transports, list)
    assert isinstance(options, tuple)
    return Mount(
        device=str(fields["device"]), path=str(fields["path"]), fstype=str(fields["fstype"]), options=options,
        transports=tuple(transports),
    )  # fmt: skip


def mount_at(mounts: list[Mount], path: str) -> Mount | None:
    """The mount at ``path`` (the last one: a later mount hides an earlier one there)."""
    found = None
    for mount in mounts:
        if mount.path.rstrip("/") == path.rstrip("/") or mount.path == path:
            found = mount
    return found


def transports(mount: Mount) -> tuple[str, ...]:
    """The transports the mount's connections use (each once, sorted); ``proto=`` of its
    options when it shows no connection yet. IPv6 names (``tcp6``, ``rdma6``) count as
    their transport."""
    names = {name.removesuffix("6") for name in mount.transports}
    if not names and mount.option("proto"):
        names = {str(mount.option("proto")).removesuffix("6")}
    return tuple(sorted(names))
