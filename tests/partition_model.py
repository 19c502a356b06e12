"""The subnet manager's partition rules, to judge whether a stack's partitions keep tenants'
VFs apart.

OpenSM (linux-rdma/opensm fa74b98, doc/partition-config.txt, opensm/osm_prtn_config.c,
opensm/osm_prtn.c): a statement is ``Name[=PKey][,flags] : port[=full|limited|both], ...;``;
``ALL`` names every end port (VFs' virtual ports included), ``ALL_SWITCHES`` the switches,
``SELF`` the SM's port, anything else one port GUID (no ranges); a port without a flag takes
``defmember`` (limited when absent); ``both`` is full unless ``allow_both_pkeys`` is set (it
is not here); a later statement for a port overwrites an earlier one (osm_prtn_add_port);
the default partition 0x7fff exists always, as ``ALL=limited, SELF=full`` when the file has
no rule for it. Only the low 15 bits of a key name the partition.

ib-kubernetes (Mellanox/ib-kubernetes 528f63f, pkg/sm/plugins/ufm/ufm.go) adds a pod's VF
GUID to its network's key through UFM with ``"membership": "full"``; the ib-sriov CNI does
not apply a network's pkey itself (k8snetworkplumbingwg/ib-sriov-cni 543060d: the field is
read only by ib-kubernetes).

Two ports talk in a partition when both are members and at least one is a full member
(InfiniBand Architecture Specification, P_Key checking; doc/partition-config.txt's
``limited``).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

FULL, LIMITED = "full", "limited"
DEFAULT = 0x7FFF
IB_KUBERNETES_POOL = 0x0200_0000_0000_0000
"""GUID_POOL_RANGE_START of ib-kubernetes, which gpufabric's NicClusterPolicy keeps."""


@dataclass(frozen=True)
class Port:
    guid: int
    kind: str
    """sm, switch, pf (a host's port) or vf."""
    tenant: str | None = None
    pkey: str | None = None
    """A VF's network's pkey (the NAD's ``pkey``)."""
    node: int = 0


Members = dict[int, dict[int, str]]
"""Partition (low 15 bits) -> port GUID -> full or limited."""


def _membership(flag: str | None, default: str) -> str:
    if flag is None:
        return default
    # osm_prtn_config.c: strncmp against the flag's own length; unrecognised: limited
    if flag and "full".startswith(flag):
        return FULL
    if flag and "both".startswith(flag):
        return FULL  # both without allow_both_pkeys: the full table only
    return LIMITED


def _select(name: str, ports: Sequence[Port], sm: int) -> list[int]:
    if name == "ALL" or name == "ALL_CAS":
        kinds = {"pf", "vf", "sm"} if name == "ALL_CAS" else {"pf", "vf", "sm", "switch"}
        return [p.guid for p in ports if p.kind in kinds]
    if name == "ALL_SWITCHES":
        return [p.guid for p in ports if p.kind == "switch"]
    if name == "ALL_ROUTERS":
        return []
    if name == "SELF":
        return [sm]
    return [int(name, 0)]


def apply_conf(lines: Iterable[str], ports: Sequence[Port]) -> Members:
    """Every partition's members after OpenSM reads these partitions.conf lines."""
    sm = next(p.guid for p in ports if p.kind == "sm")
    text = "\n".join(line.split("#", 1)[0] for line in lines)
    members: Members = {}
    for statement in filter(None, (s.strip() for s in text.split(";"))):
        definition, _, properties = statement.partition(":")
        head, *flags = [f.strip() for f in definition.split(",")]
        _name, _, key = head.partition("=")
        base = int(key, 0) & 0x7FFF if key else None
        if base is None:
            raise ValueError(f"a partition without a key: {statement!r}")
        default = LIMITED
        for flag in flags:
            fname, _, value = flag.partition("=")
            if fname.strip() == "defmember":
                default = _membership(value.strip(), LIMITED)
        table = members.setdefault(base, {})
        for spec in filter(None, (s.strip() for s in properties.split(","))):
            port, _, flag = spec.partition("=")
            how = _membership(flag.strip() if flag else None, default)
            for guid in _select(port.strip(), ports, sm):
                table[guid] = how  # a later statement overwrites (osm_prtn_add_port)
    if DEFAULT not in members:  # no rule for the default partition
        members[DEFAULT] = {p.guid: LIMITED for p in ports if p.kind != "sm"} | {sm: FULL}
    return members


def ib_kubernetes(members: Members, vfs: Iterable[Port]) -> None:
    """ib-kubernetes adds each pod's VF GUID to its network's key, full (UFM plugin)."""
    for vf in vfs:
        if vf.pkey is not None:
            members.setdefault(int(vf.pkey, 16) & 0x7FFF, {})[vf.guid] = FULL


def shared(members: Members, a: int, b: int) -> list[int]:
    """Partitions in which ports a and b can talk."""
    out = []
    for base, table in sorted(members.items()):
        if a in table and b in table and FULL in (table[a], table[b]):
            out.append(base)
    return out


@dataclass(frozen=True)
class Verdict:
    foreign_full: list[str]
    """A tenant's VF a full member of another tenant's partition."""
    reachable: list[str]
    """Two tenants' VFs that can talk though no partition of the stack puts them together."""
    unreachable: list[str]
    """A tenant's VFs that cannot reach each other in their own network's partition."""

    @property
    def isolated(self) -> bool:
        return not self.foreign_full and not self.reachable


def fabric(
    tenant_keys: dict[str, str | None], rails: int, nodes: int, ufm: bool, seed: int = 0
) -> list[Port]:
    """An SM, a switch, and per node and rail a PF and one VF per tenant (pkey: its network's
    key). VF GUIDs: from ib-kubernetes' pool with UFM, else random as the SR-IOV config
    daemon assigns them."""
    rng = random.Random(seed)
    ports = [Port(0x0002_C903_0000_0001, "sm"), Port(0x0002_C903_0000_0002, "switch")]
    n = 0
    for node in range(nodes):
        for rail in range(rails):
            ports.append(Port(0xB859_9F03_0000_0000 + node * 64 + rail, "pf", node=node))
            for tenant, key in sorted(tenant_keys.items()):
                n += 1
                guid = IB_KUBERNETES_POOL + n if ufm else rng.getrandbits(64) | 1
                ports.append(Port(guid, "vf", tenant, key, node))
    return ports


def judge(
    members: Members, ports: Sequence[Port], partitions: Sequence[tuple[str, Sequence[str]]]
) -> Verdict:
    """``partitions``: (pkey, tenants) of each partition the stack puts pods in."""
    owners = {int(key, 16) & 0x7FFF: set(tenants) for key, tenants in partitions}
    together = {frozenset((a, b)) for tenants in owners.values() for a in tenants for b in tenants}
    vfs = [p for p in ports if p.kind == "vf"]
    foreign, reach, unreach = [], [], []
    for vf in vfs:
        for base, tenants in owners.items():
            if tenants and vf.tenant not in tenants and members.get(base, {}).get(vf.guid) == FULL:
                foreign.append(f"{vf.tenant}'s VF {vf.guid:#x} is a full member of 0x{base:04x}")
    for i, a in enumerate(vfs):
        for b in vfs[i + 1 :]:
            if a.tenant == b.tenant:
                if a.pkey is not None and int(a.pkey, 16) & 0x7FFF not in shared(
                    members, a.guid, b.guid
                ):
                    unreach.append(f"{a.tenant}: {a.guid:#x} and {b.guid:#x}")  # fmt: skip
                continue
            if frozenset((a.tenant, b.tenant)) in together:
                continue
            if meet := shared(members, a.guid, b.guid):
                where = ", ".join(f"0x{m:04x}" for m in meet)
                reach.append(f"{a.tenant} and {b.tenant} meet in {where}")
    return Verdict(sorted(set(foreign)), sorted(set(reach)), sorted(set(unreach)))
