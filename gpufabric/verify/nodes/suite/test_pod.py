"""Pod checks: what a training pod of the stack must see, per pod."""

from __future__ import annotations

import pytest

from gpufabric.verify.nodes import pods
from gpufabric.verify.nodes.probe import HostProbe, ProbeCheck
from gpufabric.verify.nodes.suite.plugin import parametrize_checks, run_one


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_checks(metafunc, "pod_check", pods.pod_checks)


def test_pod(pod_check: ProbeCheck, probe: HostProbe, request: pytest.FixtureRequest) -> None:
    run_one(request, probe, pod_check)
