"""Every command ends cleanly when it is stopped or its reader goes away: SIGTERM or SIGHUP
(a cancelled CI job, a closed terminal) and Ctrl-C run the command's cleanup and print one
line, never a traceback; a closed pipe ends it quietly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from builders import REPO

PROGRAM = [sys.executable, "-m", "gpufabric"]


def _wait_for_staging(parent: Path, proc: subprocess.Popen[bytes], within: float = 60) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and proc.poll() is None:
        if any(".gpufabric-staging-" in p.name for p in parent.iterdir()):
            return True
        time.sleep(0.002)
    return False


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_render_stopped_while_it_stages_leaves_the_previous_output_and_nothing_beside(
    tmp_path: Path, signum: int
) -> None:
    out = tmp_path / "out"
    render = [*PROGRAM, "render", "--stack", "prod-ib", "--out", str(out)]
    subprocess.run(render, cwd=REPO, check=True, capture_output=True)
    before = sorted(p.relative_to(out).as_posix() for p in out.rglob("*"))
    (out / "plan.json").write_text((out / "plan.json").read_text() + " ")  # tell old from new
    for _ in range(5):  # a render can finish before the signal lands: try again
        proc = subprocess.Popen(render, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        staged = _wait_for_staging(tmp_path, proc)
        if staged:
            proc.send_signal(signum)
        _, err = proc.communicate(timeout=120)
        if staged and proc.returncode != 0:
            break
    else:
        pytest.skip("every render finished before it could be stopped")
    expected = 130 if signum == signal.SIGINT else 128 + signum
    assert proc.returncode == expected
    assert b"Traceback" not in err
    word = "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
    assert err.decode().strip().splitlines()[-1] == f"gpufabric render: {word}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # nothing staged is left
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == before
    assert (out / "plan.json").read_text().endswith(" ")  # the previous output, untouched


@pytest.mark.parametrize("command", [["stacks"], ["plan", "--stack", "prod-ib"], ["runbook", "--stack", "prod-ib"]])  # fmt: skip
def test_a_reader_that_went_away_ends_the_command_quietly(command: list[str]) -> None:
    """``gpufabric stacks | head -1``: the reader closed the pipe; the command stops with
    141 (as a shell reports SIGPIPE) and prints nothing about it."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line
    try:
        proc = subprocess.run(
            [*PROGRAM, *command], cwd=REPO, stdout=write, stderr=subprocess.PIPE, check=False
        )
    finally:
        os.close(write)
    assert proc.returncode == 141
    assert proc.stderr == b""
