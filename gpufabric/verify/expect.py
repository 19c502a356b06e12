"""What a stack expects of its nodes and pods, in a form the testinfra suite can load.

The CLI builds a :class:`Expectation` from the stack and hands it to the suite as JSON, so
the suite needs no stack file and the same checks can be pointed at any host.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpufabric import nics
from gpufabric.model import nvlink
from gpufabric.plan.facts import Facts


@dataclass(frozen=True)
class RailExpectation:
    name: str
    netdev: str
    """Host netdev (the PF for SR-IOV, the IPoIB or Ethernet port otherwise)."""
    hca: str | None
    """RDMA device; None means: find it from the netdev."""
    subnet: str
    pod_interface: str


@dataclass(frozen=True)
class Expectation:
    stack: str
    gpus: int
    driver_version: str | None
    gpudirect: str  # dmabuf | peermem
    fabric: str  # infiniband | roce
    rdma: bool
    link_rate_gbps: int
    mtu: int | None
    """The rails' effective MTU; None only in hand-written files (the MTU is not checked)."""
    pfc_priority: int | None
    rails: tuple[RailExpectation, ...] = field(default_factory=tuple)
    shm_gib: int = 0
    pkeys: tuple[str, ...] | None = None
    """InfiniBand partitions every rail port must be a full member of, as the port's pkey
    table shows them (0x8010); None: the networks carry no partition key (not checked)."""
    nvlink: str | None = None
    """The multi-node NVLink system of the pool (``GB200``, ``GB300``): the fabric state,
    IMEX channel and host IMEX service checks run; None (every other pool): they do not,
    and the expectation's JSON carries no such key."""
    vf_pkeys: tuple[str, ...] | None = None
    """The partitions the rails' SR-IOV VFs are put in (0x8010); None: not checked."""
    vf_pkey_rule: str | None = None
    """What a VF the host shows must be of ``vf_pkeys``: ``every`` (static management:
    partitions.conf reaches VFs through ALL, a full member of each) or ``one`` (UFM through
    ib-kubernetes: a full member of at most one, and of the default partition only
    limited)."""

    @property
    def link_layer(self) -> str:
        """sysfs link_layer of the rail ports."""
        return nics.link(self.fabric).sysfs_link_layer

    def to_json(self) -> str:
        data = asdict(self)
        if data["nvlink"] is None:
            del data["nvlink"]
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Expectation:
        data = dict(data)
        if data.get("fabric") not in nics.LINKS.names():
            known = ", ".join(nics.LINKS.names())
            raise ValueError(
                f"fabric {data.get('fabric')!r} is not a fabric type; expected {known}"
            )
        data["rails"] = tuple(RailExpectation(**r) for r in data.get("rails", ()))
        for key in ("pkeys", "vf_pkeys"):
            if data.get(key) is not None:
                data[key] = tuple(data[key])
        return cls(**data)

    @classmethod
    def load(cls, path: Path) -> Expectation:
        return cls.from_dict(json.loads(path.read_text(encoding="utf-8")))


def from_facts(facts: Facts) -> Expectation:
    """The expectations of a stack, read from its Plan's resolved facts (of one pool: an
    NVL72 pool's carry its system, which turns the fabric and IMEX checks on)."""
    f, domains = facts.fabric, facts.nodes.nvlink
    return Expectation(
        stack=facts.stack,
        gpus=facts.nodes.gpus_per_node,
        driver_version=facts.nodes.driver_version,
        gpudirect=f.gpudirect,
        fabric=f.type,
        rdma=f.has_rdma,
        link_rate_gbps=f.link_rate_gbps,
        mtu=f.mtu,
        pfc_priority=f.pfc_priority,
        rails=tuple(
            RailExpectation(
                name=r.name,
                netdev=r.netdev,
                hca=r.hca,
                subnet=r.subnet,
                pod_interface=r.pod_interface,
            )
            for r in f.rails
        ),
        shm_gib=facts.nodes.shm_gib,
        pkeys=nics.link(f.type).port_pkeys(f),
        **_vf_pkeys(f),
        nvlink=None if domains is None else nvlink.product(domains.system),
    )


def _vf_pkeys(f: Any) -> dict[str, Any]:
    rule = nics.link(f.type).vf_pkeys(f)
    if rule is None:
        return {}
    keys, how = rule
    return {"vf_pkeys": keys, "vf_pkey_rule": how}
