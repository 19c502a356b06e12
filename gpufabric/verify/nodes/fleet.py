"""Node checks over a fleet: many hosts at once, a bounded number in flight.

Each host's facts are gathered in one round trip (:mod:`gpufabric.verify.nodes.gather`: one
generated ``sh`` script run through the host's transport, ``ssh://``, ``kubectl://``,
``local://`` ...), then judged locally by the shipped node checks; a fact the script did not
gather costs one more round trip, a handful at most. ``parallel`` hosts are in flight at a
time (threads: they wait on the network), each within ``host_timeout`` seconds, and the
judging runs in a pool of worker processes when the fleet is large enough for it to pay, so
it never holds the interpreter lock against the network work. Results come back in the
order the hosts were given, exactly as a serial run lists them, and identical failures are
grouped for the summary ("rail3.port FAIL on 12 nodes: ...").
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from typing import Any, Protocol, TextIO

from gpufabric.exitcodes import CheckStatus
from gpufabric.verify.defaults import DEFAULT_HOST_TIMEOUT, DEFAULT_PARALLEL
from gpufabric.verify.expect import Expectation
from gpufabric.verify.nodes import gather as nodes_gather
from gpufabric.verify.nodes.gather import NodeJudgement, Script
from gpufabric.verify.nodes.probe import Unreachable
from gpufabric.verify.results import Check, error

POOL_MIN_HOSTS = 64
"""Below this many hosts the judging runs in the network threads (a pool costs more to
start than it saves)."""
POOL_MIN_CPUS = 2
"""Below this many CPUs too (one CPU: the worker only competes with the network threads).
On 2 busy CPUs, 256 hosts at once, 50 ms a round trip (benchmarks/verify_fleet.py): 1,024
hosts take as long either way (11.8 s pooled, 11.1 s in the threads) but 10,000 hosts take
110 s pooled and 261 s in the threads, whose CPU per host grows from 11 to 31 ms as the
judging fights the network threads for the interpreter lock (the pool's stays at 9-11 ms)."""


class GatherTransport(Protocol):
    """Runs a gather script on a host and returns its standard output."""

    def root(self, spec: str) -> str:
        """Where the host's root file system is seen by the script (``/``, ``/host``)."""

    def run(self, spec: str, script: str) -> bytes:
        """The script's standard output; :class:`Unreachable` when it could not run."""


class TestinfraTransport:
    """The script as one ``sh -c`` command over a testinfra backend (ssh multiplexes over
    one connection; ``kubectl://pod`` runs it in the probe pod)."""

    def __init__(self, root: str = "/") -> None:
        self._root = root
        self._hosts: dict[str, Any] = {}
        self._lock = threading.Lock()

    def root(self, spec: str) -> str:
        return self._root

    def _host(self, spec: str) -> Any:
        import testinfra

        with self._lock:
            if spec not in self._hosts:
                try:
                    self._hosts[spec] = testinfra.get_host(spec)
                except Exception as exc:  # a spec no backend takes is this host's error
                    raise Unreachable(f"cannot set up the connection: {exc}") from exc
            return self._hosts[spec]

    def run(self, spec: str, script: str) -> bytes:
        try:
            out = self._host(spec).run("sh -c %s gpufabric-gather", script)
        except RuntimeError as exc:  # testinfra: the transport itself failed (ssh 255)
            result = exc.args[0] if exc.args else None
            raise Unreachable(_first_line(getattr(result, "stderr", "") or str(exc))) from exc
        stdout = bytes(out.stdout_bytes)
        if out.rc != 0 and not stdout:
            raise Unreachable(_first_line(str(out.stderr or "")) or f"exit {out.rc}")
        return stdout


def _first_line(text: str) -> str:
    return next((ln.strip() for ln in str(text).splitlines() if ln.strip()), "")


def testinfra_transport(root: str) -> TestinfraTransport:
    """Gather over testinfra backends (ssh://, kubectl://, local://, ...)."""
    return TestinfraTransport(root)


class NodeJudge(Protocol):
    def __call__(
        self, name: str, root: str, exp: Expectation, rounds: list[tuple[str, bytes]], last: bool
    ) -> NodeJudgement: ...


def _ignore_interrupts() -> None:
    """Pool workers leave Ctrl-C to the command (no traceback from a worker)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def judge_pool(workers: int) -> ProcessPoolExecutor:
    """Worker processes for judging, started from a clean server process (never forked
    from a process that runs network threads)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["gpufabric.verify.nodes.gather"])
    return ProcessPoolExecutor(workers, mp_context=ctx, initializer=_ignore_interrupts)


def _pooled(pool: Executor) -> NodeJudge:
    def run(
        name: str, root: str, exp: Expectation, rounds: list[tuple[str, bytes]], last: bool
    ) -> NodeJudgement:
        return pool.submit(nodes_gather.judge, name, root, exp, rounds, last).result()

    return run


def _unreachable(spec: str, exp: Expectation, exc: Exception) -> list[Check]:
    return nodes_gather.unusable(
        spec,
        exp,
        f"cannot reach the host: {exc}; nothing was checked",
        "check the --hosts spec (pod name, namespace, container, ssh access)",
    )


def _check_host(
    spec: str,
    exp: Expectation,
    transport: GatherTransport,
    judge: NodeJudge,
    first: Callable[[str], Script],
) -> list[Check]:
    """One host: the gather script, then a request script per round for what is missing."""
    root = transport.root(spec)
    script, rounds = first(root), []
    for n in range(1, nodes_gather.MAX_ROUNDS + 1):
        try:
            rounds.append((script.boundary, transport.run(spec, script.text)))
        except Unreachable as exc:
            return _unreachable(spec, exp, exc)
        judged = judge(spec, root, exp, rounds, n == nodes_gather.MAX_ROUNDS)
        if judged.checks is not None:
            return list(judged.checks)
        script = nodes_gather.request_script(judged.needs, root, script.boundary)
    raise AssertionError("the last round always judges")  # pragma: no cover


def _work(
    todo: queue.Queue[str],
    started: dict[str, float],
    finished: queue.Queue[tuple[str, list[Check]]],
    check: Callable[[str], list[Check]],
) -> None:
    """One worker: check hosts from ``todo`` until it is empty; a crash is the host's ERROR."""
    while True:
        try:
            spec = todo.get_nowait()
        except queue.Empty:
            return
        started[spec] = time.monotonic()
        try:
            checks = check(spec)
        except Exception as exc:
            checks = [error("host", spec, f"checks crashed: {exc}")]
        started.pop(spec, None)  # no longer in flight: deadline looks skip it
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


def _first_scripts(exp: Expectation) -> Callable[[str], Script]:
    """The gather script per root, made once per run (one random boundary per run)."""
    boundary = nodes_gather.new_boundary()
    return functools.lru_cache(maxsize=None)(
        lambda root: nodes_gather.gather_script(exp, root, boundary)
    )


def judges_for(hosts: int, judges: int | None) -> int:
    """Worker processes to judge in: 0 judges in the network threads."""
    if judges is not None:
        return judges
    cpus = os.cpu_count() or 1
    return cpus if hosts >= POOL_MIN_HOSTS and cpus >= POOL_MIN_CPUS else 0


def run_fleet(
    hosts: Sequence[str],
    exp: Expectation,
    transport: GatherTransport,
    parallel: int = DEFAULT_PARALLEL,
    host_timeout: float = DEFAULT_HOST_TIMEOUT,
    progress: Callable[[int, int], None] = lambda _done, _total: None,
    judges: int | None = None,
    timeout: float | None = None,
) -> list[Check]:
    """Every host's checks, ``parallel`` hosts at a time, in the given host order, judged
    in ``judges`` worker processes (default: one per CPU for large fleets, none for small
    ones). A host given twice is checked once, where it first appears. A host whose checks
    run longer than ``host_timeout`` is an ERROR and is no longer waited for: its worker is
    a daemon thread, so a hung connection never holds the command open. ``timeout`` bounds
    the whole wait: every host not heard from by then is an ERROR (not checked), never a
    PASS."""
    hosts = list(dict.fromkeys(hosts))
    workers = judges_for(len(hosts), judges)
    pool = judge_pool(workers) if workers else None
    judge: NodeJudge = _pooled(pool) if pool is not None else nodes_gather.judge
    check = functools.partial(
        _check_host, exp=exp, transport=transport, judge=judge, first=_first_scripts(exp)
    )
    try:
        results = _fan_out(hosts, check, parallel, (host_timeout, timeout), progress)
    except BaseException:
        if pool is not None:  # interrupted: leave the workers, never wait for them
            pool.shutdown(wait=False, cancel_futures=True)
        raise
    if pool is not None:
        pool.shutdown(wait=True, cancel_futures=True)
    return results


OVERDUE_EVERY = 0.2
"""Seconds between looks for overdue hosts (each look reads only the hosts in flight)."""


def _fan_out(
    hosts: Sequence[str],
    check: Callable[[str], list[Check]],
    parallel: int,
    limits: tuple[float, float | None],
    progress: Callable[[int, int], None],
) -> list[Check]:
    """The hosts' results in their order; ``limits``: (per host, whole wait or None)."""
    host_timeout, timeout = limits
    results: dict[str, list[Check]] = {}
    in_flight: dict[str, float] = {}  # spec -> when its worker took it, until its result
    finished: queue.Queue[tuple[str, list[Check]]] = queue.Queue()
    todo: queue.Queue[str] = queue.Queue()
    for spec in hosts:
        todo.put(spec)
    worker = functools.partial(_work, todo, in_flight, finished, check)
    for i in range(max(1, min(parallel, len(hosts)))):
        threading.Thread(target=worker, name=f"verify-{i}", daemon=True).start()
    looked = time.monotonic()
    until = looked + timeout if timeout is not None else float("inf")
    while len(results) < len(hosts) and time.monotonic() < until:  # hosts: no repeats
        try:
            wait = min(OVERDUE_EVERY, max(until - time.monotonic(), 0.0))
            spec, checks = finished.get(timeout=wait)
            if spec not in results:  # a late answer from a host already timed out is dropped
                results[spec] = checks
                progress(len(results), len(hosts))
        except queue.Empty:
            pass
        now = time.monotonic()
        if now - looked < OVERDUE_EVERY:
            continue
        looked = now
        for spec in _overdue(in_flight, results, host_timeout, now):
            in_flight.pop(spec, None)
            results[spec] = _no_answer(spec, host_timeout)
            progress(len(results), len(hosts))
            # its worker stays stuck on it: another takes its place in the pool
            threading.Thread(target=worker, name=f"verify-{spec}", daemon=True).start()
    _stop(todo)
    late = [spec for spec in hosts if spec not in results]
    for spec in late:
        results[spec] = _out_of_time(spec, timeout or 0.0)
    if late:
        progress(len(hosts), len(hosts))
    return [c for spec in hosts for c in results[spec]]


def _stop(todo: queue.Queue[str]) -> None:
    """No worker takes another host (those in flight are no longer waited for)."""
    while True:
        try:
            todo.get_nowait()
        except queue.Empty:
            return


def _out_of_time(spec: str, timeout: float) -> list[Check]:
    return [
        error(
            "host",
            spec,
            f"not checked within the command's --timeout ({timeout:g} s); nothing was checked",
            "raise --timeout, or --parallel to check more hosts at once",
        )
    ]


def group_failures(checks: Sequence[Check]) -> list[str]:
    """One line per distinct failure (check and message), with how many nodes show it."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for c in checks:
        if c.status in (CheckStatus.FAIL, CheckStatus.ERROR):
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
    "testinfra_transport",
]
