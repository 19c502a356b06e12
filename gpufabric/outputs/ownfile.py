"""A file a command writes where a person points it (``runbook --out``, ``report --out``,
``verify --junit``, ``verify nodes --write-expect``): its missing directories created, written
atomically, and an existing file replaced only when the same command wrote it (or it is
empty): never the stack file, a README or the command's own input."""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from gpufabric.outputs.render import OutputError, write_file

Written = Callable[[bytes], bool]
"""Whether a file's first 4 KiB are what the command writes."""


def marked(marker: str) -> Written:
    """A command whose files carry ``marker`` in their first lines."""
    return lambda head: marker.encode() in head


def creatable(path: Path) -> list[Path]:
    """The directories that writing ``path`` creates (its missing parents, outermost first);
    OutputError (exit 2) naming ``path`` when it cannot be written there: a parent that is
    a file, a directory where no file can be created (permissions, a read-only or special
    file system). Nothing is left behind by the check."""
    missing: list[Path] = []
    existing = path.parent
    while not existing.exists() and existing != existing.parent:
        missing.insert(0, existing)
        existing = existing.parent
    if not existing.is_dir():
        raise OutputError(f"{path}: {existing} is a file, not a directory")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".gpufabric-probe-", dir=existing))
    except OSError as err:
        why = _UNWRITABLE.get(err.errno or 0, err.strerror or str(err))
        raise OutputError(f"{path}: nothing can be created in {existing} ({why})") from None
    return missing


_UNWRITABLE = {
    errno.EACCES: "permission denied",
    errno.EPERM: "not permitted",
    errno.EROFS: "read-only file system",
    errno.ENOENT: "a special file system that holds no files of ours",
}


def check_ours(path: Path, written: Written, command: str, flag: str = "--out") -> None:
    """OutputError (exit 2) when ``path`` is a file with content that ``command`` did not
    write: the stack file, a README, the report's own input."""
    try:  # never blocks: /dev/stdout, a FIFO or a terminal is refused, not read
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return  # new, or refused by the write (not a file; a file in its path)
    except OSError as err:
        raise OutputError(
            f"{path}: cannot be read to check what it holds ({err.strerror})"
        ) from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            stdout = f", or leave {flag} out to print to stdout" if flag == "--out" else ""
            raise OutputError(
                f"{path} is not a regular file (a device, pipe or terminal); name a file{stdout}"
            )
        head = f.read(4096)
    if head.strip() and not written(head):
        raise OutputError(
            f"{path} exists and was not written by gpufabric {command}: {flag} replaces only "
            f"a file an earlier `gpufabric {command}` wrote; choose a new file or move it away"
        )


def writable(path: Path, written: Written, command: str, flag: str = "--out") -> list[Path]:
    """Both checks before any work: ``path`` may be replaced and can be created; the
    directories writing it creates."""
    check_ours(path, written, command, flag)
    return creatable(path)


def write_out(
    path: Path, text: str, written: Written, command: str, flag: str = "--out"
) -> list[Path]:
    """Write ``path`` atomically once both checks pass again (the file may have changed
    since the command started); the directories it created."""
    created = writable(path, written, command, flag)
    write_file(path, text)
    return created


__all__ = ["Written", "check_ours", "creatable", "marked", "writable", "write_out"]
