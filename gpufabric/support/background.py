"""A computation done on a second CPU core while the caller goes on.

``gpufabric render`` validates every object against its schema while it formats the files:
on a machine with two cores the slower of the two is what the user waits for, not their
sum. The work runs in a forked child (it inherits the plan as it is, nothing is sent to
it) and hands back its picklable result through a pipe.

Where forking is not safe or not useful (not Linux, one CPU, threads running) or the child
fails in any way, :meth:`Background.result` computes the same thing in-process: the result
never depends on which path ran, only the time does.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Generic, TypeVar

T = TypeVar("T")


def usable_cpus() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def fork_supported() -> bool:
    """Plain POSIX fork (Linux) and a second core to gain."""
    return sys.platform == "linux" and hasattr(os, "fork") and usable_cpus() >= 2


def can_fork() -> bool:
    """Fork where it is supported and no other thread runs whose locks the child could
    inherit held."""
    return fork_supported() and threading.active_count() == 1


class Background(Generic[T]):
    """``fn()`` started now, in a child process when :func:`can_fork`; :meth:`result`
    waits for it. Use as a context manager: leaving the block early (an error, Ctrl-C)
    stops and reaps the child."""

    def __init__(self, fn: Callable[[], T]) -> None:
        self._fn = fn
        self._pid: int | None = None
        self._read: int | None = None
        if can_fork():
            self._start()

    @property
    def forked(self) -> bool:
        return self._pid is not None

    def _start(self) -> None:
        try:
            read, write = os.pipe()
        except OSError:
            return  # no descriptors left: compute in-process
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            pid = os.fork()
        except OSError:  # process limit, memory: compute in-process
            os.close(read)
            os.close(write)
            return
        if pid == 0:  # the child: compute, send, and leave without running any cleanup
            code = 1
            try:
                os.close(read)
                data = pickle.dumps(self._fn(), protocol=pickle.HIGHEST_PROTOCOL)
                with os.fdopen(write, "wb") as pipe:
                    pipe.write(data)
                code = 0
            except BaseException:
                pass
            finally:
                os._exit(code)
        os.close(write)
        self._pid, self._read = pid, read

    def result(self) -> T:
        if self._pid is None:
            return self._fn()
        assert self._read is not None
        with os.fdopen(self._read, "rb") as pipe:
            self._read = None
            data = pipe.read()
        _, status = os.waitpid(self._pid, 0)
        self._pid = None
        if os.waitstatus_to_exitcode(status) == 0:
            try:
                value: T = pickle.loads(data)
                return value
            except Exception:
                pass
        return self._fn()

    def close(self) -> None:
        """Stop and reap a child whose result was never asked for."""
        if self._read is not None:
            os.close(self._read)
            self._read = None
        if self._pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._pid, signal.SIGKILL)
            os.waitpid(self._pid, 0)
            self._pid = None

    def __enter__(self) -> Background[T]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
