"""``nvidia-smi -q`` prints of GB200/GB300 trays, in the formats public reports show.

Only the Fabric section is what the checks read; the lines around it follow the same print
so that a parser keyed on indentation, not on neighbours, is what the tests hold. Each
format and the public report its lines are written from ("seen" marks a line whose text,
value included, appears in that report):

- ``570``: State, Status, CliqueId, ClusterUUID; keys padded to column 42.
  Azure/azhpc-images pull request #506 ("fix: validate NVLink Fabric health beyond N/A
  check", 2026-03-28) prints a GB200 GPU's section: ``State : Completed`` (seen), ``Status :
  Insufficient Resources`` (seen), ``CliqueId : 0`` (seen), ``ClusterUUID :
  00000000-0000-0000-0000-000000000000`` (seen).
- ``570h``: the same with a ``Health`` block of Bandwidth, Route Recovery in progress, Route
  Unhealthy, Access Timeout Recovery and no Summary row: a public capture of
  ``nvidia-smi -q`` from driver 570.124.06 (every row ``N/A`` on a GPU without a fabric,
  seen); leptonai/gpud pull request #1106 (2025-10-15) shows a GB200's values for the same
  four rows through NVML: state Completed, status Success, clique 4026, cluster UUID
  9c6f5af3-53bf-49b5-a436-b66766c413c3, each health row "Not Supported" (seen, as JSON).
- ``580``: a ``Health`` block that starts with ``Summary`` and ends with ``Incorrect
  Configuration``. kubernetes-sigs/dra-driver-nvidia-gpu issue #626 (2025-09-26, a GB200):
  ``State : Completed``, ``Status : Success``, ``CliqueId : 2``, ``ClusterUUID :
  dc6e40c4-d722-4357-9ba6-5291dd461278``, ``Health`` / ``Summary : Unhealthy``, ``Bandwidth :
  Full`` (all seen, keys padded to column 42). NVIDIA/k8s-test-infra issue #677 (2026-08-18)
  diffs a real 4-GPU GB300 tray (driver 580.173.02): ``State : Completed``, ``Status :
  Success`` (seen); its mock's documentation names the rows Bandwidth (Full / Degraded),
  Route Recovery in progress, Route Unhealthy, Access Timeout Recovery (False / True) and
  Incorrect Configuration (None, ...), with Summary Healthy / Limited Capacity / Unhealthy.
- ``580w``: the 580 block with keys padded to column 55, as a public capture of driver
  580.119.02 prints every section (its Fabric rows ``N/A``, seen).

Bus ids, UUIDs and timestamps are made up; the values not marked seen are the healthy
counterparts the same reports name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

FORMATS = ("570", "570h", "580", "580w")
DRIVERS = {"570": "570.133.20", "570h": "570.158.01", "580": "580.82.07", "580w": "580.173.02"}
BUS_IDS = ("00000008:01:00.0", "00000009:01:00.0", "00000018:01:00.0", "00000019:01:00.0")
"""A tray's four GPUs (made up; one PCI domain per GPU, as on Grace systems)."""
CLUSTER = "dc6e40c4-d722-4357-9ba6-5291dd461278"


@dataclass
class GpuState:
    state: str = "Completed"
    status: str = "Success"
    clique_id: str = "2"
    cluster_uuid: str = CLUSTER
    health: dict[str, str] = field(default_factory=dict)
    """Health rows that differ from a healthy fabric's."""


HEALTHY_ROWS = {
    "570h": {
        "Bandwidth": "Full",
        "Route Recovery in progress": "False",
        "Route Unhealthy": "False",
        "Access Timeout Recovery": "False",
    },
    "580": {
        "Summary": "Healthy",
        "Bandwidth": "Full",
        "Route Recovery in progress": "False",
        "Route Unhealthy": "False",
        "Access Timeout Recovery": "False",
        "Incorrect Configuration": "None",
    },
}
HEALTHY_ROWS["580w"] = HEALTHY_ROWS["580"]


def _row(indent: int, key: str, value: str | None, width: int) -> str:
    pad = " " * indent
    if value is None:
        return f"{pad}{key}"
    return f"{pad}{key.ljust(width - indent)}: {value}"


def tray(
    fmt: str = "580",
    gpus: list[GpuState] | None = None,
    product: str = "NVIDIA GB200",
) -> str:
    """The print of one tray (four GPUs unless ``gpus`` says otherwise)."""
    width = 55 if fmt == "580w" else 42
    states = gpus if gpus is not None else [GpuState() for _ in BUS_IDS]
    lines = [
        "",
        "==============NVSMI LOG==============",
        "",
        _row(0, "Timestamp", "Tue Nov 10 09:14:02 2026", width),
        _row(0, "Driver Version", DRIVERS[fmt], width),
        _row(0, "CUDA Version", "12.8" if fmt.startswith("570") else "13.0", width),
        "",
        _row(0, "Attached GPUs", str(len(states)), width),
    ]
    for i, g in enumerate(states):
        bus = BUS_IDS[i % len(BUS_IDS)] if i < len(BUS_IDS) else f"0000{i:04x}:01:00.0"
        lines += [
            f"GPU {bus}",
            _row(4, "Product Name", product, width),
            _row(4, "Product Architecture", "Blackwell", width),
            _row(4, "GPU UUID", f"GPU-{i:08x}-15ec-deff-a5c1-82b48e063f59", width),
            _row(4, "Platform Info", None, width),
            _row(8, "Chassis Serial Number", "1821124190012", width),
            _row(8, "Slot Number", "7", width),
            _row(8, "Tray Index", "6", width),
            _row(8, "Host ID", "1", width),
            _row(8, "Peer Type", "Switch Connected", width),
            _row(8, "Module Id", str(i + 1), width),
            _row(4, "Clock Policy", None, width),
            _row(8, "Auto Boost", "N/A", width),
            _row(4, "Fabric", None, width),
            _row(8, "State", g.state, width),
            _row(8, "Status", g.status, width),
            _row(8, "CliqueId", g.clique_id, width),
            _row(8, "ClusterUUID", g.cluster_uuid, width),
        ]
        if fmt in HEALTHY_ROWS:
            lines.append(_row(8, "Health", None, width))
            rows = {**HEALTHY_ROWS[fmt], **g.health}
            lines += [_row(12, k, v, width) for k, v in rows.items()]
        lines += [
            _row(4, "Processes", "None", width),
            _row(4, "Capabilities", None, width),
            _row(8, "EGM", "disabled", width),
        ]
    return "\n".join(lines) + "\n"


def script(text: str) -> str:
    """A fake ``nvidia-smi`` printing ``text`` for ``-q`` (exit 0), as the real tool does."""
    return '#!/bin/sh\n[ "$1" = "-q" ] || exit 2\ncat <<\'EOF\'\n' + text + "EOF\n"
