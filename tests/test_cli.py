"""The `gpufabric` command as users run it: exit codes, messages, files."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLE_STACKS, REPO
from msgspec.structs import replace

from gpufabric.cli import main
from gpufabric.exitcodes import ExitCode
from gpufabric.model.stackfile import load_stack
from gpufabric.outputs.schema import is_builtin
from gpufabric.plan.build import build_plan


def test_validate_ok(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--stack", "lab-roce"]) == 0
    assert "ok (roce, 2 rails, rdma shared" in capsys.readouterr().out


def test_stacks_lists_every_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stacks"]) == 0
    out = capsys.readouterr().out
    for name in ("lab-roce", "prod-ib", "roce-sriov-volcano", "kind-dev"):
        assert name in out


def test_plan_prints_items_in_order(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--stack", "prod-ib"]) == 0
    lines = capsys.readouterr().out.splitlines()
    count = len(build_plan("prod-ib", load_stack("prod-ib").model).items)
    assert lines[0] == f"stack prod-ib: {count} items in apply order"
    body = "\n".join(lines[1:])
    # The GPU Operator (after its namespace) comes before the tenants.
    assert body.index("helm gpu-operator v26.7.0 -n gpu-operator [protect]") < body.index(
        "Namespace llm-pretrain [protect]"
    )
    assert "after: gpu/namespace" in body


def test_render_writes_the_contract_and_a_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "lab"
    assert main(["render", "--stack", "lab-roce", "--out", str(out)]) == 0
    summary = capsys.readouterr().out
    plan = build_plan("lab-roce", load_stack("lab-roce").model)
    objects = [obj for _, obj in plan.objects()]
    tenants = sum(1 for it, _ in plan.objects() if it.layer.value == "tenants")
    minor = load_stack("lab-roce").model.cluster.kubernetes_minor
    core = sum(1 for o in objects if is_builtin(minor, o.api_version, o.kind))
    assert f"tenants        {tenants:>2} objects" in summary
    assert "chart       gpu-operator v26.7.0" in summary
    assert "chart       network-operator 26.4.1" in summary
    assert "chart       kueue 0.19.2" in summary
    assert "kustomize   overlays/multus-thick -> kube-system" in summary
    assert "kustomize   overlays/mpi-operator -> mpi-operator" in summary
    assert f"schema-validated {core} built-in objects" in summary
    assert f"not checked: {len(objects) - core} custom resources (pass --crd-dir)" in summary
    doc = json.loads((out / "plan.json").read_text())
    assert len(doc["items"]) == len(plan.items)


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (lambda c: c["gpufabric:fabric"].update(mtuu=9000), "fabric.mtuu"),
        (
            lambda c: c["gpufabric:fabric"]["rails"][1].update(subnet="192.168.10.0/25"),
            "fabric.rails[1].subnet",
        ),
        (lambda c: c["gpufabric:gpuNodes"].update(count="four"), "gpuNodes.count"),
        (lambda c: c["gpufabric:scheduling"].update(gang=["kueue", "volcano"]), "scheduling.gang"),
    ],
)
def test_bad_stacks_exit_2_naming_the_path(
    mutate: Callable[[dict[str, Any]], None],
    path: str,
    lab: dict[str, Any],
    write_stack: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    mutate(lab)
    stack = write_stack(lab)
    assert main(["validate", "--stack", str(stack)]) == 2
    assert main(["render", "--stack", str(stack), "--out", str(stack.parent / "out")]) == 2
    err = capsys.readouterr().err
    assert f"  - {path}: " in err
    assert not (stack.parent / "out").exists()  # nothing half-written


@pytest.mark.parametrize("text", ["", "config: [\n", "config:\n  gpufabric:cluster: 3\n"])
def test_no_traceback_ever_reaches_the_user(text: str, write_stack: Callable[..., Path]) -> None:
    stack = write_stack(text)
    proc = subprocess.run(
        [sys.executable, "-m", "gpufabric", "validate", "--stack", str(stack)],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert str(stack) in proc.stderr


def test_missing_crd_dir_is_bad_input(tmp_path: Path) -> None:
    assert main(["render", "--stack", "kind-dev", "--crd-dir", str(tmp_path / "nope")]) == 2


def test_invalid_rendered_objects_exit_6_and_write_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpufabric.plan.build import Plan, build_plan
    from gpufabric.plan.items import Item, K8sObject, Layer

    def broken(stack: str, model: Any) -> Plan:
        plan = build_plan(stack, model)
        bad = K8sObject(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "datta": {}}
        )
        return replace(
            plan, items=(*plan.items, Item(id="tenants/bad", layer=Layer.TENANTS, payload=bad))
        )

    earlier = tmp_path / "earlier"
    assert main(["render", "--stack", "kind-dev", "--out", str(earlier)]) == 0
    before = {p: p.read_bytes() for p in earlier.rglob("*") if p.is_file()}
    monkeypatch.setattr("gpufabric.model.stackfile.build_plan", broken)
    out = tmp_path / "out"
    for target in (out, earlier):
        capsys.readouterr()
        assert (
            main(["render", "--stack", "kind-dev", "--out", str(target)])
            == ExitCode.INVALID_OBJECTS
            == 6
        )
        err = capsys.readouterr().err
        assert "ConfigMap/x" in err
        assert "datta" in err
        assert "nothing was written" in err
    assert not out.exists()
    assert {p: p.read_bytes() for p in earlier.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["earlier"]


@pytest.mark.parametrize("name", EXAMPLE_STACKS)
def test_every_example_renders_against_the_pinned_crds_identically(
    name: str, crd_dir: Path, tmp_path: Path
) -> None:
    trees = []
    for run in ("a", "b"):
        out = tmp_path / run
        assert main(["render", "--stack", name, "--out", str(out), "--crd-dir", str(crd_dir)]) == 0
        trees.append({p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()})
    assert trees[0] == trees[1]


def test_plan_prints_the_pod_contract(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--stack", "lab-roce"]) == 0
    out = capsys.readouterr().out
    contract = out[out.index("pod contract") :]
    assert "tenants: team-vision, team-speech" in contract
    assert "network   rail0    <- gpufabric-networks/rail0" in contract
    assert "resource  rdma/rail1: 1" in contract
    assert "env       NCCL_IB_TC=104" in contract


def test_warnings_go_to_stderr_and_keep_exit_0(
    lab: dict[str, Any], write_stack: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    lab["gpufabric:fabric"]["mtu"] = 1500
    assert main(["validate", "--stack", str(write_stack(lab))]) == 0
    assert "warning: fabric.mtu: 1500 caps the RDMA path MTU" in capsys.readouterr().err
