"""`verify cluster` and `verify nccl` against an API server whose answers trickle in.

    .venv/bin/python benchmarks/verify_slow_api.py [--timeout 15] [--byte-delay 0.05]

The fake API server (tests/fake_kube.py) holds a healthy lab-roce cluster and sends every
answer of the chosen requests one byte per --byte-delay seconds, so no socket read ever
times out: every answer for verify cluster, the launcher log for verify nccl. Prints each
command's exit code and wall time next to its --timeout. Goal: wall time within --timeout
plus a few seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "verify"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fake_kube import FakeKube
from test_cluster import healthy
from test_nccl import _install, argv, launcher_log

from gpufabric.cli import main as cli


def timed(args: list[str]) -> tuple[int, float]:
    start = time.monotonic()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = cli(args)
    return code, time.monotonic() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeout", type=float, default=15.0)
    ap.add_argument("--byte-delay", type=float, default=0.05)
    args = ap.parse_args()
    timeout = f"{args.timeout:g}"
    with tempfile.TemporaryDirectory() as tmp, FakeKube() as fake:
        healthy(fake, "lab-roce")
        fake.slow.append(("GET", "", args.byte_delay))
        cfg = str(fake.kubeconfig(Path(tmp)))
        code, took = timed(
            ["verify", "cluster", "--stack", "lab-roce", "--kubeconfig", cfg, "--context", "fake",
             "--timeout", timeout]
        )  # fmt: skip
        print(f"verify cluster --timeout {timeout}: exit {code}, {took:.1f} s")
    with tempfile.TemporaryDirectory() as tmp, FakeKube() as fake:
        _install(fake, launcher_log())  # the job succeeds; its launcher log trickles
        fake.slow.append(("GET", "/log", args.byte_delay))
        code, took = timed(argv(fake, Path(tmp), "--timeout", timeout))
        print(f"verify nccl --timeout {timeout}: exit {code}, {took:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
