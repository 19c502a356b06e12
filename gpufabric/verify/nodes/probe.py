"""How checks read a machine: files under a root, and a few commands.

Checks never open files themselves; they ask a :class:`Probe`. :class:`HostProbe` wraps a
pytest-testinfra host (``local://``, ``ssh://``, ``kubectl://pod``, ...) and prefixes every
path with a root: ``/`` on a host, ``/host`` in the probe pod that mounts the node's root
file system, a fixture directory in tests. Commands (``mlnx_qos``, ``ip``) run as they are,
since the node's network namespace is where they look (the probe pod uses hostNetwork).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from gpufabric.verify.expect import Expectation
    from gpufabric.verify.results import Check


class Probe(Protocol):
    name: str
    root: str
    """Where the node's root file system is seen (``/`` on the node itself)."""

    def read(self, path: str) -> str | None:
        """Text of a file, None when it does not exist or cannot be read."""

    def read_bytes(self, path: str) -> bytes | None: ...

    def listdir(self, path: str) -> list[str]:
        """Sorted entry names, [] when the directory does not exist."""

    def exists(self, path: str) -> bool: ...

    def realpath(self, path: str) -> str | None:
        """The path with symlinks resolved, relative to the root (as on the node)."""

    def unroot(self, path: str) -> str | None:
        """A path as seen here (under the root) as it is on the node; None outside the root."""

    def run(self, command: str, *args: str) -> tuple[int, str]:
        """Run a command (``%s`` placeholders are shell-quoted args): exit status, stdout."""


REACH_TOKEN = "gpufabric-probe-ok"


class Unreachable(Exception):
    """The host's backend (ssh, kubectl exec, ...) could not run a command at all."""


class HostProbe:
    """A :class:`Probe` over a testinfra host with a root prefix."""

    def __init__(self, host: Any, root: str = "/", name: str | None = None, prefix: str = ""):
        self.host = host
        self.root = "/" + root.strip("/") if root.strip("/") else "/"
        self.prefix = prefix
        """Prepended to every command, e.g. ``ip netns exec NS`` to look inside a namespace."""
        backend = getattr(host, "backend", None)
        self.name = name or (backend.get_pytest_id() if backend is not None else "local")

    def _run(self, command: str, *args: str) -> Any:
        try:
            return self.host.run(command, *args)
        except RuntimeError as exc:  # testinfra: the transport itself failed
            result = exc.args[0] if exc.args else None
            stderr = getattr(result, "stderr", "") or str(exc)
            line = next((ln for ln in str(stderr).splitlines() if ln.strip()), str(exc))
            raise Unreachable(line.strip()) from exc

    def _path(self, path: str) -> str:
        if self.root == "/":
            return path
        return self.root + "/" + path.lstrip("/")

    def read(self, path: str) -> str | None:
        data = self.read_bytes(path)
        return None if data is None else data.decode("utf-8", "replace")

    def read_bytes(self, path: str) -> bytes | None:
        out = self._run("cat -- %s", self._path(path))
        return bytes(out.stdout_bytes) if out.rc == 0 else None

    def listdir(self, path: str) -> list[str]:
        out = self._run("ls -1 -A -- %s", self._path(path))
        if out.rc != 0:
            return []
        return sorted(line for line in out.stdout.splitlines() if line)

    def exists(self, path: str) -> bool:
        return bool(self._run("test -e %s", self._path(path)).rc == 0)

    def realpath(self, path: str) -> str | None:
        out = self._run("readlink -f -- %s", self._path(path))
        if out.rc != 0 or not out.stdout.strip():
            return None
        return self.unroot(str(out.stdout).strip())

    def unroot(self, path: str) -> str | None:
        if self.root == "/":
            return path
        if path == self.root or path.startswith(self.root + "/"):
            return "/" + path[len(self.root) :].lstrip("/")
        return None

    def run(self, command: str, *args: str) -> tuple[int, str]:
        cmd = f"{self.prefix} {command}" if self.prefix else command
        out = self._run(cmd, *args)
        return int(out.rc), str(out.stdout)

    def ensure_reachable(self) -> None:
        """Unreachable unless a trivial command runs and answers (kubectl exec into a pod
        that does not exist "runs" and fails like any command would)."""
        out = self._run("echo %s", REACH_TOKEN)
        if out.rc != 0 or REACH_TOKEN not in str(out.stdout):
            stderr = str(getattr(out, "stderr", "") or "")
            line = next((ln for ln in stderr.splitlines() if ln.strip()), f"exit {out.rc}")
            raise Unreachable(line.strip())


@dataclass(frozen=True)
class ProbeCheck:
    """A named check run through a probe (node and pod checks alike)."""

    id: str
    run: Callable[[Probe, Expectation], Check]


def run_checks(probe: Probe, exp: Expectation, checks: Sequence[ProbeCheck]) -> Iterator[Check]:
    """Run checks in order; a host that cannot be reached or a check that crashes is an
    ERROR result for that check, never a pass and never an exception."""
    from gpufabric.verify.results import error

    ensure = getattr(probe, "ensure_reachable", None)
    if ensure is not None:
        try:
            ensure()
        except Unreachable as exc:
            for check in checks:
                yield error(
                    check.id,
                    probe.name,
                    f"cannot reach the host: {exc}; nothing was checked",
                    "check the --hosts spec (pod name, namespace, container, ssh access)",
                )
            return
    for check in checks:
        try:
            yield check.run(probe, exp)
        except Unreachable as exc:
            yield error(check.id, probe.name, f"cannot reach the host: {exc}")
        except Exception as exc:
            yield error(check.id, probe.name, f"check crashed: {type(exc).__name__}: {exc}")
