"""Node preflight checks, tailored to a stack, read through a :class:`Probe`.

Every check reads the node's files (sysfs, procfs, /dev, /boot) under the probe's root and
runs a command only where no file says it (PFC: ``mlnx_qos`` or iproute2's ``dcb``). Pass
criteria follow the references gpufabric's docs cite: LBNL NHC / Azure ``check_hw_ib`` for
ports (ACTIVE, LinkUp, rate), NCCL's own module probe for nvidia-peermem, the GPU Operator's
DMA-BUF prerequisites (open kernel modules, kernel >= 5.12), NCCL's troubleshooting guide for
PCIe ACS and IOMMU.
"""

from __future__ import annotations

import gzip
import posixpath
import re
import shlex
import struct
from collections.abc import Iterator, Mapping, Sequence

import yaml

from gpufabric import nics
from gpufabric.verify.expect import Expectation
from gpufabric.verify.nodes import fabric
from gpufabric.verify.nodes.probe import Probe, ProbeCheck
from gpufabric.verify.nodes.probe import run_checks as probe_run_checks
from gpufabric.verify.nodes.rails import RAIL_CHECK_NEEDS, RAIL_CHECKS
from gpufabric.verify.nodes.sysfs import (
    BDF,
    ascii_int,
    driver_version,
    first_line,
    gpu_bdfs,
    kernel_release,
    rail_hca,
)
from gpufabric.verify.results import Check, error, failed, passed, skipped

# Numbers are ASCII digits only: Python's \d and int() also take other scripts' digits
# ("٤٠٠", "²"), which no kernel file holds and int() may refuse.
_KERNEL = re.compile(r"^(?P<major>[0-9]+)\.(?P<minor>[0-9]+)")
_LIMIT = re.compile(r"^Max locked memory\s+(?P<soft>\S+)\s+(?P<hard>\S+)", re.MULTILINE)
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
    module = first_line(probe.read("/sys/module/nvidia/version"))
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
    pci = [i for i, p in enumerate(parts) if BDF.match(p)]
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
            groups[name] = first_line(probe.read(f"{path}/iommu_group/type")) or "?"
    return groups


def _all_groups(probe: Probe) -> dict[str, str]:
    base = "/sys/kernel/iommu_groups"
    return {
        f"group {g}": first_line(probe.read(f"{base}/{g}/type")) or "?"
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
        f"{first_line(probe.read(d + '/comm'))} ({d}) {v}" for d, v in limited.items()
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
    if exp.nvlink is not None:
        checks += [
            ProbeCheck("nvlink.fabric", fabric.check_fabric),
            ProbeCheck("imex.channels", fabric.check_imex_channels),
            ProbeCheck("imex.host-service", fabric.check_imex_service),
        ]
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
