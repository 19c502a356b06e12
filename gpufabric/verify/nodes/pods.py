"""Checks inside a training pod: what NCCL needs to see once the job is scheduled.

Each rail's interface (named after the rail by the Multus annotation) is up with the
fabric's MTU and an IPv4 address from the rail's subnet; the RDMA character devices and the
GPUs are visible; /dev/shm is a memory-backed volume of at least 1 GiB; IPC_LOCK is in the
effective capabilities and the locked-memory limit is unlimited.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from gpufabric.verify.expect import Expectation, RailExpectation
from gpufabric.verify.nodes.probe import Probe, ProbeCheck
from gpufabric.verify.nodes.probe import run_checks as probe_run_checks
from gpufabric.verify.results import Check, error, failed, passed, skipped

CAP_IPC_LOCK = 14
MIN_SHM_BYTES = 1 << 30
_CAP_EFF = re.compile(r"^CapEff:\s*(?P<hex>[0-9a-fA-F]+)\s*$", re.MULTILINE)
_LIMIT = re.compile(r"^Max locked memory\s+(?P<soft>\S+)", re.MULTILINE)
_NVIDIA_DEV = re.compile(r"^nvidia[0-9]+$")  # ASCII digits: \d takes any script's


def interfaces(probe: Probe) -> dict[str, dict[str, Any]] | None:
    """``ip -j addr show`` keyed by interface name; None when ``ip`` is unavailable."""
    rc, out = probe.run("ip -j addr show")
    if rc != 0:
        return None
    try:
        data = json.loads(out or "[]")
    except json.JSONDecodeError:
        return None
    return {i["ifname"]: i for i in data if isinstance(i, dict) and "ifname" in i}


def check_interface(rail: RailExpectation) -> Callable[[Probe, Expectation], Check]:
    def run(probe: Probe, exp: Expectation) -> Check:
        cid = f"pod.{rail.name}.interface"
        links = interfaces(probe)
        if links is None:
            return error(cid, probe.name, "`ip -j addr show` failed", "the image needs iproute2")
        name = rail.pod_interface
        link = links.get(name)
        if link is None:
            return failed(
                cid,
                probe.name,
                f"no interface {name} (present: {', '.join(sorted(links))})",
                "the pod needs the k8s.v1.cni.cncf.io/networks annotation of `gpufabric job`; "
                "kubectl describe pod shows Multus' events",
            )
        problems = []
        flags = link.get("flags", [])
        if "UP" not in flags:
            problems.append(f"down (flags {','.join(flags)})")
        if exp.mtu is not None and link.get("mtu") != exp.mtu:
            problems.append(f"MTU {link.get('mtu')}, expected {exp.mtu}")
        subnet = ipaddress.ip_network(rail.subnet)
        addrs = [
            a["local"]
            for a in link.get("addr_info", [])
            if a.get("family") == ("inet" if subnet.version == 4 else "inet6")
        ]
        inside = [a for a in addrs if ipaddress.ip_address(a) in subnet]
        if not inside:
            problems.append(f"no address in {rail.subnet} (has {', '.join(addrs) or 'none'})")
        if problems:
            return failed(
                cid,
                probe.name,
                f"{name}: " + "; ".join(problems),
                "kubectl get ippools -A (exhausted?); the rail's NetworkAttachmentDefinition",
            )
        return passed(cid, probe.name, f"{name} up, MTU {link.get('mtu')}, {inside[0]}")

    return run


def check_rdma_devices(probe: Probe, exp: Expectation) -> Check:
    if not exp.rdma:
        return skipped("pod.rdma-devices", probe.name, "fabric.rdma is none")
    entries = probe.listdir("/dev/infiniband")
    uverbs = [e for e in entries if e.startswith("uverbs")]
    if not uverbs or "rdma_cm" not in entries:
        return failed(
            "pod.rdma-devices",
            probe.name,
            f"/dev/infiniband has {', '.join(entries) or 'nothing'}",
            "the pod must request the rails' RDMA resources (kubectl describe node: allocatable)",
        )
    return passed("pod.rdma-devices", probe.name, f"{len(uverbs)} uverbs + rdma_cm")


def check_gpus(probe: Probe, exp: Expectation) -> Check:
    found = [e for e in probe.listdir("/dev") if _NVIDIA_DEV.match(e)]
    if len(found) != exp.gpus:
        return failed(
            "pod.gpus",
            probe.name,
            f"{len(found)} GPUs visible, the stack's jobs request {exp.gpus}",
            "resources.limits nvidia.com/gpu; kubectl describe node (allocatable)",
        )
    return passed("pod.gpus", probe.name, f"{len(found)} GPUs")


def check_shm(probe: Probe, exp: Expectation) -> Check:
    rc, out = probe.run("df -Pk /dev/shm")
    lines = out.strip().splitlines() if rc == 0 else []
    fields = lines[-1].split() if len(lines) >= 2 else []
    if len(fields) < 2 or not (fields[1].isascii() and fields[1].isdigit()):
        return error("pod.shm", probe.name, "`df -Pk /dev/shm` gave no size")
    size = int(fields[1]) * 1024
    if size < MIN_SHM_BYTES:
        return failed(
            "pod.shm",
            probe.name,
            f"/dev/shm is {size >> 20} MiB (NCCL fails with 'failed to extend /dev/shm')",
            f"mount an emptyDir (medium: Memory, sizeLimit {exp.shm_gib}Gi) at /dev/shm",
        )
    return passed("pod.shm", probe.name, f"/dev/shm {size / (1 << 30):.1f} GiB")


def check_ipc_lock(probe: Probe, exp: Expectation) -> Check:
    m = _CAP_EFF.search(probe.read("/proc/self/status") or "")
    if m is None:
        return error("pod.ipc-lock", probe.name, "no CapEff in /proc/self/status")
    if not int(m["hex"], 16) >> CAP_IPC_LOCK & 1:
        return failed(
            "pod.ipc-lock",
            probe.name,
            f"IPC_LOCK is not an effective capability (CapEff {m['hex']})",
            "securityContext.capabilities.add: [IPC_LOCK]",
        )
    return passed("pod.ipc-lock", probe.name, "IPC_LOCK effective")


def check_memlock(probe: Probe, exp: Expectation) -> Check:
    m = _LIMIT.search(probe.read("/proc/self/limits") or "")
    if m is None:
        return error("pod.memlock", probe.name, "cannot read 'Max locked memory'")
    if m["soft"] != "unlimited":
        return failed(
            "pod.memlock",
            probe.name,
            f"locked-memory limit {m['soft']} bytes, not unlimited",
            "the container runtime's LimitMEMLOCK (gpufabric verify nodes: limits.memlock)",
        )
    return passed("pod.memlock", probe.name, "memlock unlimited")


def pod_checks(exp: Expectation) -> list[ProbeCheck]:
    checks = []
    if exp.rdma:
        checks += [ProbeCheck(f"pod.{r.name}.interface", check_interface(r)) for r in exp.rails]
        checks.append(ProbeCheck("pod.rdma-devices", check_rdma_devices))
    checks += [
        ProbeCheck("pod.gpus", check_gpus),
        ProbeCheck("pod.shm", check_shm),
        ProbeCheck("pod.ipc-lock", check_ipc_lock),
        ProbeCheck("pod.memlock", check_memlock),
    ]
    return checks


def run_checks(
    probe: Probe, exp: Expectation, checks: Sequence[ProbeCheck] | None = None
) -> Iterator[Check]:
    return probe_run_checks(probe, exp, pod_checks(exp) if checks is None else checks)
