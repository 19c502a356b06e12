"""The example entrypoint (examples/train/ddp_resume.py) follows the resume contract, tested
without torch: a run SIGKILLed anywhere (mid-step, mid-checkpoint) and restarted resumes from
its last complete checkpoint, logs ``resumed from step N`` and ends in the state an
uninterrupted run ends in; without its directory or without PyTorch it says so and exits 2."""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import REPO

TRAIN = REPO / "examples" / "train"

# A deterministic "model" in plain Python: its state after step N depends on every step
# before, so resuming from a wrong or partial checkpoint ends in another state.
DRIVER = textwrap.dedent(
    """
    import json, os, signal, sys
    sys.path.insert(0, sys.argv[1])
    import ddp_resume
    from checkpoint import CheckpointDir

    kill_step, kill_chunk = int(sys.argv[3]), int(sys.argv[4])

    class Model:
        state = 1

        def train_step(self, step):
            if step == kill_step and kill_chunk < 0:
                os.kill(os.getpid(), signal.SIGKILL)  # dies mid-step
            self.state = (self.state * 6364136223846793005 + step) % (1 << 61)
            return float(self.state % 1000)

        def save(self, f):
            data = json.dumps({"state": self.state}).encode() * 2000
            for i in range(0, len(data), 4096):
                if kill_chunk >= 0 and i // 4096 == kill_chunk and STEP[0] == kill_step:
                    os.kill(os.getpid(), signal.SIGKILL)  # dies mid-checkpoint
                f.write(data[i : i + 4096])
                f.flush()

        def load(self, path):
            text = open(path, "rb").read()
            self.state = json.loads(text[: len(text) // 2000])["state"]

    STEP = [0]
    model = Model()
    real_step = model.train_step
    def counted(step):
        STEP[0] = step
        return real_step(step)
    model.train_step = counted
    ckpt = CheckpointDir(sys.argv[2], keep=2)
    ddp_resume.run(ckpt, model, steps=40, save_every=5)
    print("final", model.state)
    """
)


def drive(
    directory: Path, kill_step: int = 0, kill_chunk: int = -1
) -> subprocess.CompletedProcess[str]:
    argv = [
        sys.executable,
        "-c",
        DRIVER,
        str(TRAIN),
        str(directory),
        str(kill_step),
        str(kill_chunk),
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def final(done: subprocess.CompletedProcess[str]) -> int:
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split("final ")[-1])


@pytest.mark.parametrize(
    ("kill_step", "kill_chunk", "resumed"),
    [
        (23, -1, 20),  # killed mid-step: steps 21-22 are lost, 20 was saved
        (25, -1, 20),  # killed in the step that would have been saved
        (25, 0, 20),  # killed writing the first bytes of step 25's checkpoint
        (25, 3, 20),  # killed half-way through it
        (6, -1, 5),
        (3, -1, 0),  # nothing saved yet: a fresh start
    ],
)
def test_a_killed_run_resumes_from_its_last_complete_checkpoint(
    tmp_path: Path, kill_step: int, kill_chunk: int, resumed: int
) -> None:
    expected = final(drive(tmp_path / "clean"))
    killed = drive(tmp_path / "job", kill_step, kill_chunk)
    assert killed.returncode == -9
    restarted = drive(tmp_path / "job")
    assert final(restarted) == expected
    if resumed:
        assert f"rank 0: resumed from step {resumed} ({tmp_path / 'job'})" in restarted.stdout
    else:
        assert "rank 0: no complete checkpoint in" in restarted.stdout
    assert "starting from step 0" in killed.stdout
    # the killed checkpoint's temporary file is gone once retention passed its step
    names = sorted(n[:18] for n in os.listdir(tmp_path / "job"))
    assert names == [f"step-0000000000{s}{c}" for s in (35, 40) for c in "-."]


def test_a_finished_run_restarted_trains_nothing_more(tmp_path: Path) -> None:
    expected = final(drive(tmp_path))
    again = drive(tmp_path)
    assert final(again) == expected
    assert "resumed from step 40" in again.stdout
    assert "saved step" not in again.stdout


def test_the_helper_and_the_example_import_without_torch() -> None:
    code = (
        f"import sys; sys.path.insert(0, {str(TRAIN)!r}); sys.modules['torch'] = None\n"
        "import checkpoint, ddp_resume\nprint('ok')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout == "ok\n", done.stderr


@pytest.mark.parametrize(
    ("env", "argv", "message"),
    [
        ({}, [], "ddp_resume: GPUFABRIC_CHECKPOINT_DIR='': expected an absolute directory"),
        ({"GPUFABRIC_CHECKPOINT_DIR": "/ckpt"}, [], "ddp_resume: needs PyTorch"),
        ({"GPUFABRIC_CHECKPOINT_DIR": "/ckpt"}, ["--keep", "0"], "--keep: 0 is not a number >= 1"),
    ],
)
def test_the_entrypoint_refuses_what_it_cannot_run(
    env: dict[str, str], argv: list[str], message: str
) -> None:
    """Without torch on this machine (a fake empty torch stands in where it is installed)."""
    clean = {k: v for k, v in os.environ.items() if k != "GPUFABRIC_CHECKPOINT_DIR"}
    code = (
        "import sys, runpy; sys.modules['torch'] = None; "
        f"sys.argv = [{str(TRAIN / 'ddp_resume.py')!r}, *{argv!r}]; "
        f"sys.path.insert(0, {str(TRAIN)!r}); runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**clean, **env}
    )
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert re.search(r"\S", done.stdout) is None


def _runbook_check_line() -> str:
    """The by-hand check as the runbook prints it (prod-ib's "Resume after failure")."""
    from gpufabric.cli import main

    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert main(["runbook", "--stack", "prod-ib"]) == 0
    section = out.getvalue().split("## Resume after failure")[1].split("\n## ")[0]
    (line,) = [ln for ln in section.splitlines() if ln.startswith("python3 checkpoint.py")]
    return line


def test_the_runbooks_by_hand_check_names_the_checkpoint_a_restart_takes(tmp_path: Path) -> None:
    """The runbook's in-pod check, run in the example's directory (the pod's working
    directory) with the job's variable: the newest complete step and each newer one it
    skips; exit 1 with none."""
    env = {**os.environ, "GPUFABRIC_CHECKPOINT_DIR": str(tmp_path / "job")}
    line = _runbook_check_line()

    def check() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", line], cwd=TRAIN, env=env, capture_output=True, text=True
        )

    empty = check()
    assert empty.returncode == 1
    assert "no complete checkpoint in" in empty.stdout
    assert drive(tmp_path / "job", 23).returncode == -9  # saved 5..20, killed at 23
    (tmp_path / "job" / "step-000000000020.json").write_text("{")  # torn
    done = check()
    assert done.returncode == 0, done.stderr
    assert "checkpoint: skipped step 20: " in done.stdout
    assert done.stdout.splitlines()[-1].startswith("latest complete checkpoint: step 15 (")
