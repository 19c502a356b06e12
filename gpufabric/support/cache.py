"""Work kept between runs: ``$XDG_CACHE_HOME/gpufabric`` (default ``~/.cache/gpufabric``).

Caches hold data, never code: only what is expensive to recompute and fully determined by
its key is kept (the CRD schemas converted for validation, as JSON), so a cache never
changes an output: a missing, damaged, foreign or unwritable entry is recomputed, and
deleting the directory is always safe. The directories are created private (0700) and
refused when another user owns them or could write them; each entry is read only when it
is a regular file of ours that nobody else could write and that has no other name (a hard
link planted from elsewhere), opened without following a symbolic link.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any


def _private(path: Path) -> bool:
    st = path.stat()
    if not hasattr(os, "getuid"):
        return True
    return st.st_uid == os.getuid() and not st.st_mode & 0o022


def cache_dir(name: str) -> Path | None:
    """``<cache>/gpufabric/<name>``, created if needed, when it is ours and private; None
    when there is no such place (no home, read-only, not a directory, someone else's)."""
    try:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        root = Path(base) / "gpufabric"
        directory = root / name
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            root.chmod(0o700)  # created by mkdir's parents=True with the umask's mode
        if not (_private(root) and _private(directory)):
            return None
    except (OSError, RuntimeError):
        return None
    return directory


def read_json(name: str, key: str) -> Any | None:
    """The value stored under ``key``, or None (absent, unreadable, damaged)."""
    directory = cache_dir(name)
    if directory is None:
        return None
    try:
        fd = os.open(directory / f"{key}.json", os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            if not _own_entry(os.fstat(f.fileno())):
                return None
            return json.loads(f.read().decode("utf-8"))
    except (OSError, ValueError):
        return None


def _own_entry(st: os.stat_result) -> bool:
    """A regular file this user wrote, that nobody else could change, with one name."""
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_mode & 0o022:
        return False
    return not hasattr(os, "getuid") or st.st_uid == os.getuid()


def write_json(name: str, key: str, value: Any) -> None:
    """Store ``value`` under ``key`` atomically; a failure only means no cache."""
    directory = cache_dir(name)
    if directory is None:
        return
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{key}.", dir=directory)
        # json.dumps, not json.dump: dump streams through the pure-Python encoder (seconds
        # for the megabytes of converted CRD schemas), dumps runs the C one.
        text = json.dumps(value, separators=(",", ":"))
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, directory / f"{key}.json")
        tmp = None
    except OSError:
        pass
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
