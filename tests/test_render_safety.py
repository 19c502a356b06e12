"""`render --out` under a careless user and an attacker: it replaces only what an earlier
render recorded, never writes through links or onto mount points, serializes concurrent
renders, and a reader sees the previous tree or the new one whole, a SIGKILL at any point
of a render included. `diff --base` never lets a user's value reach git as an option."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from builders import example_config, plan_of

from gpufabric.cli import main
from gpufabric.outputs import render as render_module
from gpufabric.outputs.render import MARKER, render_files, write_tree

REPO = Path(__file__).resolve().parents[1]


def render(out: Path | str, stack: str = "kind-dev") -> int:
    return main(["render", "--stack", stack, "--out", str(out)])


def tree(directory: Path) -> dict[str, bytes]:
    return {
        p.relative_to(directory).as_posix(): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file() or p.is_symlink()
    }


def whole(out: Path) -> bool:
    """What a reader checks: plan.json is there and every file it lists too."""
    try:
        doc = json.loads((out / "plan.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return all((out / f).is_file() for item in doc["items"] for f in item["files"])


def beside(out: Path) -> list[str]:
    return sorted(p.name for p in out.parent.iterdir() if p.name != out.name)


@pytest.fixture(scope="module")
def files() -> dict[str, str]:
    return render_files(plan_of(example_config("kind-dev"), "kind-dev"))


def variant(files: Mapping[str, str], tag: str) -> dict[str, str]:
    """The same files with other contents (plan.json kept parseable)."""
    return {k: v if k == "plan.json" else f"{v}# {tag}\n" for k, v in files.items()}


# ------------------------------------------------------------------ what a render replaces


def test_a_git_and_notes_added_after_a_render_are_refused_and_kept(
    tmp_path: Path, capsys: Any
) -> None:
    """Once a directory held a render, the next one replaced it whole: a .git and notes the
    user added were deleted with exit 0. Now only what the earlier render recorded may go."""
    out = tmp_path / "out"
    assert render(out) == 0
    (out / ".git").mkdir()
    (out / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (out / "NOTES.md").write_text("why we pinned 0.19")
    (out / "objects" / "mine.yaml").write_text("a: 1\n")
    before = tree(out)
    capsys.readouterr()
    assert render(out) == 2
    err = capsys.readouterr().err
    for entry in (".git/", "NOTES.md", "objects/mine.yaml"):
        assert entry in err
    assert "HEAD" not in err  # a foreign directory is named, not listed
    assert tree(out) == before
    assert beside(out) == []


def test_the_record_lets_a_rerender_replace_exactly_what_it_wrote(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert render(out, "lab-roce") == 0
    record = json.loads((out / MARKER).read_text())
    assert record["files"] == sorted(f for f in tree(out) if f != MARKER)
    (out / "plan.json").unlink()  # a file the render wrote and the user removed
    assert render(out) == 0  # another stack: lab-roce's files are its to replace
    assert whole(out)
    assert json.loads((out / MARKER).read_text())["stack"] == "kind-dev"


# ------------------------------------------------------------------------- paths


def test_a_symlinked_parent_is_refused_and_nothing_is_written_through_it(
    tmp_path: Path, capsys: Any
) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    assert render(tmp_path / "link" / "out") == 2
    assert "link is a symbolic link" in capsys.readouterr().err
    assert list(real.iterdir()) == []


def _unshare_available() -> bool:
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True, check=False)
    return probe.returncode == 0


@pytest.mark.skipif(not _unshare_available(), reason="needs unshare -rm (user namespaces)")
@pytest.mark.parametrize("mount", ["tmpfs", "bind"])
def test_a_mount_point_is_refused_cleanly(tmp_path: Path, mount: str) -> None:
    """An empty mount point as --out failed with EBUSY and left a staging directory."""
    out = tmp_path / "mnt"
    out.mkdir()
    source = tmp_path / "src"
    source.mkdir()
    how = f"mount -t tmpfs none {out}" if mount == "tmpfs" else f"mount --bind {source} {out}"
    script = (
        f'{how} && "$1" -c "from gpufabric.cli import main; import sys; '
        f"sys.exit(main(['render', '--stack', 'kind-dev', '--out', '{out}']))\"; "
        f"echo rc=$?; ls -A {out}"
    )
    proc = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script, "sh", sys.executable],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
        timeout=120,
    )
    assert "rc=2" in proc.stdout, proc.stdout + proc.stderr
    assert "is a mount point" in proc.stderr
    assert proc.stdout.strip().endswith("rc=2")  # nothing written into it
    assert beside(out) == ["src"]  # no staging directory left


# ------------------------------------------------------------------------- diff --base


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
@pytest.mark.parametrize("option", ["--output={}", "-o{}", "--remote=file://{}"])
def test_diff_base_never_reaches_git_as_an_option(
    option: str, tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--base=--output=FILE`` reached ``git archive`` as an option and truncated FILE."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    monkeypatch.chdir(REPO)
    base = option.format(victim)
    code = main(["diff", "--stack", "kind-dev", f"--base={base}"])
    assert victim.read_text() == "precious"
    assert code == 2
    assert "may not be empty, start with '-'" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_diff_base_must_name_one_commit(capsys: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    for base in ("no-such-ref-xyz", "HEAD:stacks", "HEAD\n--output=x"):
        assert main(["diff", "--stack", "kind-dev", "--base", base]) == 2
        assert "git" in capsys.readouterr().err


# --------------------------------------------------------------- concurrency, signals


def _fork(work: Callable[[], None]) -> int:
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            work()
            code = 0
        finally:
            os._exit(code)
    return pid


CONCURRENT_PAIRS = 100


def test_concurrent_renders_take_turns_and_a_reader_never_sees_a_part(
    tmp_path: Path, files: dict[str, str]
) -> None:
    """Two renders into one --out at once: one failed with 'Directory not empty', the other
    left hundreds of the files its own plan.json lists missing."""
    out = tmp_path / "out"
    a, b = variant(files, "a"), variant(files, "b")
    write_tree(a, out)
    looks = partial = 0
    for _ in range(CONCURRENT_PAIRS):
        pids = [_fork(lambda: write_tree(a, out)), _fork(lambda: write_tree(b, out))]
        codes: dict[int, int] = {}
        while len(codes) < 2:
            looks += 1
            partial += not whole(out)
            for pid in pids:
                if pid not in codes:
                    done, status = os.waitpid(pid, os.WNOHANG)
                    if done:
                        codes[pid] = os.waitstatus_to_exitcode(status)
        assert list(codes.values()) == [0, 0]
        assert content(out) in (tree_of(a), tree_of(b))
        assert beside(out) == []
    print(f"{CONCURRENT_PAIRS} concurrent pairs, {looks} reads, {partial} partial trees")
    assert partial == 0


def tree_of(files: Mapping[str, str]) -> dict[str, bytes]:
    """What write_tree leaves for ``files``, the marker aside."""
    return {k: v.encode() for k, v in files.items()}


def content(out: Path) -> dict[str, bytes]:
    return {k: v for k, v in tree(out).items() if k != MARKER}


def test_two_real_renders_at_once_both_succeed_whole(tmp_path: Path) -> None:
    out = tmp_path / "out"
    cli = "import sys; from gpufabric.cli import main; sys.exit(main(sys.argv[1:]))"
    cmd = [sys.executable, "-c", cli, "render", "--stack", "kind-dev", "--out", str(out)]
    for _ in range(2):
        procs = [
            subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            for _ in range(2)
        ]
        for proc in procs:
            _, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err.decode()
        assert whole(out)
        assert beside(out) == []


def _kill_at(n: int) -> None:
    """In a child: SIGKILL itself at the n-th step of a render (each file written, each
    rename, each tree removed, before and after)."""
    steps = {"done": 0}

    def step() -> None:
        steps["done"] += 1
        if steps["done"] == n:
            os.kill(os.getpid(), signal.SIGKILL)

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            step()
            result = fn(*args, **kwargs)
            step()
            return result

        return wrapped

    render_module._create = wrap(render_module._create)  # type: ignore[method-assign]
    render_module._link_if_same = wrap(render_module._link_if_same)  # type: ignore[method-assign]
    render_module._rename2 = wrap(render_module._rename2)  # type: ignore[method-assign]
    os.rename = wrap(os.rename)  # type: ignore[method-assign]
    os.mkdir = wrap(os.mkdir)  # type: ignore[method-assign]
    shutil.rmtree = wrap(shutil.rmtree)  # type: ignore[method-assign]


@pytest.mark.parametrize("swap", ["exchange", "fallback"])
def test_a_render_killed_at_any_step_leaves_a_whole_tree_or_one_the_next_render_recovers(
    swap: str, tmp_path: Path, files: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGKILL between the two renames left no output until the next render. With the
    atomic exchange the output is whole after a kill at every step; with the fallback
    (no renameat2) it is whole or missing, and the next render puts the previous one back."""
    if swap == "exchange" and render_module._renameat2() is None:
        pytest.skip("no renameat2 here")
    small = {k: v for i, (k, v) in enumerate(sorted(files.items())) if i < 12 or k == "plan.json"}
    small["plan.json"] = json.dumps({"items": [{"files": [k for k in small if k != "plan.json"]}]})
    old, new = variant(small, "old"), variant(small, "new")
    out = tmp_path / "out"
    gaps = kills = 0
    for n in range(1, 1000):
        shutil.rmtree(tmp_path)
        tmp_path.mkdir()
        write_tree(old, out)

        def child(n: int = n) -> None:
            if swap == "fallback":
                render_module._renameat2.cache_clear()
                monkeypatch.setattr(render_module, "_renameat2", lambda: None)
            _kill_at(n)
            write_tree(new, out)

        _, status = os.waitpid(_fork(child), 0)
        if os.waitstatus_to_exitcode(status) == 0:
            break  # n is past the last step: the render finished
        assert os.waitstatus_to_exitcode(status) == -signal.SIGKILL
        kills += 1
        if swap == "exchange" or out.exists():
            assert content(out) in (tree_of(old), tree_of(new)), f"step {n}"
        else:
            gaps += 1
        if swap == "fallback":
            monkeypatch.setattr(render_module, "_renameat2", lambda: None)
        write_tree(new, out)  # the next render recovers
        monkeypatch.undo()
        assert content(out) == tree_of(new), f"step {n}"
        assert beside(out) == [], f"step {n}"
    else:
        pytest.fail("the render never finished")
    print(f"{swap}: killed at {kills} steps, {gaps} left the output missing until the next")
    assert kills > 20
    assert (gaps == 0) if swap == "exchange" else (gaps > 0)


def test_a_reader_waits_for_no_lock_and_a_stuck_render_times_out_clearly(
    tmp_path: Path, files: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    write_tree(files, out)
    monkeypatch.setattr(render_module, "LOCK_WAIT_S", 0.3)
    ready = tmp_path / "ready"

    def hold() -> None:
        import fcntl

        fd = os.open(tmp_path, os.O_RDONLY)
        fcntl.flock(fd, fcntl.LOCK_EX)
        ready.write_text("")
        time.sleep(5)

    pid = _fork(hold)
    try:
        while not ready.exists():
            time.sleep(0.01)
        assert whole(out)  # readers take no lock
        with pytest.raises(render_module.OutputError, match="another render"):
            write_tree(variant(files, "x"), out)
        assert content(out) == tree_of(files)
        assert beside(out) == ["ready"]
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


@pytest.mark.parametrize("mask", [0o022, 0o027])
def test_outputs_get_the_modes_the_umask_gives_not_owner_only(tmp_path: Path, mask: int) -> None:
    """A render's directory and a written file (runbook, job) are readable as the user's
    umask says (a CI artifact, a shared docs tree), not 0700/0600 from the temp helpers."""
    old = os.umask(mask)
    try:
        assert render_module.umask() == mask
        out = tmp_path / "out"
        assert main(["render", "--stack", "lab-roce", "--out", str(out)]) == 0
        runbook = tmp_path / "rb.md"
        assert main(["runbook", "--stack", "lab-roce", "--out", str(runbook)]) == 0
    finally:
        os.umask(old)
    assert out.stat().st_mode & 0o777 == 0o777 & ~mask
    assert runbook.stat().st_mode & 0o777 == 0o666 & ~mask
    some = next(p for p in out.rglob("*.yaml"))
    assert some.stat().st_mode & 0o777 == 0o666 & ~mask
