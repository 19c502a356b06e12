"""What a node's files say, read the same way by every node check: GPUs, the driver,
a rail's RDMA device and port directory, GIDs, the kernel release."""

from __future__ import annotations

import re

from gpufabric.verify.expect import RailExpectation
from gpufabric.verify.nodes.probe import Probe

_DRIVER = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+(?P<version>[0-9]+\.[0-9]+(?:\.[0-9]+)?)")
BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_HEX4 = re.compile(r"[0-9a-f]{4}")


def ascii_int(text: str) -> int | None:
    """A decimal number written in ASCII digits (no sign, no blanks), else None."""
    return int(text) if text and text.isascii() and text.isdigit() else None


def first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0].strip() if (text or "").strip() else ""


def gpu_bdfs(probe: Probe) -> list[str]:
    """PCI addresses of the GPUs the NVIDIA driver registered (/proc/driver/nvidia/gpus)."""
    return [d for d in probe.listdir("/proc/driver/nvidia/gpus") if BDF.match(d.lower())]


def driver_version(probe: Probe) -> str | None:
    m = _DRIVER.search(probe.read("/proc/driver/nvidia/version") or "")
    return m["version"] if m else None


def rail_hca(probe: Probe, rail: RailExpectation) -> str | None:
    """The rail's RDMA device: the stack's ``hca`` or the one behind its netdev."""
    if rail.hca:
        return rail.hca
    devices = probe.listdir(f"/sys/class/net/{rail.netdev}/device/infiniband")
    return devices[0] if devices else None


def ipv4_of_gid(gid: str) -> str | None:
    """The IPv4 address of an IPv4-mapped GID (``0000:...:ffff:c0a8:0a02``), else None."""
    groups = gid.lower().split(":")
    if len(groups) != 8 or groups[:5] != ["0000"] * 5 or groups[5] != "ffff":
        return None
    if not all(_HEX4.fullmatch(g) for g in groups[6:]):
        return None
    raw = bytes.fromhex(groups[6] + groups[7])
    return ".".join(str(b) for b in raw)


def port_dir(hca: str) -> str:
    return f"/sys/class/infiniband/{hca}/ports/1"


def kernel_release(probe: Probe) -> str | None:
    return first_line(probe.read("/proc/sys/kernel/osrelease")) or None
