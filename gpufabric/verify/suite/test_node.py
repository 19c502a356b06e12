"""Node preflight: one test per check of the stack, per host."""

from __future__ import annotations

import pytest

from gpufabric.verify import nodes
from gpufabric.verify.expect import Expectation
from gpufabric.verify.probe import HostProbe
from gpufabric.verify.suite.plugin import load_expectation, report


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "node_check" in metafunc.fixturenames:
        exp = load_expectation(metafunc.config)
        checks = nodes.node_checks(exp)
        metafunc.parametrize("node_check", checks, ids=[c.id for c in checks])


def test_node(
    node_check: nodes.NodeCheck,
    probe: HostProbe,
    expectation: Expectation,
    request: pytest.FixtureRequest,
) -> None:
    report(request, next(nodes.run_checks(probe, expectation, [node_check])))
