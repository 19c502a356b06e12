"""The render output contract: plan.json, one object per file, charts, placeholders for
secrets, byte-identical output, and a clean replacement of the output directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from builders import example_config, plan_of
from conftest import EXAMPLE_STACKS
from msgspec.structs import replace

from gpufabric.model.config import SecretValue
from gpufabric.model.stackfile import load_stack
from gpufabric.outputs.render import render_files, write_tree
from gpufabric.plan.build import build_plan
from gpufabric.plan.items import HelmChart, Item, K8sObject, Layer, SecretRef


def _render(name: str, out: Path) -> dict[str, bytes]:
    stack = load_stack(name)
    write_tree(render_files(build_plan(name, stack.model)), out)
    return {
        p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()
    }


@pytest.mark.parametrize("name", EXAMPLE_STACKS)
def test_render_is_byte_identical(name: str, tmp_path: Path) -> None:
    assert _render(name, tmp_path / "a") == _render(name, tmp_path / "b")


def test_plan_json_lists_items_in_apply_order_with_their_files(tmp_path: Path) -> None:
    files = _render("lab-roce", tmp_path / "out")
    doc = json.loads(files["plan.json"])
    assert doc["stack"] == "lab-roce"
    items = {item["id"]: item for item in doc["items"]}
    ns = items["tenants/team-vision/namespace"]
    assert ns["files"] == ["objects/tenants/_cluster/namespace-team-vision.yaml"]
    assert ns["protect"] is True
    assert items["tenants/team-vision/nccl-env"]["dependsOn"] == ["tenants/team-vision/namespace"]
    chart = items["gpu/gpu-operator"]
    assert chart["files"] == ["charts/gpu-operator/chart.yaml", "charts/gpu-operator/values.yaml"]
    assert [i["id"] for i in doc["items"]][:2] == ["gpu/namespace", "gpu/gpu-operator"]
    for item in doc["items"]:
        for f in item["files"]:
            assert f in files
    # one object per file
    for path, content in files.items():
        if path.startswith("objects/"):
            docs = list(yaml.safe_load_all(content))
            assert len(docs) == 1
            assert docs[0]["metadata"]["name"]


def test_stale_files_do_not_survive_a_rerender(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = _render("lab-roce", out)
    files = _render("kind-dev", out)
    listed = {f for item in json.loads(files["plan.json"])["items"] for f in item["files"]}
    assert first.keys() - files.keys()  # lab-roce wrote files kind-dev does not
    assert files.keys() == listed | {"plan.json", ".gpufabric-render"}


def test_secrets_render_as_placeholders_and_charts_as_two_files() -> None:
    secret = SecretRef("fabric.infiniband.ufm.password", SecretValue(plaintext="hunter2"))
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "ufm", "namespace": "nvidia-network-operator"},
        "stringData": {"UFM_PASSWORD": secret},
    }
    chart = HelmChart(
        repository="https://example.invalid/charts",
        chart="demo",
        version="1.0.0",
        namespace="demo",
        release="demo",
        values={"a": {"b": 1}},
    )
    plan = replace(
        plan_of(example_config("kind-dev"), "s"),
        items=(
            Item(id="network/ufm-secret", layer=Layer.NETWORK, payload=K8sObject(body)),
            Item(id="gpu/demo", layer=Layer.GPU, payload=chart),
        ),
    )
    files = render_files(plan)
    rendered = "".join(files.values())
    assert "hunter2" not in rendered
    secret_file = yaml.safe_load(files["objects/network/nvidia-network-operator/secret-ufm.yaml"])
    assert secret_file["stringData"]["UFM_PASSWORD"] == "<secret:fabric.infiniband.ufm.password>"
    meta = yaml.safe_load(files["charts/demo/chart.yaml"])
    assert meta == {
        "chart": "demo",
        "namespace": "demo",
        "release": "demo",
        "repository": "https://example.invalid/charts",
        "version": "1.0.0",
    }
    assert yaml.safe_load(files["charts/demo/values.yaml"]) == {"a": {"b": 1}}
