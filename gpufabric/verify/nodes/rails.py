"""Per-rail node checks: the rail's HCA, its port (state, rate), GID, MTU, partition keys
and PFC, by the names a link lists in ``node_rail_checks`` (gpufabric.nics)."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping

from gpufabric.verify.expect import Expectation, RailExpectation
from gpufabric.verify.nodes.probe import Probe
from gpufabric.verify.nodes.sysfs import ascii_int, first_line, ipv4_of_gid, port_dir, rail_hca
from gpufabric.verify.results import Check, error, failed, passed, skipped

_PKEY = re.compile(r"0x[0-9a-fA-F]{1,4}")
PFC_COMMANDS = ("mlnx_qos -i %s", "dcb pfc show dev %s")
"""What reads a netdev's PFC state, in the order tried (``%s``: the netdev)."""


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
        if hca is None or not probe.exists(port_dir(hca)):
            return error(cid, probe.name, f"no port 1 for rail {rail.name}'s device")
        base = port_dir(hca)
        state = first_line(probe.read(f"{base}/state"))
        phys = first_line(probe.read(f"{base}/phys_state"))
        rate = first_line(probe.read(f"{base}/rate"))
        layer = first_line(probe.read(f"{base}/link_layer"))
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
        base = port_dir(hca)
        types = probe.listdir(f"{base}/gid_attrs/types")
        found = []
        for idx in sorted(types, key=lambda s: (ascii_int(s) is None, ascii_int(s) or 0, s)):
            if first_line(probe.read(f"{base}/gid_attrs/types/{idx}")) != "RoCE v2":
                continue
            if first_line(probe.read(f"{base}/gid_attrs/ndevs/{idx}")) != rail.netdev:
                continue
            ipv4 = ipv4_of_gid(first_line(probe.read(f"{base}/gids/{idx}")))
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
        text = first_line(probe.read(f"/sys/class/net/{rail.netdev}/mtu"))
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
    line = first_line(text)
    if _PKEY.fullmatch(line) and int(line, 16) & 0x7FFF:
        return int(line, 16)
    return None


def _pkey_table(probe: Probe, hca: str) -> set[int]:
    """The port's P_Key table: the value of every non-empty entry."""
    base = f"{port_dir(hca)}/pkeys"
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


def _host_vfs(probe: Probe, hca: str) -> list[str]:
    """The RDMA devices of the port's VFs the host shows (a VF in a pod's network namespace
    has left the host's ``/sys/class/infiniband``)."""
    base = f"/sys/class/infiniband/{hca}/device"
    vfs = []
    for entry in probe.listdir(base):
        if entry.startswith("virtfn"):
            vfs += probe.listdir(f"{base}/{entry}/infiniband")
    return sorted(set(vfs))


def _vf_problems(table: set[int], keys: tuple[str, ...], rule: str) -> list[str]:
    full = {v & 0x7FFF for v in table if v & 0x8000}
    if rule == "every":
        wanted = [k for k in keys if int(k, 16) & 0x7FFF not in full]
        return [f"{k} {'limited member only' if int(k, 16) & 0x7FFF in table else 'missing'}" for k in wanted]  # fmt: skip
    bases = {int(k, 16) & 0x7FFF for k in keys}
    bad = []
    if 0x7FFF in full:
        bad.append("a full member of the default partition (0xffff), where every VF meets")
    others = sorted(full - {0x7FFF})
    if len(others) > 1:
        bad.append("a full member of " + ", ".join(f"0x{k | 0x8000:04x}" for k in others))
    bad += [f"0x{k | 0x8000:04x} is no partition of this stack" for k in others if k not in bases]
    return bad


def check_rail_vf_pkeys(rail: RailExpectation) -> Callable[[Probe, Expectation], Check]:
    """Each VF of the rail the host shows, by its own pkey table: with UFM a full member
    of at most one of the stack's partitions and of the default only limited; with static
    management a full member of each (partitions.conf reaches VFs through ALL)."""

    def run(probe: Probe, exp: Expectation) -> Check:
        cid = f"rail.{rail.name}.vfpkeys"
        hca = rail_hca(probe, rail)
        keys, rule = exp.vf_pkeys or (), exp.vf_pkey_rule or "every"
        vfs = _host_vfs(probe, hca) if hca is not None else []
        if not vfs:
            return skipped(cid, probe.name, f"no VF of rail {rail.name} shown on the host")
        bad, unread = [], []
        for vf in vfs:
            table = _pkey_table(probe, vf)
            if not table:
                unread.append(vf)
                continue
            bad += [f"{vf}: {p}" for p in _vf_problems(table, keys, rule)]
        if bad:
            hint = (
                "a VF must be in its pod's partition only: ib-kubernetes adds it through UFM, "
                "nothing else (no ALL in a tenant's key), and UFM keeps every end port a "
                "limited member of the default partition (runbook: Prerequisites)"
                if rule == "one"
                else "the subnet manager must give every VF full membership of the stack's "
                "partitions (partitions.conf: ALL; runbook: Prerequisites)"
            )
            return failed(cid, probe.name, "; ".join(bad), hint)
        if unread:
            return error(cid, probe.name, f"cannot read the pkey table of {', '.join(unread)}")
        held = (
            "at most one partition each" if rule == "one" else f"full members of {', '.join(keys)}"
        )
        return passed(cid, probe.name, f"{len(vfs)} VF(s) of {hca}: {held}")

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


RAIL_CHECKS: Mapping[str, Callable[[RailExpectation], Callable[[Probe, Expectation], Check]]] = {
    "hca": check_rail_hca,
    "port": check_rail_port,
    "gid": check_rail_gid,
    "mtu": check_rail_mtu,
    "pfc": check_rail_pfc,
    "pkeys": check_rail_pkeys,
    "vfpkeys": check_rail_vf_pkeys,
}
"""Per-rail checks by the names a link lists in ``node_rail_checks`` (gpufabric.nics)."""
RAIL_CHECK_NEEDS: Mapping[str, str] = {
    "mtu": "mtu",
    "pfc": "pfc_priority",
    "pkeys": "pkeys",
    "vfpkeys": "vf_pkeys",
}
"""Rail checks that need a value the expectation may lack (hand-written files)."""
