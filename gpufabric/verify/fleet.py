"""Node checks over a fleet: many hosts at once, a bounded number in flight.

Each host gets one testinfra backend (ssh multiplexes its commands over one connection) and
runs the same checks as the shipped pytest suite (:func:`gpufabric.verify.nodes.run_checks`);
``parallel`` hosts are checked at a time, each within ``host_timeout`` seconds, so a fleet of
1,024 nodes takes minutes, not hours. Results come back in the order the hosts were given,
exactly as a serial run lists them, and identical failures are grouped for the summary
("rail3.port FAIL on 12 nodes: ...").
"""

from __future__ import annotations

import functools
import queue
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TextIO

from gpufabric.verify import nodes
from gpufabric.verify.arguments import DEFAULT_HOST_TIMEOUT, DEFAULT_PARALLEL
from gpufabric.verify.expect import Expectation
from gpufabric.verify.probe import HostProbe, Probe
from gpufabric.verify.results import Check, error

ProbeFactory = Callable[[str], Probe]


def testinfra_probe(root: str) -> ProbeFactory:
    """Probes over testinfra backends (ssh://, kubectl://, local://, ...)."""

    def make(spec: str) -> Probe:
        import testinfra

        return HostProbe(testinfra.get_host(spec), root=root, name=spec)

    return make


def _check_host(spec: str, exp: Expectation, factory: ProbeFactory) -> list[Check]:
    try:
        probe = factory(spec)
    except Exception as exc:  # a backend that cannot even be set up is this host's error
        return [error("host", spec, f"cannot set up the connection: {exc}")]
    return list(nodes.run_checks(probe, exp))


def _work(
    todo: queue.Queue[str],
    started: dict[str, float],
    finished: queue.Queue[tuple[str, list[Check]]],
    exp: Expectation,
    factory: ProbeFactory,
) -> None:
    """One worker: check hosts from ``todo`` until it is empty; a crash is the host's ERROR."""
    while True:
        try:
            spec = todo.get_nowait()
        except queue.Empty:
            return
        started[spec] = time.monotonic()
        try:
            checks = _check_host(spec, exp, factory)
        except Exception as exc:
            checks = [error("host", spec, f"checks crashed: {exc}")]
        finished.put((spec, checks))


def _overdue(
    started: dict[str, float], results: dict[str, list[Check]], host_timeout: float, now: float
) -> list[str]:
    """Hosts started more than ``host_timeout`` seconds before ``now`` with no result yet."""
    return [
        spec
        for spec, began in list(started.items())
        if spec not in results and now - began > host_timeout
    ]


def _no_answer(spec: str, host_timeout: float) -> list[Check]:
    return [
        error(
            "host",
            spec,
            f"no answer within {host_timeout:g} s; nothing was checked",
            "check the host's connection; --host-timeout sets the limit",
        )
    ]


def run_fleet(
    hosts: Sequence[str],
    exp: Expectation,
    factory: ProbeFactory,
    parallel: int = DEFAULT_PARALLEL,
    host_timeout: float = DEFAULT_HOST_TIMEOUT,
    progress: Callable[[int, int], None] = lambda _done, _total: None,
) -> list[Check]:
    """Every host's checks, ``parallel`` hosts at a time, in the given host order. A host
    whose checks run longer than ``host_timeout`` is an ERROR and is no longer waited for:
    its worker is a daemon thread, so a hung connection never holds the command open."""
    results: dict[str, list[Check]] = {}
    started: dict[str, float] = {}
    finished: queue.Queue[tuple[str, list[Check]]] = queue.Queue()
    todo: queue.Queue[str] = queue.Queue()
    for spec in hosts:
        todo.put(spec)
    worker = functools.partial(_work, todo, started, finished, exp, factory)
    workers = [
        threading.Thread(target=worker, name=f"verify-{i}", daemon=True)
        for i in range(max(1, min(parallel, len(hosts))))
    ]
    for w in workers:
        w.start()
    while len(results) < len(hosts):
        try:
            spec, checks = finished.get(timeout=0.2)
            if spec not in results:  # a late answer from a host already timed out is dropped
                results[spec] = checks
                progress(len(results), len(hosts))
        except queue.Empty:
            pass
        for spec in _overdue(started, results, host_timeout, time.monotonic()):
            results[spec] = _no_answer(spec, host_timeout)
            progress(len(results), len(hosts))
            # its worker stays stuck on it: another takes its place in the pool
            threading.Thread(target=worker, name=f"verify-{spec}", daemon=True).start()
    return [c for spec in hosts for c in results[spec]]


def group_failures(checks: Sequence[Check]) -> list[str]:
    """One line per distinct failure (check and message), with how many nodes show it."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for c in checks:
        if c.status in ("FAIL", "ERROR"):
            groups.setdefault((c.check, c.status, c.message), []).append(c.target)
    lines = []
    for (check, status, message), targets in sorted(
        groups.items(), key=lambda kv: (-len(kv[1]), kv[0])
    ):
        shown = ", ".join(targets[:5]) + (
            f", ... ({len(targets) - 5} more)" if len(targets) > 5 else ""
        )
        noun = "node" if len(targets) == 1 else "nodes"
        lines.append(f"{check} {status} on {len(targets)} {noun}: {message} [{shown}]")
    return lines


def terminal_progress(stream: TextIO | None = None) -> Callable[[int, int], None]:
    """A one-line counter on a terminal (standard error unless given); silent when the
    stream is not one (CI, --json)."""
    stream = sys.stderr if stream is None else stream
    if not stream.isatty():
        return lambda _done, _total: None

    def show(done: int, total: int) -> None:
        end = "\n" if done == total else ""
        stream.write(f"\rverify nodes: {done}/{total} hosts checked{end}")
        stream.flush()

    return show


__all__ = [
    "DEFAULT_HOST_TIMEOUT",
    "DEFAULT_PARALLEL",
    "group_failures",
    "run_fleet",
    "terminal_progress",
    "testinfra_probe",
]
