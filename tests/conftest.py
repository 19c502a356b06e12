"""Shared fixtures: the example stacks, ../shared when present, stack-file builders."""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
STACKS_DIR = REPO / "stacks"
EXAMPLE_STACKS = sorted(
    p.name[len("Pulumi.") : -len(".yaml")] for p in STACKS_DIR.glob("Pulumi.*.yaml")
)
SHARED = Path(os.environ.get("GPUFABRIC_SHARED", REPO.parent / "shared"))
CRD_DIR = SHARED / "crds"


@pytest.fixture
def crd_dir() -> Path:
    """The upstream CRDs at the pinned versions; tests using it skip without ../shared."""
    if not CRD_DIR.is_dir():
        pytest.skip("../shared/crds is absent (a user's clone has none)")
    return CRD_DIR


def example_config(name: str) -> dict[str, Any]:
    """The `config:` mapping of an example stack, as a fresh mutable copy."""
    doc = yaml.safe_load((STACKS_DIR / f"Pulumi.{name}.yaml").read_text())
    return copy.deepcopy(doc["config"])


def sections(config: dict[str, Any]) -> dict[str, Any]:
    """`gpufabric:x` keys -> `x`, as the Pulumi program hands them to the model."""
    return {k.split(":", 1)[1]: v for k, v in config.items() if k.startswith("gpufabric:")}


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
