"""The checkpoint resume contract of gpufabric's jobs, in plain Python (no torch needed).

Every job ``gpufabric job`` writes tells its pods one directory, ``GPUFABRIC_CHECKPOINT_DIR``
(``<checkpoints mount>/<kind>/<job name>``), the same for every pod and every restart. In it:

- a checkpoint of step N is a payload file ``step-<N>-<token>.ckpt`` and a manifest
  ``step-<N>.json`` naming that file, its size and its SHA-256;
- the payload is written under a temporary name (``.tmp-...``) in the same directory, fsynced,
  renamed into place; then the manifest the same way, and the directory is fsynced after each
  rename. The manifest's rename is the commit: a checkpoint without one does not exist;
- on start, the newest step (by its number, never by file times) whose manifest parses and whose
  payload has the recorded size and checksum wins; a torn, truncated or corrupt one is skipped
  with a message naming it, and the one before it is taken;
- one rank writes (rank 0); the others never write. Each save keeps the newest ``keep`` complete
  checkpoints at or below the step it wrote and removes older ones and their leftovers.

A payload name carries a random token, so two writers (a pod the node lost and its replacement)
never write into each other's file: each manifest names its own payload, whichever rename comes
last wins whole.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import secrets
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

ENV = "GPUFABRIC_CHECKPOINT_DIR"
FORMAT = "gpufabric-checkpoint/1"
_MANIFEST = re.compile(r"^step-(\d{12})\.json$")
_PAYLOAD = re.compile(r"^step-(\d{12})-[0-9a-f]{16}\.ckpt$")
_TEMP = re.compile(r"^\.tmp-step-(\d{12})-")
_CHUNK = 1 << 20


class CheckpointError(Exception):
    """A checkpoint could not be written or the directory cannot be used."""


@dataclass(frozen=True)
class Checkpoint:
    """One complete checkpoint: its step, its payload file and the caller's metadata."""

    step: int
    path: Path
    meta: dict[str, Any] = field(default_factory=dict)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as e:  # some filesystems cannot fsync a directory; rename is still atomic
        if e.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class CheckpointDir:
    """The checkpoints of one job in one directory; only ``rank`` 0 writes."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        rank: int = 0,
        keep: int = 3,
        log: Callable[[str], None] | None = None,
    ) -> None:
        if keep < 1:
            raise CheckpointError(f"keep: {keep} is not a number of checkpoints >= 1")
        self.path = Path(path)
        self.rank = rank
        self.keep = keep
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))

    @classmethod
    def from_env(cls, rank: int = 0, keep: int = 3) -> CheckpointDir:
        """The directory the job's ``GPUFABRIC_CHECKPOINT_DIR`` names."""
        value = os.environ.get(ENV, "")
        if not value.startswith("/"):
            raise CheckpointError(
                f"{ENV}={value!r}: expected an absolute directory; gpufabric job sets it when "
                "the tenant has a checkpoints claim (storage.claims), or set it yourself"
            )
        return cls(value, rank=rank, keep=keep)

    # ------------------------------------------------------------------------ reading

    def steps(self) -> list[int]:
        """Steps that have a manifest, newest first (complete or not: see :meth:`load`)."""
        try:
            names = os.listdir(self.path)
        except FileNotFoundError:
            return []
        found = {int(m.group(1)) for n in names if (m := _MANIFEST.match(n))}
        return sorted(found, reverse=True)

    def load(self, step: int) -> Checkpoint:
        """The checkpoint of ``step`` if it is complete; CheckpointError saying why not."""
        manifest = self.path / f"step-{step:012d}.json"
        try:
            doc = json.loads(manifest.read_text())
        except (OSError, ValueError) as e:
            raise CheckpointError(f"{manifest}: unreadable manifest ({e})") from None
        if not isinstance(doc, dict):
            raise CheckpointError(f"{manifest}: not a {FORMAT} manifest of step {step}")
        recorded = doc.get("step")
        if doc.get("format") != FORMAT or type(recorded) is not int or recorded != step:
            raise CheckpointError(f"{manifest}: not a {FORMAT} manifest of step {step}")
        name = doc.get("file")
        m = _PAYLOAD.match(name) if isinstance(name, str) else None
        if m is None or int(m.group(1)) != step:
            raise CheckpointError(f"{manifest}: names no payload file of this directory")
        payload = self.path / m.group(0)
        try:
            size = payload.stat().st_size
        except OSError:
            raise CheckpointError(f"{manifest}: its payload {name} is missing") from None
        if size != doc.get("bytes"):
            raise CheckpointError(
                f"{payload}: {size} bytes, the manifest records {doc.get('bytes')} (truncated)"
            )
        if _sha256(payload) != doc.get("sha256"):
            raise CheckpointError(f"{payload}: SHA-256 differs from the manifest (corrupt)")
        meta = doc.get("meta")
        return Checkpoint(step, payload, meta if isinstance(meta, dict) else {})

    def latest(self) -> Checkpoint | None:
        """The newest complete checkpoint (None: start from scratch); each newer one that is
        not complete is logged and skipped."""
        for step in self.steps():
            try:
                return self.load(step)
            except CheckpointError as e:
                self.log(f"checkpoint: skipped step {step}: {e}")
        return None

    # ------------------------------------------------------------------------ writing

    def save(
        self, step: int, write: Callable[[BinaryIO], None], meta: dict[str, Any] | None = None
    ) -> Checkpoint | None:
        """Write the checkpoint of ``step`` (``write`` fills the open payload file) and commit
        it; on ranks other than 0 nothing is written and None is returned."""
        if self.rank != 0:
            return None
        if step < 0 or step >= 10**12:
            raise CheckpointError(f"step: {step} is not between 0 and 10**12 - 1")
        self.path.mkdir(parents=True, exist_ok=True)
        token = secrets.token_hex(8)
        name = f"step-{step:012d}-{token}.ckpt"
        with self._committed(f".tmp-step-{step:012d}-{token}.ckpt", name) as f:
            write(f)
        doc = {
            "format": FORMAT,
            "step": step,
            "file": name,
            "bytes": (self.path / name).stat().st_size,
            "sha256": _sha256(self.path / name),
            "meta": meta or {},
        }
        text = json.dumps(doc, sort_keys=True).encode()
        with self._committed(f".tmp-step-{step:012d}-{token}.json", f"step-{step:012d}.json") as f:
            f.write(text)
        self.prune(step)
        return Checkpoint(step, self.path / name, dict(meta or {}))

    def save_bytes(self, step: int, data: bytes, meta: dict[str, Any] | None = None) -> None:
        self.save(step, lambda f: f.write(data), meta)

    @contextlib.contextmanager
    def _committed(self, temp: str, final: str) -> Iterator[BinaryIO]:
        """A file written under ``temp``, fsynced, renamed to ``final``, directory fsynced;
        on any error the temporary file is removed and nothing is renamed."""
        tmp = self.path / temp
        try:
            with tmp.open("xb") as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path / final)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        _fsync_dir(self.path)

    def prune(self, saved: int) -> None:
        """Keep the newest ``keep`` manifests at or below ``saved``; remove older ones, payloads
        no kept manifest names and temporary files of older steps. Newer steps are left alone
        (a run resumed from an older checkpoint overwrites them as it gets there)."""
        kept = [s for s in self.steps() if s <= saved][: self.keep]
        if len(kept) == self.keep:
            for step in self.steps():
                if step < kept[-1]:
                    self._unlink(f"step-{step:012d}.json")
        self._remove_leftovers(kept)

    def _remove_leftovers(self, kept: list[int]) -> None:
        names = set()
        for step in self.steps():
            with contextlib.suppress(OSError, ValueError):
                names.add(json.loads((self.path / f"step-{step:012d}.json").read_text())["file"])
        oldest = kept[-1] if kept else 0
        for name in os.listdir(self.path):
            m = _PAYLOAD.match(name) or _TEMP.match(name)
            # a payload of a kept step no manifest names may be another writer's, renamed
            # just before its manifest: left until its step is older than every kept one
            if m and int(m.group(1)) < oldest and name not in names:
                self._unlink(name)

    def _unlink(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.path / name).unlink()


def main(argv: list[str] | None = None) -> int:
    """``python3 checkpoint.py [DIR]``: the newest complete checkpoint of DIR (default
    ``$GPUFABRIC_CHECKPOINT_DIR``), each newer one it skips and why; exit 1 with none."""
    args = sys.argv[1:] if argv is None else argv
    where = args[0] if args else os.environ.get(ENV, "")
    if not where:
        print(f"usage: checkpoint.py DIR (or set {ENV})", file=sys.stderr)
        return 2
    found = CheckpointDir(where, log=print).latest()
    if found is None:
        print(f"no complete checkpoint in {where}: a job started now starts from step 0")
        return 1
    print(f"latest complete checkpoint: step {found.step} ({found.path})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
