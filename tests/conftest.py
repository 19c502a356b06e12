"""Shared fixtures: ../shared when present, stack files, the lab-roce config (builders in
builders.py)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import REPO, SHIPPED_STACKS, STACKS_DIR, example_config, sections

EXAMPLE_STACKS = list(SHIPPED_STACKS)
SHARED = Path(os.environ.get("GPUFABRIC_SHARED", REPO.parent / "shared"))
CRD_DIR = SHARED / "crds"


def pytest_configure(config: pytest.Config) -> None:
    # A run started in the background of a non-interactive shell (`make test &` in a
    # script, some CI runners) inherits SIGINT ignored, and Python then installs no
    # KeyboardInterrupt handler: the tests that press Ctrl-C (a SIGINT to this process, or to
    # a command they start, which inherits the disposition) would wait for an interruption
    # that never comes. Restore what a terminal gives (each xdist worker runs this too).
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def crd_dir() -> Path:
    """The upstream CRDs at the pinned versions; tests using it skip without ../shared."""
    if not CRD_DIR.is_dir():
        pytest.skip("../shared/crds is absent (a user's clone has none)")
    return CRD_DIR


@pytest.fixture
def write_stack(tmp_path: Path) -> Callable[..., Path]:
    """Write a stack file from a config mapping (or raw text) and return its path."""

    def write(config: dict[str, Any] | str, name: str = "test") -> Path:
        path = tmp_path / f"Pulumi.{name}.yaml"
        text = config if isinstance(config, str) else yaml.safe_dump({"config": config})
        path.write_text(text)
        return path

    return write


@pytest.fixture
def lab() -> dict[str, Any]:
    return example_config("lab-roce")


@pytest.fixture
def quick_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sweep jobs expected to take under a second (the planner assumes 90 s a pair): a fake
    cluster's jobs end at once or never, and such a test bounds them by a short --timeout,
    which a sweep refuses when shorter than the jobs it expects."""
    from gpufabric.verify.sweep import cost as sweep_cost

    monkeypatch.setattr(sweep_cost, "TYPICAL_JOB_S", 0.5)
    monkeypatch.setattr(sweep_cost, "RUN_S", 0.05)


__all__ = [
    "CRD_DIR",
    "EXAMPLE_STACKS",
    "REPO",
    "SHARED",
    "STACKS_DIR",
    "example_config",
    "sections",
]
