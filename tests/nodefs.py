"""Build a node's sysfs / procfs / dev tree in a directory, in the kernel's real formats.

The layout follows the kernel ABI (Documentation/ABI/stable/sysfs-class-infiniband, PCI
sysfs): /sys/class/* entries are relative symlinks into /sys/devices, each GPU and NIC sits
below a PCIe switch under a root port, port files read ``4: ACTIVE`` / ``5: LinkUp`` /
``400 Gb/sec (4X NDR)``, config space dumps carry an extended capability list with ACS.
Variants (degraded port, no peermem, ACS on, ...) are keyword arguments so each test states
what differs from a healthy node.
"""

from __future__ import annotations

import gzip
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

PROPRIETARY = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024\nGCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n"
OPEN = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {v}  Release Build  (dvs-builder@U16-I3-B03-4-3)  Thu May 22 23:49:18 UTC 2025\nGCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n"
LIMITS = """Limit                     Soft Limit           Hard Limit           Units
Max cpu time              unlimited            unlimited            seconds
Max file size             unlimited            unlimited            bytes
Max open files            1048576              1048576              files
Max locked memory         {memlock}            {memlock}            bytes
Max address space         unlimited            unlimited            bytes
"""
MLNX_QOS = """DCBX mode: OS controlled
Priority trust state: dscp
dscp2prio mapping:
\tprio:0 dscp:07,06,05,04,03,02,01,00,
\tprio:3 dscp:31,30,29,28,27,26,25,24,
default priority:
Receive buffer size (bytes): 130944,130944,0,0,0,0,0,0,
Cable len: 7
PFC configuration:
\tpriority    0   1   2   3   4   5   6   7
\tenabled     {enabled}
\tbuffer      0   0   0   1   0   0   0   0
tc: 0 ratelimit: unlimited, tsa: vendor
\t priority:  1
"""


@dataclass
class Node:
    fabric: str = "infiniband"  # infiniband | roce
    rails: list[tuple[str, str]] = field(
        default_factory=lambda: [(f"mlx5_{i}", f"ibp{i}s0") for i in range(8)]
    )
    gpus: int = 8
    driver: str = "575.57.08"
    open_module: bool = True
    kernel: str = "6.8.0-60-generic"
    p2pdma: bool = True
    peermem: bool = False
    rate: int = 400
    mtu: int = 4092
    degraded: dict[str, tuple[str, str]] = field(default_factory=dict)
    """hca -> (state, phys_state) overrides, e.g. ("1: DOWN", "3: Disabled")."""
    acs_on: bool = False
    iommu: str = "off"  # off | pt | dma
    memlock: str = "unlimited"
    pfc_priority: int | None = 3
    gid_on_netdev: bool = True
    uverbs: int | None = None
    kernel_config: str = "boot"
    """Where the kernel's build config is: boot (/boot/config-R), proc-gz (/proc/config.gz),
    lib-modules (/lib/modules/R/config) or none."""
    root_bus: bool = False
    """GPUs and NICs directly on the root bus (no bridge above them), as in some VMs."""
    driver_loaded: bool = True
    runtime: str = "containerd"
    """The process the kubelet's CRI endpoint leads to: containerd or crio."""
    kubelet: str = "flag"
    """How the kubelet names its runtime endpoint: flag (--container-runtime-endpoint),
    config (containerRuntimeEndpoint in --config), default (neither) or none (no kubelet)."""
    dockerd_memlock: str | None = None
    """A dockerd running beside the kubelet's runtime (lower PID), with this memlock."""
    cmdline_extra: str = ""
    """Appended to the kernel command line."""
    iommu_groups: bool = True
    """Whether sysfs shows IOMMU groups (False: the IOMMU is on but no group is readable)."""
    pkeys: tuple[str, ...] = ("0xffff",)
    """The P_Key table of every InfiniBand port, in index order (the rest reads 0x0000)."""
    port_pkeys: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """hca -> its own P_Key table, where one port differs."""
    nvsmi: str | None = None
    """An NVL72 tray: what its ``nvidia-smi -q`` prints (tests/nvsmi.py), put on the tree's
    usr/bin as a fake nvidia-smi; None: no such tool and none of the IMEX files below."""
    imex_registered: bool = True
    """/proc/devices lists nvidia-caps-imex-channels (the driver supports IMEX channels)."""
    imex_channels: int = 0
    """/dev/nvidia-caps-imex-channels/channelN devices the DRA driver has made."""
    imex_unit: str = "masked"
    """The host's nvidia-imex.service: masked (a link to /dev/null in /etc), masked-empty
    (an empty file there), enabled, disabled (installed only) or absent."""
    vfs: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=dict)
    """hca -> {VF RDMA device: its P_Key table}: the VFs the host shows (virtfn<N> of the
    port's PCI function, each with its own RDMA device), on InfiniBand."""


def _write(path: Path, text: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")


def _link(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(target, link.parent))


def config_space(acs_ctl: int | None) -> bytes:
    """4 KiB PCIe config space: AER at 0x100 -> ACS at 0x148 (when given) -> end."""
    data = bytearray(4096)
    struct.pack_into("<HH", data, 0, 0x15B3, 0x1021)
    nxt = 0x148 if acs_ctl is not None else 0
    struct.pack_into("<I", data, 0x100, 0x0001 | (1 << 16) | (nxt << 20))
    if acs_ctl is not None:
        struct.pack_into("<I", data, 0x148, 0x000D | (1 << 16))
        struct.pack_into("<HH", data, 0x14C, 0x005F, acs_ctl)
    return bytes(data)


def build(root: Path, node: Node) -> Path:
    sys_ = root / "sys"
    devices = sys_ / "devices"
    version = OPEN.format(v=node.driver) if node.open_module else PROPRIETARY
    if node.driver_loaded:
        _write(root / "proc/driver/nvidia/version", version)
    module_version = node.driver if node.open_module else "550.54.14"
    _write(sys_ / "module/nvidia/version", module_version + "\n")
    if node.peermem:
        _write(sys_ / "module/nvidia_peermem/version", module_version + "\n")
    _write(root / "proc/sys/kernel/osrelease", node.kernel + "\n")
    p2p = "CONFIG_PCI_P2PDMA=y" if node.p2pdma else "# CONFIG_PCI_P2PDMA is not set"
    kconfig = f"CONFIG_PCI=y\n{p2p}\nCONFIG_DMABUF_MOVE_NOTIFY=y\n"
    if node.kernel_config == "boot":
        _write(root / f"boot/config-{node.kernel}", kconfig)
    elif node.kernel_config == "proc-gz":
        _write(root / "proc/config.gz", gzip.compress(kconfig.encode()))
    elif node.kernel_config == "lib-modules":
        _write(root / f"lib/modules/{node.kernel}/config", kconfig)
    cmdline = f"BOOT_IMAGE=/vmlinuz-{node.kernel} root=/dev/nvme0n1p2 ro"
    if node.iommu == "pt":
        cmdline += " intel_iommu=on iommu=pt"
    elif node.iommu == "dma":
        cmdline += " intel_iommu=on"
    _write(root / "proc/cmdline", cmdline + node.cmdline_extra + "\n")
    (sys_ / "class/iommu").mkdir(parents=True, exist_ok=True)
    if node.iommu != "off":
        (sys_ / "class/iommu/dmar0").mkdir()
    acs = 0x001D if node.acs_on else 0x0000
    pairs = max(node.gpus, len(node.rails))
    for i in range(pairs):
        bus = 0x10 + 0x10 * i
        rootport = devices / f"pci0000:{bus:02x}" / f"0000:{bus:02x}:01.0"
        upstream = rootport / f"0000:{bus + 1:02x}:00.0"
        down_gpu = upstream / f"0000:{bus + 2:02x}:00.0"
        down_nic = upstream / f"0000:{bus + 2:02x}:01.0"
        if node.root_bus:
            down_gpu = down_nic = devices / f"pci0000:{bus:02x}"
        else:
            for bridge in (rootport, upstream, down_gpu, down_nic):
                _write(bridge / "config", config_space(acs))
        if i < node.gpus:
            bdf = f"0000:{bus + 3:02x}:00.0"
            gpu = down_gpu / bdf
            _write(gpu / "config", config_space(None))
            _link(sys_ / "bus/pci/devices" / bdf, gpu)
            _write(
                root / f"proc/driver/nvidia/gpus/{bdf}/information",
                f"Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 0\nBus Location: \t {bdf}\n",
            )
            if node.iommu != "off" and node.iommu_groups:
                group = sys_ / "kernel/iommu_groups" / str(i)
                _write(group / "type", {"pt": "identity", "dma": "DMA-FQ"}[node.iommu] + "\n")
                _link(gpu / "iommu_group", group)
        if i < len(node.rails):
            hca, netdev = node.rails[i]
            nic_bdf = f"0000:{bus + 4:02x}:00.0"
            nic = down_nic / nic_bdf
            _write(nic / "config", config_space(None))
            _link(sys_ / "bus/pci/devices" / nic_bdf, nic)
            if node.iommu != "off" and node.iommu_groups:
                group = sys_ / "kernel/iommu_groups" / str(100 + i)
                _write(group / "type", {"pt": "identity", "dma": "DMA-FQ"}[node.iommu] + "\n")
                _link(nic / "iommu_group", group)
            ibdev = nic / "infiniband" / hca
            _link(ibdev / "device", nic)
            _link(sys_ / "class/infiniband" / hca, ibdev)
            port = ibdev / "ports/1"
            state, phys = node.degraded.get(hca, ("4: ACTIVE", "5: LinkUp"))
            speed = {400: "4X NDR", 200: "4X HDR", 100: "4X EDR"}.get(node.rate, "4X")
            _write(port / "state", state + "\n")
            _write(port / "phys_state", phys + "\n")
            _write(port / "rate", f"{node.rate} Gb/sec ({speed})\n")
            layer = "InfiniBand" if node.fabric == "infiniband" else "Ethernet"
            _write(port / "link_layer", layer + "\n")
            _write(ibdev / "fw_ver", "28.41.1000\n")
            net = nic / "net" / netdev
            _write(net / "mtu", f"{node.mtu}\n")
            _write(net / "operstate", "up\n")
            _link(net / "device", nic)
            _link(sys_ / "class/net" / netdev, net)
            if node.fabric == "roce":
                ip = f"c0a8:{10 + i:02x}{i + 2:02x}"
                mapped = f"0000:0000:0000:0000:0000:ffff:{ip[:4]}:{ip[5:]}"
                gids = [
                    ("fe80:0000:0000:0000:0a00:27ff:fe00:0001", "IB/RoCE v1"),
                    ("fe80:0000:0000:0000:0a00:27ff:fe00:0001", "RoCE v2"),
                ]
                if node.gid_on_netdev:  # the netdev has its IPv4 address
                    gids += [(mapped, "IB/RoCE v1"), (mapped, "RoCE v2")]
                for idx, (gid, kind) in enumerate(gids):
                    _write(port / f"gids/{idx}", gid + "\n")
                    _write(port / f"gid_attrs/types/{idx}", kind + "\n")
                    _write(port / f"gid_attrs/ndevs/{idx}", netdev + "\n")
                if node.pfc_priority is not None:
                    enabled = "   ".join("1" if p == node.pfc_priority else "0" for p in range(8))
                    script = root / "usr/bin/mlnx_qos"
                    body = MLNX_QOS.format(enabled=enabled)
                    _write(
                        script,
                        '#!/bin/sh\n[ "$1" = "-i" ] || exit 1\ncat <<\'EOF\'\n' + body + "EOF\n",
                    )
                    script.chmod(0o755)
            else:
                _write(port / "gids/0", "fe80:0000:0000:0000:9803:9b03:0067:f7a0\n")
                table = node.port_pkeys.get(hca, node.pkeys)
                for idx in range(128):  # mlx5 ports have 128 entries
                    entry = table[idx] if idx < len(table) else "0x0000"
                    _write(port / f"pkeys/{idx}", entry + "\n")
                for n, (vfdev, vf_table) in enumerate(sorted(node.vfs.get(hca, {}).items())):
                    vf_bdf = f"0000:{bus + 4:02x}:00.{n + 1}"
                    vf = down_nic / vf_bdf
                    _link(nic / f"virtfn{n}", vf)
                    vf_ibdev = vf / "infiniband" / vfdev
                    _link(vf_ibdev / "device", vf)
                    _link(sys_ / "class/infiniband" / vfdev, vf_ibdev)
                    for idx in range(128):
                        entry = vf_table[idx] if idx < len(vf_table) else "0x0000"
                        _write(vf_ibdev / f"ports/1/pkeys/{idx}", entry + "\n")
    uverbs = len(node.rails) if node.uverbs is None else node.uverbs
    for i in range(uverbs):
        _write(root / f"dev/infiniband/uverbs{i}", "")
    _write(root / "dev/infiniband/rdma_cm", "")
    _processes(root, node)
    if node.nvsmi is not None:
        _nvl72(root, node)
    return root


IMEX_UNIT_TEXT = "[Unit]\nDescription=NVIDIA IMEX service\n\n[Service]\nType=forking\nExecStart=/usr/bin/nvidia-imex -c /etc/nvidia-imex/config.cfg\n\n[Install]\nWantedBy=multi-user.target\n"
"""The unit as the nvidia-imex package installs it (only [Install] matters here)."""


def _nvl72(root: Path, node: Node) -> None:
    import nvsmi

    script = root / "usr/bin/nvidia-smi"
    _write(script, nvsmi.script(node.nvsmi or ""))
    script.chmod(0o755)
    devices = "Character devices:\n  1 mem\n195 nvidia-frontend\n"
    if node.imex_registered:
        devices += "234 nvidia-caps-imex-channels\n"
    _write(root / "proc/devices", devices + "\nBlock devices:\n  8 sd\n")
    for i in range(node.imex_channels):
        _write(root / f"dev/nvidia-caps-imex-channels/channel{i}", "")
    etc = root / "etc/systemd/system"
    if node.imex_unit != "absent":
        _write(root / "usr/lib/systemd/system/nvidia-imex.service", IMEX_UNIT_TEXT)
    if node.imex_unit == "masked":
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "nvidia-imex.service").symlink_to("/dev/null")
    elif node.imex_unit == "masked-empty":
        _write(etc / "nvidia-imex.service", "")
    elif node.imex_unit == "enabled":
        wants = etc / "multi-user.target.wants"
        wants.mkdir(parents=True, exist_ok=True)
        (wants / "nvidia-imex.service").symlink_to("/usr/lib/systemd/system/nvidia-imex.service")
    etc.mkdir(parents=True, exist_ok=True)
    (etc / "multi-user.target.wants").mkdir(exist_ok=True)


RUNTIME_SOCKETS = {
    "containerd": "unix:///run/containerd/containerd.sock",
    "crio": "unix:///var/run/crio/crio.sock",
}


def _process(root: Path, pid: int, comm: str, argv: list[str], memlock: str) -> None:
    _write(root / f"proc/{pid}/comm", comm + "\n")
    _write(root / f"proc/{pid}/cmdline", "\0".join(argv) + "\0")
    _write(root / f"proc/{pid}/limits", LIMITS.format(memlock=memlock))


def _processes(root: Path, node: Node) -> None:
    """systemd, the kubelet's runtime, a dockerd beside it when asked, and the kubelet with
    its runtime endpoint where kubeadm puts it (flag or /var/lib/kubelet/config.yaml)."""
    _process(root, 1, "systemd", ["/sbin/init"], "8388608")
    if node.dockerd_memlock is not None:
        _process(root, 900, "dockerd", ["/usr/bin/dockerd", "-H", "fd://"], node.dockerd_memlock)
    binary = {"containerd": "/usr/bin/containerd", "crio": "/usr/bin/crio"}[node.runtime]
    _process(root, 1234, node.runtime, [binary], node.memlock)
    endpoint = RUNTIME_SOCKETS[node.runtime]
    argv = ["/usr/bin/kubelet", "--kubeconfig=/etc/kubernetes/kubelet.conf"]
    if node.kubelet == "flag":
        argv.append(f"--container-runtime-endpoint={endpoint}")
    elif node.kubelet == "config":
        argv += ["--config", "/var/lib/kubelet/config.yaml"]
        _write(
            root / "var/lib/kubelet/config.yaml",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
            f"cgroupDriver: systemd\ncontainerRuntimeEndpoint: {endpoint}\n",
        )
    if node.kubelet != "none":
        _process(root, 2345, "kubelet", argv, "8388608")


def roce_node(**overrides: object) -> Node:
    rails = [("mlx5_0", "ens1f0np0"), ("mlx5_1", "ens2f0np0")]
    base: dict[str, object] = {"fabric": "roce", "rails": rails, "mtu": 9000}
    base.update(overrides)
    return Node(**base)  # type: ignore[arg-type]
