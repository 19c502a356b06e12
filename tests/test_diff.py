"""`gpufabric diff`: field-level changes per item in apply order, each classified by the
disruption applying it causes. Bases are earlier renders of an edited stack, and a git ref
rendered by that ref's code."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO, example_config

from gpufabric.cli import main


def stack_file(directory: Path, config: dict[str, Any], name: str = "lab") -> Path:
    """Base and head share the stack name (it labels every object), in separate dirs."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"Pulumi.{name}.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    return path


def render(config: dict[str, Any], out: Path) -> None:
    path = stack_file(out.parent / "base-src", config)
    assert main(["render", "--stack", str(path), "--out", str(out)]) == 0


def run_diff(
    write_stack: Callable[..., Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    base: dict[str, Any],
    head: dict[str, Any],
) -> dict[str, Any]:
    render(base, tmp_path / "base")
    head_path = stack_file(tmp_path / "head-src", head)
    capsys.readouterr()
    assert (
        main(
            [
                "diff",
                "--stack",
                str(head_path),
                "--base",
                str(tmp_path / "base"),
                "--format",
                "json",
            ]
        )
        == 0
    )
    return json.loads(capsys.readouterr().out)


def by_id(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {i["id"]: i for i in doc["items"]}


@pytest.fixture
def diff_of(
    write_stack: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]:
    return lambda base, head: run_diff(write_stack, tmp_path, capsys, base, head)


def test_identical_stacks_have_no_changes(diff_of: Any) -> None:
    lab = example_config("lab-roce")
    assert diff_of(lab, lab)["items"] == []


def test_mtu_change_is_disruptive_per_rail(diff_of: Any) -> None:
    base = example_config("lab-roce")
    head = example_config("lab-roce")
    head["gpufabric:fabric"]["mtu"] = 4200
    items = by_id(diff_of(base, head))
    nad = items["network/nad/rail0"]
    assert nad["class"] == "disruptive"
    assert {"path": "object.spec.config.mtu", "old": 9000, "new": 4200} in nad["fields"]
    assert nad["reasons"][0].startswith("MTU change on rail0 (9000 -> 4200)")
    assert items["network/nad/rail1"]["class"] == "disruptive"


def test_tenant_added_is_a_plain_update(diff_of: Any) -> None:
    base = example_config("lab-roce")
    head = example_config("lab-roce")
    head["gpufabric:tenants"][0]["gpuQuota"] = 8
    head["gpufabric:tenants"].append({"namespace": "team-nlp", "gpuQuota": 8})
    doc = diff_of(base, head)
    assert doc["summary"]["disruptive"] == 0
    assert doc["summary"]["replacing"] == 0
    added = [i["id"] for i in doc["items"] if i["change"] == "added"]
    assert added == [
        "scheduling/team-nlp/priority",
        "scheduling/team-nlp/queue",
        "tenants/team-nlp/namespace",
        "tenants/team-nlp/resource-quota",
        "tenants/team-nlp/local-queue",
        "tenants/team-nlp/role-binding",
        "tenants/team-nlp/nccl-env",
        # the stack's claims for every tenant (lab-roce: an existing CephFS class)
        "storage/quota/team-nlp",
        "storage/claim/team-nlp/checkpoints",
        "storage/claim/team-nlp/datasets",
    ]


def test_rdma_mode_change_is_disruptive_with_the_reboot_reason(diff_of: Any) -> None:
    base = example_config("lab-roce")
    head = example_config("lab-roce")
    head["gpufabric:fabric"]["rdma"] = "sriov"
    head["gpufabric:fabric"]["sriov"] = {"numVfs": 8}
    items = by_id(diff_of(base, head))
    pool = items["network/sriov-rdma-exclusive"]
    assert (pool["change"], pool["class"]) == ("added", "disruptive")
    assert pool["reasons"] == ["switching the RDMA subsystem to exclusive reboots GPU nodes"]
    assert items["network/sriov-policy/rail0"]["reasons"] == [
        "creating or changing VFs drains and may reboot GPU nodes"
    ]


def test_rail_removed_is_disruptive(diff_of: Any) -> None:
    base = example_config("lab-roce")
    head = example_config("lab-roce")
    head["gpufabric:fabric"]["rails"].pop()
    doc = diff_of(base, head)
    items = by_id(doc)
    nad = items["network/nad/rail1"]
    assert (nad["change"], nad["class"]) == ("removed", "disruptive")
    assert nad["reasons"][0].startswith("rail rail1 removed")
    assert items["network/pool/rail1"]["change"] == "removed"
    # removals come last, in reverse apply order (the order Pulumi deletes them)
    ids = [i["id"] for i in doc["items"]]
    assert ids.index("network/nad/rail1") < ids.index("network/pool/rail1")
    assert ids[-2:] == ["network/nad/rail1", "network/pool/rail1"]


def test_pin_bumps(diff_of: Any) -> None:
    base = example_config("lab-roce")
    head = example_config("lab-roce")
    head["gpufabric:versions"] = {"kueue": "0.19.1", "gpu-operator": "v25.10.1"}
    items = by_id(diff_of(base, head))
    kueue = items["scheduling/kueue"]
    assert kueue["class"] == "update"
    assert {"path": "chart.version", "old": "0.19.2", "new": "0.19.1"} in kueue["fields"]
    gpu = items["gpu/gpu-operator"]
    assert gpu["class"] == "disruptive"
    assert "GPU driver change (chart.version)" in gpu["reasons"][0]


def test_operator_removal_is_disruptive(diff_of: Any) -> None:
    base = example_config("lab-roce")
    head = example_config("lab-roce")
    head["gpufabric:training"]["trainingOperator"]["schemes"] = []
    items = by_id(diff_of(base, head))
    op = items["training/training-operator"]
    assert (op["change"], op["class"]) == ("removed", "disruptive")
    assert "deletes its CRDs" in op["reasons"][0]


def test_immutable_topology_levels_replace(diff_of: Any) -> None:
    base = example_config("prod-ib")
    head = example_config("prod-ib")
    head["gpufabric:scheduling"]["topologyLevels"] = ["example.com/leaf", "kubernetes.io/hostname"]
    items = by_id(diff_of(base, head))
    assert items["scheduling/topology"]["class"] == "replacing"
    assert items["scheduling/topology"]["reasons"] == [
        "spec.levels is immutable: Pulumi replaces the Topology"
    ]


def test_markdown_puts_disruptive_first(
    write_stack: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = example_config("lab-roce")
    head = example_config("lab-roce")
    head["gpufabric:fabric"]["mtu"] = 4200
    head["gpufabric:tenants"][1]["priority"] = 50
    render(base, tmp_path / "base")
    head_path = stack_file(tmp_path / "head-src", head)
    capsys.readouterr()
    argv = ["diff", "--stack", str(head_path), "--base", str(tmp_path / "base")]
    assert main(argv) == 0
    md = capsys.readouterr().out
    assert md.splitlines()[2].startswith("`lab`: ")
    assert "**2 disruptive**" in md.splitlines()[2]
    assert md.index("#### Disruptive") < md.index("<details>")
    assert "- **network/nad/rail0**" in md
    assert "`object.spec.config.mtu`: 9000 → 4200" in md
    assert main([*argv, "--fail-on-disruptive"]) == 4


def test_bad_base_is_an_input_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", "--stack", "lab-roce", "--base", "no-such-ref-xyz"]) == 2
    assert "--base no-such-ref-xyz" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["diff", "--stack", "lab-roce", "--base", str(tmp_path / "empty")]) == 2
    assert "no plan.json" in capsys.readouterr().err


@pytest.mark.parametrize(
    "damage",
    [
        "string",
        "list",
        "empty",
        "missing",
        "symlink",
        "plan-link",
        "deep",
        "deep-json",
        "deep-plan",
    ],
)
def test_a_damaged_base_render_is_an_input_error_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    """A damaged earlier render used to give a traceback (an object file holding a plain
    string) or a made-up change (a missing or symlinked file: ``object: ∅ → ∅``)."""
    base = tmp_path / "base"
    assert main(["render", "--stack", "lab-roce", "--out", str(base)]) == 0
    plan = json.loads((base / "plan.json").read_text())
    name = next(f for i in plan["items"] if i["type"] == "object" for f in i["files"])
    victim = base / name
    if damage == "string":
        victim.write_text("just a string\n")
    elif damage == "list":
        victim.write_text("- a\n- b\n")
    elif damage == "empty":
        victim.write_text("")
    elif damage == "missing":
        victim.unlink()
    elif damage == "deep":  # a RecursionError traceback before
        victim.write_text(victim.read_text() + "deep: " + "[" * 600 + "]" * 600 + "\n")
    elif damage == "deep-json":  # JSON in a string is expanded like a NAD's CNI config
        victim.write_text(victim.read_text() + "deep: '" + "[" * 900 + "]" * 900 + "'\n")
    elif damage == "deep-plan":
        name = "plan.json"
        (base / name).write_text("[" * 100_000 + "]" * 100_000)
    elif damage == "symlink":
        (tmp_path / "elsewhere.yaml").write_text(victim.read_text())
        victim.unlink()
        victim.symlink_to(tmp_path / "elsewhere.yaml")
    else:
        name = "plan.json"
        (tmp_path / "plan.json").write_text((base / name).read_text())
        (base / name).unlink()
        (base / name).symlink_to(tmp_path / "plan.json")
    capsys.readouterr()
    assert main(["diff", "--stack", "lab-roce", "--base", str(base)]) == 2
    err = capsys.readouterr().err
    assert f"gpufabric diff: --base {base}: {name}" in err
    assert "the render is " in err
    assert "Traceback" not in err


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_ref_is_rendered_by_that_refs_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "repo"
    for part in ("gpufabric", "manifests", "stacks", "Pulumi.yaml"):
        src = REPO / part
        if src.is_dir():
            shutil.copytree(src, repo / part, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(src, repo / part)

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)

    git("init", "-q")
    git("-c", "user.email=t@example.com", "-c", "user.name=t", "add", "-A")
    git("-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qm", "base")
    stack = repo / "stacks/Pulumi.lab-roce.yaml"
    stack.write_text(stack.read_text().replace("mtu: 9000", "mtu: 4200"))
    monkeypatch.chdir(repo)
    assert main(["diff", "--stack", "lab-roce", "--base", "HEAD", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["base"] == "HEAD"
    assert by_id(doc)["network/nad/rail0"]["class"] == "disruptive"


def test_a_mirror_change_of_a_chart_is_a_plain_update_and_added_items_list_only_fields(
    tmp_path: Path,
) -> None:
    from gpufabric.outputs import diff as semantic_diff

    base = {
        "plan.json": json.dumps(
            {
                "items": [
                    {
                        "id": "gpu/gpu-operator",
                        "type": "helm-chart",
                        "layer": "gpu",
                        "chart": "gpu-operator",
                        "version": "v26.7.0",
                        "namespace": "gpu-operator",
                        "component": "gpu-operator",
                        "files": ["charts/gpu-operator/chart.yaml"],
                    }
                ]
            }
        ),
        "charts/gpu-operator/chart.yaml": "repository: https://helm.ngc.nvidia.com/nvidia\n",
    }
    head = dict(base)
    head["charts/gpu-operator/chart.yaml"] = "repository: oci://mirror.example/nvidia\n"
    (change,) = semantic_diff.diff(
        semantic_diff.side_from_files(base), semantic_diff.side_from_files(head)
    )
    assert change.klass == "update"
    assert change.reasons == []
    added = semantic_diff.diff(
        semantic_diff.side_from_files({}), semantic_diff.side_from_files(head)
    )
    (item,) = added
    assert item.change == "added"
    assert all(f.path for f in item.fields)  # no "{} -> ∅" line for the whole item
    assert "{} → ∅" not in semantic_diff.to_markdown("s", "base", added)
