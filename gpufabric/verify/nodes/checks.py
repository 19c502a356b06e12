"""Node preflight checks, tailored to a stack, read through a :class:`Probe`.

Every check reads the node's files (sysfs, procfs, /dev, /boot) under the probe's root and
runs a command only where no file says it (PFC: ``mlnx_qos`` or iproute2's ``dcb``). Pass
criteria follow the references gpufabric's docs cite: LBNL NHC / Azure ``check_hw_ib`` for
ports (ACTIVE, LinkUp, rate), NCCL's own module probe for nvidia-peermem, the GPU Operator's
DMA-BUF prerequisites (open kernel modules, kernel >= 5.12), NCCL's troubleshooting guide for
PCIe ACS and IOMMU.
"""

from __future__ import annotations

import functools
import gzip
import posixpath
import re
import shlex
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence

import yaml

from gpufabric import nics
from gpufabric.verify.expect import Expectation, RailExpectation
from gpufabric.verify.nodes.probe import Probe, ProbeCheck
from gpufabric.verify.nodes.probe import run_checks as probe_run_checks
from gpufabric.verify.results import Check, error, failed, passed, skipped

# Numbers are ASCII digits only: Python's \d and int() also take other scripts' digits
# ("٤٠٠", "²"), which no kernel file holds and int() may refuse.
_DRIVER = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+(?P<version>[0-9]+\.[0-9]+(?:\.[0-9]+)?)")
_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_KERNEL = re.compile(r"^(?P<major>[0-9]+)\.(?P<minor>[0-9]+)")
_LIMIT = re.compile(r"^Max locked memory\s+(?P<soft>\S+)\s+(?P<hard>\S+)", re.MULTILINE)
_HEX4 = re.compile(r"[0-9a-f]{4}")
_PKEY = re.compile(r"0x[0-9a-fA-F]{1,4}")
_CMDLINE_TOKEN = re.compile(r'(?:"[^"]*"?|[^\s"])+')
PEERMEM_PATHS = (
    "/sys/module/nvidia_peermem/version",
    "/sys/kernel/mm/memory_peers/nv_mem/version",
    "/sys/kernel/mm/memory_peers/nv_mem_nc/version",
)
"""The files NCCL's GDR probe looks for (net_ib/gdr.cc), in that order of preference."""
DMABUF_MIN_KERNEL = (5, 12)
ACS_CAP_ID = 0x000D
ACS_SRC_VALID, ACS_REQ_REDIR, ACS_CMPLT_REDIR = 0x1, 0x4, 0x8
RUNTIMES = ("containerd", "crio", "dockerd")
PFC_COMMANDS = ("mlnx_qos -i %s", "dcb pfc show dev %s")
"""What reads a netdev's PFC state, in the order tried (``%s``: the netdev)."""


# ----------------------------------------------------------------------------- helpers


def ascii_int(text: str) -> int | None:
    """A decimal number written in ASCII digits (no sign, no blanks), else None."""
    return int(text) if text and text.isascii() and text.isdigit() else None


def _first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0].strip() if (text or "").strip() else ""


def gpu_bdfs(probe: Probe) -> list[str]:
    """PCI addresses of the GPUs the NVIDIA driver registered (/proc/driver/nvidia/gpus)."""
    return [d for d in probe.listdir("/proc/driver/nvidia/gpus") if _BDF.match(d.lower())]


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


def _port(hca: str) -> str:
    return f"/sys/class/infiniband/{hca}/ports/1"


def kernel_release(probe: Probe) -> str | None:
    return _first_line(probe.read("/proc/sys/kernel/osrelease")) or None


# ---------------------------------------------------------------------------- GPU checks


def check_gpu_count(probe: Probe, exp: Expectation) -> Check:
    bdfs = gpu_bdfs(probe)
    if not probe.exists("/proc/driver/nvidia"):
        return failed(
            "gpu.count",
            probe.name,
            "the NVIDIA driver is not loaded (/proc/driver/nvidia missing)",
            "kubectl -n gpu-operator get pods (driver DaemonSet); dmesg | grep -i nvrm",
        )
    if len(bdfs) != exp.gpus:
        return failed(
            "gpu.count",
            probe.name,
            f"{len(bdfs)} GPUs registered with the driver, the stack expects {exp.gpus}",
            "nvidia-smi -L; dmesg | grep -i -e xid -e 'fallen off the bus'",
            found=bdfs,
        )
    return passed("gpu.count", probe.name, f"{len(bdfs)} GPUs", gpus=bdfs)


def check_driver(probe: Probe, exp: Expectation) -> Check:
    version = driver_version(probe)
    if version is None:
        return failed(
            "gpu.driver",
            probe.name,
            "no driver version: /proc/driver/nvidia/version missing or unrecognised",
            "cat /proc/driver/nvidia/version",
        )
    module = _first_line(probe.read("/sys/module/nvidia/version"))
    if module and module != version:
        return failed(
            "gpu.driver",
            probe.name,
            f"loaded kernel module {module} differs from the driver's {version}",
            "reboot or reload the driver so user space and kernel module match",
        )
    if exp.driver_version and version != exp.driver_version:
        return failed(
            "gpu.driver",
            probe.name,
            f"driver {version}, the stack pins {exp.driver_version} (gpuOperator.driver.version)",
            "kubectl -n gpu-operator get pods -l app=nvidia-driver-daemonset; pulumi up",
            version=version,
        )
    return passed("gpu.driver", probe.name, f"driver {version}", version=version)


def check_gpudirect(probe: Probe, exp: Expectation) -> Check:
    cid = f"gpudirect.{exp.gpudirect}"
    if not exp.rdma:
        return skipped(cid, probe.name, "fabric.rdma is none")
    if exp.gpudirect == "peermem":
        found = next((p for p in PEERMEM_PATHS if probe.exists(p)), None)
        if found is None:
            return failed(
                cid,
                probe.name,
                "nvidia-peermem is not loaded (NCCL will run without GPUDirect RDMA)",
                "kubectl -n gpu-operator logs ds/nvidia-driver-daemonset -c nvidia-peermem-ctr; "
                "lsmod | grep peermem",
            )
        return passed(cid, probe.name, f"peer memory module loaded ({found})")
    problems: list[str] = []
    unverified: list[str] = []
    version_text = probe.read("/proc/driver/nvidia/version")
    if version_text is None:
        unverified.append(
            "the NVIDIA driver is not loaded (/proc/driver/nvidia/version missing), so its "
            "kernel module type is unknown"
        )
    elif "Open Kernel Module" not in version_text:
        problems.append("the driver is the proprietary kernel module, DMA-BUF needs the open one")
    release = kernel_release(probe)
    m = _KERNEL.match(release or "")
    if m is None:
        unverified.append("kernel release unknown (/proc/sys/kernel/osrelease)")
    elif (int(m["major"]), int(m["minor"])) < DMABUF_MIN_KERNEL:
        problems.append(f"kernel {release} is older than 5.12")
    p2pdma, where = kernel_option(probe, release, "CONFIG_PCI_P2PDMA")
    if p2pdma is None:
        unverified.append(
            "CONFIG_PCI_P2PDMA not verified: no kernel config readable at "
            + ", ".join(kernel_config_paths(release))
        )
    elif p2pdma not in ("y",):
        problems.append(f"kernel {release} is built without CONFIG_PCI_P2PDMA ({where})")
    if problems:
        return failed(
            cid,
            probe.name,
            "; ".join(problems + unverified),
            "gpuOperator driver with kernelModuleType open; a kernel >= 5.12 with "
            "CONFIG_PCI_P2PDMA; or fabric.gpuDirect: peermem",
        )
    if unverified:
        return error(
            cid,
            probe.name,
            "; ".join(unverified),
            "on the node: cat /proc/driver/nvidia/version; uname -r; "
            "zgrep CONFIG_PCI_P2PDMA /proc/config.gz || grep CONFIG_PCI_P2PDMA "
            "/boot/config-$(uname -r)",
        )
    return passed(
        cid, probe.name, f"open kernel module, kernel {release}, CONFIG_PCI_P2PDMA=y ({where})"
    )


def kernel_config_paths(release: str | None) -> list[str]:
    """Where distributions keep the running kernel's build config, in the order read."""
    paths = ["/proc/config.gz"]
    if release:
        paths += [f"/boot/config-{release}", f"/lib/modules/{release}/config"]
    return paths


def kernel_option(probe: Probe, release: str | None, option: str) -> tuple[str | None, str]:
    """(value, file) of a kernel build option: "y"/"m", "n" for "is not set" or absent from
    a readable config, None when no config could be read."""
    for path in kernel_config_paths(release):
        if path.endswith(".gz"):
            raw = probe.read_bytes(path)
            if raw is None:
                continue
            try:
                text = gzip.decompress(raw).decode("utf-8", errors="replace")
            except (OSError, EOFError):
                continue
        else:
            read = probe.read(path)
            if read is None:
                continue
            text = read
        for line in text.splitlines():
            if line.startswith(f"{option}="):
                return line.split("=", 1)[1].strip().strip('"'), path
        return "n", path
    return None, ""


# --------------------------------------------------------------------------- rail checks


def check_rail_hca(rail: RailExpectation) -> Callable[[Probe, Expectation], Check]:
    def run(probe: Probe, exp: Expectation) -> Check:
        cid = f"rail.{rail.name}.hca"
        hca = rail_hca(probe, rail)
        if hca is None:
            return failed(
                cid,
                probe.name,
                f"no RDMA device behind netdev {rail.netdev}",
                "ls /sys/class/infiniband; ibdev2netdev; is mlx5_ib loaded?",
            )
        if not probe.exists(f"/sys/class/infiniband/{hca}"):
            present = ", ".join(probe.listdir("/sys/class/infiniband")) or "none"
            return failed(
                cid,
                probe.name,
                f"RDMA device {hca} is missing (present: {present})",
                "fabric.rails[].hca must name the device on every GPU node; rdma link show",
            )
        if not probe.exists(f"/sys/class/net/{rail.netdev}"):
            return failed(
                cid,
                probe.name,
                f"netdev {rail.netdev} is missing",
                "ip link show; fabric.rails[].netdev must exist on every GPU node",
            )
        return passed(cid, probe.name, f"{hca} / {rail.netdev}", hca=hca)

    return run


def check_rail_port(rail: RailExpectation) -> Callable[[Probe, Expectation], Check]:
    def run(probe: Probe, exp: Expectation) -> Check:
        cid = f"rail.{rail.name}.port"
        hca = rail_hca(probe, rail)
        if hca is None or not probe.exists(_port(hca)):
            return error(cid, probe.name, f"no port 1 for rail {rail.name}'s device")
        base = _port(hca)
        state = _first_line(probe.read(f"{base}/state"))
        phys = _first_line(probe.read(f"{base}/phys_state"))
        rate = _first_line(probe.read(f"{base}/rate"))
        layer = _first_line(probe.read(f"{base}/link_layer"))
        bad = []
        if not state.endswith("ACTIVE"):
            bad.append(f"state {state or '?'} (expected ACTIVE)")
        if not phys.endswith("LinkUp"):
            bad.append(f"phys_state {phys or '?'} (expected LinkUp)")
        rate_gbps = rate.split(" ", 1)[0]
        if rate_gbps != str(exp.link_rate_gbps):
            bad.append(f"rate {rate or '?'} (expected {exp.link_rate_gbps} Gb/sec)")
        if layer != exp.link_layer:
            bad.append(f"link_layer {layer or '?'} (expected {exp.link_layer})")
        if bad:
            hint = (
                "cable, transceiver or switch port; ibstat / ethtool; for InfiniBand is the "
                "subnet manager running (sminfo)?"
                if "state" in bad[0] or "phys" in bad[0]
                else "fabric.linkRateGbps and fabric.type must match the NIC ports"
            )
            return failed(cid, probe.name, f"{hca} port 1: " + "; ".join(bad), hint)
        return passed(cid, probe.name, f"{hca} port 1 ACTIVE LinkUp {rate}")

    return run


def check_rail_gid(rail: RailExpectation) -> Callable[[Probe, Expectation], Check]:
    def run(probe: Probe, exp: Expectation) -> Check:
        cid = f"rail.{rail.name}.gid"
        hca = rail_hca(probe, rail)
        if hca is None:
            return error(cid, probe.name, f"no RDMA device for rail {rail.name}")
        base = _port(hca)
        types = probe.listdir(f"{base}/gid_attrs/types")
        found = []
        for idx in sorted(types, key=lambda s: (ascii_int(s) is None, ascii_int(s) or 0, s)):
            if _first_line(probe.read(f"{base}/gid_attrs/types/{idx}")) != "RoCE v2":
                continue
            if _first_line(probe.read(f"{base}/gid_attrs/ndevs/{idx}")) != rail.netdev:
                continue
            ipv4 = ipv4_of_gid(_first_line(probe.read(f"{base}/gids/{idx}")))
            if ipv4:
                found.append(f"{idx} ({ipv4})")
        if not found:
            return failed(
                cid,
                probe.name,
                f"no IPv4 RoCE v2 GID of {hca} on {rail.netdev}",
                f"the netdev needs its IPv4 address (ip addr show {rail.netdev}; show_gids); "
                "the RoCE v2 GID appears with it",
            )
        return passed(cid, probe.name, f"RoCE v2 GID {', '.join(found)} on {rail.netdev}")

    return run


def check_rail_mtu(rail: RailExpectation) -> Callable[[Probe, Expectation], Check]:
    def run(probe: Probe, exp: Expectation) -> Check:
        cid = f"rail.{rail.name}.mtu"
        text = _first_line(probe.read(f"/sys/class/net/{rail.netdev}/mtu"))
        mtu = ascii_int(text)
        if mtu is None:
            return error(cid, probe.name, f"cannot read the MTU of {rail.netdev}")
        if mtu != exp.mtu:
            return failed(
                cid,
                probe.name,
                f"{rail.netdev} MTU {text}, the stack expects {exp.mtu} (fabric.mtu)",
                "set the MTU on the node (netplan / NetworkManager / NicClusterPolicy) and on "
                "the switches end to end",
            )
        return passed(cid, probe.name, f"{rail.netdev} MTU {text}")

    return run


@functools.lru_cache(maxsize=4096)
def pkey_entry(text: str | None) -> int | None:
    """A P_Key table entry's value (sysfs ``pkeys/<index>``: ``0x8010`` full member,
    ``0x0010`` limited, ``0x0000`` an empty slot), None for an empty slot or anything that is
    not a 16-bit hexadecimal key. Cached: a port's 128 entries are mostly the same few texts."""
    line = _first_line(text)
    if _PKEY.fullmatch(line) and int(line, 16) & 0x7FFF:
        return int(line, 16)
    return None


def _pkey_table(probe: Probe, hca: str) -> set[int]:
    """The port's P_Key table: the value of every non-empty entry."""
    base = f"{_port(hca)}/pkeys"
    read = probe.read
    entries = [pkey_entry(read(f"{base}/{index}")) for index in probe.listdir(base)]
    return {value for value in entries if value is not None}


def check_rail_pkeys(rail: RailExpectation) -> Callable[[Probe, Expectation], Check]:
    def run(probe: Probe, exp: Expectation) -> Check:
        cid = f"rail.{rail.name}.pkeys"
        hca = rail_hca(probe, rail)
        table = _pkey_table(probe, hca) if hca is not None else set()
        if hca is None or not table:
            return error(cid, probe.name, f"cannot read the pkey table of rail {rail.name}'s port")
        bad = []
        for key in exp.pkeys or ():
            full = int(key, 16) | 0x8000
            if full not in table:
                limited = full & 0x7FFF in table
                bad.append(f"{key} {'limited member only' if limited else 'missing'}")
        if bad:
            return failed(
                cid,
                probe.name,
                f"{hca} port 1: " + "; ".join(bad),
                "the subnet manager must give this port full membership of every partition the "
                "stack's networks use (runbook: Prerequisites, subnet manager)",
            )
        return passed(cid, probe.name, f"{hca} port 1 full member of {', '.join(exp.pkeys or ())}")

    return run


def parse_pfc(text: str) -> dict[int, bool] | None:
    """Per-priority PFC state from ``mlnx_qos -i IF`` or ``dcb pfc show dev IF``."""
    m = re.search(r"prio-pfc\s+((?:[0-7]:(?:on|off)\s*)+)", text)
    if m:
        return {int(p): s == "on" for p, s in re.findall(r"([0-7]):(on|off)", m[1])}
    prio = re.search(r"^\s*priority\s+((?:[0-7]\s+)*[0-7])\s*$", text, re.MULTILINE)
    enabled = re.search(r"^\s*enabled\s+((?:[01]\s+)*[01])\s*$", text, re.MULTILINE)
    if prio and enabled:
        keys = [int(x) for x in prio[1].split()]
        values = [x == "1" for x in enabled[1].split()]
        if len(keys) == len(values):
            return dict(zip(keys, values, strict=True))
    return None


def check_rail_pfc(rail: RailExpectation) -> Callable[[Probe, Expectation], Check]:
    def run(probe: Probe, exp: Expectation) -> Check:
        cid = f"rail.{rail.name}.pfc"
        prio = exp.pfc_priority
        states = None
        for cmd in PFC_COMMANDS:
            rc, out = probe.run(cmd, rail.netdev)
            if rc == 0 and (states := parse_pfc(out)) is not None:
                break
        if states is None:
            return error(
                cid,
                probe.name,
                f"PFC state of {rail.netdev} unknown: neither mlnx_qos nor dcb answered",
                "install mlnx-tools or iproute2's dcb on the node (or in the probe image)",
            )
        on = sorted(p for p, v in states.items() if v)
        if prio not in on:
            return failed(
                cid,
                probe.name,
                f"PFC is off on priority {prio} of {rail.netdev} (enabled: {on or 'none'})",
                f"mlnx_qos -i {rail.netdev} --pfc "
                + ",".join("1" if p == prio else "0" for p in range(8))
                + " --trust dscp; the switches must pause on the same priority",
            )
        extra = [p for p in on if p != prio]
        note = f"; also on {extra}" if extra else ""
        return passed(cid, probe.name, f"PFC on priority {prio} of {rail.netdev}{note}")

    return run


# --------------------------------------------------------------------- PCIe and devices


def acs_control(config: bytes) -> int | None:
    """The ACS Control register from a PCI config space dump, None without ACS capability
    (or when only the first 256 bytes were readable)."""
    offset, seen = 0x100, set()
    while 0x100 <= offset <= len(config) - 8 and offset not in seen:
        seen.add(offset)
        (header,) = struct.unpack_from("<I", config, offset)
        if header in (0, 0xFFFFFFFF):
            return None
        if header & 0xFFFF == ACS_CAP_ID:
            (ctl,) = struct.unpack_from("<H", config, offset + 6)
            return int(ctl)
        offset = (header >> 20) & 0xFFC
        if offset == 0:
            return None
    return None


def _acs_flags(ctl: int) -> list[str]:
    names = (
        (ACS_SRC_VALID, "SrcValid"),
        (ACS_REQ_REDIR, "ReqRedir"),
        (ACS_CMPLT_REDIR, "CmpltRedir"),
    )
    return [name for bit, name in names if ctl & bit]


def _upstream_bridges(probe: Probe, device_path: str) -> list[str]:
    real = probe.realpath(device_path)
    if real is None:
        return []
    parts = real.split("/")
    pci = [i for i, p in enumerate(parts) if _BDF.match(p)]
    # every PCI ancestor on the path; the device itself is not a bridge on its own path
    return ["/".join(parts[: i + 1]) for i in pci[:-1]]


def check_acs(probe: Probe, exp: Expectation) -> Check:
    if not exp.rdma:
        return skipped("pcie.acs", probe.name, "fabric.rdma is none")
    devices = [f"/sys/bus/pci/devices/{b}" for b in gpu_bdfs(probe)]
    for rail in exp.rails:
        hca = rail_hca(probe, rail)
        if hca:
            devices.append(f"/sys/class/infiniband/{hca}/device")
    resolved = [d for d in devices if probe.realpath(d) is not None]
    bridges = sorted({b for d in resolved for b in _upstream_bridges(probe, d)})
    if not resolved:
        return error(
            "pcie.acs",
            probe.name,
            "no GPU or NIC found in sysfs, so there is no PCIe path to check",
            "ls /sys/bus/pci/devices; ls /sys/class/infiniband",
        )
    if not bridges:
        return passed(
            "pcie.acs",
            probe.name,
            f"the {len(resolved)} GPUs and NICs sit directly on the root bus: no bridge above "
            "them, so no ACS to redirect their peer-to-peer traffic",
        )
    enabled, unreadable = [], []
    for bridge in bridges:
        config = probe.read_bytes(f"{bridge}/config")
        if config is None or len(config) <= 256:
            unreadable.append(bridge.rsplit("/", 1)[-1])
            continue
        ctl = acs_control(config)
        if ctl is not None and (flags := _acs_flags(ctl)):
            enabled.append(f"{bridge.rsplit('/', 1)[-1]} ({'+ '.join(flags)}+)")
    if enabled:
        return failed(
            "pcie.acs",
            probe.name,
            f"ACS redirects peer-to-peer traffic on {len(enabled)} bridges: {', '.join(enabled)}",
            "disable ACS in the BIOS, or per boot: setpci -s <BDF> ECAP_ACS+0x6.w=0000 "
            "(NCCL troubleshooting: PCI Access Control Services)",
            bridges=enabled,
        )
    if unreadable:
        return error(
            "pcie.acs",
            probe.name,
            f"extended config space unreadable for {', '.join(unreadable)} (needs root)",
            "run the probe privileged / with sudo",
        )
    return passed("pcie.acs", probe.name, f"ACS off on {len(bridges)} bridges above GPUs and NICs")


def kernel_params(cmdline: str) -> list[tuple[str, str | None]]:
    """The kernel command line as the kernel's ``next_arg`` splits it: blanks separate
    parameters, double quotes protect blanks, ``--`` ends the kernel's part; names compare
    with ``-`` and ``_`` alike (``parameq``), so they come back with ``_``."""
    params: list[tuple[str, str | None]] = []
    for token in _CMDLINE_TOKEN.findall(cmdline):
        token = token.replace('"', "")
        if token == "--":
            break
        name, eq, value = token.partition("=")
        params.append((name.replace("-", "_"), value if eq else None))
    return params


def iommu_mode_of_cmdline(params: Sequence[tuple[str, str | None]]) -> tuple[str | None, str]:
    """("passthrough" | "translated" | None, the parameter that decided it). The kernel
    applies ``iommu=pt|nopt`` (x86 ``iommu_setup``, comma-separated options) and
    ``iommu.passthrough=`` (``kstrtobool``) in command-line order: the last one wins."""
    mode: str | None = None
    said = ""
    for name, value in params:
        if name == "iommu" and value is not None:
            for option in value.split(","):
                if option.startswith("nopt"):
                    mode, said = "translated", f"iommu={value}"
                elif option.startswith("pt"):
                    mode, said = "passthrough", f"iommu={value}"
        elif name == "iommu.passthrough" and value is not None:
            flag = _kstrtobool(value)
            if flag is not None:
                mode = "passthrough" if flag else "translated"
                said = f"iommu.passthrough={value}"
    return mode, said


def _kstrtobool(value: str) -> bool | None:
    """The kernel's ``kstrtobool``: y/Y/1/on true, n/N/0/off false, by the first characters."""
    low = value[:3].lower()
    if value[:1] in ("y", "Y", "1") or low.startswith("on"):
        return True
    if value[:1] in ("n", "N", "0") or low.startswith("of"):
        return False
    return None


PASSTHROUGH_GROUPS = frozenset({"identity"})
TRANSLATING_GROUPS = frozenset({"DMA", "DMA-FQ"})
"""IOMMU group types (``/sys/kernel/iommu_groups/N/type``, drivers/iommu/iommu.c): identity
maps DMA 1:1 (passthrough), DMA and DMA-FQ translate it (strict and lazy flushing)."""
IOMMU_DEFAULTS = (
    ("CONFIG_IOMMU_DEFAULT_PASSTHROUGH", "passthrough"),
    ("CONFIG_IOMMU_DEFAULT_DMA_LAZY", "translated"),
    ("CONFIG_IOMMU_DEFAULT_DMA_STRICT", "translated"),
)
"""The kernel's build-time default domain type, used when the command line sets none."""
_IOMMU_HINT = (
    "boot with iommu=pt (and no later iommu.passthrough=0 or iommu=nopt), or disable "
    "VT-d / AMD-Vi on bare metal: translation sends peer-to-peer traffic through the root "
    "complex"
)


def _device_groups(probe: Probe, exp: Expectation) -> dict[str, str]:
    """IOMMU group type of each GPU and rail NIC that sits in a group (device -> type)."""
    devices = {b: f"/sys/bus/pci/devices/{b}" for b in gpu_bdfs(probe)}
    for rail in exp.rails if exp.rdma else ():
        hca = rail_hca(probe, rail)
        if hca:
            devices[hca] = f"/sys/class/infiniband/{hca}/device"
    groups = {}
    for name, path in devices.items():
        if probe.exists(f"{path}/iommu_group"):
            groups[name] = _first_line(probe.read(f"{path}/iommu_group/type")) or "?"
    return groups


def _all_groups(probe: Probe) -> dict[str, str]:
    base = "/sys/kernel/iommu_groups"
    return {
        f"group {g}": _first_line(probe.read(f"{base}/{g}/type")) or "?"
        for g in probe.listdir(base)
        if probe.exists(f"{base}/{g}/type")
    }


def _judge_groups(probe: Probe, groups: Mapping[str, str], whose: str, said: str) -> Check:
    kinds = sorted(set(groups.values()))
    translating = sorted(d for d, t in groups.items() if t in TRANSLATING_GROUPS)
    if translating:
        note = f"; the kernel command line ends with {said}" if said else ""
        return failed(
            "pcie.iommu",
            probe.name,
            f"IOMMU translates DMA of {whose} (group type {', '.join(kinds)}; "
            f"{', '.join(translating[:8])}{' ...' if len(translating) > 8 else ''}){note}",
            _IOMMU_HINT,
        )
    if set(kinds) <= PASSTHROUGH_GROUPS:
        return passed(
            "pcie.iommu", probe.name, f"IOMMU on, {whose} in identity groups (passthrough)"
        )
    return error(
        "pcie.iommu",
        probe.name,
        f"IOMMU group type {', '.join(kinds)} of {whose} is neither identity nor DMA",
        "cat /sys/kernel/iommu_groups/*/type; ls -l /sys/bus/pci/devices/*/iommu_group",
    )


def _judge_cmdline(probe: Probe, mode: str | None, said: str) -> Check:
    """No group type readable although the IOMMU is on: the command line, else the kernel's
    build default, says what the kernel chose."""
    if mode is None:
        for option, default in IOMMU_DEFAULTS:
            value, where = kernel_option(probe, kernel_release(probe), option)
            if value == "y":
                mode, said = default, f"{option}=y ({where}), no iommu=pt on the command line"
                break
    if mode == "passthrough":
        return passed(
            "pcie.iommu", probe.name, f"IOMMU in passthrough ({said}; no group type readable)"
        )
    if mode == "translated":
        return failed("pcie.iommu", probe.name, f"IOMMU translates DMA ({said})", _IOMMU_HINT)
    return error(
        "pcie.iommu",
        probe.name,
        "IOMMU on, but no group type is readable and neither the kernel command line nor a "
        "readable kernel config says passthrough or translation",
        "cat /sys/kernel/iommu_groups/*/type; cat /proc/cmdline",
    )


def check_iommu(probe: Probe, exp: Expectation) -> Check:
    """What the kernel uses: the IOMMU group types in sysfs (the GPUs' and NICs' own, else
    every group's); the kernel command line only when no group type is readable."""
    mode, said = iommu_mode_of_cmdline(kernel_params(probe.read("/proc/cmdline") or ""))
    groups = _device_groups(probe, exp)
    if groups:
        return _judge_groups(probe, groups, "the GPUs and NICs", said)
    groups = _all_groups(probe)
    if groups:
        return _judge_groups(probe, groups, "the node's devices", said)
    if not probe.listdir("/sys/class/iommu"):
        return passed("pcie.iommu", probe.name, "IOMMU off (no IOMMU unit, no IOMMU group)")
    return _judge_cmdline(probe, mode, said)


def check_rdma_devices(probe: Probe, exp: Expectation) -> Check:
    if not exp.rdma:
        return skipped("rdma.devices", probe.name, "fabric.rdma is none")
    entries = probe.listdir("/dev/infiniband")
    uverbs = [e for e in entries if e.startswith("uverbs")]
    missing = []
    if len(uverbs) < len(exp.rails):
        missing.append(f"{len(uverbs)} uverbs devices for {len(exp.rails)} rails")
    if "rdma_cm" not in entries:
        missing.append("no rdma_cm")
    if missing:
        return failed(
            "rdma.devices",
            probe.name,
            "/dev/infiniband: " + "; ".join(missing),
            "modprobe ib_uverbs rdma_ucm (or let the NIC driver container load them)",
        )
    return passed("rdma.devices", probe.name, f"{len(uverbs)} uverbs + rdma_cm")


KUBELET_DEFAULT_ENDPOINT = "unix:///run/containerd/containerd.sock"
"""The kubelet's containerRuntimeEndpoint when neither its flags nor its config set one."""
RUNTIME_OF_ENDPOINT = (("cri-dockerd", "dockerd"), ("crio", "crio"), ("containerd", "containerd"))
"""The process behind a CRI endpoint, by a word of its socket path (first match wins):
cri-dockerd's containers are dockerd's, /var/run/crio/crio.sock is CRI-O's, containerd's
socket (also k3s' /run/k3s/containerd/containerd.sock) is containerd's."""


def process_command(root: str) -> str:
    """The command that lists ``/proc/PID/comm`` files whose name is one of ``%s``
    (an extended regular expression of names), under the probe's root."""
    proc = shlex.quote(root.rstrip("/") + "/proc")
    return f"grep -l -x -E %s {proc}/[0-9]*/comm 2>/dev/null"


def processes(probe: Probe, names: Sequence[str]) -> list[str]:
    """``/proc/PID`` (as on the node) of every process whose comm is one of ``names``,
    by ascending PID."""
    rc, out = probe.run(process_command(probe.root), "|".join(names))
    found = [probe.unroot(line.strip()) for line in out.splitlines() if line.strip()]
    dirs = [f[: -len("/comm")] for f in found if f and f.endswith("/comm")]
    return sorted(dirs, key=lambda d: ascii_int(d.rsplit("/", 1)[-1]) or 0) if rc == 0 else []


def _flag(argv: Sequence[str], name: str) -> str | None:
    """The last value of ``--name=V`` or ``--name V`` (the kubelet's flags; last one wins)."""
    value = None
    for i, arg in enumerate(argv):
        if arg.startswith(name + "="):
            value = arg[len(name) + 1 :]
        elif arg == name and i + 1 < len(argv):
            value = argv[i + 1]
    return value


def kubelet_runtime_endpoint(probe: Probe) -> tuple[str | None, str]:
    """(the CRI endpoint the kubelet uses, where that was read); (None, why) when there is
    no kubelet or its config cannot be read. Flags override the config file."""
    kubelets = processes(probe, ("kubelet",))
    if not kubelets:
        return None, "no kubelet process"
    argv = (probe.read(f"{kubelets[0]}/cmdline") or "").split("\0")
    endpoint = _flag(argv, "--container-runtime-endpoint")
    if endpoint:
        return endpoint, "kubelet flag --container-runtime-endpoint"
    config = _flag(argv, "--config")
    if config:
        path = posixpath.normpath("/" + config)  # the node's own path, kept under the root
        text = probe.read(path)
        if text is None:
            return None, f"the kubelet's config {path} is unreadable"
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError:
            return None, f"the kubelet's config {path} is not YAML"
        value = doc.get("containerRuntimeEndpoint") if isinstance(doc, dict) else None
        if isinstance(value, str) and value:
            return value, f"containerRuntimeEndpoint in {path}"
    return KUBELET_DEFAULT_ENDPOINT, "the kubelet's default"


def runtime_of_endpoint(endpoint: str) -> str | None:
    return next((proc for word, proc in RUNTIME_OF_ENDPOINT if word in endpoint), None)


def _memlock_of(probe: Probe, pid_dir: str) -> str | None:
    m = _LIMIT.search(probe.read(f"{pid_dir}/limits") or "")
    return m["soft"] if m else None


def _runtime_processes(probe: Probe) -> tuple[list[str], str, str]:
    """(the processes to judge, who they are, what is unverified when there is no kubelet)."""
    endpoint, source = kubelet_runtime_endpoint(probe)
    if endpoint is None:
        who = f"the container runtimes {', '.join(RUNTIMES)} (which one containers use is unknown: {source})"
        return processes(probe, RUNTIMES), who, source
    runtime = runtime_of_endpoint(endpoint)
    if runtime is None:
        return [], f"the kubelet's runtime endpoint {endpoint} ({source})", "unknown runtime"
    found = processes(probe, (runtime,))
    socket = endpoint.removeprefix("unix://")
    named = [d for d in found if socket in (probe.read(f"{d}/cmdline") or "").split("\0")]
    return named or found, f"{runtime}, the kubelet's runtime ({endpoint}, {source})", ""


def check_memlock(probe: Probe, exp: Expectation) -> Check:
    """Containers inherit the locked-memory limit of the runtime the kubelet uses."""
    procs, who, unverified = _runtime_processes(probe)
    if not procs:
        why = "" if unverified and unverified in who else f" ({unverified or 'not running'})"
        return error(
            "limits.memlock",
            probe.name,
            f"no process of {who} found{why}, so what containers inherit is not verified",
            "on the node: cat /proc/$(pidof containerd)/limits | grep 'locked memory'",
        )
    limits = {d: _memlock_of(probe, d) for d in procs}
    unreadable = sorted(d for d, v in limits.items() if v is None)
    limited = {d: v for d, v in limits.items() if v is not None and v != "unlimited"}
    shown = "; ".join(
        f"{_first_line(probe.read(d + '/comm'))} ({d}) {v}" for d, v in limited.items()
    )
    if limited and (not unverified or len(limited) == len(procs)):
        return failed(
            "limits.memlock",
            probe.name,
            f"locked-memory limit of {who} is not unlimited: {shown} bytes",
            "LimitMEMLOCK=infinity in the runtime's systemd unit (or a drop-in), then restart it; "
            "NCCL fails with 'ibv_reg_mr ... Cannot allocate memory'",
        )
    if limited or unreadable:
        why = f"limited: {shown}" if limited else f"unreadable: {', '.join(unreadable)}"
        return error(
            "limits.memlock",
            probe.name,
            f"memlock of {who} not verified ({why})",
            "on the node: ps -o pid,cmd -C kubelet; cat /proc/$(pidof containerd)/limits",
        )
    return passed("limits.memlock", probe.name, f"memlock unlimited for {who}")


# ------------------------------------------------------------------------------- suite


RAIL_CHECKS: Mapping[str, Callable[[RailExpectation], Callable[[Probe, Expectation], Check]]] = {
    "hca": check_rail_hca,
    "port": check_rail_port,
    "gid": check_rail_gid,
    "mtu": check_rail_mtu,
    "pfc": check_rail_pfc,
    "pkeys": check_rail_pkeys,
}
"""Per-rail checks by the names a link lists in ``node_rail_checks`` (gpufabric.nics)."""
RAIL_CHECK_NEEDS: Mapping[str, str] = {"mtu": "mtu", "pfc": "pfc_priority", "pkeys": "pkeys"}
"""Rail checks that need a value the expectation may lack (hand-written files)."""


def _has_inputs(kind: str, exp: Expectation) -> bool:
    need = RAIL_CHECK_NEEDS.get(kind)
    return need is None or getattr(exp, need) is not None


def node_checks(exp: Expectation) -> list[ProbeCheck]:
    """The checks that apply to this stack, in the order a person would debug a node."""
    checks = [
        ProbeCheck("gpu.count", check_gpu_count),
        ProbeCheck("gpu.driver", check_driver),
        ProbeCheck(f"gpudirect.{exp.gpudirect}", check_gpudirect),
    ]
    if exp.rdma:
        kinds = [k for k in nics.link(exp.fabric).node_rail_checks if _has_inputs(k, exp)]
        for rail in exp.rails:
            checks += [
                ProbeCheck(f"rail.{rail.name}.{kind}", RAIL_CHECKS[kind](rail)) for kind in kinds
            ]
        checks.append(ProbeCheck("rdma.devices", check_rdma_devices))
        checks.append(ProbeCheck("pcie.acs", check_acs))
    checks.append(ProbeCheck("pcie.iommu", check_iommu))
    checks.append(ProbeCheck("limits.memlock", check_memlock))
    return checks


def run_checks(
    probe: Probe, exp: Expectation, checks: Sequence[ProbeCheck] | None = None
) -> Iterator[Check]:
    return probe_run_checks(probe, exp, node_checks(exp) if checks is None else checks)


FLEET_DRIVER_CHECK = "fleet.driver-version"
"""One driver version across the nodes a job may span (``gpufabric health`` judges a
re-certified node by the same check against the rest of the fleet)."""


def fleet_checks(results: list[Check]) -> list[Check]:
    """Checks across nodes: one driver version everywhere."""
    versions: dict[str, list[str]] = {}
    for c in results:
        if c.check == "gpu.driver" and "version" in c.details:
            versions.setdefault(c.details["version"], []).append(c.target)
    if len(versions) > 1:
        spread = "; ".join(f"{v}: {', '.join(sorted(t))}" for v, t in sorted(versions.items()))
        return [
            failed(
                FLEET_DRIVER_CHECK,
                "all nodes",
                f"{len(versions)} driver versions across nodes ({spread})",
                "NCCL needs one driver version across a job; upgrade the stragglers",
            )
        ]
    if versions:
        (v,) = versions
        return [passed(FLEET_DRIVER_CHECK, "all nodes", f"one driver version ({v})")]
    return []
