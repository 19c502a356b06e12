"""nccl-tests logs of GB200/GB300 NVL72 runs: NCCL's own multi-node NVLink lines.

nccl-tests' header, table and footer are tests/nccllogs.py's (nccl-tests 2.19.6). NCCL's
lines are written from its source (NVIDIA/nccl, at the tags named), each format string
character for character:

- ``NCCL version %d.%d.%d<suffix>+cuda%d.%d``: src/init.cc showVersion, an INFO line under
  NCCL_DEBUG=INFO (v2.25.1-1 to v2.30.7-1).
- ``MNNVL busId 0x%lx fabric UUID %lx.%lx cliqueId 0x%x state %d healthMask 0x%x``:
  src/init.cc fillInfo (v2.25.1-1 to v2.30.7-1).
- ``NVLS multicast support is %savailable on dev %d``: src/transport/nvls.cc (v2.25.1-1,
  v2.26.x, v2.30.x); ``... on dev %d (NVLS_NCHANNELS %d)`` in v2.27.3-1 to v2.29.x.
- ``comm %p rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL %d``: src/init.cc.
- ``MNNVL %d cliqueId %x cliqueSize %d cliqueRank %d``: src/mnnvl.cc (v2.25.1-1 to
  v2.29.x); v2.30.x appends `` nvlDomainSize %d``.
- ``Channel %02d/%01d : %d[%d] -> %d[%d] via P2P/%s%s%s`` with ``MNNVL`` (``CUMEM`` when
  MNNVL is off): src/transport/p2p.cc.
- ``%d coll channels, %d collnet channels, %d nvls channels, %d p2p channels, %d p2p channels
  per peer``: src/init.cc.
- the WARN ``MNNVL (cliqueSize %d) is available but not working on this system. Check the
  IMEX channel configuration (/dev/nvidia-caps-imex-channels). Set NCCL_MNNVL_ENABLE=0 to
  ignore this issue.``: src/mnnvl.cc.

Bandwidth figures: one GB200 rack measured 834.57 GB/s at 8 GiB (coreweave/nccl-tests pull
request #43, NCCL 2.26.2); hosts, pids and ids are made up.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nccllogs import Log

FAMILIES = {
    "2.25": "2.25.2+cuda12.8",
    "2.26": "2.26.2+cuda12.8",
    "2.27": "2.27.7+cuda12.9",
    "2.30": "2.30.7+cuda13.0",
}


def rack(n: int, trays: int = 18) -> tuple[str, ...]:
    return tuple(f"gb200-r{n:02d}-t{t:02d}" for t in range(trays))


@dataclass
class MnnvlLog(Log):
    """One all_reduce over trays of NVL72 racks (4 GPUs a tray)."""

    hosts: tuple[str, ...] = rack(1)
    gpus_per_host: int = 4
    busbw: float = 834.57
    version: str = FAMILIES["2.27"]
    cliques: tuple[tuple[int, int], ...] | None = None
    """(cliqueId, hosts in it) in host order; None: every host in clique 2."""
    mnnvl: bool = True
    nvls: bool = True
    net_channels: bool = False
    """Channels over NET/IB between trays too (the fallback inside a rack)."""
    warn_imex: bool = False
    extra: list[str] = field(default_factory=list)

    def _cliques(self) -> list[tuple[int, int]]:
        spec = self.cliques or ((2, len(self.hosts)),)
        out = []
        for clique, count in spec:
            out += [(clique, count)] * count
        return out

    def info(self) -> list[str]:
        family = self.version[:4]
        out: list[str] = []
        nodes = len(self.hosts)
        nranks = self.nranks
        cliques = self._cliques()
        for h, host in enumerate(self.hosts):
            rank = h * self.gpus_per_host
            pre = f"{host}:{1000 + rank}:{1000 + rank}"
            clique, members = cliques[h]
            out.append(f"{pre} [0] NCCL INFO NCCL version {self.version}")
            out.append(
                f"{pre} [0] NCCL INFO MNNVL busId 0x8010000 fabric UUID 4357d722c4406edc."
                f"78124d46dd9126ba cliqueId 0x{clique:x} state 3 healthMask 0x0"
            )
            nvls = f"NVLS multicast support is {'' if self.nvls else 'not '}available on dev 0"
            if family in ("2.27", "2.28", "2.29"):
                nvls += " (NVLS_NCHANNELS 24)"
            out.append(f"{pre} [0] NCCL INFO {nvls}")
            out.append(f"{pre} [0] NCCL INFO Using network IB")
            out.append(
                f"{pre} [0] NCCL INFO comm 0x55d0c0 rank {rank} nRanks {nranks} nNodes {nodes} "
                f"localRanks {self.gpus_per_host} localRank 0 MNNVL {int(self.mnnvl)}"
            )
            if self.warn_imex:
                out.append(
                    f"{pre} [0] NCCL WARN MNNVL (cliqueSize {members * self.gpus_per_host}) is "
                    "available but not working on this system. Check the IMEX channel "
                    "configuration (/dev/nvidia-caps-imex-channels). Set NCCL_MNNVL_ENABLE=0 "
                    "to ignore this issue."
                )
            if self.mnnvl:
                size = members * self.gpus_per_host
                index = sum(1 for c, _ in cliques[:h] if c == clique)
                line = (
                    f"{pre} [0] NCCL INFO MNNVL 1 cliqueId {clique:x} cliqueSize {size} "
                    f"cliqueRank {index * self.gpus_per_host}"
                )
                if family == "2.30":
                    line += f" nvlDomainSize {size}"
                out.append(line)
            peer = (rank + self.gpus_per_host) % nranks
            for ch in range(2):
                via = "P2P/MNNVL/read" if self.mnnvl else "P2P/CUMEM/read"
                out.append(
                    f"{pre} [0] NCCL INFO Channel {ch:02d}/0 : {rank}[0] -> {peer}[0] via {via}"
                )
                if self.net_channels:
                    out.append(
                        f"{pre} [0] NCCL INFO Channel {ch + 2:02d}/0 : {rank}[0] -> {peer}[0] "
                        "[send] via NET/IB/0/GDRDMA"
                    )
            out.append(
                f"{pre} [0] NCCL INFO 24 coll channels, 24 collnet channels, "
                f"{24 if self.nvls else 0} nvls channels, 32 p2p channels, 32 p2p channels per peer"
            )
            out.append(
                f"{pre} [0] NCCL INFO comm 0x55d0c0 rank {rank} nranks {nranks} cudaDev 0 "
                f"nvmlDev 0 busId 8010000 commId 0x7c1d - Init COMPLETE"
            )
        return out + self.extra
