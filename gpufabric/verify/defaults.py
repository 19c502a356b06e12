"""The defaults of ``gpufabric verify`` that the checks use and its arguments' help states
(:mod:`gpufabric.cli.verify`), in one place so the two agree; importing it imports nothing
else, so parsing the command line never loads the checks."""

from __future__ import annotations

DEFAULT_PARALLEL = 32
"""Hosts ``verify nodes`` checks at once."""
DEFAULT_HOST_TIMEOUT = 600.0
"""Seconds one host's checks may take."""
NCCL_JOB_NAME = "gpufabric-nccl"
NCCL_TIMEOUT = 1800
"""Seconds ``verify nccl`` waits for its acceptance job."""
STORAGE_TIMEOUT = 300.0
"""Seconds each ``verify storage`` pod may take (scheduling, mounting, its I/O)."""
STORAGE_PARALLEL = 4
STORAGE_MIB = 1024
"""MiB ``verify storage`` writes and reads per node and writable claim."""
