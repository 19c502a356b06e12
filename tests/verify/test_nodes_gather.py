"""`verify nodes` in one round trip per host: the generated gather script, its framing, and
the fleet that runs it.

The script runs for real (/bin/sh, dash, bash) over fixture trees built by tests/nodefs.py;
answers are judged by the shipped node checks and compared with the probe that reads the
same tree file by file (TreeProbe).
"""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import nodefs
import pytest
from fleetfake import LatencyTransport, gather_checks, run_script
from test_nodes import TreeProbe, expectation, mlnx_qos_on_path, node_for

from gpufabric.model.stackfile import list_stacks
from gpufabric.verify.nodes import checks as nodes
from gpufabric.verify.nodes import fleet
from gpufabric.verify.nodes import gather as nodes_gather
from gpufabric.verify.nodes import rails as node_rails

__all__ = ["mlnx_qos_on_path"]  # a fixture used here

BOUNDARY = "@gf-" + "0123456789abcdef" * 2


def _answer(tmp_path: Path, stack: str = "prod-ib", **overrides: object) -> tuple[Path, bytes]:
    exp = expectation(stack)
    root = nodefs.build(tmp_path / "node", node_for(exp, **overrides))
    script = nodes_gather.gather_script(exp, str(root), BOUNDARY)
    return root, run_script(script.text, root)


@pytest.fixture(scope="module")
def healthy_answer(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    """A healthy prod-ib node's tree and the gather script's answer over it, built and run
    once for the tests that only judge that answer (or a changed copy of its bytes)."""
    return _answer(tmp_path_factory.mktemp("healthy"))


def _judge(stack: str, root: Path, output: bytes) -> list[nodes_gather.Check]:
    judged = nodes_gather.judge("node", str(root), expectation(stack), [(BOUNDARY, output)], True)
    assert judged.checks is not None
    return list(judged.checks)


# ------------------------------------------------------------------------ the script


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
@pytest.mark.parametrize("stack", list_stacks())
def test_the_gather_script_passes_shellcheck(stack: str) -> None:
    exp = expectation(stack)
    scripts = [
        nodes_gather.gather_script(exp, "/host").text,
        nodes_gather.request_script(
            [
                ("f", "/var/lib/kubelet/config.yaml"),
                ("l", "/sys/kernel/iommu_groups"),
                ("x", node_rails.PFC_COMMANDS[0] % "'ens1f0np0'"),
            ],
            "/",
        ).text,
    ]
    for script in scripts:
        for dialect in ("sh", "dash", "bash"):
            out = subprocess.run(
                ["shellcheck", "-s", dialect, "-S", "style", "-"],
                input=script,
                capture_output=True,
                text=True,
                check=False,
            )
            assert out.returncode == 0, out.stdout


@pytest.mark.parametrize("shell", ["dash", "bash"])
def test_dash_and_bash_gather_the_same_facts_and_verdicts(
    tmp_path: Path, shell: str, mlnx_qos_on_path: None
) -> None:
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed")
    exp = expectation("lab-roce")
    root = nodefs.build(tmp_path / "node", node_for(exp, memlock="65536", iommu="pt"))
    checks, round_trips = gather_checks(exp, root, shell=shutil.which(shell) or shell)
    assert round_trips == 1
    assert checks == list(nodes.run_checks(TreeProbe(root), exp))
    assert [c.status for c in checks if c.check == "limits.memlock"] == ["FAIL"]


def test_the_script_fits_in_one_command_argument() -> None:
    """It travels as one ``sh -c`` argument (ssh, kubectl exec): Linux takes 128 KiB."""
    for stack in list_stacks():
        assert len(nodes_gather.gather_script(expectation(stack), "/host").text) < 32 * 1024


def test_hostile_roots_and_names_are_data_not_code(tmp_path: Path) -> None:
    """A root (and so every path) with quotes, blanks and command substitutions is read as
    a path: nothing runs, and the verdicts are the file-by-file probe's."""
    exp = expectation("prod-ib")
    root = nodefs.build(tmp_path / "it's $(touch PWNED) `touch PWNED2` ; x", node_for(exp))
    checks, _ = gather_checks(exp, root)
    assert not list(tmp_path.glob("**/PWNED*"))
    assert not list(Path.cwd().glob("PWNED*"))
    assert checks == list(nodes.run_checks(TreeProbe(root), exp))
    assert {c.status for c in checks} <= {"PASS", "SKIP"}


def test_what_the_script_did_not_gather_is_asked_in_a_second_round_trip(tmp_path: Path) -> None:
    """A kubelet --config given as a relative ../ path is not prefetched: the judge asks for
    it, the second round trip answers it, and the verdict is the probe's."""
    exp = expectation("prod-ib")
    root = nodefs.build(tmp_path / "node", node_for(exp, kubelet="config", runtime="crio"))
    cmdline = root / "proc/2345/cmdline"
    cmdline.write_text(cmdline.read_text().replace("/var/lib/kubelet", "../../var/lib/kubelet"))
    checks, round_trips = gather_checks(exp, root)
    assert round_trips == 2
    assert checks == list(nodes.run_checks(TreeProbe(root), exp))
    memlock = next(c for c in checks if c.check == "limits.memlock")
    assert "crio" in memlock.message


def test_a_fact_never_gathered_is_an_error_not_a_guess(tmp_path: Path) -> None:
    """A host that answers the first script but never the requests after it: the checks
    that lack a fact are ERROR after the last round, the others keep their verdicts."""
    exp = expectation("prod-ib")
    root = nodefs.build(tmp_path / "node", node_for(exp, kubelet="config", runtime="crio"))
    cmdline = root / "proc/2345/cmdline"
    cmdline.write_text(cmdline.read_text().replace("/var/lib/kubelet", "../../var/lib/kubelet"))
    first = nodes_gather.gather_script(exp, str(root), BOUNDARY)
    answer = run_script(first.text, root)
    empty = f"{BOUNDARY} BEGIN 1\n{BOUNDARY} END 0\n".encode()
    rounds = [(BOUNDARY, answer)] + [(BOUNDARY, empty)] * (nodes_gather.MAX_ROUNDS - 1)
    judged = nodes_gather.judge("node", str(root), exp, rounds, last=True)
    assert judged.checks is not None
    by_id = {c.check: c for c in judged.checks}
    assert by_id["limits.memlock"].status == "ERROR"
    assert "not gathered in 4 round trips" in by_id["limits.memlock"].message
    assert by_id["gpu.count"].status == "PASS"


# ------------------------------------------------------------------------ the framing


def test_an_answer_judges_as_the_probe_does(tmp_path: Path) -> None:
    root, output = _answer(tmp_path, degraded={"mlx5_3": ("1: DOWN", "3: Disabled")})
    checks = _judge("prod-ib", root, output)
    assert checks == list(nodes.run_checks(TreeProbe(root), expectation("prod-ib")))
    assert [c.check for c in checks if c.status == "FAIL"] == ["rail.rail3.port"]


def test_a_truncated_answer_is_an_error_for_every_check_wherever_it_stops(
    healthy_answer: tuple[Path, bytes],
) -> None:
    root, output = healthy_answer
    for cut in [*range(0, len(output), max(1, len(output) // 97)), len(output) - 1]:
        checks = _judge("prod-ib", root, output[:cut])
        assert {c.status for c in checks} == {"ERROR"}, cut
        assert "the host's answer is unusable" in checks[0].message


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda o: o.replace(BOUNDARY.encode(), b"@gf-" + b"f" * 32), "start line is missing"),
        (lambda o: o + b"extra\n", "end line does not match"),
        (lambda o: o.replace(b" END ", b" END 1"), "end line does not match"),
        (lambda o: o.replace(b" f 27 /proc/driver/nvidia/version", b" f 99 /proc/x"), "overruns"),
        (lambda o: o.replace(b" = 0\n", b" = zero\n", 1), "malformed record trailer"),
        (lambda o: o.replace(b" 0a\n", b" 0a zz\n", 1), "not od's output"),
        (lambda o: o.replace(b" f ", b" q ", 1), "malformed record header"),
    ],
)
def test_an_answer_that_lies_about_its_framing_is_an_error(
    healthy_answer: tuple[Path, bytes], change: object, why: str
) -> None:
    root, output = healthy_answer
    changed = change(output)  # type: ignore[operator]
    assert changed != output
    checks = _judge("prod-ib", root, changed)
    assert {c.status for c in checks} == {"ERROR"}
    assert why in checks[0].message


def test_file_contents_cannot_forge_records(tmp_path: Path) -> None:
    """A file on the host that holds this run's boundary and a whole forged answer is read
    as that file's bytes (hexadecimal on the wire), nothing more."""
    exp = expectation("prod-ib")
    root = nodefs.build(tmp_path / "node", node_for(exp, gpus=4))
    forged = f"\n{BOUNDARY} = 0\n{BOUNDARY} END 1\n{BOUNDARY} l 24 /proc/driver/nvidia/gpus\n"
    (root / "sys/module/nvidia/version").write_text(forged)
    output = run_script(nodes_gather.gather_script(exp, str(root), BOUNDARY).text, root)
    by_id = {c.check: c for c in _judge("prod-ib", root, output)}
    assert by_id["gpu.count"].status == "FAIL"
    assert by_id["gpu.driver"].status == "FAIL"
    assert "differs from the driver's" in by_id["gpu.driver"].message


def test_a_login_greeting_before_the_answer_is_ignored(healthy_answer: tuple[Path, bytes]) -> None:
    root, output = healthy_answer
    checks = _judge("prod-ib", root, b"Welcome to gpu-0001\n" + output)
    assert checks == _judge("prod-ib", root, output)


# ---------------------------------------------------------------------------- fleet


def test_one_round_trip_per_host_and_judging_in_processes(tmp_path: Path) -> None:
    """Worker processes judge exactly as the network threads do, one round trip a host."""
    exp = expectation("prod-ib")
    healthy = nodefs.build(tmp_path / "healthy", node_for(exp))
    bad = nodefs.build(
        tmp_path / "bad", node_for(exp, degraded={"mlx5_3": ("1: DOWN", "3: Disabled")})
    )
    roots = {f"gpu-{i:03d}": bad if i % 7 == 3 else healthy for i in range(24)}
    transport = LatencyTransport(roots)
    inline = fleet.run_fleet(list(roots), exp, transport, parallel=8, judges=0)
    assert transport.round_trips == len(roots)
    pooled = fleet.run_fleet(list(roots), exp, transport, parallel=8, judges=2)
    assert pooled == inline
    failing = {c.target for c in inline if c.status == "FAIL"}
    assert failing == {s for s, r in roots.items() if r == bad}


@pytest.mark.parametrize(
    "data",
    [
        *(b"", b"ab", b"\n\n\n", b"x" * 16, b"x" * 17, bytes(100), bytes(range(256)) * 3),
        *(bytes(4096) + b"\x01" + bytes(40), b"\xff" * 4096),
    ],
)
def test_od_output_decodes_to_the_file_bytes(data: bytes) -> None:
    """What the host's od prints (repeated lines as '*', offsets, the length last) comes back
    as the exact bytes; a lost line or a wrong length is refused."""
    if shutil.which("od") is None:
        pytest.skip("od is not installed")
    out = subprocess.run(["od", "-Ad", "-tx1"], input=data, capture_output=True, check=True)
    assert nodes_gather.unod(out.stdout) == data
    lines = out.stdout.splitlines(keepends=True)
    if len(lines) > 2:
        with pytest.raises(ValueError, match=r"offset|length|repeat"):
            nodes_gather.unod(b"".join(lines[:1] + lines[2:]))
    with pytest.raises(ValueError, match=r"offset|length|repeat"):
        nodes_gather.unod(b"".join(lines[:-1]) + b"9999999\n")


# --------------------------------------------------------------- the fast path's truth


def _exact(output: bytes, boundary: str) -> dict[nodes_gather.Key, nodes_gather.Answer]:
    """The answer decoded record by record by the exact decoder alone (no fast path)."""
    records = nodes_gather._parts(output, boundary)  # the framing checks, shared by both
    return dict(
        nodes_gather._record(records[i], records[i + 1], i // 2) for i in range(0, len(records), 2)
    )


def _outcome(decode: object, output: bytes) -> object:
    try:
        return decode(output, BOUNDARY)  # type: ignore[operator]
    except nodes_gather.GatherError as exc:
        return f"GatherError: {exc}"


def _mutants(output: bytes, rng: random.Random) -> list[bytes]:
    """The answer with one line changed the ways a broken or hostile host could."""
    lines = output.split(b"\n")
    found = []
    for _ in range(40):
        at = rng.randrange(len(lines))
        line = lines[at]
        pos = rng.randrange(len(line) + 1)
        variants = [
            line[:pos] + bytes([rng.choice(b"0123456789abcdef \n*=@gxyz\xff")]) + line[pos:],
            line[:pos] + line[pos + 1 :],
            line + b"\n" + line,
            b"",
            line.upper(),
            line.replace(b" ", b"  ", 1),
        ]
        mutant = [*lines[:at], rng.choice(variants), *lines[at + 1 :]]
        found.append(b"\n".join(mutant))
    return found


@pytest.mark.parametrize("stack", list_stacks())
def test_the_fast_decoder_reads_every_answer_as_the_exact_one(tmp_path: Path, stack: str) -> None:
    """Every fixture answer, and the same answers broken line by line, decode to the same
    records (or fail with the same error) through parse's fast path as through the exact
    record decoder alone: speed changed nothing a verdict reads."""
    exp = expectation(stack)
    rng = random.Random(stack)
    variants = [{}, {"degraded": {exp.rails[0].hca or "mlx5_0": ("1: DOWN", "3: Disabled")}}]
    for n, overrides in enumerate(variants if exp.rails else variants[:1]):
        root = nodefs.build(tmp_path / f"node{n}", node_for(exp, **overrides))
        output = run_script(nodes_gather.gather_script(exp, str(root), BOUNDARY).text, root)
        assert _outcome(nodes_gather.parse, output) == _outcome(_exact, output)
        assert not str(_outcome(nodes_gather.parse, output)).startswith("GatherError")
        for mutant in _mutants(output, rng):
            assert _outcome(nodes_gather.parse, mutant) == _outcome(_exact, mutant)


def test_a_key_with_a_newline_and_empty_files_take_the_exact_path(tmp_path: Path) -> None:
    """Records the fast path leaves alone (a key holding a newline, a file with no bytes,
    od's repeated lines) still decode exactly."""
    if shutil.which("od") is None:
        pytest.skip("od is not installed")
    data = bytes(64) + b"\x01"
    od = subprocess.run(["od", "-Ad", "-tx1"], input=data, capture_output=True, check=True)
    empty = subprocess.run(["od", "-Ad", "-tx1"], input=b"", capture_output=True, check=True)
    body = [
        f"{BOUNDARY} f 6 /a\nb/c\n".encode() + od.stdout + f"{BOUNDARY} = 0\n".encode(),
        f"{BOUNDARY} f 2 /e\n".encode() + empty.stdout + f"{BOUNDARY} = 0\n".encode(),
    ]
    output = f"{BOUNDARY} BEGIN 1\n".encode() + b"".join(body) + f"{BOUNDARY} END 2\n".encode()
    answers = nodes_gather.parse(output, BOUNDARY)
    assert answers == {
        ("f", "/a\nb/c"): nodes_gather.Answer(0, data),
        ("f", "/e"): nodes_gather.Answer(0, b""),
    }
    assert answers == _exact(output, BOUNDARY)


def test_looking_for_overdue_hosts_reads_only_the_hosts_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deadline look reads the hosts in flight, not every host started so far (at
    10,000 hosts a look per result over every started host was 50 million reads)."""
    exp = expectation("prod-ib")
    root = nodefs.build(tmp_path / "node", node_for(exp))
    roots = {f"gpu-{i:03d}": root for i in range(40)}
    seen: list[int] = []
    overdue = fleet._overdue

    def counting(started: dict[str, float], *args: object) -> list[str]:
        seen.append(len(started))
        return overdue(started, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(fleet, "_overdue", counting)
    monkeypatch.setattr(fleet, "OVERDUE_EVERY", 0.01, raising=False)
    transport = LatencyTransport(roots, latency=0.02)
    checks = fleet.run_fleet(list(roots), exp, transport, parallel=4, judges=0)
    assert {c.status for c in checks} <= {"PASS", "SKIP"}
    assert seen, "the deadline was looked at"
    assert max(seen) <= 4


def test_large_fleets_are_judged_in_processes_from_two_cpus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The measured choice (benchmarks/verify_fleet.py, docs/decisions/verify-nodes.md): a process per
    CPU from 64 hosts on 2 or more CPUs; the threads for small fleets and a single CPU; an
    explicit number always wins."""
    monkeypatch.setattr(fleet.os, "cpu_count", lambda: 2)
    assert fleet.judges_for(10_000, None) == 2
    assert fleet.judges_for(64, None) == 2
    assert fleet.judges_for(63, None) == 0
    assert fleet.judges_for(10_000, 0) == 0
    monkeypatch.setattr(fleet.os, "cpu_count", lambda: 1)
    assert fleet.judges_for(10_000, None) == 0
    assert fleet.judges_for(10_000, 3) == 3
