"""node-problem-detector's kernel-log rules against lines as the drivers print them.

The lines go through :mod:`tests.npdmatch`, node-problem-detector v1.36.0's matching (each
message trimmed, pushed into the ring buffer, the pattern plus ``\\z`` searched over the
buffer's lines joined by newlines). Each fixture cites the source that prints it; ``seen``
names a public report that shows the line (or one of its exact shape), otherwise None.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

import pytest

from gpufabric.plan import alerts, ids
from gpufabric.plan.items import KustomizeOverlay
from tests.builders import example_config, plan_of
from tests.npdmatch import LogBuffer, compile_rule, reasons_after_each_line

KERNEL_RC = "NVIDIA/open-gpu-kernel-modules src/nvidia/src/kernel/gpu/rc/kernel_rc.c"
ERROR_CONT = (
    "NVIDIA/open-gpu-kernel-modules src/nvidia/src/kernel/gpu/arch/ampere/"
    "kern_gpu_error_cont_ga100.c (the driver's own examples)"
)
HEALTH_C = "torvalds/linux drivers/net/ethernet/mellanox/mlx5/core/health.c"
GPUD_README = (
    "https://github.com/leptonai/gpud/blob/main/components/accelerator/nvidia/error/xid/README.md"
    " (dmesg output)"
)


class Line(NamedTuple):
    text: str
    reasons: list[str]
    source: str
    seen: str | None


LINES = [
    # NVIDIA driver, 515.43.04-560.28.03: pid_string "'<unknown>'", procname "<unknown>" when
    # no process is known; "NVRM: Xid (PCI:%04x:%02x:%02x): %d, pid=%s, name=%s, %s".
    Line(
        "NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp "
        "Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter",
        ["NonFatalXid"],
        f"{KERNEL_RC} at 550.54.14",
        GPUD_README,
    ),
    Line(
        "NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, Ch 00000008, "
        "errorString CTX SWITCH TIMEOUT, Info 0x58005",
        ["FatalXid"],
        f"{KERNEL_RC} at 550.54.14",
        GPUD_README,
    ),
    Line(
        "NVRM: Xid (PCI:0000:3b:00): 140, pid='<unknown>', name=<unknown>, message",
        ["FatalXid"],
        f"{KERNEL_RC} at 560.28.03 (message text illustrative)",
        None,
    ),
    Line(
        "NVRM: Xid (PCI:0000:3b:00): 92, pid='<unknown>', name=<unknown>, message",
        ["NonFatalXid"],
        f"{KERNEL_RC} at 560.28.03 (message text illustrative)",
        None,
    ),
    # 570 on: "NVRM: Xid (%s): %d, %s%s" when no process is known.
    Line(
        "NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus",
        ["FatalXid"],
        f"{KERNEL_RC} at 595.45.04",
        "https://github.com/NVIDIA/NVSentinel/issues/155",
    ),
    Line(
        "NVRM: Xid (PCI:0000:17:00): 145, message",
        ["FatalXid"],
        f"{KERNEL_RC} at 595.45.04 (message text illustrative)",
        None,
    ),
    # An empty message: "%d, " and node-problem-detector's TrimSpace leave "79,".
    Line("NVRM: Xid (PCI:0000:3b:00): 79, ", ["FatalXid"], f"{KERNEL_RC} at 595.45.04", None),
    # MIG attribution: "PCI:%04x:%02x:%02x GPU-I:%02u[ GPU-CI:%02u]".
    Line(
        "NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). "
        "RST: No, D-RST: No",
        ["NonFatalXid"],
        ERROR_CONT,
        None,
    ),
    Line(
        "NVRM: Xid (PCI:0000:01:00): 95, pid=7062, Uncontained: LTC TAG (0x2, 0x1). "
        "RST: Yes, D-RST: No",
        ["FatalXid"],
        ERROR_CONT,
        None,
    ),
    Line(
        "NVRM: Xid (PCI:0000:01:00 GPU-I:02 GPU-CI:01): 48, pid=4242, name=python3, message",
        ["FatalXid"],
        f"{KERNEL_RC} at 595.45.04, XID_PRINT_WITH_ATTR (message text illustrative)",
        None,
    ),
    # Xid 14 is not Xid 145, nor 1.
    Line("NVRM: Xid (PCI:0000:3b:00): 14, message", ["NonFatalXid"], KERNEL_RC, None),
    # mlx5: mlx5_core_err is dev_err(dev, "%s:%d:(pid %d): " fmt, __func__, __LINE__, pid)
    # (drivers/net/ethernet/mellanox/mlx5/core/mlx5_core.h); dev_err prefixes "mlx5_core BDF: ".
    Line(
        "mlx5_core 0000:3b:00.0: poll_health:815:(pid 0): Fatal error 1 detected",
        ["Mlx5FatalError"],
        f"{HEALTH_C} poll_health",
        None,
    ),
    Line(  # older mlx5_core_err: "%s:%s:%d:(pid %d): " with the device's name first
        "mlx5_core 0000:3b:00.0: 0000:3b:00.0:poll_health:702:(pid 0): Fatal error 3 detected",
        ["Mlx5FatalError"],
        f"{HEALTH_C} poll_health",
        None,
    ),
    Line(  # PCI reads return all ones: ioread8(synd) == 0xff, hsynd_str's default
        "mlx5_core 0000:3b:00.0: synd 0xff: unrecognized error",
        ["Mlx5FatalError"],
        f"{HEALTH_C} print_health_info (kernels before the fw_ver == 0xffffffff check)",
        None,
    ),
    Line(
        "mlx5_core 0000:3b:00.0: PCI slot is unavailable",
        ["Mlx5FatalError"],
        f"{HEALTH_C} print_health_info (mlx5_log when fw_ver reads 0xffffffff)",
        None,
    ),
    Line(
        "mlx5_core 0000:3b:00.0: poll_health:737:(pid 0): device's health compromised - "
        "reached miss count",
        ["Mlx5FatalError"],
        f"{HEALTH_C} poll_health",
        None,
    ),
    Line(
        "mlx5_core 0000:3b:00.0: assert_var[0] 0xffffffff",
        [],
        f"{HEALTH_C} print_health_info",
        None,
    ),
    Line(
        "mlx5_core 0000:17:00.0 ens1f0np0: Link down",
        ["RailLinkDown"],
        "torvalds/linux drivers/net/ethernet/mellanox/mlx5/core/en_main.c mlx5e_update_carrier",
        None,
    ),
]


def _config() -> dict[str, Any]:
    plan = plan_of(example_config("roce-sriov-volcano"), "roce-sriov-volcano")
    overlay = plan.item(ids.NODE_PROBLEM_DETECTOR).payload
    assert isinstance(overlay, KustomizeOverlay)
    config: dict[str, Any] = json.loads(overlay.parameters["monitor"])
    return config


@pytest.mark.parametrize("line", LINES, ids=lambda line: line.text[:48])
def test_each_line_as_the_driver_prints_it(line: Line) -> None:
    assert line.source
    assert reasons_after_each_line(_config(), [line.text]) == [line.reasons]


def test_a_rule_fires_when_its_line_arrives_not_after_the_next_one() -> None:
    # The pattern plus \z must reach the end of the buffer: a rule matches on the push of
    # its own line; the driver's follow-up lines match nothing.
    xid = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    follow = "NVRM: GPU at PCI:0000:3b:00: GPU-6a8f2c1e-0000-0000-0000-000000000000"
    assert reasons_after_each_line(_config(), [xid, follow, xid]) == [
        ["FatalXid"],
        [],
        ["FatalXid"],
    ]


def test_the_buffer_is_the_last_lines_joined_by_newlines() -> None:
    buf = LogBuffer(3)
    for m in ("  a ", "b", "c", "d"):
        buf.push(m)
    assert buf.text() == "b\nc\nd"
    assert buf.match("c\nd")
    assert not buf.match("b")
    assert buf.match("b\nc\nd")
    empty = LogBuffer(3)
    empty.push("x")
    assert empty.text() == "\n\nx"


def test_the_patterns_compile_as_re2_would() -> None:
    for rule in _config()["rules"]:
        compile_rule(rule["pattern"])
    with pytest.raises(ValueError, match="RE2"):
        compile_rule("(?!x)y")


def test_the_previous_mlx5_pattern_missed_the_driver_lines() -> None:
    old = r"mlx5_core [0-9a-fA-F:.]+:? .*(health compromised|internal error|fatal error).*"
    for text in ("Fatal error 1 detected", "synd 0xff: unrecognized error"):
        line = f"mlx5_core 0000:3b:00.0: {text}"
        buf = LogBuffer()
        buf.push(line)
        assert not buf.match(old)
        assert buf.match(alerts.MLX5_FATAL)
