"""Work kept between runs: ``$XDG_CACHE_HOME/gpufabric`` (default ``~/.cache/gpufabric``).

Only what is expensive to recompute and fully determined by its key is kept (compiled
templates, CRD schemas converted for validation), so a cache never changes an output: a
missing, damaged or unwritable entry is recomputed, and deleting the directory is always
safe. The directories are created private (0700) and refused when another user owns them or
could write them, since what is read back drives validation or runs as template code.
"""

from __future__ import annotations

import contextlib
import json
import os
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
        return json.loads((directory / f"{key}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def write_json(name: str, key: str, value: Any) -> None:
    """Store ``value`` under ``key`` atomically; a failure only means no cache."""
    directory = cache_dir(name)
    if directory is None:
        return
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{key}.", dir=directory)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(value, f, separators=(",", ":"))
        os.replace(tmp, directory / f"{key}.json")
        tmp = None
    except OSError:
        pass
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
