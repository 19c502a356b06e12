"""Run the testinfra suite in-process and collect its :class:`Check` results.

pytest runs with its own throwaway configuration (never the project's or the user's
pytest.ini), the suite's plugin, and a recorder that also turns a host that could not be
reached (a failed fixture) into an ERROR result for each of its checks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import pytest

from gpufabric.verify.expect import Expectation
from gpufabric.verify.nodes.suite import SUITE_DIR
from gpufabric.verify.nodes.suite.plugin import Recorder
from gpufabric.verify.results import Check, SuiteError, error

SuiteKind = Literal["node", "pod"]

__all__ = ["SuiteError", "SuiteKind", "run_suite"]


class _Collector(Recorder):
    def __init__(self, kind: SuiteKind) -> None:
        super().__init__()
        self.kind = kind
        self.meta: dict[str, tuple[str, str]] = {}

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            params: Mapping[str, Any] = getattr(getattr(item, "callspec", None), "params", {})
            host = params.get("_testinfra_host")
            check = params.get(f"{self.kind}_check")
            host_id = host.backend.get_pytest_id() if host is not None else "?"
            self.meta[item.nodeid] = (host_id, getattr(check, "id", "?"))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.nodeid in self.recorded or not report.failed or report.when == "teardown":
            return
        host, check = self.meta.get(report.nodeid, ("?", report.nodeid))
        text = str(report.longrepr).strip().splitlines()[-1] if report.longrepr else "failed"
        self.add(report.nodeid, error(check, host, f"could not run on this host: {text[:300]}"))


def run_suite(
    kind: SuiteKind,
    exp: Expectation,
    hosts: Sequence[str],
    root: str = "/",
    netns: str = "",
    names: Mapping[str, str] | None = None,
    extra_args: Sequence[str] = (),
) -> list[Check]:
    """Run the node or pod suite on every host; results in host, then check order."""
    collector = _Collector(kind)
    with tempfile.TemporaryDirectory(prefix="gpufabric-verify-") as tmp:
        work = Path(tmp)
        (work / "expect.json").write_text(exp.to_json(), encoding="utf-8")
        (work / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
        args = [
            str(SUITE_DIR / f"test_{kind}.py"),
            "-c",
            str(work / "pytest.ini"),
            "--rootdir",
            str(work),
            "-p",
            "gpufabric.verify.nodes.suite.plugin",
            "-p",
            "no:cacheprovider",
            "-q",
            "--hosts",
            ",".join(hosts),
            "--gpufabric-expect",
            str(work / "expect.json"),
            "--gpufabric-root",
            root,
            *(["--gpufabric-netns", netns] if netns else []),
            *extra_args,
        ]
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            code = pytest.main(args, plugins=[collector])
    if int(code) not in (0, 1):
        tail = "\n".join(out.getvalue().strip().splitlines()[-15:])
        raise SuiteError(f"the {kind} suite did not run (pytest exit {int(code)}):\n{tail}")
    results = collector.results
    if names:
        results = [dataclasses.replace(c, target=names.get(c.target, c.target)) for c in results]
    return results
