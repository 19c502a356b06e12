"""diff over storage: a StorageClass parameter change replaces the class; a claim that
shrinks, moves class or leaves the stack is disruptive and named."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import example_config

from gpufabric.cli import main


def diff_of(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], base: dict[str, Any], head: dict[str, Any]
) -> dict[str, dict[str, Any]]:
    paths = []
    for side, config in (("base-src", base), ("head-src", head)):
        (tmp_path / side).mkdir()
        path = tmp_path / side / "Pulumi.lab.yaml"
        path.write_text(yaml.safe_dump({"config": config}))
        paths.append(path)
    assert main(["render", "--stack", str(paths[0]), "--out", str(tmp_path / "base")]) == 0
    capsys.readouterr()
    args = ["diff", "--stack", str(paths[1]), "--base", str(tmp_path / "base"), "--format", "json"]
    assert main(args) == 0
    return {i["id"]: i for i in json.loads(capsys.readouterr().out)["items"]}


@pytest.fixture
def prod() -> dict[str, Any]:
    return example_config("prod-ib")


def test_storage_class_parameter_change_replaces_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], prod: dict[str, Any]
) -> None:
    head = copy.deepcopy(prod)
    head["gpufabric:storage"]["backends"][0]["nfs"]["nfsVersion"] = "4.1"
    head["gpufabric:storage"]["backends"][0]["nfs"]["server"] = "10.40.0.11"
    items = diff_of(tmp_path, capsys, prod, head)
    sc = items["storage/class/nfsordma"]
    assert sc["class"] == "replacing"
    assert any("mountOptions" in r and "cannot be updated" in r for r in sc["reasons"])
    assert any("parameters.server" in r for r in sc["reasons"])


def test_claim_shrink_is_disruptive_and_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], prod: dict[str, Any]
) -> None:
    head = copy.deepcopy(prod)
    head["gpufabric:storage"]["claims"][0]["size"] = "40Ti"
    items = diff_of(tmp_path, capsys, prod, head)
    claim = items["storage/claim/eval/checkpoints"]
    assert claim["class"] == "disruptive"
    assert claim["reasons"] == [
        "claim eval/checkpoints shrinks (50Ti -> 40Ti): Kubernetes refuses to shrink a claim, "
        "so the update fails; keep the size or move the data to a new claim"
    ]
    # growing is a plain update (the class allows expansion)
    grow = copy.deepcopy(prod)
    grow["gpufabric:storage"]["claims"][0]["size"] = "60Ti"
    (tmp_path / "g").mkdir()
    items = diff_of(tmp_path / "g", capsys, prod, grow)
    assert items["storage/claim/eval/checkpoints"]["class"] == "update"


def test_removed_tenant_claim_is_disruptive_and_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], prod: dict[str, Any]
) -> None:
    head = copy.deepcopy(prod)
    research = next(t for t in head["gpufabric:tenants"] if t["namespace"] == "research")
    research["claims"] = [c for c in research["claims"] if c["name"] != "scratch"]
    items = diff_of(tmp_path, capsys, prod, head)
    gone = items["storage/claim/research/scratch"]
    assert gone["change"] == "removed"
    assert gone["class"] == "disruptive"
    assert "claim research/scratch removed" in gone["reasons"][0]
    assert items["storage/quota/research"]["class"] == "update"
