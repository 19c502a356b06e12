"""The GitHub workflows: schema-valid offline, least privilege, pinned actions, and the diff
step's scripts run for real on a pair of renders."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO, example_config

from gpufabric.cli import main

WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))
SCRIPTS = REPO / ".github" / "scripts"
GPUFABRIC = str(Path(sys.executable).parent / "gpufabric")


def load(name: str) -> dict[str, Any]:
    doc = yaml.safe_load((REPO / ".github" / "workflows" / name).read_text())
    doc["on"] = doc.pop(True, doc.get("on"))  # YAML 1.1 reads the `on` key as True
    return doc


def test_workflows_validate_against_the_github_schema() -> None:
    assert [w.name for w in WORKFLOWS] == ["deploy.yml", "preview.yml"]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "check_jsonschema",
            "--builtin-schema",
            "vendor.github-workflows",
            *map(str, WORKFLOWS),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_broken_workflow_is_caught(tmp_path: Path) -> None:
    """The schema check can fail: a misspelt trigger is rejected."""
    bad = tmp_path / "bad.yml"
    bad.write_text(
        (REPO / ".github/workflows/preview.yml")
        .read_text()
        .replace("pull_request:", "pull_reqest:", 1)
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "check_jsonschema",
            "--builtin-schema",
            "vendor.github-workflows",
            str(bad),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode != 0


@pytest.mark.parametrize("name", ["preview.yml", "deploy.yml"])
def test_least_privilege_and_pinned_actions(name: str) -> None:
    doc = load(name)
    assert doc["permissions"] == {"contents": "read"}
    assert "pull_request_target" not in doc["on"]
    text = (REPO / ".github/workflows" / name).read_text()
    uses = re.findall(r"uses:\s*(\S+)", text)
    assert uses
    for ref in uses:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+@v\d+\.\d+\.\d+", ref), (
            f"{ref} is not pinned to a release"
        )
    for job in doc["jobs"].values():
        perms = job.get("permissions", {})
        assert set(perms.values()) <= {"read", "write"}
        if perms.get("pull-requests") == "write":
            assert any("comment" in str(s).lower() for s in job["steps"])


def test_preview_concurrency_per_pr_and_skipped_preview() -> None:
    doc = load("preview.yml")
    assert doc["concurrency"]["group"] == "preview-${{ github.event.pull_request.number }}"
    assert doc["concurrency"]["cancel-in-progress"] is True
    assert doc["jobs"]["test"]["steps"][-1]["run"] == "make test"
    preview = doc["jobs"]["pulumi-preview"]
    assert "needs.diff.outputs.preview == 'ran'" in preview["if"]
    action = next(
        s for s in preview["steps"] if str(s.get("uses", "")).startswith("pulumi/actions@")
    )
    assert action["with"]["command"] == "preview"
    assert action["with"]["comment-on-pr"] is True
    assert action["with"]["diff"] is True


def test_deploy_is_gated_by_the_stacks_environment() -> None:
    doc = load("deploy.yml")
    assert doc["on"]["push"]["branches"] == ["main"]
    up = doc["jobs"]["up"]
    assert up["environment"] == "${{ matrix.stack }}"
    assert up["concurrency"]["cancel-in-progress"] is False
    action = next(s for s in up["steps"] if str(s.get("uses", "")).startswith("pulumi/actions@"))
    assert action["with"]["command"] == "up"


def _script_env() -> dict[str, str]:
    return {**os.environ, "GPUFABRIC": GPUFABRIC}


def test_diff_comment_step_on_a_pair_of_renders(tmp_path: Path) -> None:
    """What the PR comment says when lab-roce's MTU was 4200 on the base branch."""
    base_cfg = example_config("lab-roce")
    base_cfg["gpufabric:fabric"]["mtu"] = 4200
    src = tmp_path / "base-src"
    src.mkdir()
    (src / "Pulumi.lab-roce.yaml").write_text(yaml.safe_dump({"config": base_cfg}))
    assert (
        main(
            [
                "render",
                "--stack",
                str(src / "Pulumi.lab-roce.yaml"),
                "--out",
                str(tmp_path / "base"),
            ]
        )
        == 0
    )
    out = tmp_path / "comment.md"
    subprocess.run(
        [str(SCRIPTS / "diff-comment.sh"), "lab-roce", str(tmp_path / "base"), "skipped", str(out)],
        cwd=REPO,
        env=_script_env(),
        check=True,
    )
    md = out.read_text()
    lines = md.splitlines()
    assert lines[0] == "<!-- gpufabric-diff:lab-roce -->"
    assert lines[1] == f"### gpufabric diff: `lab-roce` against `{tmp_path / 'base'}`"
    assert lines[3].startswith("`lab-roce`: 2 items change — **2 disruptive**")
    assert "`object.spec.config.mtu`: 4200 → 9000" in md
    assert "MTU change on rail0 (4200 -> 9000)" in md
    assert "`pulumi preview` was **skipped** for `lab-roce`" in md
    subprocess.run(
        [str(SCRIPTS / "diff-comment.sh"), "lab-roce", str(tmp_path / "base"), "ran", str(out)],
        cwd=REPO,
        env=_script_env(),
        check=True,
    )
    assert "posted by the Pulumi action" in out.read_text()


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_changed_stacks_lists_only_stacks_whose_result_changes(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    for part in ("gpufabric", "manifests", "stacks", ".github", "Pulumi.yaml"):
        src = REPO / part
        if src.is_dir():
            shutil.copytree(src, repo / part, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(src, repo / part)
    ident = ["-c", "user.email=t@example.com", "-c", "user.name=t"]
    subprocess.run(["git", "-C", str(repo), "init", "-q"], check=True)
    subprocess.run(["git", "-C", str(repo), *ident, "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), *ident, "commit", "-qm", "base"], check=True)
    stack = repo / "stacks/Pulumi.prod-ib.yaml"
    stack.write_text(stack.read_text() + "\n# a comment changes nothing rendered\n")
    lab = repo / "stacks/Pulumi.lab-roce.yaml"
    lab.write_text(
        lab.read_text().replace(
            "gpuQuota: 16\n      priority: 100", "gpuQuota: 12\n      priority: 100"
        )
    )
    proc = subprocess.run(
        [str(repo / ".github/scripts/changed-stacks.sh"), "HEAD"],
        cwd=repo,
        env=_script_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    assert proc.stdout.strip() == '["lab-roce"]'
