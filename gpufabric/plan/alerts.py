"""The fleet-health alerts (PrometheusRule groups) and node-problem-detector's kernel-log
rules, one class per failure, computed from the Plan's facts.

Every alert carries ``class`` (its row in the runbook's triage table), ``severity`` and
``quarantine`` ("true": the node must leave service until it is repaired and re-certified;
"false": never quarantine for it). Series are grouped by ``node`` (the ServiceMonitors
label every series with its node).
"""

from __future__ import annotations

from typing import Any

from msgspec import Struct

from gpufabric.plan import node_acceptance
from gpufabric.plan.facts import Facts, XidClass

ACCEPTANCE_JOB = "gpufabric-nccl"
"""Name prefix of the NCCL acceptance job ``gpufabric verify nccl`` runs."""
GPU_PRESENCE_METRIC = "DCGM_FI_DEV_GPU_TEMP"
"""One series per GPU the DCGM exporter sees, labelled with its node: which nodes are GPU
nodes (the GPUs-missing and acceptance-stale rules count them per node)."""


class AlertClass(Struct, frozen=True, kw_only=True):
    """One failure class: the alert, what it means and where it leads."""

    alert: str
    group: str
    expr: str
    for_: str
    severity: str
    quarantine: bool
    summary: str
    action: str

    def rule(self) -> dict[str, Any]:
        return {
            "alert": self.alert,
            "expr": self.expr,
            "for": self.for_,
            "labels": {
                "class": self.alert,
                "severity": self.severity,
                "quarantine": "true" if self.quarantine else "false",
            },
            "annotations": {"summary": self.summary, "action": self.action},
        }


def _codes(xids: XidClass) -> str:
    return "|".join(str(c) for c in xids.codes)


def _xid_alert(xids: XidClass) -> AlertClass:
    name = "GpuFatalXid" if xids.quarantine else "GpuNonFatalXid"
    # The exporter's count is a gauge of records per code in its sliding window: take the
    # window's maximum, never increase().
    return AlertClass(
        alert=name,
        group="gpufabric-gpu",
        expr=(
            "max by (node, gpu, xid) (max_over_time("
            f'DCGM_EXP_XID_ERRORS_COUNT{{xid=~"{_codes(xids)}"}}[5m])) > 0'
        ),
        for_="0m",
        severity="critical" if xids.quarantine else "info",
        quarantine=xids.quarantine,
        summary=f"Xid {{{{ $labels.xid }}}} ({xids.name}) on {{{{ $labels.node }}}} "
        "GPU {{ $labels.gpu }}",
        action=xids.action,
    )


def _gpu(f: Facts) -> list[AlertClass]:
    m = f.monitoring
    by = "max by (node, gpu)"
    return [
        *(_xid_alert(x) for x in m.xid_classes if x.codes),
        AlertClass(
            alert="GpuEccDoubleBit",
            group="gpufabric-gpu",
            expr=f"{by} (DCGM_FI_DEV_ECC_DBE_VOL_TOTAL) > 0",
            for_="0m",
            severity="critical",
            quarantine=True,
            summary="Uncorrectable (double-bit) ECC errors on {{ $labels.node }} GPU {{ $labels.gpu }}",
            action="drain the node and reset the GPU; replace it when the errors return",
        ),
        AlertClass(
            alert="GpuRowRemapFailure",
            group="gpufabric-gpu",
            expr=f"{by} (DCGM_FI_DEV_ROW_REMAP_FAILURE) > 0",
            for_="0m",
            severity="critical",
            quarantine=True,
            summary="Row remapping failed on {{ $labels.node }} GPU {{ $labels.gpu }}",
            action="the GPU is out of spare rows: drain the node and file an RMA",
        ),
        AlertClass(
            alert="GpuRowRemapPending",
            group="gpufabric-gpu",
            expr=f"{by} (DCGM_FI_DEV_ROW_REMAP_PENDING) > 0",
            for_="15m",
            severity="warning",
            quarantine=False,
            summary="A row remap waits for a GPU reset on {{ $labels.node }} GPU {{ $labels.gpu }}",
            action="reset the GPU at the next idle window (drain, reset, re-certify)",
        ),
    ]


def _gpu_links(f: Facts) -> list[AlertClass]:
    return [
        AlertClass(
            alert="GpuNvlinkErrorsRising",
            group="gpufabric-gpu",
            expr=" or ".join(
                f"sum by (node, gpu) (increase({metric}[15m])) > 0"
                for metric in (
                    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
                    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
                    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
                )
            ),
            for_="15m",
            severity="warning",
            quarantine=False,
            summary="NVLink CRC/replay/recovery errors keep rising on {{ $labels.node }} "
            "GPU {{ $labels.gpu }}",
            action="run gpufabric verify nodes and an NCCL all-reduce on the node; reseat or "
            "replace the NVLink/NVSwitch path when busbw drops",
        ),
        AlertClass(
            alert="GpusMissing",
            group="gpufabric-gpu",
            expr=f"count by (node) ({GPU_PRESENCE_METRIC}) < {f.nodes.gpus_per_node}",
            for_="10m",
            severity="critical",
            quarantine=True,
            summary=f"{{{{ $labels.node }}}} reports {{{{ $value }}}} GPUs, the stack expects "
            f"{f.nodes.gpus_per_node}",
            action="a GPU fell off the bus or its driver failed: drain, reboot, re-certify",
        ),
    ]


def _fabric(f: Facts) -> list[AlertClass]:
    m = f.monitoring
    rails = [r for p in f.pools for r in p.fabric.rails] or list(f.fabric.rails)
    devices = sorted({r.hca.split(":")[0] for r in rails if r.hca})  # every pool's rails
    sel = f'{{device=~"{"|".join(devices)}"}}' if devices else ""
    out = [
        AlertClass(
            alert="RailDown",
            group="gpufabric-fabric",
            # Port state 4 is ACTIVE (ib_verbs); anything else carries no traffic.
            expr=f"node_infiniband_state_id{sel} != 4",
            for_="2m",
            severity="critical",
            quarantine=True,
            summary="Rail port {{ $labels.device }}/{{ $labels.port }} on {{ $labels.node }} is not ACTIVE",
            action="check cable, transceiver and switch port; the node cannot run rail-aligned "
            "all-reduce until the port is ACTIVE again",
        ),
        AlertClass(
            alert="RailFlapping",
            group="gpufabric-fabric",
            expr=f"increase(node_infiniband_link_downed_total{sel}[1h]) > 2",
            for_="0m",
            severity="warning",
            quarantine=False,
            summary="Rail port {{ $labels.device }}/{{ $labels.port }} on {{ $labels.node }} went "
            "down {{ $value }} times in an hour",
            action="replace the cable or transceiver; watch RailDown",
        ),
        AlertClass(
            alert="RailSymbolErrors",
            group="gpufabric-fabric",
            expr=f"rate(node_infiniband_symbol_error_total{sel}[1h]) * 3600 > "
            f"{m.symbol_errors_per_hour}",
            for_="15m",
            severity="warning",
            quarantine=False,
            summary=f"Symbol errors above {m.symbol_errors_per_hour} per hour on "
            "{{ $labels.node }} {{ $labels.device }}/{{ $labels.port }}",
            action="the link's physical layer degrades: clean or replace the optics",
        ),
    ]
    return out + _pfc_storm(f)


def _pfc_storm(f: Facts) -> list[AlertClass]:
    """PfcStorm, on each RoCE pool's lossless class (none without RoCE)."""
    m = f.monitoring
    out: list[AlertClass] = []
    if f.pfc_priorities:
        ps = f.pfc_priorities
        out.append(
            AlertClass(
                alert="PfcStorm",
                group="gpufabric-fabric",
                # each pool's lossless class: a fleet's RoCE pools may pause on different ones
                expr=" or ".join(
                    f"rate(node_ethtool_received_prio{p}_pause[5m]) > {m.pfc_pauses_per_second}"
                    for p in ps
                ),
                for_="5m",
                severity="critical",
                quarantine=False,
                summary=f"{{{{ $labels.node }}}} {{{{ $labels.device }}}} receives more than "
                f"{m.pfc_pauses_per_second} PFC pauses/s on priority "
                f"{' or '.join(str(p) for p in ps)}",
                action="find the port that sends them (a stuck receiver): the switch's PFC watchdog "
                "and counters; quarantine the node whose NIC pauses",
            )
        )
    return out


def acceptance_master(reason: str) -> str:
    """1 while a PyTorchJob acceptance run's Master container has terminated with
    ``reason`` (Completed: exit 0, the job's success; Error: its failure). A PyTorchJob
    runs bare pods, so no batch Job records its completion."""
    pods = f'pod=~"{ACCEPTANCE_JOB}.*-master-0", container="pytorch"'
    return f'kube_pod_container_status_terminated_reason{{{pods}, reason="{reason}"}}'


def _stale(age: int) -> str:
    """A GPU node (one the DCGM exporter reports GPUs for) without a GOOD NodeAcceptance
    result from the last ``age`` seconds: its last result is older, not GOOD (a failed run,
    a BAD or FLAKY sweep verdict), or it has none at all (a node never accepted, or
    kube-state-metrics not exporting the results). Records of nodes that left the fleet
    never fire: the join keeps only nodes with GPUs."""
    last = f"max by (node) ({node_acceptance.LAST_RUN_METRIC})"
    good = f'max by (node) ({node_acceptance.VERDICT_METRIC}{{verdict="GOOD"}})'
    return (
        f"count by (node) ({GPU_PRESENCE_METRIC}) unless on (node) "
        f"(((time() - {last}) < {age}) and on (node) ({good} == 1))"
    )


def _fleet(f: Facts) -> list[AlertClass]:
    age = f.monitoring.acceptance_max_age_s
    return [
        AlertClass(
            alert="AcceptanceStale",
            group="gpufabric-fleet",
            expr=_stale(age),
            for_="1h",
            severity="warning",
            quarantine=False,
            summary="{{ $labels.node }} has no GOOD acceptance result from the last "
            f"{age // 3600} hours (its last result is older, failed, or missing)",
            action="prove the node: gpufabric verify nccl (the runbook's acceptance phase), or its "
            "--sweep when the node's last result is BAD, FLAKY or UNKNOWN; when every GPU "
            "node fires, kube-state-metrics is not exporting the NodeAcceptance results",
        )
    ]


def classes(f: Facts) -> list[AlertClass]:
    """Every alert class of the stack, in triage order."""
    return [*_gpu(f), *_gpu_links(f), *_fabric(f), *_fleet(f)]


def groups(f: Facts) -> list[dict[str, Any]]:
    """PrometheusRule ``spec.groups``."""
    out: dict[str, list[dict[str, Any]]] = {}
    for c in classes(f):
        out.setdefault(c.group, []).append(c.rule())
    return [{"name": name, "rules": rules} for name, rules in out.items()]


# --------------------------------------------------------------- node-problem-detector

GPU_FATAL_CONDITION = "GpuFatalXid"
NIC_FATAL_CONDITION = "NicFatalError"
FATAL_CONDITIONS = (GPU_FATAL_CONDITION, NIC_FATAL_CONDITION)
"""The node conditions node-problem-detector sets True on a fault that quarantines the
node (``gpufabric health`` reads them); permanent until the node reboots."""

XID_LINE = (
    r"NVRM: Xid \((?:PCI:)?[0-9a-fA-F]{{4}}:[0-9a-fA-F]{{2}}:[0-9a-fA-F]{{2}}"
    r"(?: GPU-I:[0-9]+)?(?: GPU-CI:[0-9]+)?\): ({codes}),.*"
)
"""An Xid line as the NVIDIA driver prints it (open-gpu-kernel-modules
src/nvidia/src/kernel/gpu/rc/kernel_rc.c): ``NVRM: Xid (PCI:%04x:%02x:%02x): %d, `` then either
``pid=%s, name=%s, `` (``pid='<unknown>', name=<unknown>`` in 515-560 when no process is known)
or the message alone (570 on); the device may carry MIG attribution (`` GPU-I:%02u``,
`` GPU-CI:%02u``), and older drivers wrote it without ``PCI:``. ``{codes}`` takes the class's Xids."""
MLX5_LINK_DOWN = r"mlx5_core [0-9a-fA-F:.]+ \S+: Link down.*"
MLX5_FATAL = (
    r"mlx5_core [0-9a-fA-F:.]+:? .*(Fatal error [0-9]+ detected"
    r"|synd 0xff: unrecognized error|PCI slot is unavailable|health compromised).*"
)
"""mlx5 health lines (torvalds/linux drivers/net/ethernet/mellanox/mlx5/core/health.c):
poll_health prints ``Fatal error %u detected`` when a fatal sensor trips (PCI reads failing,
the PCI channel offline, the NIC disabled or in reset, firmware asking for a reset) and
``device's health compromised - reached miss count`` when the firmware's health counter stops;
print_health_info then prints ``synd 0x%x: %s``, which reads ``synd 0xff: unrecognized
error`` when PCI reads return all ones (the NIC has dropped off the bus), or, in kernels that
check for it first, ``PCI slot is unavailable``. dev_err prefixes the driver and PCI name."""


def kernel_monitor(f: Facts) -> dict[str, Any]:
    """node-problem-detector's system-log monitor config: fatal Xids and mlx5 fatal errors
    set a permanent node condition (cleared when the node reboots and the detector
    restarts); non-fatal Xids and link-down lines are events only."""
    fatal = next(x for x in f.monitoring.xid_classes if x.quarantine)
    nonfatal = [x for x in f.monitoring.xid_classes if not x.quarantine and x.codes]
    rules: list[dict[str, Any]] = [
        {
            "type": "permanent",
            "condition": GPU_FATAL_CONDITION,
            "reason": "FatalXid",
            "pattern": XID_LINE.format(codes=_codes(fatal)),
        },
        {
            "type": "permanent",
            "condition": NIC_FATAL_CONDITION,
            "reason": "Mlx5FatalError",
            "pattern": MLX5_FATAL,
        },
        {"type": "temporary", "reason": "RailLinkDown", "pattern": MLX5_LINK_DOWN},
    ]
    rules += [
        {
            "type": "temporary",
            "reason": "NonFatalXid",
            "pattern": XID_LINE.format(codes=_codes(x)),
        }
        for x in nonfatal
    ]
    return {
        "plugin": "kmsg",
        "logPath": "/dev/kmsg",
        "lookback": "5m",
        "bufferSize": 10,
        "source": "gpufabric-monitor",
        "conditions": [
            {"type": GPU_FATAL_CONDITION, "reason": "NoFatalXid", "message": "no fatal Xid seen"},
            {"type": NIC_FATAL_CONDITION, "reason": "NoNicFatalError", "message": "mlx5 healthy"},
        ],
        "rules": rules,
    }
