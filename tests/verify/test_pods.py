"""Pod checks: rail interfaces in real network namespaces (veth + macvlan, as Multus' macvlan
plugin builds them), the rest against pod-like /proc and /dev contents.

The namespace tests need CAP_NET_ADMIN; they skip cleanly where namespaces cannot be made.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import testinfra

from gpufabric.cli import main
from gpufabric.model.stackfile import load_stack
from gpufabric.plan.build import build_plan
from gpufabric.verify import expect
from gpufabric.verify.nodes import pods
from gpufabric.verify.nodes.probe import HostProbe
from gpufabric.verify.nodes.suite_runner import run_suite


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@pytest.fixture
def netns() -> Iterator[str]:
    """A namespace shaped like a lab-roce training pod: rail0 and rail1 are macvlans on
    veth 'host' ends, MTU 9000, addresses from the rails' subnets."""
    name = f"gpf-pod-{os.getpid()}"
    try:
        _ip("netns", "add", name)
    except (subprocess.CalledProcessError, FileNotFoundError) as exc:
        pytest.skip(f"cannot create network namespaces here: {exc}")
    links = []
    try:
        for i, addr in enumerate(["192.168.10.17/24", "192.168.11.17/24"]):
            host, peer = f"gpfh{i}-{os.getpid() % 10000}", f"gpfp{i}-{os.getpid() % 10000}"
            _ip("link", "add", host, "mtu", "9000", "type", "veth", "peer", "name", peer)
            links.append(host)
            _ip("link", "set", peer, "mtu", "9000", "up")
            _ip("link", "set", host, "up")
            mv = f"gpfm{i}-{os.getpid() % 10000}"
            _ip(
                "link",
                "add",
                "link",
                host,
                "name",
                mv,
                "mtu",
                "9000",
                "type",
                "macvlan",
                "mode",
                "bridge",
            )
            _ip("link", "set", mv, "netns", name)
            _ip("-n", name, "link", "set", mv, "name", f"rail{i}")
            _ip("-n", name, "addr", "add", addr, "dev", f"rail{i}")
            _ip("-n", name, "link", "set", f"rail{i}", "up")
        _ip("-n", name, "link", "set", "lo", "up")
        yield name
    finally:
        for link in links:
            subprocess.run(["ip", "link", "del", link], capture_output=True)
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def lab() -> expect.Expectation:
    return expect.from_facts(build_plan("lab-roce", load_stack("lab-roce", None).model).facts)


def ns_probe(name: str) -> HostProbe:
    return HostProbe(testinfra.get_host("local://"), prefix=f"ip netns exec {name}", name=name)


def interface_results(probe: HostProbe, exp: expect.Expectation) -> dict[str, str]:
    checks = [c for c in pods.pod_checks(exp) if c.id.endswith(".interface")]
    return {c.check: f"{c.status} {c.message}" for c in pods.run_checks(probe, exp, checks)}


def test_rail_interfaces_in_a_real_namespace_pass(netns: str) -> None:
    assert interface_results(ns_probe(netns), lab()) == {
        "pod.rail0.interface": "PASS rail0 up, MTU 9000, 192.168.10.17",
        "pod.rail1.interface": "PASS rail1 up, MTU 9000, 192.168.11.17",
    }


def test_wrong_mtu_and_address_fail(netns: str) -> None:
    _ip("-n", netns, "link", "set", "rail0", "mtu", "1500")
    _ip("-n", netns, "addr", "flush", "dev", "rail1")
    _ip("-n", netns, "addr", "add", "10.0.0.5/24", "dev", "rail1")
    out = interface_results(ns_probe(netns), lab())
    assert out["pod.rail0.interface"] == "FAIL rail0: MTU 1500, expected 9000"
    assert out["pod.rail1.interface"] == (
        "FAIL rail1: no address in 192.168.11.0/24 (has 10.0.0.5)"
    )


def test_missing_and_down_interfaces_fail(netns: str) -> None:
    _ip("-n", netns, "link", "del", "rail1")
    _ip("-n", netns, "link", "set", "rail0", "down")
    out = interface_results(ns_probe(netns), lab())
    assert out["pod.rail0.interface"].startswith("FAIL rail0: down")
    assert out["pod.rail1.interface"] == "FAIL no interface rail1 (present: lo, rail0)"


def test_pod_suite_runs_in_the_namespace(netns: str) -> None:
    results = run_suite("pod", lab(), ["local://"], netns=netns)
    by_id = {c.check: c for c in results}
    assert by_id["pod.rail0.interface"].status == "PASS"
    assert by_id["pod.rail1.interface"].status == "PASS"
    assert [c.check for c in results] == [c.id for c in pods.pod_checks(lab())]


# -------------------------------------------------------------- pod files (fake probe)

DOCKER_DEFAULT_CAPS = "00000000a80425fb"  # the runtime's default set: no IPC_LOCK
WITH_IPC_LOCK = "00000000a80465fb"
STATUS = (
    "Name:\tbash\nState:\tS (sleeping)\nCapInh:\t0000000000000000\nCapPrm:\t{c}\nCapEff:\t{c}\n"
)
LIMITS = "Limit                     Soft Limit           Hard Limit           Units\nMax locked memory         {m}            {m}            bytes\n"
DF = "Filesystem     1024-blocks  Used Available Capacity Mounted on\nshm            {k}     0 {k}       0% /dev/shm\n"


@dataclass
class PodFiles:
    """A probe over in-memory pod contents, for checks that read /proc, /dev and df."""

    files: dict[str, str] = field(default_factory=dict)
    dirs: dict[str, list[str]] = field(default_factory=dict)
    commands: dict[str, str] = field(default_factory=dict)
    name: str = "pod"
    root: str = "/"

    def read(self, path: str) -> str | None:
        return self.files.get(path)

    def read_bytes(self, path: str) -> bytes | None:
        text = self.files.get(path)
        return None if text is None else text.encode()

    def listdir(self, path: str) -> list[str]:
        return sorted(self.dirs.get(path, []))

    def exists(self, path: str) -> bool:
        return path in self.files or path in self.dirs

    def realpath(self, path: str) -> str | None:
        return path

    def unroot(self, path: str) -> str | None:
        return path

    def run(self, command: str, *args: str) -> tuple[int, str]:
        cmd = command % args if args else command
        return (0, self.commands[cmd]) if cmd in self.commands else (127, "")


def pod(
    caps: str = WITH_IPC_LOCK, memlock: str = "unlimited", shm_kib: int = 67108864, gpus: int = 8
) -> PodFiles:
    return PodFiles(
        files={
            "/proc/self/status": STATUS.format(c=caps),
            "/proc/self/limits": LIMITS.format(m=memlock),
        },
        dirs={
            "/dev/infiniband": ["rdma_cm", "uverbs0", "uverbs1"],
            "/dev": ["infiniband", "null", "nvidiactl", "nvidia-uvm", "shm"]
            + [f"nvidia{i}" for i in range(gpus)],
        },
        commands={"df -Pk /dev/shm": DF.format(k=shm_kib)},
    )


def file_results(probe: PodFiles) -> dict[str, str]:
    exp = lab()
    checks = [c for c in pods.pod_checks(exp) if not c.id.endswith(".interface")]
    return {c.check: c.status for c in pods.run_checks(probe, exp, checks)}


def test_a_wired_pod_passes() -> None:
    assert file_results(pod()) == {
        "pod.rdma-devices": "PASS",
        "pod.gpus": "PASS",
        "pod.shm": "PASS",
        "pod.ipc-lock": "PASS",
        "pod.memlock": "PASS",
    }


def test_default_container_settings_fail() -> None:
    """What a pod without gpufabric's wiring gets: 64 MiB /dev/shm, no IPC_LOCK, 8 MiB memlock."""
    out = file_results(pod(caps=DOCKER_DEFAULT_CAPS, memlock="8388608", shm_kib=65536, gpus=0))
    assert out == {
        "pod.rdma-devices": "PASS",
        "pod.gpus": "FAIL",
        "pod.shm": "FAIL",
        "pod.ipc-lock": "FAIL",
        "pod.memlock": "FAIL",
    }


def test_messages_name_the_fix() -> None:
    exp = lab()
    probe = pod(caps=DOCKER_DEFAULT_CAPS, shm_kib=65536)
    assert pods.check_shm(probe, exp).hint == (
        "mount an emptyDir (medium: Memory, sizeLimit 64Gi) at /dev/shm"
    )
    assert "IPC_LOCK" in pods.check_ipc_lock(probe, exp).hint
    empty = PodFiles(dirs={"/dev/infiniband": []})
    assert "RDMA resources" in pods.check_rdma_devices(empty, exp).hint


def test_ip_missing_is_undecided(tmp_path: Path) -> None:
    probe = PodFiles()
    (check,) = [c for c in pods.pod_checks(lab()) if c.id == "pod.rail0.interface"]
    assert next(pods.run_checks(probe, lab(), [check])).status == "ERROR"


class _DeadPod:
    """A testinfra host whose backend runs nothing: kubectl exec into a missing pod."""

    class _Result:
        rc = 1
        stdout = ""
        stdout_bytes = b""
        stderr = 'Error from server (NotFound): pods "ghost" not found'

    backend = None

    def run(self, command: str, *args: str) -> _DeadPod._Result:
        return self._Result()


def test_an_unreachable_pod_is_inconclusive_with_the_reason() -> None:
    probe = HostProbe(_DeadPod(), name="kubectl://ghost")
    results = list(pods.run_checks(probe, lab()))
    assert results
    assert {r.status for r in results} == {"ERROR"}
    assert all('pods "ghost" not found' in r.message for r in results)
    assert not any("iproute2" in (r.hint or "") or "GPUs visible" in r.message for r in results)


@pytest.mark.parametrize(
    "hosts", ["garbage", "ssh://", "ftp://host", ",", "kubectl://?namespace=x"]
)
def test_bad_hosts_are_a_clean_exit_2(hosts: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["verify", "pods", "--stack", "lab-roce", "--hosts", hosts])
    assert code == 2
    err = capsys.readouterr().err
    assert "--hosts" in err
    assert "Traceback" not in err


def test_sizes_and_device_numbers_in_other_scripts_are_not_read_as_numbers() -> None:
    """df's size column or a /dev/nvidiaN name with non-ASCII digits (int() refuses the
    superscript ones, \\d takes Arabic-Indic ones): unreadable, never a crash or a GPU."""
    superscript = "\u00b9\u2070\u2070\u2070\u2070\u2070\u2070\u2070"
    probe = pod(gpus=7)
    probe.commands["df -Pk /dev/shm"] = DF.format(k=superscript)
    probe.dirs["/dev"].append("nvidia\u0667")
    results = file_results(probe)
    assert results["pod.shm"] == "ERROR"
    assert results["pod.gpus"] == "FAIL"
