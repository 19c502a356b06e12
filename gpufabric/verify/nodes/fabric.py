"""Multi-node NVLink (GB200/GB300 NVL72) node checks: each GPU's fabric state, the IMEX
channel devices, the host's own IMEX service.

The fabric state is what ``nvidia-smi -q`` prints in each GPU's ``Fabric`` section (NVML's
``nvmlDeviceGetGpuFabricInfoV``). The print changed across drivers; :func:`parse_fabric`
reads every form seen in public reports (the fixtures in ``tests/nvsmi.py`` cite them):

- State, Status, CliqueId, ClusterUUID only (driver 570 on GB200);
- the same with a ``Health`` block of Bandwidth, Route Recovery in progress, Route
  Unhealthy, Access Timeout Recovery (later 570 drivers);
- a ``Health`` block that starts with ``Summary`` and ends with Incorrect Configuration
  (580 drivers), with keys padded to a wider column.

A GPU has joined its NVLink domain when State is ``Completed`` and Status ``Success`` (NVML:
the status "must be checked only if state returns complete"), with a non-zero CliqueId and
ClusterUUID (NCCL's ``mnnvl.cc`` disables MNNVL for a zero UUID; Azure's HPC images count a
zero CliqueId as not joined). Every GPU of a tray is in one rack, so all of a tray's GPUs
must show one (ClusterUUID, CliqueId); GPU Feature Discovery labels the node
``nvidia.com/gpu.clique=<ClusterUUID>.<CliqueId>`` from the same NVML call.

The DRA driver for NVIDIA GPUs runs the IMEX daemons of each ComputeDomain itself; its
prerequisites (docs/prerequisites.md, v0.4.0) have the host's ``nvidia-imex.service``
disabled and masked.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gpufabric.verify.nodes.probe import Probe
from gpufabric.verify.results import Check, error, failed, passed, skipped

NVSMI_COMMAND = "nvidia-smi -q"
"""How the fabric state is read on the host (the full query: ``-d`` has no fabric group)."""
IMEX_CHANNELS_DIR = "/dev/nvidia-caps-imex-channels"
IMEX_CHANNELS_MAJOR = "nvidia-caps-imex-channels"
"""The character device the driver registers in /proc/devices for IMEX channels."""
IMEX_UNIT = "nvidia-imex.service"
UNIT_DIRS = (
    "/etc/systemd/system",
    "/run/systemd/system",
    "/usr/lib/systemd/system",
    "/lib/systemd/system",
)
"""Where systemd finds units, in precedence order (a mask is a link to /dev/null in the
first two)."""
ZERO_UUID = "00000000-0000-0000-0000-000000000000"
HEALTHY = frozenset({"Healthy"})
"""Health Summary values that pass (NVML_GPU_FABRIC_HEALTH_SUMMARY_*: Healthy, Unhealthy,
Limited Capacity; "N/A" or "Not Supported" when the driver reports none)."""
UNREPORTED = frozenset({"N/A", "Not Supported", "[Not Supported]", ""})
HEALTH_FAULTS = {
    "Bandwidth": frozenset({"Full", "N/A", "Not Supported"}),
    "Route Recovery in progress": frozenset({"False", "N/A", "Not Supported"}),
    "Route Unhealthy": frozenset({"False", "N/A", "Not Supported"}),
    "Access Timeout Recovery": frozenset({"False", "N/A", "Not Supported"}),
    "Incorrect Configuration": frozenset({"None", "N/A", "Not Supported"}),
}
"""Each Health row and the values that say no fault."""

_GPU = re.compile(r"^GPU (?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")
_FIELD = re.compile(r"^(?P<indent> *)(?P<key>[^:]*?)\s*(?::\s?(?P<value>.*?))?\s*$")


@dataclass
class GpuFabric:
    """One GPU's Fabric section."""

    bus_id: str
    uuid: str | None = None
    state: str | None = None
    status: str | None = None
    clique_id: str | None = None
    cluster_uuid: str | None = None
    health: dict[str, str] = field(default_factory=dict)
    has_section: bool = False

    @property
    def clique(self) -> str | None:
        """``<ClusterUUID>.<CliqueId>``, as GPU Feature Discovery labels the node."""
        if self.cluster_uuid is None or self.clique_id is None:
            return None
        return f"{self.cluster_uuid}.{self.clique_id}"

    def problems(self) -> list[str]:
        """Why this GPU has not joined a healthy NVLink domain (empty when it has)."""
        if not self.has_section:
            return ["no Fabric section (a driver older than 550 prints none)"]
        out = []
        if self.state != "Completed":
            out.append(f"State {self.state or 'missing'}")
        elif self.status != "Success":
            out.append(f"Status {self.status or 'missing'}")
        if not self.clique_id or self.clique_id in UNREPORTED or self.clique_id == "0":
            out.append(f"CliqueId {self.clique_id or 'missing'}")
        if (
            not self.cluster_uuid
            or self.cluster_uuid in UNREPORTED
            or self.cluster_uuid == ZERO_UUID
        ):
            out.append(f"ClusterUUID {self.cluster_uuid or 'missing'}")
        summary = self.health.get("Summary")
        if summary is not None and summary not in HEALTHY | UNREPORTED:
            out.append(f"Health Summary {summary}")
        for row, fine in HEALTH_FAULTS.items():
            value = self.health.get(row)
            if value is not None and value not in fine:
                out.append(f"{row} {value}")
        return out


def parse_fabric(text: str) -> list[GpuFabric]:
    """Every GPU of an ``nvidia-smi -q`` print with its Fabric section, in print order.

    Sections are found by indentation, not by column: the key column is 34 wide on 570
    drivers and 51 on 580."""
    gpus: list[GpuFabric] = []
    current: GpuFabric | None = None
    section: list[tuple[int, str]] = []
    for raw in text.splitlines():
        line = raw.rstrip()
        if m := _GPU.match(line):
            current = GpuFabric(bus_id=m["bus"].lower())
            gpus.append(current)
            section = []
            continue
        if current is None or not line.strip():
            continue
        f = _FIELD.match(line)
        if f is None:
            continue
        indent, key, value = len(f["indent"]), f["key"], f["value"]
        while section and section[-1][0] >= indent:
            section.pop()
        path = [name for _, name in section]
        if value is None:
            section.append((indent, key))
            continue
        if not path and key == "GPU UUID":
            current.uuid = value
        elif path == ["Fabric"]:
            current.has_section = True
            attr = {
                "State": "state",
                "Status": "status",
                "CliqueId": "clique_id",
                "ClusterUUID": "cluster_uuid",
            }.get(key)
            if attr:
                setattr(current, attr, value)
        elif path == ["Fabric", "Health"]:
            current.health[key] = value
    return gpus


def _tray_clique(gpus: Sequence[GpuFabric]) -> tuple[str | None, list[str]]:
    """(the tray's one clique, or None; the distinct cliques its GPUs show)."""
    cliques = sorted({g.clique for g in gpus if g.clique is not None})
    return (cliques[0] if len(cliques) == 1 else None), cliques


def judge_fabric(name: str, rc: int, text: str, gpus_expected: int) -> Check:
    """``nvlink.fabric`` from the exit status and print of ``nvidia-smi -q`` on one tray."""
    cid = "nvlink.fabric"
    if rc != 0 or not text.strip():
        return error(
            cid,
            name,
            f"`{NVSMI_COMMAND}` did not run (exit {rc}): the fabric state is not verified",
            "on the node: nvidia-smi -q | grep -A 14 Fabric (the driver container has it)",
        )
    gpus = parse_fabric(text)
    if not gpus:
        return error(
            cid,
            name,
            f"`{NVSMI_COMMAND}` printed no GPU section: the fabric state is not verified",
            "on the node: nvidia-smi -q",
        )
    bad = {g.bus_id: g.problems() for g in gpus}
    bad = {bus: why for bus, why in bad.items() if why}
    clique, cliques = _tray_clique(gpus)
    hint = (
        "nvidia-smi -q | grep -A 14 Fabric; the NVLink switch trays and their fabric manager "
        "(NMX) for this rack; a GPU still In Progress joins after the fabric manager finishes"
    )
    if bad:
        shown = "; ".join(f"{bus}: {', '.join(why)}" for bus, why in sorted(bad.items()))
        return failed(
            cid,
            name,
            f"{len(bad)} of {len(gpus)} GPUs have not joined a healthy NVLink domain ({shown})",
            hint,
            gpus=sorted(bad),
        )
    if clique is None:
        return failed(
            cid,
            name,
            f"the tray's GPUs are in {len(cliques)} NVLink cliques ({', '.join(cliques)}); "
            "one tray is in one rack",
            hint,
            cliques=cliques,
        )
    if len(gpus) != gpus_expected:
        return failed(
            cid,
            name,
            f"{len(gpus)} GPUs in `{NVSMI_COMMAND}`, the stack expects {gpus_expected}",
            "nvidia-smi -L; dmesg | grep -i xid",
        )
    cluster_uuid, _, clique_id = clique.rpartition(".")
    return passed(
        cid,
        name,
        f"{len(gpus)} GPUs Completed/Success in clique {clique_id} of cluster {cluster_uuid}",
        clique=clique,
        clique_id=clique_id,
        cluster_uuid=cluster_uuid,
    )


def check_fabric(probe: Probe, exp: object) -> Check:
    gpus = int(getattr(exp, "gpus", 0))
    if getattr(exp, "nvlink", None) is None:
        return skipped("nvlink.fabric", probe.name, "not a multi-node NVLink pool")
    rc, out = probe.run(NVSMI_COMMAND)
    return judge_fabric(probe.name, rc, out, gpus)


def judge_imex_channels(name: str, entries: Sequence[str], proc_devices: str | None) -> Check:
    """``imex.channels``: the driver registers the IMEX channel device class; the channel
    nodes themselves (``channelN``) are made by the DRA driver when it prepares a claim, so
    a node that has run no ComputeDomain pod may have none yet."""
    cid = "imex.channels"
    channels = sorted(
        (e for e in entries if re.fullmatch(r"channel[0-9]+", e)), key=lambda e: int(e[7:])
    )
    if proc_devices is None:
        return error(
            cid,
            name,
            "/proc/devices unreadable: IMEX channel support not verified",
            "cat /proc/devices",
        )
    registered = any(
        line.split()[1:2] == [IMEX_CHANNELS_MAJOR] for line in proc_devices.splitlines()
    )
    if not registered:
        return failed(
            cid,
            name,
            f"the driver registers no {IMEX_CHANNELS_MAJOR} devices (/proc/devices): "
            "ComputeDomain pods get no IMEX channel",
            "a driver of 570.158.01 or later with IMEX support (the DRA driver's prerequisite)",
        )
    if channels:
        return passed(
            cid,
            name,
            f"{len(channels)} IMEX channel devices in {IMEX_CHANNELS_DIR} ({', '.join(channels[:4])}"
            f"{' ...' if len(channels) > 4 else ''})",
            channels=channels,
        )
    return passed(
        cid,
        name,
        f"the driver registers {IMEX_CHANNELS_MAJOR}; no channel device yet (the DRA driver "
        "creates one when it prepares a ComputeDomain channel claim)",
        channels=[],
    )


def check_imex_channels(probe: Probe, exp: object) -> Check:
    if getattr(exp, "nvlink", None) is None:
        return skipped("imex.channels", probe.name, "not a multi-node NVLink pool")
    return judge_imex_channels(
        probe.name, probe.listdir(IMEX_CHANNELS_DIR), probe.read("/proc/devices")
    )


@dataclass(frozen=True)
class UnitState:
    """What the host's systemd files say of ``nvidia-imex.service``."""

    installed: str | None
    """The unit file's directory, None when no unit directory holds it."""
    masked: str | None
    """The mask (a link to /dev/null) that hides it, None when not masked."""
    wanted_by: tuple[str, ...]
    """``*.wants`` directories that start it at boot (enabled)."""


def unit_state(probe: Probe) -> UnitState:
    """Read from the unit directories as systemd does: a unit file that is empty or a link
    to /dev/null is masked (systemd.unit(5)); a ``*.wants`` directory naming the unit
    enables it. Links are not followed out of the root: their names are what count."""
    masked = installed = None
    for base in UNIT_DIRS:
        path = f"{base}/{IMEX_UNIT}"
        text = probe.read(path)
        if text is None:
            continue
        if not text.strip():
            masked = masked or path
        else:
            installed = installed or base
    wants = [
        f"{base}/{entry}"
        for base in UNIT_DIRS[:2]
        for entry in probe.listdir(base)
        if entry.endswith(".wants") and IMEX_UNIT in probe.listdir(f"{base}/{entry}")
    ]
    return UnitState(installed, masked, tuple(wants))


def judge_imex_service(name: str, state: UnitState) -> Check:
    cid = "imex.host-service"
    fix = "systemctl disable --now nvidia-imex.service && systemctl mask nvidia-imex.service"
    if state.masked:
        return passed(cid, name, f"{IMEX_UNIT} masked ({state.masked} is empty or /dev/null)")
    if state.wanted_by:
        return failed(
            cid,
            name,
            f"{IMEX_UNIT} is enabled ({', '.join(state.wanted_by)}): the host's IMEX daemon "
            "competes with the DRA driver's ComputeDomain daemons",
            fix,
        )
    if state.installed is None:
        return passed(cid, name, f"{IMEX_UNIT} is not installed on the host")
    return passed(
        cid,
        name,
        f"{IMEX_UNIT} installed in {state.installed} and not enabled (the DRA driver's "
        "prerequisites also mask it)",
    )


def check_imex_service(probe: Probe, exp: object) -> Check:
    if getattr(exp, "nvlink", None) is None:
        return skipped("imex.host-service", probe.name, "not a multi-node NVLink pool")
    return judge_imex_service(probe.name, unit_state(probe))


FLEET_CLIQUE_CHECK = "fleet.nvlink-domains"


def domain_checks(
    results: Iterable[Check],
    trays_per_domain: int,
    labels: Mapping[str, str | None] | None = None,
) -> list[Check]:
    """Across trays: no clique holds more trays than a rack has, and each tray's clique is
    the one GPU Feature Discovery labelled its node with (``labels``: node -> label, when
    read from the API)."""
    members: dict[str, list[str]] = {}
    for c in results:
        if c.check == "nvlink.fabric" and "clique" in c.details:
            members.setdefault(c.details["clique"], []).append(c.target)
    if not members:
        return []
    out: list[Check] = []
    over = {k: v for k, v in members.items() if len(v) > trays_per_domain}
    if over:
        shown = "; ".join(f"{k}: {len(v)} trays" for k, v in sorted(over.items()))
        out.append(
            failed(
                FLEET_CLIQUE_CHECK,
                "all nodes",
                f"cliques with more than {trays_per_domain} trays ({shown}): one NVLink "
                "domain is one rack",
                "nvidia-smi -q | grep -A 4 Fabric on the trays; the racks' fabric manager",
            )
        )
    if labels is not None:
        wrong = sorted(
            f"{node} (label {labels.get(node) or 'missing'}, GPUs {clique})"
            for clique, nodes in members.items()
            for node in nodes
            if labels.get(node) != clique
        )
        if wrong:
            out.append(
                failed(
                    FLEET_CLIQUE_CHECK,
                    "all nodes",
                    f"nvidia.com/gpu.clique differs from the GPUs' fabric on {len(wrong)} "
                    f"nodes: {'; '.join(wrong[:6])}{' ...' if len(wrong) > 6 else ''}",
                    "GPU Feature Discovery sets the label: kubectl -n gpu-operator get pods "
                    "-l app=gpu-feature-discovery; never hand-set it",
                )
            )
    if not out:
        sizes = ", ".join(f"{k}: {len(v)}" for k, v in sorted(members.items()))
        out.append(
            passed(
                FLEET_CLIQUE_CHECK,
                "all nodes",
                f"{len(members)} NVLink domains, trays per clique: {sizes}",
                domains={k: sorted(v) for k, v in sorted(members.items())},
            )
        )
    return out
