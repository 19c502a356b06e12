"""A simulated fleet for `verify nodes`: hosts whose files are fixture trees, each command
answered after an injected network latency (as over ssh or kubectl exec)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from gpufabric.verify.probe import Unreachable


class LatencyProbe:
    """A Probe over a node tree in a directory, every command delayed by ``latency`` s."""

    def __init__(self, name: str, root: Path, latency: float = 0.0, dead: bool = False) -> None:
        self.name = name
        self.root = str(root)
        self.latency = latency
        self.dead = dead
        self.commands = 0

    def _wait(self) -> None:
        self.commands += 1
        if self.dead:
            raise Unreachable(f"ssh: connect to host {self.name} port 22: Connection timed out")
        if self.latency:
            time.sleep(self.latency)

    def _path(self, path: str) -> Path:
        return Path(self.root + "/" + path.lstrip("/"))

    def ensure_reachable(self) -> None:
        self._wait()

    def read(self, path: str) -> str | None:
        data = self.read_bytes(path)
        return None if data is None else data.decode("utf-8", "replace")

    def read_bytes(self, path: str) -> bytes | None:
        self._wait()
        try:
            return self._path(path).read_bytes()
        except OSError:
            return None

    def listdir(self, path: str) -> list[str]:
        self._wait()
        try:
            return sorted(os.listdir(self._path(path)))
        except OSError:
            return []

    def exists(self, path: str) -> bool:
        self._wait()
        return os.path.exists(self._path(path))

    def realpath(self, path: str) -> str | None:
        self._wait()
        p = self._path(path)
        return self.unroot(os.path.realpath(p)) if os.path.exists(p) else None

    def unroot(self, path: str) -> str | None:
        if path == self.root or path.startswith(self.root + "/"):
            return "/" + path[len(self.root) :].lstrip("/")
        return None

    def run(self, command: str, *args: str) -> tuple[int, str]:
        self._wait()
        env = dict(os.environ, PATH=f"{self.root}/usr/bin:{os.environ.get('PATH', '')}")
        proc = subprocess.run(
            command % tuple(args) if args else command,
            shell=True,
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        return proc.returncode, proc.stdout
