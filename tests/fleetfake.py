"""A simulated fleet for `verify nodes`: hosts whose files are fixture trees, reached through
a transport that answers after an injected network latency (as ssh or kubectl exec would).

The gather script really runs: /bin/sh executes it over the host's fixture tree. Hosts that
share a tree share its answer, so the script runs once per tree and distinct script and
later hosts are answered from that (with their own run's boundary), as fast as a fleet of
10,000 simulated hosts needs.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from gpufabric.verify.expect import Expectation
from gpufabric.verify.nodes import gather as nodes_gather
from gpufabric.verify.nodes.probe import Unreachable
from gpufabric.verify.results import Check

_BOUNDARY = re.compile(r"^B='?(@gf-[0-9a-f]{32})'?$", re.MULTILINE)


def run_script(script: str, root: Path | str, shell: str = "/bin/sh") -> bytes:
    """The script's output, run for real with the tree's fake tools (mlnx_qos) on PATH."""
    env = dict(os.environ, PATH=f"{root}/usr/bin:{os.environ.get('PATH', '')}")
    proc = subprocess.run(
        [shell, "-c", script, "gpufabric-gather"], capture_output=True, env=env, check=False
    )
    return proc.stdout


def boundary_of(script: str) -> str:
    found = _BOUNDARY.search(script)
    assert found, "a gather script names its boundary"
    return found[1]


class LatencyTransport:
    """Each host is a fixture tree; every round trip takes ``latency`` seconds (``slow``
    hosts: their own), ``dead`` hosts never answer (ssh cannot connect)."""

    def __init__(
        self,
        roots: Mapping[str, Path],
        latency: float = 0.0,
        dead: frozenset[str] = frozenset(),
        slow: Mapping[str, float] | None = None,
    ) -> None:
        self.roots = roots
        self.latency = latency
        self.dead = dead
        self.slow = dict(slow or {})
        self.round_trips = 0
        self.scripts_run = 0
        self._cache: dict[tuple[str, str], tuple[str, bytes]] = {}
        self._lock = threading.Lock()

    def root(self, spec: str) -> str:
        return str(self.roots[spec])

    def run(self, spec: str, script: str) -> bytes:
        with self._lock:
            self.round_trips += 1
        if spec in self.dead:
            raise Unreachable(f"ssh: connect to host {spec} port 22: Connection timed out")
        time.sleep(self.slow.get(spec, self.latency))
        boundary = boundary_of(script)
        key = (self.root(spec), script.replace(boundary, ""))
        with self._lock:
            cached = self._cache.get(key)
        if cached is None:
            cached = (boundary, run_script(script, self.root(spec)))
            with self._lock:
                self.scripts_run += 1
                self._cache[key] = cached
        ran_with, output = cached
        return output.replace(ran_with.encode(), boundary.encode())


def gather_checks(
    exp: Expectation, root: Path | str, shell: str = "/bin/sh"
) -> tuple[list[Check], int]:
    """A node's checks as ``verify nodes`` judges them: the gather script run for real over
    the tree, then request scripts for whatever it missed; (checks, round trips)."""
    script = nodes_gather.gather_script(exp, str(root))
    rounds: list[tuple[str, bytes]] = []
    for n in range(1, nodes_gather.MAX_ROUNDS + 1):
        rounds.append((script.boundary, run_script(script.text, root, shell)))
        judged = nodes_gather.judge("node", str(root), exp, rounds, n == nodes_gather.MAX_ROUNDS)
        if judged.checks is not None:
            return list(judged.checks), n
        script = nodes_gather.request_script(judged.needs, str(root))
    raise AssertionError("the last round always judges")
