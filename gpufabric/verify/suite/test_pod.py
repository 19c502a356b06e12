"""Pod checks: what a training pod of the stack must see, per pod."""

from __future__ import annotations

import pytest

from gpufabric.verify import pods
from gpufabric.verify.expect import Expectation
from gpufabric.verify.probe import HostProbe
from gpufabric.verify.suite.plugin import load_expectation, report


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "pod_check" in metafunc.fixturenames:
        exp = load_expectation(metafunc.config)
        checks = pods.pod_checks(exp)
        metafunc.parametrize("pod_check", checks, ids=[c.id for c in checks])


def test_pod(
    pod_check: pods.PodCheck,
    probe: HostProbe,
    expectation: Expectation,
    request: pytest.FixtureRequest,
) -> None:
    report(request, next(pods.run_checks(probe, expectation, [pod_check])))
