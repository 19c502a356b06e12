"""Node preflight: one test per check of the stack, per host."""

from __future__ import annotations

import pytest

from gpufabric.verify.nodes import checks as nodes
from gpufabric.verify.nodes.probe import HostProbe, ProbeCheck
from gpufabric.verify.nodes.suite.plugin import parametrize_checks, run_one


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_checks(metafunc, "node_check", nodes.node_checks)


def test_node(node_check: ProbeCheck, probe: HostProbe, request: pytest.FixtureRequest) -> None:
    run_one(request, probe, node_check)
