"""The resume contract's checkpoint helper (examples/train/checkpoint.py), without torch: a
restarted job takes the newest complete checkpoint and never a partial one, whatever moment
the writer was killed at; a torn, truncated or corrupt newest one falls back to the one
before; steps order checkpoints (file times do not); only rank 0 writes; the newest ``keep``
are kept."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from conftest import REPO

TRAIN = REPO / "examples" / "train"
sys.path.insert(0, str(TRAIN))

from checkpoint import CheckpointDir, CheckpointError  # noqa: E402


def payload(step: int) -> bytes:
    """Content that tells a whole checkpoint from any prefix of it (256 KiB per step)."""
    return (f"step {step};".encode() * 30_000)[: 256 * 1024]


def quiet(path: Path, **kw: int) -> tuple[CheckpointDir, list[str]]:
    lines: list[str] = []
    return CheckpointDir(path, log=lines.append, **kw), lines


def read(ckpt: CheckpointDir) -> tuple[int, bytes] | None:
    found = ckpt.latest()
    return None if found is None else (found.step, found.path.read_bytes())


def test_an_empty_or_missing_directory_is_a_fresh_start(tmp_path: Path) -> None:
    assert quiet(tmp_path / "absent")[0].latest() is None
    assert quiet(tmp_path)[0].latest() is None


def test_a_directory_with_only_temporary_files_is_a_fresh_start(tmp_path: Path) -> None:
    (tmp_path / ".tmp-step-000000000100-0123456789abcdef.ckpt").write_bytes(payload(100))
    (tmp_path / ".tmp-step-000000000100-0123456789abcdef.json").write_text("{")
    (tmp_path / "step-000000000100-0123456789abcdef.ckpt").write_bytes(payload(100))
    assert quiet(tmp_path)[0].latest() is None


def _manifest(path: Path, step: int) -> Path:
    return path / f"step-{step:012d}.json"


@pytest.mark.parametrize(
    "damage",
    [
        "truncated payload",
        "flipped byte",
        "missing payload",
        "torn manifest",
        "manifest of another step",
        "manifest naming another step's payload",
        "manifest naming a file outside the directory",
    ],
)
def test_a_damaged_latest_falls_back_to_the_one_before(tmp_path: Path, damage: str) -> None:
    ckpt, lines = quiet(tmp_path, keep=5)
    for step in (100, 200, 300):
        ckpt.save_bytes(step, payload(step))
    doc = json.loads(_manifest(tmp_path, 300).read_text())
    newest = tmp_path / doc["file"]
    if damage == "truncated payload":
        newest.write_bytes(payload(300)[:1000])
    elif damage == "flipped byte":
        data = bytearray(newest.read_bytes())
        data[5000] ^= 1
        newest.write_bytes(bytes(data))
    elif damage == "missing payload":
        newest.unlink()
    elif damage == "torn manifest":
        _manifest(tmp_path, 300).write_text(_manifest(tmp_path, 300).read_text()[:40])
    elif damage == "manifest of another step":
        _manifest(tmp_path, 300).write_text(json.dumps({**doc, "step": 200}))
    elif damage == "manifest naming another step's payload":
        other = json.loads(_manifest(tmp_path, 200).read_text())
        _manifest(tmp_path, 300).write_text(json.dumps({**other, "step": 300}))
    else:
        (tmp_path.parent / "evil.ckpt").write_bytes(payload(300))
        _manifest(tmp_path, 300).write_text(json.dumps({**doc, "file": "../evil.ckpt"}))
    assert read(ckpt) == (200, payload(200))
    assert len(lines) == 1
    assert lines[0].startswith("checkpoint: skipped step 300: ")


def test_steps_order_checkpoints_not_file_times(tmp_path: Path) -> None:
    """A node whose clock is behind wrote the newer checkpoint with older times."""
    ckpt, _ = quiet(tmp_path, keep=5)
    for step in (9, 10, 100):
        ckpt.save_bytes(step, payload(step))
    for name in os.listdir(tmp_path):
        step = int(name[5:17])
        os.utime(tmp_path / name, (1e9 - step, 1e9 - step))  # newer steps look older
    assert read(ckpt) == (100, payload(100))


def test_the_newest_keep_checkpoints_are_kept(tmp_path: Path) -> None:
    ckpt, _ = quiet(tmp_path, keep=2)
    (tmp_path).mkdir(exist_ok=True)
    (tmp_path / ".tmp-step-000000000001-0123456789abcdef.ckpt").write_bytes(b"x")  # a crash
    for step in range(10, 60, 10):
        ckpt.save_bytes(step, payload(step))
    names = sorted(os.listdir(tmp_path))
    assert [n for n in names if n.endswith(".json")] == [
        "step-000000000040.json",
        "step-000000000050.json",
    ]
    assert len([n for n in names if n.endswith(".ckpt")]) == 2  # no leftovers
    assert read(ckpt) == (50, payload(50))


def test_a_run_resumed_from_an_older_step_keeps_what_it_writes(tmp_path: Path) -> None:
    """Step 300 is corrupt, the run resumed from 200 and saved 210: retention counts from
    the step just saved, so the one good newest checkpoint is never pruned for a bad one."""
    ckpt, _ = quiet(tmp_path, keep=1)
    ckpt.save_bytes(200, payload(200))
    ckpt2, _ = quiet(tmp_path, keep=5)
    ckpt2.save_bytes(300, payload(300))
    doc = json.loads(_manifest(tmp_path, 300).read_text())
    (tmp_path / doc["file"]).write_bytes(b"torn")
    assert read(ckpt) == (200, payload(200))
    ckpt.save_bytes(210, payload(210))
    assert read(ckpt) == (210, payload(210))
    ckpt.save_bytes(300, payload(300))  # the run gets there again and replaces it whole
    assert read(ckpt) == (300, payload(300))


def test_only_rank_0_writes(tmp_path: Path) -> None:
    for rank in (1, 2, 7):
        ckpt, _ = quiet(tmp_path / "d", rank=rank)
        assert ckpt.save(10, lambda f: f.write(b"x")) is None
    assert not (tmp_path / "d").exists()


def test_bad_settings_say_what_is_accepted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(CheckpointError, match="keep: 0 is not a number of checkpoints >= 1"):
        CheckpointDir(tmp_path, keep=0)
    monkeypatch.setenv("GPUFABRIC_CHECKPOINT_DIR", "relative/dir")
    with pytest.raises(CheckpointError, match="GPUFABRIC_CHECKPOINT_DIR='relative/dir'"):
        CheckpointDir.from_env()
    monkeypatch.delenv("GPUFABRIC_CHECKPOINT_DIR")
    with pytest.raises(CheckpointError, match="expected an absolute directory"):
        CheckpointDir.from_env()
    with pytest.raises(CheckpointError, match="step: -1"):
        CheckpointDir(tmp_path).save_bytes(-1, b"")


def test_a_failing_writer_leaves_nothing_behind(tmp_path: Path) -> None:
    ckpt, _ = quiet(tmp_path)
    ckpt.save_bytes(1, payload(1))

    def broken(f: object) -> None:
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        ckpt.save(2, broken)  # type: ignore[arg-type]
    assert sorted(n[:18] for n in os.listdir(tmp_path)) == [
        "step-000000000001-",
        "step-000000000001.",
    ]
    assert read(ckpt) == (1, payload(1))


# --------------------------------------------------------------- killed at every moment

KILLER = textwrap.dedent(
    """
    import os, signal, sys
    sys.path.insert(0, sys.argv[1])
    import checkpoint

    crash_at, counter = int(sys.argv[3]), [0]

    def point():
        counter[0] += 1
        if counter[0] == crash_at:
            os.kill(os.getpid(), signal.SIGKILL)

    def wrap(fn):
        def inner(*a, **kw):
            point()
            return fn(*a, **kw)
        return inner

    for name in ("fsync", "replace", "unlink", "open", "close", "mkdir"):
        setattr(os, name, wrap(getattr(os, name)))

    def write(f):
        data = sys.stdin.buffer.read()
        for i in range(0, len(data), 65536):  # a crash between any two chunks tears the file
            point()
            f.write(data[i : i + 65536])
            f.flush()

    checkpoint.CheckpointDir(sys.argv[2], keep=2).save(int(sys.argv[4]), write)
    point()
    print("crash points:", counter[0])
    """
)


def _save_killed_at(directory: Path, crash_at: int, step: int) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-c", KILLER, str(TRAIN), str(directory), str(crash_at), str(step)]
    return subprocess.run(argv, input=payload(step).decode(), capture_output=True, text=True)


def test_a_writer_killed_at_any_syscall_never_leaves_a_partial_checkpoint(
    tmp_path: Path,
) -> None:
    """SIGKILL before each file-system call and between the payload's chunks of one save
    (write, fsync, rename, directory fsync, manifest, pruning): a restart takes the previous
    checkpoint or the new one, whole, never a prefix; the next save works."""
    outcomes: set[int] = set()
    crash_at = 1
    while True:
        directory = tmp_path / f"k{crash_at}"
        ckpt, _ = quiet(directory, keep=2)
        for step in (10, 20):
            ckpt.save_bytes(step, payload(step))
        done = _save_killed_at(directory, crash_at, 30)
        found = read(ckpt)
        assert found in ((20, payload(20)), (30, payload(30))), (crash_at, found)
        outcomes.add(found[0])  # type: ignore[index]
        ckpt.save_bytes(40, payload(40))  # the restarted job goes on
        assert read(ckpt) == (40, payload(40))
        if done.returncode == 0:
            break
        assert done.returncode == -signal.SIGKILL, done.stderr
        crash_at += 1
        assert crash_at < 60, "the writer never finished"
    assert int(done.stdout.split()[-1]) == crash_at - 1  # every point was a crash once
    assert outcomes == {20, 30}  # killed both before and after the commit


def test_readers_see_only_complete_checkpoints_while_rank_0_writes(tmp_path: Path) -> None:
    """The other ranks (threads here) read while rank 0 saves step after step."""
    writer, _ = quiet(tmp_path, keep=2)
    writer.save_bytes(1, payload(1))
    seen: list[tuple[int, bytes] | None] = []
    stop = threading.Event()

    errors: list[BaseException] = []

    def reader() -> None:
        ckpt, _ = quiet(tmp_path, rank=1)
        while not stop.is_set():
            try:
                seen.append(read(ckpt))
            except FileNotFoundError:
                seen.append(None)  # pruned between listing and reading: never partial
            except BaseException as e:
                errors.append(e)
                return

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for step in range(2, 40):
        writer.save_bytes(step, payload(step))
    stop.set()
    for t in threads:
        t.join()
    assert not errors
    assert seen
    for found in seen:
        # a reader may find nothing when pruning removed what it listed a moment before
        assert found is None or found == (found[0], payload(found[0]))


def test_two_writers_of_the_same_step_never_mix(tmp_path: Path) -> None:
    """A pod the node lost may still write while its replacement does: each manifest names
    its own payload, so the step read back is one writer's, whole."""
    a, _ = quiet(tmp_path)
    b, _ = quiet(tmp_path)
    a.save_bytes(5, payload(5))
    b.save_bytes(5, payload(5)[::-1])
    assert read(a) == (5, payload(5)[::-1])
