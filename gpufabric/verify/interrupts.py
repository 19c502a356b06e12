"""Signals during cluster-facing commands: whatever ends a command, what it created goes.

Ctrl-C raises KeyboardInterrupt; :func:`terminating_signals` makes SIGTERM and SIGHUP raise
:class:`Terminated` the same way, so ``finally`` blocks run (a CI job cancelled, a closed
terminal). :func:`shielded` holds every such signal while cleanup runs (a second Ctrl-C must
not abandon a half-deleted job) and raises the first one afterwards.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

CAUGHT = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Terminated(BaseException):
    """SIGTERM or SIGHUP arrived (a BaseException, like KeyboardInterrupt)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


def _raise(signum: int, _frame: FrameType | None) -> None:
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated(signum)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def terminating_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP raise :class:`Terminated` inside the block."""
    if not _main_thread():
        yield
        return
    saved = {s: signal.signal(s, _raise) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP during the block; raise the first afterwards."""
    if not _main_thread():
        yield
        return
    pending: list[int] = []

    def hold(signum: int, _frame: FrameType | None) -> None:
        pending.append(signum)

    saved = {s: signal.signal(s, hold) for s in CAUGHT}
    try:
        yield
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
    if pending:
        _raise(pending[0], None)


_STOPPED_CHECK = "_gpufabric_stopped_check"


@contextlib.contextmanager
def check_running() -> Iterator[None]:
    """Marks whatever ends the block (an exception, Ctrl-C, :class:`Terminated`) as having
    stopped a running ``verify`` check (:func:`stopped_check`); it propagates unchanged."""
    try:
        yield
    except BaseException as exc:
        setattr(exc, _STOPPED_CHECK, True)
        raise


def stopped_check(exc: BaseException) -> bool:
    """Whether ``exc`` ended a running ``verify`` check (raised inside :func:`check_running`)."""
    return getattr(exc, _STOPPED_CHECK, False) is True


_LEFTOVERS: list[str] = []
_LEFTOVERS_LOCK = threading.Lock()


def left_behind(command: str) -> None:
    """Record that cleanup could not confirm an object gone: ``command`` deletes it."""
    with _LEFTOVERS_LOCK:
        if command not in _LEFTOVERS:
            _LEFTOVERS.append(command)


def leftovers(clear: bool = False) -> list[str]:
    """The delete commands :func:`left_behind` recorded (this command's, once cleared at
    its start): a stopped command says "cleaned up" only when there are none."""
    with _LEFTOVERS_LOCK:
        out = list(_LEFTOVERS)
        if clear:
            _LEFTOVERS.clear()
    return out


__all__ = [
    "Terminated",
    "check_running",
    "left_behind",
    "leftovers",
    "shielded",
    "stopped_check",
    "terminating_signals",
]
