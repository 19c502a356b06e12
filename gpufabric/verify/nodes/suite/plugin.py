"""pytest plugin of the verify suite: options, fixtures, result recording."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpufabric.exitcodes import CheckStatus
from gpufabric.verify.expect import Expectation
from gpufabric.verify.nodes.probe import HostProbe, ProbeCheck, run_checks
from gpufabric.verify.results import Check


class Recorder:
    """Collects every :class:`Check` the suite produced (registered by the CLI)."""

    def __init__(self) -> None:
        self.results: list[Check] = []
        self.recorded: set[str] = set()

    def add(self, nodeid: str, check: Check) -> None:
        self.results.append(check)
        self.recorded.add(nodeid)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gpufabric")
    group.addoption("--gpufabric-expect", type=Path, help="expectations JSON of a stack")
    group.addoption(
        "--gpufabric-root",
        default="/",
        help="where the node's root file system is seen (default /; /host in the probe pod)",
    )
    group.addoption(
        "--gpufabric-netns",
        default="",
        help="run commands inside this network namespace (ip netns exec)",
    )


_EXPECTATION = pytest.StashKey[Expectation]()


def load_expectation(config: pytest.Config) -> Expectation:
    """The stack's expectations, read once per run."""
    if _EXPECTATION not in config.stash:
        path = config.getoption("--gpufabric-expect")
        if path is None:
            raise pytest.UsageError(
                "--gpufabric-expect FILE is required (gpufabric verify nodes --write-expect FILE)"
            )
        try:
            config.stash[_EXPECTATION] = Expectation.load(Path(path))
        except (OSError, ValueError, TypeError) as err:
            raise pytest.UsageError(
                f"--gpufabric-expect {path}: not an expectations file ({err}); write one "
                "with gpufabric verify nodes --write-expect FILE"
            ) from None
    return config.stash[_EXPECTATION]


@pytest.fixture(scope="module")
def probe(host: Any, request: pytest.FixtureRequest) -> HostProbe:
    netns = request.config.getoption("--gpufabric-netns")
    return HostProbe(
        host,
        root=request.config.getoption("--gpufabric-root"),
        prefix=f"ip netns exec {netns}" if netns else "",
    )


def report(request: pytest.FixtureRequest, check: Check) -> None:
    """Record a check and turn it into the pytest outcome."""
    for plugin in request.config.pluginmanager.get_plugins():
        if isinstance(plugin, Recorder):
            plugin.add(request.node.nodeid, check)
    text = check.message + (f" -> {check.hint}" if check.hint else "")
    if check.status == CheckStatus.SKIP:
        pytest.skip(text)
    if check.status == CheckStatus.ERROR:
        pytest.fail(f"could not check: {text}", pytrace=False)
    if check.status == CheckStatus.FAIL:
        pytest.fail(text, pytrace=False)


def parametrize_checks(
    metafunc: pytest.Metafunc, argname: str, checks_for: Callable[[Expectation], list[ProbeCheck]]
) -> None:
    """One test per check of the stack (ids = check ids); testinfra adds the host axis."""
    if argname in metafunc.fixturenames:
        checks = checks_for(load_expectation(metafunc.config))
        metafunc.parametrize(argname, checks, ids=[c.id for c in checks])


def run_one(request: pytest.FixtureRequest, probe: HostProbe, check: ProbeCheck) -> None:
    exp = load_expectation(request.config)
    report(request, next(run_checks(probe, exp, [check])))
