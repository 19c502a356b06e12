"""The defaults of ``gpufabric health`` that its passes use and its arguments' help states
(:mod:`gpufabric.cli.health`), in one place so the two agree; importing it imports nothing
else, so parsing the command line never loads what talks to a cluster."""

from __future__ import annotations

NAME = "gpufabric-health"
"""Prefix of the sweep jobs' names (``<name>-r<round>-<index>``)."""
JOB_TIMEOUT = 1800.0
RETRY_AFTER = 3600.0
INTERVAL = 300.0
PROBE_TIMEOUT = 300.0
PROBE, API = "probe", "api"
"""``--node-checks``: the probe (default) or the API status only."""
