"""Bad input on the command line, as a new user meets it: every refusal exits 2 and names
the flag (or file) and what is accepted; nothing is contacted, created or half-written."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_kube import FakeKube

from gpufabric.cli import main

NCCL = ["verify", "nccl", "--stack", "lab-roce", "--tenant", "team-vision"]
HEALTH = ["health", "--stack", "prod-ib", "--tenant", "llm-pretrain", "--dry-run"]
NODES = ["verify", "nodes", "--stack", "lab-roce"]


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    with FakeKube() as f:
        yield f


# ------------------------------------------------------------------ counts in listings


def test_stacks_and_validate_say_one_rail_and_one_tenant(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """kind-dev has one rail and one tenant: `1 rail`, never `1 rails`."""
    assert main(["stacks"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("kind-dev "))
    assert ", 1 rail," in line
    assert line.endswith(", 1 tenant")
    assert main(["validate", "--stack", "kind-dev"]) == 0
    out = capsys.readouterr().out
    assert "1 rail," in out
    assert "1 tenant;" in out
    assert "1 rails" not in out
    assert "1 tenants" not in out


def test_render_summary_says_one_object(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "--stack", "lab-roce", "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "  gpu             1 object\n" in out  # lab-roce's gpu layer: one object
    assert "1 objects" not in out


def test_a_sweep_of_one_round_says_one_round() -> None:
    from gpufabric.verify.sweep import run as sweep

    header = sweep.format_table(sweep.SweepReport(nodes={}, rounds=1)).splitlines()[0]
    assert header.startswith("NCCL sweep: 0 nodes in 1 round, 0 jobs;"), header


# ------------------------------------------------------ flags another flag would ignore


@pytest.mark.parametrize(
    ("argv", "flag", "other"),
    [
        ([*HEALTH, "--interval", "30"], "--interval", "--watch"),
        ([*HEALTH, "--interval", "300"], "--interval", "--watch"),  # the default, typed
        ([*HEALTH, "--node-checks", "api", "--probe-image", "x:1"], "--probe-image", "--node-checks"),
        ([*HEALTH, "--node-checks", "api", "--probe-timeout", "60"], "--probe-timeout", "--node-checks"),
        ([*HEALTH, "--min-busbw", "300", "--fraction", "0.8"], "--fraction", "--min-busbw"),
        ([*NCCL, "--sweep", "--nodes", "4", "--dry-run"], "--nodes", "--sweep"),
        ([*NCCL, "--sweep-group", "4", "--dry-run"], "--sweep-group", "--sweep"),
        ([*NCCL, "--sweep-confirm", "4"], "--sweep-confirm", "--sweep"),
        ([*NCCL, "--min-busbw", "300", "--fraction", "0.8"], "--fraction", "--min-busbw"),
        ([*NODES, "--via-cluster", "--root", "/mnt"], "--root", "--hosts"),
        ([*NODES, "--hosts", "local://", "--probe-image", "x:1"], "--probe-image", "--via-cluster"),
        ([*NODES, "--hosts", "local://", "--keep-probe"], "--keep-probe", "--via-cluster"),
        ([*NODES, "--hosts", "local://", "--timeout", "60"], "--timeout", "--via-cluster"),
        ([*NODES, "--hosts", "local://", "--kubeconfig", "k"], "--kubeconfig", "--via-cluster"),
        ([*NODES, "--hosts", "local://", "--write-expect", "e.json"], "--hosts", "--write-expect"),
        (["nccl-report", "x.log", "--fraction", "0.8"], "--fraction", "--stack"),
    ],
)  # fmt: skip
def test_a_flag_that_would_be_ignored_is_refused(
    argv: list[str],
    flag: str,
    other: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)  # nothing may be written (--write-expect) or read
    assert main(argv) == 2
    err = capsys.readouterr().err
    command = " ".join(argv[:2]) if argv[0] == "verify" else argv[0]
    assert err.startswith(f"gpufabric {command}: 1 problem\n"), err
    assert f"  - {flag}: " in err
    assert other in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "argv",
    [
        [*NCCL, "--nodes", "2", "--dry-run"],
        # --dry-run previews the run its command line describes: appended, it refuses nothing
        [*NCCL, "--sweep", "--keep", "--timeout", "600", "--kubeconfig", "absent", "--dry-run"],
        [*NCCL, "--sweep", "--sweep-group", "4", "--dry-run"],
    ],
)
def test_flags_that_act_are_accepted(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 0, capsys.readouterr().err


# ---------------------------------------------------------------- verify nccl --nodes 1


def test_an_acceptance_run_on_one_node_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*NCCL, "--nodes", "1", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpufabric verify nccl: 1 problem\n")
    assert "--nodes: 1: the acceptance test needs at least 2 nodes" in err


def test_one_node_is_refused_before_the_cluster_is_asked(
    fake: FakeKube, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = str(fake.kubeconfig(tmp_path))
    argv = [*NCCL, "--nodes", "1", "--kubeconfig", cfg, "--context", "fake", "--timeout", "5"]
    assert main(argv) == 2
    assert not fake.requests


# ------------------------------------------- the heading names the command the user ran


def test_verify_nccl_errors_are_headed_verify_nccl(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["verify", "nccl", "--stack", "lab-roce", "--tenant", "nope", "--dry-run"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpufabric verify nccl: 1 problem\n"), err
    assert "gpufabric job" not in err
    assert "--tenant: 'nope' is not a tenant of this stack" in err


def test_job_errors_stay_headed_job(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["job", "--stack", "lab-roce", "--tenant", "nope", "--kind", "mpijob"]
    assert main(argv) == 2
    assert capsys.readouterr().err.startswith("gpufabric job: 1 problem\n")


# ------------------------------------------------------------------------ --crd-dir


@pytest.mark.parametrize("command", [["render"], ["job", "--tenant", "team-vision", "--kind", "mpijob"]])  # fmt: skip
def test_crd_dir_must_hold_crd_files(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "crds"
    empty.mkdir()
    out = ["--out", str(tmp_path / "out")] if command == ["render"] else []
    base = [command[0], "--stack", "lab-roce", *command[1:], *out]
    assert main([*base, "--crd-dir", str(empty)]) == 2
    assert f"--crd-dir '{empty}': holds no *.yaml or *.yml file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:  # an empty path would be the working directory
        main([*base, "--crd-dir", ""])
    assert exited.value.code == 2
    assert "argument --crd-dir: empty; expected a directory" in capsys.readouterr().err
    assert main([*base, "--crd-dir", str(tmp_path / "nope")]) == 2
    assert "no such file or directory" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------- unwritable --out


def _unwritable(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    return {
        "proc": (Path("/proc/gpufabric-x/y"), "nothing can be created in /proc"),
        "under a file": (blocker / "sub" / "x", f"{blocker} is a file, not a directory"),
    }


@pytest.mark.parametrize("case", ["proc", "under a file"])
@pytest.mark.parametrize("command", ["render", "runbook", "report"])
def test_an_unwritable_out_is_bad_input_naming_the_path(
    command: str, case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, why = _unwritable(tmp_path)[case]
    argv = {
        "render": ["render", "--stack", "kind-dev"],
        "runbook": ["runbook", "--stack", "kind-dev"],
        "report": ["report"],  # every section then says its input is missing
    }[command]
    assert main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"gpufabric {command}: --out {out}: {why}" in err, err
    assert "staging" not in err
    assert ".gpufabric-probe" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_read_only_directory_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    try:
        assert main(["render", "--stack", "kind-dev", "--out", str(locked / "o")]) == 2
        err = capsys.readouterr().err
        assert (
            f"--out {locked / 'o'}: nothing can be created in {locked} (permission denied)" in err
        )
    finally:
        locked.chmod(0o755)


def test_runbook_out_says_which_directories_it_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Like render, runbook --out creates the missing parents of its file, and says so."""
    monkeypatch.chdir(tmp_path)
    assert main(["runbook", "--stack", "kind-dev", "--out", "a/b/c.md"]) == 0
    err = capsys.readouterr().err
    assert err.splitlines() == ["created directory a", "created directory a/b", "wrote a/b/c.md"]
    assert (tmp_path / "a" / "b" / "c.md").read_text().startswith("#")
    assert main(["runbook", "--stack", "kind-dev", "--out", "a/b/c.md"]) == 0
    assert capsys.readouterr().err.splitlines() == ["wrote a/b/c.md"]  # nothing new created


# ----------------------------------------------------------------------- kubeconfig


KUBE_COMMANDS = {
    "cluster": ["verify", "cluster", "--stack", "lab-roce"],
    "nccl": [*NCCL],
    "storage": ["verify", "storage", "--stack", "lab-roce"],
    "nodes": [*NODES, "--via-cluster"],
    "health": ["health", "--stack", "prod-ib", "--tenant", "llm-pretrain", "--node-checks", "api"],
}


def _kubeconfigs(tmp_path: Path, fake: FakeKube) -> dict[str, tuple[str, str]]:
    """name: (the file, what the error says about it)."""
    (tmp_path / "garbage").write_text("clusters: [\n")
    (tmp_path / "list").write_text("- a\n- b\n")
    unreadable = tmp_path / "unreadable"
    unreadable.write_text("{}")
    unreadable.chmod(0)
    cases = {
        "missing": (str(tmp_path / "nope"), "no such file"),
        "directory": (str(tmp_path), "a directory, not a kubeconfig file"),
        "not YAML": (str(tmp_path / "garbage"), "not YAML"),
        "not a mapping": (str(tmp_path / "list"), "not a kubeconfig"),
        "no such context": (str(fake.kubeconfig(tmp_path)), "is no context of --kubeconfig"),
    }
    if os.geteuid() != 0:
        cases["unreadable"] = (str(unreadable), "cannot be read (Permission denied)")
    return cases


@pytest.mark.parametrize("command", sorted(KUBE_COMMANDS))
def test_a_kubeconfig_that_cannot_be_used_is_bad_input(
    command: str, fake: FakeKube, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, (path, why) in _kubeconfigs(tmp_path, fake).items():
        assert main([*KUBE_COMMANDS[command], "--kubeconfig", path]) == 2, name
        err = capsys.readouterr().err
        assert path in err, (name, err)
        assert why in err, (name, err)
        assert "Traceback" not in err
    assert not fake.requests


def test_kubeconfig_variable_naming_a_missing_file_is_bad_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = str(tmp_path / "nope")
    monkeypatch.setenv("KUBECONFIG", missing)
    monkeypatch.setattr("kubernetes.config.load_incluster_config", _not_in_a_pod)
    assert main(KUBE_COMMANDS["cluster"]) == 2
    assert f"  - KUBECONFIG: {missing}: no such file" in capsys.readouterr().err


def _not_in_a_pod() -> None:
    from kubernetes.config.config_exception import ConfigException

    raise ConfigException("not in a pod")


def test_runbook_out_never_replaces_a_file_it_did_not_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``runbook --out stacks/Pulumi.x.yaml`` (or a README) replaced the user's file with
    Markdown: --out replaces only a runbook written earlier, or an empty file."""
    from builders import REPO

    stack_copy = tmp_path / "Pulumi.lab-roce.yaml"
    stack_copy.write_bytes((REPO / "stacks" / "Pulumi.lab-roce.yaml").read_bytes())
    before = stack_copy.read_bytes()
    assert main(["runbook", "--stack", "lab-roce", "--out", str(stack_copy)]) == 2
    assert stack_copy.read_bytes() == before
    assert "was not written by gpufabric runbook" in capsys.readouterr().err
    ours, empty = tmp_path / "runbook.md", tmp_path / "empty.md"
    empty.touch()
    for path in (ours, ours, empty):  # new, then its own earlier file, then an empty one
        assert main(["runbook", "--stack", "lab-roce", "--out", str(path)]) == 0
        assert path.read_text().startswith("# Bootstrap runbook")


def test_report_out_never_replaces_its_own_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from builders import REPO

    nodes = tmp_path / "nodes.json"
    nodes.write_bytes((REPO / "docs" / "examples" / "report" / "nodes.json").read_bytes())
    before = nodes.read_bytes()
    assert main(["report", "--nodes", str(nodes), "--out", str(nodes)]) == 2
    assert nodes.read_bytes() == before
    assert "was not written by gpufabric report" in capsys.readouterr().err
    page = tmp_path / "report.html"
    for _ in range(2):  # a report replaces the report it wrote
        assert main(["report", "--nodes", str(nodes), "--out", str(page)]) in (0, 4, 5)
    assert '<meta name="generator" content="gpufabric report">' in page.read_text()


def test_the_validate_command_stacks_prints_for_an_invalid_stack_runs(tmp_path: Path) -> None:
    """``stacks --stacks-dir D`` names the command that lists a bad stack's problems, with
    the directory it was found in; run as printed, it lists them."""
    import shlex
    import subprocess
    import sys

    from builders import REPO

    directory = tmp_path / "my stacks"
    directory.mkdir()
    (directory / "Pulumi.b1.yaml").write_text("config:\n  gpufabric:bogus: 1\n")
    listing = subprocess.run(
        [sys.executable, "-m", "gpufabric", "--stacks-dir", str(directory), "stacks"],
        capture_output=True, text=True, check=False, cwd=REPO,
    )  # fmt: skip
    assert listing.returncode == 2
    printed = listing.stdout.split("; run ", 1)[1].rsplit(")", 1)[0]
    argv = shlex.split(printed)
    assert argv[0] == "gpufabric"
    run = subprocess.run(
        [sys.executable, "-m", "gpufabric", *argv[1:]],
        capture_output=True, text=True, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 2
    assert "gpufabric:bogus" in run.stderr


def test_diff_against_a_ref_of_a_stack_outside_the_repository_says_what_to_give(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from builders import REPO

    stack = tmp_path / "Pulumi.s.yaml"
    stack.write_bytes((REPO / "stacks" / "Pulumi.kind-dev.yaml").read_bytes())
    assert main(["diff", "--stack", str(stack), "--base", "HEAD"]) == 2
    err = capsys.readouterr().err
    assert "is outside the repository" in err
    assert "an earlier render directory as --base" in err
    assert "subpath" not in err  # not Python's own words


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_stack_that_is_no_regular_file_is_said_as_such(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A FIFO or a directory named as the stack was "no such stack file": the user looked
    at a file that exists. Nothing is opened (a FIFO would block)."""
    stack = tmp_path / "Pulumi.lab.yaml"
    if kind == "fifo":
        os.mkfifo(stack)
    else:
        stack.mkdir()
    assert main(["validate", "--stack", str(stack)]) == 2
    err = capsys.readouterr().err
    assert "no such stack file" not in err
    assert "--stack: is a " + ("FIFO" if kind == "fifo" else "directory") in err


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        ([*NODES, "--via-cluster", "--probe-image"], "--probe-image"),
        (["verify", "storage", "--stack", "prod-ib", "--image"], "--image"),
        ([*HEALTH, "--probe-image"], "--probe-image"),
    ],
)
@pytest.mark.parametrize(
    ("image", "why"),
    [
        ("probe image:1", "is not an image reference"),
        (
            "public.ecr.aws/x/probe:1",
            "is pulled from public.ecr.aws, which this air-gapped stack has no mirror",
        ),
    ],
)
def test_every_image_flag_is_a_reference_through_the_mirrors(
    fake: FakeKube,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    flag: str,
    image: str,
    why: str,
) -> None:
    """`job --image` and `verify nccl --image` were checked and mirrored; the probe and
    storage images went unchecked into pod specs (pods stuck pulling on an air-gapped
    cluster until the timeout, or refused by the API after objects were created)."""
    if "lab-roce" in argv and "air-gapped" in why:
        argv = [a if a != "lab-roce" else "prod-ib" for a in argv]
    cfg = str(fake.kubeconfig(tmp_path))
    code = main([*argv, image, "--kubeconfig", cfg, "--context", "fake"])
    assert code == 2
    assert f"  - {flag}: {image!r} {why}" in capsys.readouterr().err
    assert [r for r in fake.requests if r[0] != "GET"] == []


@pytest.mark.parametrize(
    "argv",
    [
        ["runbook", "--stack", "lab-roce", "--out"],
        ["report", "--nodes", "docs/examples/report/nodes.json", "--out"],
        ["verify", "nodes", "--stack", "lab-roce", "--write-expect"],
    ],
)
def test_an_output_that_is_a_pipe_is_refused_without_waiting(
    argv: list[str], tmp_path: Path
) -> None:
    """`--out /dev/stdout` (or a FIFO) hung: checking what the file held opened it for
    reading, which waits for a writer (a terminal: for the keyboard)."""
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    done = subprocess.run(
        [sys.executable, "-m", "gpufabric", *argv, str(fifo)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert done.returncode == 2
    assert "is not a regular file (a device, pipe or terminal); name a file" in done.stderr


def test_stacks_dir_misplaced_or_missing_says_how(capsys: pytest.CaptureFixture[str]) -> None:
    """A new user put --stacks-dir after the command, named a directory that is not there,
    and named a stack kept elsewhere by its name alone: each message says what to type."""
    from gpufabric.cli import main

    with pytest.raises(SystemExit):
        main(["validate", "--stack", "x", "--stacks-dir", "/tmp"])
    assert "before the command: gpufabric --stacks-dir DIR COMMAND" in capsys.readouterr().err
    assert main(["--stacks-dir", "/nonexistent-gpufabric", "stacks"]) == 2
    assert "(no such directory)" in capsys.readouterr().err
    assert main(["validate", "--stack", "mycluster"]) == 2
    assert "give its path (--stack DIR/Pulumi.<name>.yaml)" in capsys.readouterr().err


def test_a_runbook_of_a_stack_outside_stacks_says_pulumi_reads_another_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The runbook's `pulumi up --stack NAME` reads stacks/Pulumi.NAME.yaml: for a file kept
    elsewhere, the command says so (a new user followed it with their own file)."""
    from builders import STACKS_DIR

    from gpufabric.cli import main

    own = tmp_path / "Pulumi.mine.yaml"
    own.write_text((STACKS_DIR / "Pulumi.lab-roce.yaml").read_text())
    assert main(["runbook", "--stack", str(own)]) == 0
    err = capsys.readouterr().err
    assert "is not in the project's stacks/" in err
    assert "read stacks/Pulumi.mine.yaml" in err
    assert main(["runbook", "--stack", "lab-roce"]) == 0
    assert "not in the project" not in capsys.readouterr().err
