"""Node preflight checks against fixture sysfs/procfs trees, through testinfra's local backend.

Each tree is built by tests/nodefs.py in the kernel's formats; a variant changes exactly
what a broken node would differ in (a port down, no peermem, ACS on, ...). The suite itself
runs in-process as ``gpufabric verify nodes --hosts local:// --root TREE`` does.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shlex
import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import nodefs
import pytest
import testinfra
from fleetfake import gather_checks

from gpufabric.cli import main
from gpufabric.exitcodes import CheckStatus
from gpufabric.model.stackfile import load_stack
from gpufabric.plan.build import build_plan
from gpufabric.verify import expect
from gpufabric.verify.nodes import checks as nodes
from gpufabric.verify.nodes import gather as nodes_gather
from gpufabric.verify.nodes import rails as node_rails
from gpufabric.verify.nodes import sysfs as node_sysfs
from gpufabric.verify.nodes.probe import HostProbe
from gpufabric.verify.nodes.suite_runner import run_suite
from gpufabric.verify.results import Check


def expectation(stack: str) -> expect.Expectation:
    return expect.from_facts(build_plan(stack, load_stack(stack, None).model).facts)


def node_for(exp: expect.Expectation, **overrides: object) -> nodefs.Node:
    """A healthy node of this stack: its HCAs and netdevs, rate, MTU, PFC priority."""
    base: dict[str, object] = {
        "fabric": exp.fabric,
        "rails": [(r.hca or f"mlx5_{i}", r.netdev) for i, r in enumerate(exp.rails)],
        "rate": exp.link_rate_gbps,
        "mtu": exp.mtu or (9000 if exp.fabric == "roce" else 4092),
        "pfc_priority": exp.pfc_priority,
        "peermem": exp.gpudirect == "peermem",
        "gpus": exp.gpus,
        "pkeys": ("0xffff", *(exp.pkeys or ())),
        # one VF per rail left on the host, in the stack's partitions (static: all of them)
        "vfs": {
            (r.hca or f"mlx5_{i}"): {f"mlx5_{100 + i}": ("0xffff", *exp.vf_pkeys)}
            for i, r in enumerate(exp.rails)
        }
        if exp.vf_pkeys
        else {},
    }
    base.update(overrides)
    return nodefs.Node(**base)  # type: ignore[arg-type]


def check(tmp_path: Path, exp: expect.Expectation, node: nodefs.Node) -> dict[str, Check]:
    """The node's checks as ``verify nodes`` runs them: the gather script executed by /bin/sh
    over the tree, judged locally; they must be what the probe reading file by file says."""
    root = nodefs.build(tmp_path / "node", node)
    gathered, round_trips = gather_checks(exp, root)
    assert gathered == list(nodes.run_checks(TreeProbe(root), exp))
    assert round_trips == 1
    return {c.check: c for c in gathered}


@pytest.fixture
def mlnx_qos_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """RoCE trees carry a fake mlnx_qos printing the tool's real output format."""
    monkeypatch.setenv("PATH", f"{tmp_path / 'node/usr/bin'}:{Path('/usr/bin')}:{Path('/bin')}")


@pytest.mark.parametrize("stack", ["prod-ib", "lab-roce", "roce-sriov-volcano"])
def test_healthy_node_passes_every_check(
    stack: str, tmp_path: Path, mlnx_qos_on_path: None
) -> None:
    exp = expectation(stack)
    results = check(tmp_path, exp, node_for(exp))
    bad = {k: c.message for k, c in results.items() if c.status != "PASS"}
    assert bad == {}
    expected = {"gpu.count", "gpu.driver", f"gpudirect.{exp.gpudirect}", "pcie.acs", "pcie.iommu"}
    expected |= {"rdma.devices", "limits.memlock"}
    expected |= {f"rail.{r.name}.{what}" for r in exp.rails for what in ("hca", "port")}
    if exp.fabric == "roce":
        expected |= {f"rail.{r.name}.{what}" for r in exp.rails for what in ("gid", "pfc")}
    if exp.mtu:
        expected |= {f"rail.{r.name}.mtu" for r in exp.rails}
    if exp.pkeys:
        expected |= {f"rail.{r.name}.pkeys" for r in exp.rails}
    if exp.vf_pkeys:
        expected |= {f"rail.{r.name}.vfpkeys" for r in exp.rails}
    assert set(results) == expected


def test_ib_node_has_no_roce_checks(tmp_path: Path) -> None:
    exp = expectation("prod-ib")
    results = check(tmp_path, exp, node_for(exp))
    assert not [k for k in results if k.endswith((".gid", ".pfc"))]
    assert results["rail.rail0.port"].message.endswith("400 Gb/sec (4X NDR)")


def test_degraded_port_fails_with_state(tmp_path: Path) -> None:
    exp = expectation("prod-ib")
    node = node_for(exp, degraded={"mlx5_3": ("1: DOWN", "3: Disabled")})
    results = check(tmp_path, exp, node)
    port = results["rail.rail3.port"]
    assert port.status == "FAIL"
    assert "state 1: DOWN (expected ACTIVE)" in port.message
    assert "phys_state 3: Disabled (expected LinkUp)" in port.message
    assert "subnet manager" in port.hint
    assert all(results[f"rail.rail{i}.port"].status == "PASS" for i in (0, 1, 2, 4, 5, 6, 7))


def test_port_initialising_without_subnet_manager_fails(tmp_path: Path) -> None:
    exp = expectation("prod-ib")
    node = node_for(exp, degraded={"mlx5_0": ("2: INIT", "5: LinkUp")})
    assert "state 2: INIT" in check(tmp_path, exp, node)["rail.rail0.port"].message


def test_wrong_rate_and_link_layer_fail(tmp_path: Path) -> None:
    exp = expectation("prod-ib")
    results = check(tmp_path, exp, node_for(exp, rate=200, fabric="roce", pfc_priority=None))
    msg = results["rail.rail0.port"].message
    assert "rate 200 Gb/sec (4X HDR) (expected 400 Gb/sec)" in msg
    assert "link_layer Ethernet (expected InfiniBand)" in msg


def test_missing_peermem_fails_for_peermem_stacks(tmp_path: Path) -> None:
    exp = dataclasses.replace(expectation("prod-ib"), gpudirect="peermem")
    res = check(tmp_path, exp, node_for(exp, peermem=False))["gpudirect.peermem"]
    assert res.status == "FAIL"
    assert "nvidia-peermem is not loaded" in res.message
    assert "nvidia-peermem-ctr" in res.hint


def test_loaded_peermem_passes(tmp_path: Path) -> None:
    exp = dataclasses.replace(expectation("prod-ib"), gpudirect="peermem")
    res = check(tmp_path, exp, node_for(exp, peermem=True))["gpudirect.peermem"]
    assert res.status == "PASS"
    assert "/sys/module/nvidia_peermem/version" in res.message


@pytest.mark.parametrize(
    ("variant", "message"),
    [
        ({"open_module": False}, "proprietary kernel module"),
        ({"kernel": "5.4.0-216-generic"}, "kernel 5.4.0-216-generic is older than 5.12"),
        ({"p2pdma": False}, "without CONFIG_PCI_P2PDMA"),
    ],
)
def test_dmabuf_prerequisites(tmp_path: Path, variant: dict[str, object], message: str) -> None:
    exp = expectation("prod-ib")
    res = check(tmp_path, exp, node_for(exp, **variant))["gpudirect.dmabuf"]
    assert res.status == "FAIL"
    assert message in res.message


@pytest.mark.parametrize(
    ("where", "p2pdma", "status"),
    [
        ("proc-gz", False, "FAIL"),
        ("proc-gz", True, "PASS"),
        ("lib-modules", True, "PASS"),
        ("lib-modules", False, "FAIL"),
        ("none", True, "ERROR"),
    ],
)
def test_kernel_config_is_read_wherever_the_distribution_keeps_it(
    tmp_path: Path, where: str, p2pdma: bool, status: str
) -> None:
    """/proc/config.gz (built here with gzip), /boot/config-R and /lib/modules/R/config; a
    requirement no config could confirm is never PASS."""
    exp = expectation("prod-ib")
    res = check(tmp_path, exp, node_for(exp, kernel_config=where, p2pdma=p2pdma))[
        "gpudirect.dmabuf"
    ]
    assert res.status == status, res.message
    if status == "FAIL":
        assert "without CONFIG_PCI_P2PDMA" in res.message
    if status == "ERROR":
        assert "CONFIG_PCI_P2PDMA not verified" in res.message
        assert "/proc/config.gz" in res.message


def test_unverified_dmabuf_makes_the_node_verdict_inconclusive(tmp_path: Path) -> None:
    from gpufabric.verify.results import verdict

    exp = expectation("prod-ib")
    results = check(tmp_path, exp, node_for(exp, kernel_config="none"))
    assert verdict(results.values()) == "INCONCLUSIVE"


def test_dmabuf_without_a_loaded_driver_says_so(tmp_path: Path) -> None:
    exp = expectation("prod-ib")
    res = check(tmp_path, exp, node_for(exp, driver_loaded=False))["gpudirect.dmabuf"]
    assert res.status != "PASS"
    assert "driver is not loaded" in res.message
    assert "proprietary" not in res.message


def test_acs_with_devices_on_the_root_bus_passes_with_the_reason(tmp_path: Path) -> None:
    exp = expectation("prod-ib")
    res = check(tmp_path, exp, node_for(exp, root_bus=True))["pcie.acs"]
    assert res.status == "PASS"
    assert "directly on the root bus" in res.message


def test_gpu_count_and_pinned_driver(tmp_path: Path) -> None:
    exp = dataclasses.replace(expectation("prod-ib"), driver_version="580.95.05")
    results = check(tmp_path, exp, node_for(exp, gpus=7))
    assert results["gpu.count"].message == "7 GPUs registered with the driver, the stack expects 8"
    assert "driver 575.57.08, the stack pins 580.95.05" in results["gpu.driver"].message


def test_acs_enabled_fails_naming_bridges(tmp_path: Path) -> None:
    exp = expectation("prod-ib")
    res = check(tmp_path, exp, node_for(exp, acs_on=True))["pcie.acs"]
    assert res.status == "FAIL"
    assert "0000:10:01.0 (SrcValid+ ReqRedir+ CmpltRedir+)" in res.message
    assert "setpci" in res.hint


@pytest.mark.parametrize(("iommu", "status"), [("off", "PASS"), ("pt", "PASS"), ("dma", "FAIL")])
def test_iommu(tmp_path: Path, iommu: str, status: str) -> None:
    exp = expectation("prod-ib")
    res = check(tmp_path, exp, node_for(exp, iommu=iommu))["pcie.iommu"]
    assert res.status == status
    if status == "FAIL":
        assert "DMA-FQ" in res.message


def test_iommu_group_types_win_over_the_command_line(tmp_path: Path) -> None:
    """iommu=pt on the command line, but the GPUs' groups translate (a later parameter or
    a per-group override): the groups are what the kernel uses."""
    exp = expectation("prod-ib")
    res = check(tmp_path, exp, node_for(exp, iommu="dma", cmdline_extra=" iommu=pt"))
    assert res["pcie.iommu"].status == "FAIL"
    assert "DMA-FQ" in res["pcie.iommu"].message
    assert "ends with iommu=pt" in res["pcie.iommu"].message


@pytest.mark.parametrize(
    ("extra", "status"),
    [
        (" iommu=pt iommu.passthrough=0", "FAIL"),
        (" iommu.passthrough=0 iommu=pt", "PASS"),
        (" iommu=pt iommu=nopt", "FAIL"),
        (" iommu.passthrough=1", "PASS"),
        (" iommu.passthrough=on", "PASS"),
        (" iommu=pt -- iommu.passthrough=0", "PASS"),
        ("", "ERROR"),
    ],
)
def test_iommu_command_line_applies_in_order_without_group_types(
    tmp_path: Path, extra: str, status: str
) -> None:
    exp = expectation("prod-ib")
    node = node_for(exp, iommu="dma", iommu_groups=False, cmdline_extra=extra)
    res = check(tmp_path, exp, node)["pcie.iommu"]
    assert res.status == status, res.message


def test_iommu_default_from_the_kernel_config(tmp_path: Path) -> None:
    exp = expectation("prod-ib")
    root = nodefs.build(tmp_path / "node", node_for(exp, iommu="dma", iommu_groups=False))
    config = root / "boot/config-6.8.0-60-generic"
    config.write_text(config.read_text() + "CONFIG_IOMMU_DEFAULT_DMA_LAZY=y\n")
    probe = HostProbe(testinfra.get_host("local://"), root=str(root), name="node")
    res = nodes.check_iommu(probe, exp)
    assert res.status == "FAIL"
    assert "CONFIG_IOMMU_DEFAULT_DMA_LAZY=y" in res.message


def test_kernel_params_split_as_the_kernel_does() -> None:
    line = 'BOOT_IMAGE=/vmlinuz ro quiet dyndbg="file a.c +p" iommu-passthrough=1 -- iommu=pt'
    assert nodes.kernel_params(line) == [
        ("BOOT_IMAGE", "/vmlinuz"),
        ("ro", None),
        ("quiet", None),
        ("dyndbg", "file a.c +p"),
        ("iommu_passthrough", "1"),
    ]
    assert nodes.iommu_mode_of_cmdline(nodes.kernel_params("iommu=soft,pt")) == (
        "passthrough",
        "iommu=soft,pt",
    )
    assert nodes.iommu_mode_of_cmdline(nodes.kernel_params("iommu.passthrough=maybe")) == (None, "")


def test_memlock_of_the_container_runtime(tmp_path: Path) -> None:
    exp = expectation("prod-ib")
    res = check(tmp_path, exp, node_for(exp, memlock="8388608"))["limits.memlock"]
    assert res.status == "FAIL"
    assert "containerd, the kubelet's runtime" in res.message
    assert "containerd (/proc/1234) 8388608 bytes" in res.message
    assert "LimitMEMLOCK=infinity" in res.hint


@pytest.mark.parametrize("kubelet", ["flag", "config", "default"])
def test_memlock_is_judged_on_the_runtime_the_kubelet_uses_not_dockerd(
    tmp_path: Path, kubelet: str
) -> None:
    """A dockerd (lower PID, found first) with a small limit beside the kubelet's
    containerd: containers get containerd's limit, so the node passes; and the reverse fails."""
    exp = expectation("prod-ib")
    node = node_for(exp, kubelet=kubelet, dockerd_memlock="65536")
    res = check(tmp_path / "a", exp, node)["limits.memlock"]
    assert res.status == "PASS", res.message
    assert "containerd, the kubelet's runtime" in res.message
    node = node_for(exp, kubelet=kubelet, dockerd_memlock="unlimited", memlock="65536")
    res = check(tmp_path / "b", exp, node)["limits.memlock"]
    assert res.status == "FAIL", res.message
    assert "65536" in res.message
    assert "dockerd" not in res.message


def test_memlock_of_cri_o_from_the_kubelet_config(tmp_path: Path) -> None:
    exp = expectation("prod-ib")
    node = node_for(
        exp, runtime="crio", kubelet="config", memlock="65536", dockerd_memlock="unlimited"
    )
    res = check(tmp_path, exp, node)["limits.memlock"]
    assert res.status == "FAIL"
    assert "crio, the kubelet's runtime (unix:///var/run/crio/crio.sock" in res.message
    assert "/var/lib/kubelet/config.yaml" in res.message


def test_memlock_without_a_kubelet_and_disagreeing_runtimes_is_not_verified(
    tmp_path: Path,
) -> None:
    exp = expectation("prod-ib")
    node = node_for(exp, kubelet="none", dockerd_memlock="65536")
    res = check(tmp_path, exp, node)["limits.memlock"]
    assert res.status == "ERROR"
    assert "no kubelet process" in res.message


def test_memlock_without_kubelet_or_runtime_says_why_once(tmp_path: Path) -> None:
    """The message said "(no kubelet process)" twice."""
    exp = expectation("prod-ib")
    root = nodefs.build(tmp_path / "node", node_for(exp, kubelet="none"))
    for pid in (root / "proc").iterdir():
        if pid.name.isdigit():
            shutil.rmtree(pid)
    probe = HostProbe(testinfra.get_host("local://"), root=str(root), name="node")
    res = {c.check: c for c in nodes.run_checks(probe, exp)}["limits.memlock"]
    assert res.status == "ERROR"
    assert res.message.count("no kubelet process") == 1, res.message
    assert "not verified" in res.message


def test_memlock_kubelet_runtime_not_running_is_not_verified(tmp_path: Path) -> None:
    exp = expectation("prod-ib")
    root = nodefs.build(tmp_path / "node", node_for(exp, dockerd_memlock="unlimited"))
    shutil.rmtree(root / "proc/1234")
    probe = HostProbe(testinfra.get_host("local://"), root=str(root), name="node")
    res = {c.check: c for c in nodes.run_checks(probe, exp)}["limits.memlock"]
    assert res.status == "ERROR"
    assert "not verified" in res.message


def test_kubelet_flag_overrides_its_config(tmp_path: Path) -> None:
    exp = expectation("prod-ib")
    root = nodefs.build(tmp_path / "node", node_for(exp, kubelet="config"))
    argv = (root / "proc/2345/cmdline").read_text().rstrip("\0").split("\0")
    argv.append("--container-runtime-endpoint=unix:///var/run/crio/crio.sock")
    (root / "proc/2345/cmdline").write_text("\0".join(argv) + "\0")
    probe = HostProbe(testinfra.get_host("local://"), root=str(root), name="node")
    assert nodes.kubelet_runtime_endpoint(probe) == (
        "unix:///var/run/crio/crio.sock",
        "kubelet flag --container-runtime-endpoint",
    )
    (root / "var/lib/kubelet/config.yaml").write_text("a: [\n")
    argv.pop()
    (root / "proc/2345/cmdline").write_text("\0".join(argv) + "\0")
    endpoint, why = nodes.kubelet_runtime_endpoint(probe)
    assert endpoint is None
    assert "not YAML" in why


def test_missing_uverbs_devices(tmp_path: Path) -> None:
    exp = expectation("prod-ib")
    res = check(tmp_path, exp, node_for(exp, uverbs=6))["rdma.devices"]
    assert res.message == "/dev/infiniband: 6 uverbs devices for 8 rails"


def test_roce_gid_mtu_pfc_failures(tmp_path: Path, mlnx_qos_on_path: None) -> None:
    exp = expectation("lab-roce")
    node = node_for(exp, gid_on_netdev=False, mtu=1500, pfc_priority=0)
    results = check(tmp_path, exp, node)
    assert "no IPv4 RoCE v2 GID of mlx5_0 on ens1f0np0" in results["rail.rail0.gid"].message
    assert results["rail.rail0.mtu"].message == (
        "ens1f0np0 MTU 1500, the stack expects 9000 (fabric.mtu)"
    )
    pfc = results["rail.rail0.pfc"]
    assert pfc.message == "PFC is off on priority 3 of ens1f0np0 (enabled: [0])"
    assert "--pfc 0,0,0,1,0,0,0,0" in pfc.hint


def test_pfc_without_any_tool_is_undecided(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exp = expectation("lab-roce")
    base = tmp_path / "base-bin"  # a host's base tools, no mlnx_qos and no dcb
    base.mkdir()
    for tool in (*nodes_gather.HOST_TOOLS, "grep"):
        (base / tool).symlink_to(shutil.which(tool) or f"/bin/{tool}")
    monkeypatch.setenv("PATH", str(base))
    results = check(tmp_path, exp, node_for(exp, pfc_priority=None))
    assert results["rail.rail0.pfc"].status == "ERROR"
    assert results["gpu.count"].status == "PASS"


def test_a_host_without_the_gather_tools_is_inconclusive_not_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No od on the host: nothing could be read, so no check may PASS or FAIL ("0 GPUs")."""
    exp = expectation("prod-ib")
    root = nodefs.build(tmp_path / "node", node_for(exp))
    base = tmp_path / "base-bin"
    base.mkdir()
    for tool in ("ls", "readlink", "tr", "grep"):
        (base / tool).symlink_to(shutil.which(tool) or f"/bin/{tool}")
    monkeypatch.setenv("PATH", str(base))
    results, _ = gather_checks(exp, root)
    assert {c.status for c in results} == {"ERROR"}
    assert "the host has no od" in results[0].message


def test_parse_pfc_formats() -> None:
    dcb = "pfc-cap 8 macsec-bypass off delay 0\nprio-pfc 0:off 1:off 2:off 3:on 4:off 5:off 6:off 7:off\n"
    assert node_rails.parse_pfc(dcb) == {p: p == 3 for p in range(8)}
    qos = nodefs.MLNX_QOS.format(enabled="0   0   0   0   1   0   0   0")
    assert node_rails.parse_pfc(qos) == {p: p == 4 for p in range(8)}
    assert node_rails.parse_pfc("garbage") is None


def test_acs_control_walks_the_extended_capability_list() -> None:
    assert nodes.acs_control(nodefs.config_space(0x001D)) == 0x001D
    assert nodes.acs_control(nodefs.config_space(None)) is None
    assert nodes.acs_control(nodefs.config_space(0x001D)[:256]) is None  # non-root read
    looped = bytearray(4096)
    struct.pack_into("<I", looped, 0x100, 0x0001 | (0x100 << 20))
    assert nodes.acs_control(bytes(looped)) is None


def test_ipv4_of_gid() -> None:
    assert node_sysfs.ipv4_of_gid("0000:0000:0000:0000:0000:ffff:c0a8:0a02") == "192.168.10.2"
    assert node_sysfs.ipv4_of_gid("fe80:0000:0000:0000:0a00:27ff:fe00:0001") is None


def test_fleet_driver_versions() -> None:
    def drv(node: str, v: str) -> Check:
        return Check(
            check="gpu.driver",
            target=node,
            status=CheckStatus.PASS,
            message=f"driver {v}",
            details={"version": v},
        )

    (one,) = nodes.fleet_checks([drv("a", "575.57.08"), drv("b", "575.57.08")])
    assert one.status == "PASS"
    (two,) = nodes.fleet_checks([drv("a", "575.57.08"), drv("b", "570.124.06")])
    assert two.status == "FAIL"
    assert "570.124.06: b; 575.57.08: a" in two.message


# ------------------------------------------------------------------- suite and CLI


def test_suite_runs_under_pytest_and_records_every_check(
    tmp_path: Path, mlnx_qos_on_path: None
) -> None:
    exp = expectation("lab-roce")
    root = nodefs.build(
        tmp_path / "node", node_for(exp, degraded={"mlx5_1": ("1: DOWN", "2: Polling")})
    )
    results = run_suite("node", exp, ["local://"], root=str(root))
    assert [c.check for c in results] == [c.id for c in nodes.node_checks(exp)]
    failed = [c.check for c in results if c.status == "FAIL"]
    assert failed == ["rail.rail1.port"]


def test_cli_verify_nodes_reports(
    tmp_path: Path, mlnx_qos_on_path: None, capsys: pytest.CaptureFixture[str]
) -> None:
    exp = expectation("lab-roce")
    root = nodefs.build(tmp_path / "node", node_for(exp))
    junit = tmp_path / "out/nodes.xml"
    argv = ["verify", "nodes", "--stack", "lab-roce", "--hosts", "local://", "--root", str(root)]
    assert main([*argv, "--json", "--junit", str(junit)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"] == "PASS"
    assert doc["counts"]["FAIL"] == 0
    assert {c["check"] for c in doc["checks"]} >= {"rail.rail0.pfc", "fleet.driver-version"}
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None
    assert suite.get("failures") == "0"
    assert len(suite.findall("testcase")) == len(doc["checks"])

    shutil.rmtree(root)
    nodefs.build(root, node_for(exp, acs_on=True))
    assert main(argv) == 4
    table = capsys.readouterr().out
    assert "pcie.acs" in table
    assert "FAIL" in table
    assert "-> disable ACS in the BIOS" in table


@pytest.mark.skipif(shutil.which("ssh") is None, reason="no ssh client on this machine")
def test_unreachable_host_is_inconclusive_not_passed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "verify",
            "nodes",
            "--stack",
            "lab-roce",
            "--hosts",
            "ssh://gpu-node.invalid?timeout=3",
            "--json",
        ]
    )
    doc = json.loads(capsys.readouterr().out)
    assert code == 5
    assert doc["verdict"] == "INCONCLUSIVE"
    assert all(c["status"] == "ERROR" for c in doc["checks"])
    assert "cannot reach the host" in doc["checks"][0]["message"]


def test_cli_needs_a_target(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", "nodes", "--stack", "lab-roce"]) == 2
    assert "--hosts ssh://a,ssh://b or --via-cluster" in capsys.readouterr().err


def test_write_expect_for_direct_pytest_use(tmp_path: Path) -> None:
    out = tmp_path / "expect.json"
    assert main(["verify", "nodes", "--stack", "prod-ib", "--write-expect", str(out)]) == 0
    exp = expect.Expectation.load(out)
    assert exp == expectation("prod-ib")
    assert exp.link_layer == "InfiniBand"


@pytest.mark.parametrize("stack", ["prod-ib", "lab-roce"])
def test_write_expect_replaces_only_an_expectations_file(
    stack: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--write-expect` over the stack file (or any file not written by it) is refused and
    leaves it; an expectations file it wrote, for any stack, is replaced."""
    mine = tmp_path / "Pulumi.prod-ib.yaml"
    mine.write_text("config: {}\n")
    argv = ["verify", "nodes", "--stack", stack, "--write-expect"]
    assert main([*argv, str(mine)]) == 2
    assert "--write-expect: " in capsys.readouterr().err
    assert mine.read_text() == "config: {}\n"
    out = tmp_path / "expect.json"
    assert main(["verify", "nodes", "--stack", "kind-dev", "--write-expect", str(out)]) == 0
    assert main([*argv, str(out)]) == 0
    assert expect.Expectation.load(out) == expectation(stack)


# ---------------------------------------------------------------------- fleet fan-out


def _fleet(tmp_path: Path, exp: expect.Expectation, count: int) -> dict[str, Path]:
    """count hosts over three trees: healthy, rail 3 down, peermem-style driver mismatch."""
    healthy = nodefs.build(tmp_path / "healthy", node_for(exp))
    degraded = nodefs.build(
        tmp_path / "degraded",
        node_for(exp, degraded={exp.rails[3].hca or "mlx5_3": ("1: DOWN", "3: Disabled")}),
    )
    return {f"gpu-{i:04d}": degraded if i % 5 == 0 else healthy for i in range(count)}


def test_fleet_fan_out_gives_the_serial_results_and_groups_failures(tmp_path: Path) -> None:
    from fleetfake import LatencyTransport

    from gpufabric.verify.nodes import fleet

    exp = expectation("prod-ib")
    roots = _fleet(tmp_path, exp, 20)
    transport = LatencyTransport(roots, dead=frozenset({"gpu-0007"}))
    serial = fleet.run_fleet(list(roots), exp, transport, parallel=1)
    wide = fleet.run_fleet(list(roots), exp, transport, parallel=16)
    assert wide == serial
    assert [c.target for c in serial][:1] == ["gpu-0000"]
    summary = fleet.group_failures(serial)
    rail = exp.rails[3].name
    assert any(line.startswith(f"rail.{rail}.port FAIL on 4 nodes:") for line in summary), summary
    assert any("on 1 node:" in line and "gpu-0007" in line for line in summary)
    unreachable = [c for c in serial if c.target == "gpu-0007"]
    assert unreachable
    assert {c.status for c in unreachable} == {"ERROR"}
    assert "cannot reach the host" in unreachable[0].message


def test_a_host_over_its_time_limit_is_an_error_not_a_hang(tmp_path: Path) -> None:
    from fleetfake import LatencyTransport

    from gpufabric.verify.nodes import fleet

    exp = expectation("prod-ib")
    roots = _fleet(tmp_path, exp, 2)
    transport = LatencyTransport(roots, slow={"gpu-0001": 3.0})
    fleet.run_fleet(["gpu-0000"], exp, transport)  # its tree's answer is ready: no sh time
    results = fleet.run_fleet(list(roots), exp, transport, parallel=2, host_timeout=1.0)
    late = [c for c in results if c.target == "gpu-0001"]
    assert [c.status for c in late] == ["ERROR"]
    assert "no answer within 1 s" in late[0].message
    assert any(c.target == "gpu-0000" and c.status == "PASS" for c in results)


def test_hung_hosts_do_not_starve_the_others(tmp_path: Path) -> None:
    """Two workers, both stuck on hosts that never answer in time: the third host is still
    checked (a fresh worker takes each stuck one's place)."""
    from fleetfake import LatencyTransport

    from gpufabric.verify.nodes import fleet

    exp = expectation("prod-ib")
    roots = _fleet(tmp_path, exp, 3)
    transport = LatencyTransport(roots, slow={"gpu-0000": 3.0, "gpu-0001": 3.0})
    fleet.run_fleet(["gpu-0002"], exp, transport)  # its tree's answer is ready: no sh time
    results = fleet.run_fleet(list(roots), exp, transport, parallel=2, host_timeout=1.0)
    checked = [c for c in results if c.target == "gpu-0002"]
    assert len(checked) > 10  # every check ran on it
    assert any(c.status == "PASS" for c in checked)
    assert {c.target for c in results if c.check == "host"} == {"gpu-0000", "gpu-0001"}


@pytest.mark.parametrize(
    "text",
    [
        '{"fabric": "ethernet"}',  # no such link: never checked as another one
        "not json",
        '{"fabric": "roce"}',  # keys missing
    ],
)
def test_a_bad_expectations_file_is_a_usage_error(tmp_path: Path, text: str) -> None:
    from types import SimpleNamespace

    from gpufabric.verify.nodes.suite.plugin import load_expectation

    path = tmp_path / "exp.json"
    path.write_text(text)
    config = SimpleNamespace(stash=pytest.Stash(), getoption=lambda name: str(path))
    with pytest.raises(
        pytest.UsageError, match=r"--gpufabric-expect .*exp\.json: not an expectations"
    ):
        load_expectation(config)  # type: ignore[arg-type]


# ------------------------------------------------------------ numbers in other scripts

OTHER_DIGITS = (
    *("".join(chr(base + i) for i in range(10)) for base in (0x0660, 0xFF10, 0x0966, 0x1D7CE)),
    "\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079",
)
"""Arabic-Indic, fullwidth, Devanagari, superscript, mathematical bold digits: str.isdigit()
is true for all, int() takes some and refuses others, \\d matches the decimal ones."""


def _foreign(text: str, rng: random.Random) -> str:
    digits = rng.choice(OTHER_DIGITS)
    return "".join(digits[int(c)] if c in "0123456789" and rng.random() < 0.7 else c for c in text)


class TreeProbe:
    """A probe reading a nodefs tree in-process (fast enough to fuzz); commands run in sh."""

    name = "node"

    def __init__(self, root: Path) -> None:
        self.root = str(root)

    def _p(self, path: str) -> Path:
        return Path(self.root + path)

    def read(self, path: str) -> str | None:
        data = self.read_bytes(path)
        return None if data is None else data.decode("utf-8", "replace")

    def read_bytes(self, path: str) -> bytes | None:
        try:
            return self._p(path).read_bytes()
        except OSError:
            return None

    def listdir(self, path: str) -> list[str]:
        try:
            return sorted(os.listdir(self._p(path)))
        except OSError:
            return []

    def exists(self, path: str) -> bool:
        return self._p(path).exists()

    def realpath(self, path: str) -> str | None:
        return self.unroot(os.path.realpath(self._p(path)))

    def unroot(self, path: str) -> str | None:
        return path[len(self.root) :] if path.startswith(self.root + "/") else None

    def run(self, command: str, *args: str) -> tuple[int, str]:
        cmd = command % tuple(shlex.quote(a) for a in args)
        out = subprocess.run(cmd, shell=True, capture_output=True, text=True, check=False)
        return out.returncode, out.stdout


NUMBER_FILES = (
    "sys/class/net/ens1f0np0/mtu",
    "sys/class/infiniband/mlx5_0/ports/1/rate",
    "sys/class/infiniband/mlx5_0/ports/1/gids/2",
    "sys/class/infiniband/mlx5_0/ports/1/gids/3",
    "proc/sys/kernel/osrelease",
    "proc/driver/nvidia/version",
    "sys/module/nvidia/version",
    "proc/1234/limits",
    "proc/2345/cmdline",
    "proc/cmdline",
)


def test_numbers_in_other_scripts_never_crash_a_check_nor_pass_it(
    tmp_path: Path, mlnx_qos_on_path: None
) -> None:
    """Every parser of a number or size in nodes.py reads ASCII digits only: a file whose
    digits are another script's is unreadable (ERROR) or wrong (FAIL), never a crash."""
    exp = expectation("lab-roce")
    root = nodefs.build(tmp_path / "node", node_for(exp, memlock="65536", iommu="pt"))
    pristine = {f: (root / f).read_bytes() for f in NUMBER_FILES}
    healthy = {c.check: c.status for c in nodes.run_checks(TreeProbe(root), exp)}
    rng = random.Random(23)
    types = root / "sys/class/infiniband/mlx5_0/ports/1/gid_attrs/types"
    for _ in range(40):
        for f in NUMBER_FILES:
            text = pristine[f].decode()
            (root / f).write_text(_foreign(text, rng) if rng.random() < 0.5 else text)
        for entry in list(types.iterdir()):
            entry.rename(
                types
                / (
                    _foreign("3", rng)
                    if entry.name == "3" or not entry.name.isascii()
                    else entry.name
                )
            )
        for c in nodes.run_checks(TreeProbe(root), exp):
            assert "crashed" not in c.message, c.message
            if c.status == "PASS":
                assert healthy[c.check] == "PASS"
    assert node_sysfs.ascii_int(OTHER_DIGITS[1][9] + OTHER_DIGITS[1][0] * 3) is None
    assert node_sysfs.ascii_int("\u00b2") is None
    assert node_sysfs.ascii_int("9000") == 9000
    assert node_sysfs.ipv4_of_gid("0000:0000:0000:0000:0000:ffff:c0a8:0a0\u00b2") is None
    assert node_rails.parse_pfc("prio-pfc \u0663:on") is None


def test_an_mtu_in_other_digits_is_unreadable_not_a_crash(tmp_path: Path) -> None:
    exp = expectation("lab-roce")
    root = nodefs.build(tmp_path / "node", node_for(exp))
    (root / "sys/class/net/ens1f0np0/mtu").write_text(OTHER_DIGITS[4][9] + OTHER_DIGITS[4][0] * 3)
    res = node_rails.check_rail_mtu(exp.rails[0])(TreeProbe(root), exp)
    assert res.status == "ERROR"
    assert "cannot read the MTU" in res.message


def test_a_kubelet_config_path_stays_under_the_root(tmp_path: Path) -> None:
    """A relative or ../ --config path is the node's path from /, never one above the
    probe's root (/host/../etc would be the probe pod's own /etc)."""
    exp = expectation("prod-ib")
    root = nodefs.build(tmp_path / "node", node_for(exp, kubelet="config", runtime="crio"))
    cmdline = root / "proc/2345/cmdline"
    cmdline.write_text(cmdline.read_text().replace("/var/lib/kubelet", "../../var/lib/kubelet"))
    probe = TreeProbe(root)
    endpoint, source = nodes.kubelet_runtime_endpoint(probe)
    assert endpoint == "unix:///var/run/crio/crio.sock"
    assert source == "containerRuntimeEndpoint in /var/lib/kubelet/config.yaml"


def test_a_host_named_twice_is_checked_once_and_never_hangs(
    tmp_path: Path, mlnx_qos_on_path: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--hosts local://,local://` used to wait forever (results were kept by host name and
    counted against the hosts given)."""
    import threading

    exp = expectation("lab-roce")
    root = nodefs.build(tmp_path / "node", node_for(exp))
    argv = ["verify", "nodes", "--stack", "lab-roce", "--hosts", "local://,local://"]
    codes: list[int] = []
    runner = threading.Thread(
        target=lambda: codes.append(main([*argv, "--root", str(root), "--json"])), daemon=True
    )
    runner.start()
    runner.join(60)
    assert codes == [0], "verify nodes with a host named twice did not end"
    doc = json.loads(capsys.readouterr().out)
    once = [c for c in doc["checks"] if c["target"] == "local://"]
    assert len(once) == len({c["check"] for c in once})  # every check once, not twice


class _Silent:
    """A transport whose hosts in ``hung`` never answer (a worker that never reports)."""

    def __init__(self, inner: object, hung: set[str]) -> None:
        import threading

        self.inner, self.hung, self.released = inner, hung, threading.Event()

    def root(self, spec: str) -> str:
        return self.inner.root(spec)  # type: ignore[attr-defined,no-any-return]

    def run(self, spec: str, script: str) -> bytes:
        if spec in self.hung:
            self.released.wait(30)
        return self.inner.run(spec, script)  # type: ignore[attr-defined,no-any-return]


def test_the_command_timeout_bounds_the_whole_fan_out(tmp_path: Path) -> None:
    """Hosts not heard from when --timeout runs out (one stuck, one never started) are
    ERROR "not checked", never PASS, and the wait ends on time whatever --host-timeout is."""
    import time

    from fleetfake import LatencyTransport

    from gpufabric.verify.nodes import fleet

    exp = expectation("prod-ib")
    roots = _fleet(tmp_path, exp, 4)
    inner = LatencyTransport(roots)
    fleet.run_fleet(["gpu-0001"], exp, inner)  # its tree's answer is ready: no sh time
    transport = _Silent(inner, {"gpu-0000", "gpu-0002"})
    began = time.monotonic()
    results = fleet.run_fleet(
        ["gpu-0000", "gpu-0001", "gpu-0000", "gpu-0002", "gpu-0003"],
        exp,
        transport,
        parallel=2,
        host_timeout=600,
        timeout=1.5,
    )
    transport.released.set()
    assert time.monotonic() - began < 5
    for host in ("gpu-0000", "gpu-0002", "gpu-0003"):  # stuck, stuck, never started
        mine = [c for c in results if c.target == host]
        assert [c.status for c in mine] == ["ERROR"], host
        assert "not checked within the command's --timeout (1.5 s)" in mine[0].message
    assert [c.target for c in results if c.check == "host"] == ["gpu-0000", "gpu-0002", "gpu-0003"]
    assert any(c.target == "gpu-0001" and c.status == "PASS" for c in results)


@pytest.mark.parametrize("shell", ["dash", "bash"])
def test_vf_pkey_tables_are_gathered_in_the_one_round_trip(tmp_path: Path, shell: str) -> None:
    """rail.<name>.vfpkeys reads each VF the host shows (virtfn<N>/infiniband/<VF>): the
    gather script fetches them with the rest (one round trip), with the probe's verdicts;
    prod-ib (static) wants every VF a full member of its key 0x8001."""
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed")
    exp = expectation("prod-ib")
    vfs = {"mlx5_0": {"mlx5_20": ("0xffff", "0x8001"), "mlx5_21": ("0xffff", "0x0001")}}
    root = nodefs.build(tmp_path / "node", node_for(exp, vfs=vfs))  # rail1's VF in a pod
    checks, round_trips = gather_checks(exp, root, shell=shutil.which(shell) or shell)
    assert round_trips == 1
    assert checks == list(nodes.run_checks(TreeProbe(root), exp))
    by_id = {c.check: c for c in checks}
    assert by_id["rail.rail0.vfpkeys"].status == "FAIL"
    assert "mlx5_21: 0x8001 limited member only" in by_id["rail.rail0.vfpkeys"].message
    assert by_id["rail.rail1.vfpkeys"].status == "SKIP"
