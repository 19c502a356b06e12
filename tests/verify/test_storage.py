"""``verify storage``'s readers and judges: mountstats as the kernel writes it (fixtures from
its printers), ``dd``'s summary, the pods' framed steps, the pod the tenant policy admits."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from builders import REPO, example_config, plan_of

from gpufabric.verify.storage import judge as storage
from gpufabric.verify.storage import mountstats
from gpufabric.verify.storage.judge import ClaimTarget, PodResult, StorageJudge, StorageTarget

FIXTURES = REPO / "tests" / "fixtures" / "mountstats"
TOKEN = "9f1c2a7be3d04c55a1b2c3d4e5f60718"


def fixture(name: str) -> str:
    """A mountstats fixture without its '#' header (the kernel writes none)."""
    text = (FIXTURES / name).read_text()
    return "".join(line for line in text.splitlines(True) if not line.startswith("#"))


def target(transport: str | None = "rdma", ns: str = "team-vision") -> StorageTarget:
    return StorageTarget(
        ns,
        ns,
        (
            ClaimTarget(
                name="checkpoints",
                namespace=ns,
                mount_path="/checkpoints",
                read_only=False,
                transport=transport,
                storage_class="nfs-rdma",
                size="10Ti",
            ),
            ClaimTarget(
                name="datasets",
                namespace=ns,
                mount_path="/data",
                read_only=True,
                transport=transport,
                storage_class="nfs-rdma",
                size="50Ti",
            ),
        ),
    )


def gnu_dd(nbytes: int, seconds: float) -> str:
    return (
        f"{nbytes >> 20}+0 records in\n{nbytes >> 20}+0 records out\n"
        f"{nbytes} bytes (1.1 GB, 1.0 GiB) copied, {seconds} s, 1.0 GB/s"
    )


def log(
    mounts: str, write_s: float = 0.4, read_s: float = 0.3, token_rc: int = 0, mib: int = 1024
) -> str:
    """A write pod's log as its program prints it."""
    m = storage.MARKER.format
    return "\n".join(
        [
            m(step="mountstats"),
            mounts.rstrip("\n"),
            m(step="rc 0"),
            m(step="token 0"),
            m(step=f"rc {token_rc}"),
            m(step="write 0"),
            gnu_dd(mib << 20, write_s),
            m(step="rc 0"),
            m(step="read 0"),
            gnu_dd(mib << 20, read_s),
            m(step="rc 0"),
        ]
    )


def result(text: str, node: str = "gpu-node-0", state: str = "Succeeded") -> PodResult:
    r = PodResult(node=node, state=state, message="done", log=text)
    r.parse()
    return r


# --------------------------------------------------------------------------- mountstats


def test_rdma_fixture_reads_as_rdma_mounts() -> None:
    mounts = mountstats.parse(fixture("nfs-rdma.mountstats"))
    assert [m.path for m in mounts][:2] == ["/", "/proc"]
    ckpt = mountstats.mount_at(mounts, "/checkpoints")
    assert ckpt is not None
    assert ckpt.device == "10.20.0.5:/export/team-vision/checkpoints"
    assert ckpt.fstype == "nfs4"
    assert ckpt.is_nfs
    assert ckpt.transports == ("rdma",)
    assert ckpt.option("proto") == "rdma"
    assert ckpt.option("port") == "20049"
    assert mountstats.transports(ckpt) == ("rdma",)


def test_nconnect_gives_one_xprt_line_per_connection() -> None:
    mount = mountstats.mount_at(mountstats.parse(fixture("nfs-tcp.mountstats")), "/data")
    assert mount is not None
    assert mount.transports == ("tcp",) * 4
    assert mount.option("nconnect") == "4"
    assert mountstats.transports(mount) == ("tcp",)


def test_escaped_mount_points_and_ipv6_transports() -> None:
    text = (
        "device srv:/x mounted on /mnt/with\\040space with fstype nfs4 statvers=1.1\n"
        "\topts:\trw,vers=4.2,proto=rdma6\n"
        "\txprt:\trdma 0 0 1 0 0 5 5 0 5 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
    )
    mount = mountstats.mount_at(mountstats.parse(text), "/mnt/with space")
    assert mount is not None
    assert mountstats.transports(mount) == ("rdma",)


@pytest.mark.parametrize(
    "bad",
    [
        "garbage first line\n",
        "device a mounted on /x with fstype nfs4 statvers=1.1\n\txprt:\trdma 0 0 1\n",
        "device a mounted on /x with fstype nfs4 statvers=1.1\n\txprt:\trdma 0 0 x 1 2 3 4 5 6 7\n",
        "device a mounted on /x with fstype nfs4 statvers=1.1\nnot indented\n",
    ],
)
def test_what_the_kernel_does_not_write_is_refused(bad: str) -> None:
    with pytest.raises(mountstats.MountstatsError):
        mountstats.parse(bad)


# ------------------------------------------------------------------------------- dd


@pytest.mark.parametrize(
    ("summary", "seconds"),
    [
        ("1073741824 bytes (1.1 GB, 1.0 GiB) copied, 0.5 s, 2.1 GB/s", 0.5),  # GNU coreutils
        ("1073741824 bytes (1.0GB) copied, 0.500000 seconds, 2.0GB/s", 0.5),  # BusyBox
        ("1073741824 bytes copied, 2.5e-01 s, 4.3 GB/s", 0.25),
    ],
)
def test_dd_summaries_of_gnu_and_busybox(summary: str, seconds: float) -> None:
    t = storage.parse_dd(f"1024+0 records in\n1024+0 records out\n{summary}", 1 << 30)
    assert t.seconds == seconds
    assert t.mbps == pytest.approx((1 << 30) / 1e6 / seconds)


@pytest.mark.parametrize(
    "output",
    [
        "",
        "dd: error writing: No space left on device",
        "536870912 bytes (537 MB, 512 MiB) copied, 0.5 s, 1.1 GB/s",  # short
        "1073741824 bytes (1.1 GB, 1.0 GiB) copied, 0 s, inf GB/s",
        gnu_dd(1 << 30, 0.5) + "\n" + gnu_dd(1 << 30, 0.5).splitlines()[-1],  # twice
    ],
)
def test_unreadable_dd_output_is_refused(output: str) -> None:
    with pytest.raises(ValueError, match=r"dd|summary"):
        storage.parse_dd(output, 1 << 30)


@pytest.mark.skipif(shutil.which("dd") is None, reason="no dd on this machine")
def test_the_real_dd_summary_is_read(tmp_path: Path) -> None:
    """GNU or BusyBox dd on this machine prints what parse_dd reads."""
    out = subprocess.run(
        ["dd", "if=/dev/zero", f"of={tmp_path / 'f'}", "bs=1M", "count=4", "conv=fsync"],
        capture_output=True,
        text=True,
        check=True,
        env={"LC_ALL": "C", "PATH": "/usr/bin:/bin"},
    )
    assert storage.parse_dd(out.stderr, 4 << 20).bytes == 4 << 20


# ----------------------------------------------------------------------------- steps


def test_steps_are_read_by_their_frames() -> None:
    got = storage.steps(log(fixture("nfs-rdma.mountstats")))
    assert list(got) == ["mountstats", "token 0", "write 0", "read 0"]
    assert all(s.rc == 0 for s in got.values())
    cut = storage.steps(storage.MARKER.format(step="write 0") + "\n1+0 records in")
    assert cut["write 0"].rc is None  # the pod ended mid-step


def test_a_step_framed_twice_is_an_unreadable_log() -> None:
    twice = log("x") + "\n" + storage.MARKER.format(step="write 0")
    r = result(twice)
    assert r.steps == {}
    assert "unreadable log" in r.message


# ---------------------------------------------------------------------------- judging


JUDGE = StorageJudge(2500.0, "0.05 x one rail's 400 Gb/s")


def statuses(checks: list) -> dict[str, str]:  # type: ignore[type-arg]
    return {c.check.removeprefix("storage.team-vision."): c.status for c in checks}


def test_rdma_mounts_fast_and_shared_pass() -> None:
    writer = result(log(fixture("nfs-rdma.mountstats")))
    m = storage.MARKER.format
    reader = result("\n".join([m(step="readback 0"), TOKEN, m(step="rc 0")]), "gpu-node-1")
    checks = storage.judge_node(target(), writer, reader, TOKEN, JUDGE)
    assert statuses(checks) == {
        "checkpoints.transport": "PASS",
        "datasets.transport": "PASS",
        "checkpoints.write": "PASS",
        "checkpoints.read": "PASS",
        "checkpoints.readback": "PASS",
    }
    write = next(c for c in checks if c.check.endswith("checkpoints.write"))
    assert write.details["mbps"] == pytest.approx(2684.4, abs=0.1)


def test_tcp_mounts_pass_where_the_stack_asked_for_tcp() -> None:
    checks = storage.judge_node(
        target("tcp"), result(log(fixture("nfs-tcp.mountstats"))), None, TOKEN, JUDGE
    )
    transport = [c for c in checks if c.check.endswith(".transport")]
    assert [c.status for c in transport] == ["PASS", "PASS"]
    assert "4 connection(s)" in transport[0].message


def test_a_mount_that_fell_back_to_tcp_fails_naming_the_node() -> None:
    writer = result(log(fixture("nfs-rdma-fell-back-to-tcp.mountstats")), "gpu-node-3")
    check = storage.judge_transport(writer, target().claims[0])
    assert check.status == "FAIL"
    assert check.target == "gpu-node-3"
    assert "runs over tcp, not rdma (fell back)" in check.message
    assert "rpcrdma" in check.hint
    assert storage.judge_transport(writer, target().claims[1]).status == "PASS"


def test_an_rdma_mount_where_tcp_was_asked_fails() -> None:
    writer = result(log(fixture("nfs-rdma.mountstats")))
    assert storage.judge_transport(writer, target("tcp").claims[0]).status == "FAIL"


def test_a_bring_your_own_class_reports_its_transport_without_judging_it() -> None:
    writer = result(log(fixture("nfs-tcp.mountstats")))
    check = storage.judge_transport(writer, target(None).claims[0])
    assert check.status == "SKIP"
    assert "over tcp" in check.message


def test_a_slow_node_fails_and_a_missing_threshold_never_passes() -> None:
    slow = result(log(fixture("nfs-rdma.mountstats"), write_s=4.0))
    checks = storage.judge_throughput(slow, target().claims[0], 0, JUDGE)
    assert [c.status for c in checks] == ["FAIL", "PASS"]
    assert checks[0].message == "write 268 MB/s (1024 MiB in 4 s) < 2500 MB/s"
    none = StorageJudge(None, "no rail line rate in the stack: pass --min-throughput")
    assert {c.status for c in storage.judge_throughput(slow, target().claims[0], 0, none)} == {
        "ERROR"
    }


def test_unreadable_or_missing_steps_are_errors_never_passes() -> None:
    cut = result(log(fixture("nfs-rdma.mountstats")).rsplit("\n", 1)[0])  # read's rc lost
    assert [c.status for c in storage.judge_throughput(cut, target().claims[0], 0, JUDGE)] == [
        "PASS",
        "ERROR",
    ]
    empty = result("", state="Timeout")
    checks = storage.judge_node(target(), empty, None, TOKEN, JUDGE)
    assert {c.status for c in checks} == {"ERROR"}
    garbage = log("device a mounted on /x with fstype nfs4\nnot a mountstats line")
    assert storage.judge_transport(result(garbage), target().claims[0]).status == "ERROR"


def test_a_missing_or_foreign_read_back_fails() -> None:
    writer = result(log(fixture("nfs-rdma.mountstats")))
    m = storage.MARKER.format
    missing = result(
        "\n".join(
            [
                m(step="readback 0"),
                "cat: /checkpoints/.gpufabric-verify/ab12cd/x.token: No such file or directory",
                m(step="rc 1"),
            ]
        ),
        "gpu-node-1",
    )
    check = storage.judge_readback(writer, missing, target().claims[0], 0, TOKEN)
    assert check.status == "FAIL"
    assert "written on gpu-node-0 is not found on gpu-node-1" in check.message
    other = result("\n".join([m(step="readback 0"), "0" * 32, m(step="rc 0")]), "gpu-node-1")
    assert storage.judge_readback(writer, other, target().claims[0], 0, TOKEN).status == "FAIL"
    denied = result(log(fixture("nfs-rdma.mountstats"), token_rc=1))
    assert storage.judge_readback(denied, other, target().claims[0], 0, TOKEN).status == "FAIL"
    alone = storage.judge_readback(writer, None, target().claims[0], 0, TOKEN)
    assert alone.status == "ERROR"


def test_the_ring_pairs_each_node_with_another() -> None:
    assert storage.ring(["c", "a", "b"]) == {"a": "b", "b": "c", "c": "a"}
    assert storage.ring(["a"]) == {}
    assert len(storage.sample([f"n{i}" for i in range(10)], 3)) == 3
    assert storage.sample(["b", "a"], None) == ["a", "b"]


def test_the_default_threshold_is_a_fraction_of_one_rails_line_rate() -> None:
    assert storage.default_threshold(400) == (2500.0, "0.05 x one rail's 400 Gb/s")
    assert storage.default_threshold(0)[0] is None


# ------------------------------------------------------------------------- the pods


def test_targets_are_the_plans_claims() -> None:
    """verify storage proves exactly the claims the Plan gives each tenant (prod-ib: NFS
    over RDMA); a stack without storage has nothing to prove."""
    assert storage.targets_from_plan(plan_of(example_config("kind-dev"), "kind-dev")) == ()
    targets = storage.targets_from_plan(plan_of(example_config("prod-ib"), "prod-ib"))
    eval_ = next(t for t in targets if t.namespace == "eval")
    assert eval_.claims == (
        ClaimTarget(
            name="checkpoints",
            namespace="eval",
            mount_path="/checkpoints",
            read_only=False,
            transport="rdma",
            storage_class="gpufabric-nfsordma",
            size="50Ti",
        ),
        ClaimTarget(
            name="datasets",
            namespace="eval",
            mount_path="/data",
            read_only=True,
            transport="rdma",
            storage_class="gpufabric-nfsordma",
            size="200Ti",
        ),
    )
    byo = storage.targets_from_plan(plan_of(example_config("lab-roce"), "lab-roce"))
    assert {c.transport for t in byo for c in t.claims} == {None}  # the site's own class


def test_the_pod_passes_the_tenant_admission_policy() -> None:
    from admission import Policy, Request
    from tenant_admission import policies

    plan = plan_of(example_config("lab-roce"), "lab-roce")
    t = target()
    body = storage.pod(
        t, "gpu-node-0", "gpufabric-storage-ab12cd-w-0123456789ab", "img:1",
        storage.write_script(t), {"GF_RUN": "ab12cd"}, plan.facts.nodes.tolerations,
    )  # fmt: skip
    policy: Policy = policies(plan)["pods"]
    assert policy.denials(body, Request(namespace="team-vision")) == []
    spec = body["spec"]
    assert [v["persistentVolumeClaim"] for v in spec["volumes"]] == [
        {"claimName": "checkpoints", "readOnly": False},
        {"claimName": "datasets", "readOnly": True},
    ]
    assert spec["restartPolicy"] == "Never"


@pytest.mark.skipif(shutil.which("dd") is None, reason="no dd on this machine")
def test_hostile_mount_paths_stay_quoted_in_the_script(tmp_path: Path) -> None:
    """A mount path reaches the shell only as one quoted word."""
    evil = str(tmp_path / "a'b; touch pwned $(touch pwned2)")
    Path(evil).mkdir()
    t = StorageTarget(
        "t",
        "t",
        (ClaimTarget(name="c", namespace="t", mount_path=evil, read_only=False, transport="rdma"),),
    )
    script = storage.write_script(t, mib=1).replace("/proc/self/mountstats", "/dev/null")
    env = {"GF_RUN": "r1", "GF_TOKEN": TOKEN, "GF_NODE": "n1", "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        ["/bin/sh", "-c", script], capture_output=True, text=True, cwd=tmp_path, env=env
    )
    assert not (tmp_path / "pwned").exists()
    assert not (tmp_path / "pwned2").exists()
    assert (Path(evil) / ".gpufabric-verify" / "r1" / "n1.token").read_text() == TOKEN
    ran = storage.steps(out.stdout)
    assert [ran[s].rc for s in ("mountstats", "token 0", "write 0")] == [0, 0, 0]
    assert not (Path(evil) / ".gpufabric-verify" / "r1" / "n1.dd").exists()  # removed after
