# ruff: noqa: UP031  (printf formats on purpose: they are nccl-tests' own, character for character)
"""nccl-tests output as the real tool writes it, for every flag that changes the format.

The format strings are those of nccl-tests 2.19.6 (src/util.cu: writeDeviceReport,
writeResultHeader, writeBenchmarkLinePreamble/Body, getFloatStr, writePerIterReport,
writeTimestamp, writeResultFooter, writeMemInfo; -J JSON version 3) and of NCCL's INFO lines
(init.cc "comm %p rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL %d", the
channel and NET/IB lines of reference/verify.md section 5.2). Launchers' prefixes are applied
as each launcher writes them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from gpufabric.verify.nccl.rules import NcclExpectation

IB_8X400 = NcclExpectation(
    rdma=True,
    link_layer="IB",
    threshold_gbps=360.0,
    threshold_source="0.9 x line rate 400 GB/s",
    gpus_per_node=8,
    line_rate_gbytes=400.0,
)
"""What a stack of 8 x 400G InfiniBand rails expects of a run (the default Log)."""


def float_str(value: float, width: int) -> str:
    """getFloatStr: %.2f, then %.1f, %.0f, then exponent when the width is exceeded."""
    for fmt in (f"%{width}.2f", f"%{width}.1f", f"%{width}.0f"):
        text = fmt % value
        if len(text) <= width:
            return text
    return (f"%{width}.1e" if width >= 7 else f"%{width}.0e") % value


@dataclass
class Log:
    """One collective test of an nccl-tests run."""

    test: str = "all_reduce_perf_mpi"
    hosts: tuple[str, ...] = ("node-a", "node-b")
    gpus_per_host: int = 8
    sizes: tuple[int, ...] = (1 << 30, 2 << 30, 4 << 30, 8 << 30)
    busbw: float = 370.0
    layer: str = "IB"  # IB | RoCE
    hcas: int = 8
    first_hca: int = 0
    """NCCL numbers the HCAs it uses from 0; their names are mlx5_<first_hca + i>."""
    network: str = "IB"
    gdr: bool = True
    per_iter: bool = False  # -I 1
    timestamps: bool = False  # -S 1
    check: bool = True  # -c 1 (else #wrong is N/A)
    memory: bool = False  # -M 1
    cycles: int = 1  # -N
    cputime: bool = False  # -C 1
    concluded: bool = True
    rows_printed: int | None = None
    """Rows actually printed (a killed run prints fewer than announced)."""
    extra_info: list[str] = field(default_factory=list)

    @property
    def nranks(self) -> int:
        return len(self.hosts) * self.gpus_per_host

    def header(self) -> list[str]:
        low, high = min(self.sizes), max(self.sizes)
        out = [
            "# nccl-tests version 2.19.6 nccl-headers=22807 nccl-library=22807",
            f"# Collective test starting: {self.test}",
            f"# nThread 1 nGpus 1 minBytes {low} maxBytes {high} step: 2(factor) warmup iters: 1 "
            f"iters: 20 agg iters: 1 validation: {int(self.check)} graph: 0 unalign: 0",
        ]
        if self.per_iter:
            out.append("# Per-Iteration Report: CUDA event timing; i_* uses max over process rows ")
        out += ["#", "# Using devices"]
        rank = 0
        for host in self.hosts:
            for dev in range(self.gpus_per_host):
                out.append(
                    "#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s"
                    % (rank, 0, 1000 + rank, host, dev, 0, 0x18 + dev, 0, "NVIDIA H100 80GB HBM3")
                )
                rank += 1
        if self.memory:
            out.append(
                "# %-20s : %s"
                % ("GPU memory usage", "NCCL 1.02 GB | Test 16.0 GB | Total  17.0 GB")
            )
        return out

    def info(self) -> list[str]:
        nodes = len(self.hosts)
        out: list[str] = []
        host = self.hosts[0]
        devs = " ".join(f"[{i}]mlx5_{self.first_hca + i}:1/{self.layer}" for i in range(self.hcas))
        if self.network == "IB":
            out.append(
                f"{host}:1000:1000 [0] NCCL INFO NET/IB : Using {devs} [RO]; OOB eth0:10.0.0.1<0>"
            )
        else:
            out.append(f"{host}:1000:1000 [0] NCCL INFO NET/IB : No device found.")
            out.append(f"{host}:1000:1000 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>")
        out.append(f"{host}:1000:1000 [0] NCCL INFO Using network {self.network}")
        out.append(
            f"{host}:1000:1020 [0] NCCL INFO comm 0x55d0c0 rank 0 nRanks {self.nranks} "
            f"nNodes {nodes} localRanks {self.gpus_per_host} localRank 0 MNNVL 0"
        )
        if nodes > 1:
            peer = self.gpus_per_host
            via = (
                "NET/IB/0/GDRDMA"
                if self.network == "IB" and self.gdr
                else ("NET/IB/0" if self.network == "IB" else "NET/Socket/0")
            )
            for ch in range(2):
                out.append(
                    f"{host}:1000:1020 [0] NCCL INFO Channel {ch:02d}/0 : 0[0] -> {peer}[0] "
                    f"[send] via {via}"
                )
                out.append(
                    f"{self.hosts[1]}:1001:1021 [0] NCCL INFO Channel {ch:02d}/0 : {peer}[0] -> "
                    f"0[0] [receive] via {via}"
                )
        out.append(
            f"{host}:1000:1020 [0] NCCL INFO comm 0x55d0c0 rank 0 nranks {self.nranks} cudaDev 0 "
            "nvmlDev 0 busId 18000 commId 0x7c1d - Init COMPLETE"
        )
        return out + self.extra_info

    def table_header(self) -> list[str]:
        time = "cputime" if self.cputime else "time"
        ts_pad, ts_lbl, ts_fmt = (
            (19, "timestamp", "%Y-%m-%d %H:%M:%S") if self.timestamps else (0, "", "")
        )
        if self.per_iter:
            cols = ("size", "count", "type", "redop", "root", time, "algbw", "busbw", "#wrong",
                    "i_min", "i_max", "i_p99", "i_cv%", time, "algbw", "busbw", "#wrong",
                    "i_min", "i_max", "i_p99", "i_cv%")  # fmt: skip
            units = ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)",
                     "(us)", "(us)", "(%)", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)",
                     "(%)")  # fmt: skip
            fmt = "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s %*s"
            return [
                "#",
                "# %10s  %12s  %8s  %6s  %6s              out-of-place (+ per-iteration)                                in-place (+ per-iteration)" % ("", "", "", "", ""),
                fmt % (*cols, ts_pad, ts_lbl),
                fmt % (*units, ts_pad, ts_fmt),
            ]  # fmt: skip
        fmt = "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s"
        return [
            "#",
            "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          " % ("", "", "", "", ""),
            fmt % ("size", "count", "type", "redop", "root", time, "algbw", "busbw", "#wrong", time, "algbw", "busbw", "#wrong", ts_pad, ts_lbl),
            fmt % ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", ts_pad, ts_fmt),
        ]  # fmt: skip

    def body(self, bus: float, algbw: float, usec: float) -> str:
        text = "  %7s  %6s  %6s" % (float_str(usec, 7), float_str(algbw, 6), float_str(bus, 6))
        text += "  %6g" % 0 if self.check else "    N/A"
        if self.per_iter:
            text += "  %7s  %7s  %7s  %7s" % tuple(
                float_str(v, 7) for v in (usec * 0.98, usec * 1.05, usec * 1.04, 1.2)
            )
        return text

    def rows(self) -> list[str]:
        out = []
        sizes = [s for _ in range(self.cycles) for s in self.sizes]
        if self.rows_printed is not None:
            sizes = sizes[: self.rows_printed]
        op = "none" if "gather" in self.test else "sum"
        for size in sizes:
            scale = min(1.0, size / (8 << 30)) ** 0.05
            bus = self.busbw * scale
            factor = 2 * (self.nranks - 1) / self.nranks if self.nranks > 1 else 1.0
            algbw = bus / factor
            usec = size / (algbw * 1e3) if algbw > 0 else 0.0
            line = "%12li  %12li  %8s  %6s  %6s" % (size, size // 4, "float", op, "%6i" % -1)
            line += self.body(bus, algbw, usec) + self.body(bus * 0.998, algbw, usec * 1.002)
            if self.timestamps:
                line += "%21s" % "2026-11-20 10:15:42"
            out.append(line)
        return out

    def footer(self) -> list[str]:
        avg = self.busbw * 0.95
        out = [
            "# %-20s : %d %s" % ("Out of bounds values", 0, "OK"),
            "# %-20s : %g %s" % ("Avg bus bandwidth", avg, ""),
            "#",
        ]
        if self.concluded:
            out.append(f"# Collective test concluded: {self.test}")
        return out

    def lines(self) -> list[str]:
        out = self.header() + self.info() + self.table_header() + self.rows()
        if self.concluded or self.rows_printed is None:
            out += self.footer()
        return out

    def json(self) -> str:
        """The -J document (format version 3) as util.cu writes it: jsonBool writes the
        strings "true"/"false" (util.cu:273), the devices list sits inside "config"
        (writeDeviceReport, util.cu:702), nwrong is a double (util.cu:521) and "errors" holds
        NCCL's last error, "" when there was none (writeErrors, util.cu:846)."""
        results = []
        for size in [s for _ in range(self.cycles) for s in self.sizes]:
            part = {
                "time": 1000.0,
                "alg_bw": self.busbw / 2,
                "bus_bw": self.busbw,
                "nwrong": 0.0 if self.check else None,
            }
            results.append({"size": size, "count": size // 4, "type": "float", "redop": "sum", "root": "    -1",
                            "out_of_place": part, "in_place": dict(part), "actual_iterations": 20, "experiment_name": ""})  # fmt: skip
        doc = {
            "version": 3,
            "start_time": "2026-11-20 10:15:00",
            "args": [f"./build/{self.test}", "-b", "1G", "-e", "8G", "-f", "2", "-J", "out.json"],
            "env": [],
            "nccl_version": 22807,
            "config": {
                "nthreads": 1,
                "ngpus": 1,
                "minimum_bytes": min(self.sizes),
                "maximum_bytes": max(self.sizes),
                "step_factor": 2,
                "warmup_iters": 1,
                "iterations": 20,
                "aggregated_iterations": 1,
                "validation": 1,
                "graph": 0,
                "blocking_collectives": "false",
                "per_iter_timing": "false",
                "per_iter_skip": 0,
                "parallel_init": "false",
                "devices": [
                    {
                        "rank": i,
                        "group": 0,
                        "pid": 1000 + i,
                        "hostname": h,
                        "device": i % self.gpus_per_host,
                        "device_hex": "0000:18:00",
                        "device_info": "NVIDIA H100",
                    }
                    for i, h in enumerate(h for h in self.hosts for _ in range(self.gpus_per_host))
                ],
            },
            "results": results,
            "out_of_bounds": {"count": 0, "okay": "true"},
            "average_bus_bandwidth": {"bandwidth": self.busbw * 0.95, "okay": "unchecked"},
            "errors": [""],
            "end_time": "2026-11-20 10:16:00",
        }
        return json.dumps(doc, indent=1)


def text(*logs: Log) -> str:
    return "\n".join(line for log in logs for line in log.lines()) + "\n"


def openmpi(body: str) -> str:
    """mpirun --tag-output: [jobid,rank]<stdout>: before every line."""
    return "".join(f"[1,0]<stdout>:{line}\n" for line in body.splitlines())


def mpich(body: str, split_rows: bool = False) -> str:
    """mpiexec -prepend-rank: "[0] " before every write; a table row is written in pieces
    (preamble, out-of-place, in-place), so with split_rows the prefix appears mid-line."""
    out = []
    for line in body.splitlines():
        if split_rows and line[:12].strip().isdigit():
            # writes end after the preamble (root, 5th field) and the out-of-place body
            ends = [m.end() for m in re.finditer(r"\S+", line)]
            cuts = [ends[4], ends[8]]
            pieces = [line[: cuts[0]], line[cuts[0] : cuts[1]], line[cuts[1] :]]
            out.append("".join(f"[0] {p}" for p in pieces))
        else:
            out.append(f"[0] {line}")
    return "\n".join(out) + "\n"


def slurm(body: str, tasks: int = 1) -> str:
    """srun -l (--label): "<task>: " before every line, the task id right-aligned to the
    width of the largest one, so " 0: " with 10 or more tasks."""
    width = len(str(tasks - 1))
    return "".join(f"{0:>{width}}: {line}\n" for line in body.splitlines())


def openmpi5(body: str, host: str = "node-a", pid: int = 4242) -> str:
    """Open MPI 5 (PRRTE) --output tag-detailed: "[1,0][host:pid]<stdout>: " per line."""
    return "".join(f"[1,0][{host}:{pid}]<stdout>: {line}\n" for line in body.splitlines())


def torchrun(body: str, local_rank: int = 0) -> str:
    """torchrun --tee 3 (torch.distributed.elastic): "[default0]:" before every line."""
    return "".join(f"[default{local_rank}]:{line}\n" for line in body.splitlines())


def kubectl_prefix(body: str, pod: str = "pod/team-mpijob-launcher-x7k2p/launcher") -> str:
    """kubectl logs --prefix: [pod/NAME/CONTAINER] before every line."""
    return "".join(f"[{pod}] {line}\n" for line in body.splitlines())
