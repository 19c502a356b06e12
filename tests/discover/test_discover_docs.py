"""The discover commands docs/user/discover.md and README.md print run as written: through
bash, with `gpufabric` on PATH, in a checkout-like working directory whose kubeconfig
(~/.kube/config, `K` in the docs) points at the fake API server seeded with a stack."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from builders import REPO
from discoverseed import nodes, objects
from fake_kube import FakeKube
from test_runbook import code_blocks

from gpufabric.model.stackfile import load_stack
from gpufabric.plan.build import build_plan

DOCS = {
    "docs/user/discover.md": REPO / "docs" / "user" / "discover.md",
    "README.md": REPO / "README.md",
}


def discover_lines(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    if path.name == "README.md":
        start = text.index("## Start from a running cluster")
        text = text[start : text.index("\n## ", start + 1)]
    return [line for line in code_blocks(text) if line.startswith("gpufabric ")]


def _workdir(tmp: Path, fake: FakeKube) -> dict[str, str]:
    (tmp / "Pulumi.yaml").write_text((REPO / "Pulumi.yaml").read_text("utf-8"), "utf-8")
    kube = tmp / "home" / ".kube"
    kube.mkdir(parents=True)
    cfg = json.loads(fake.kubeconfig(tmp).read_text("utf-8"))
    cfg["contexts"].append({"name": "prod", "context": cfg["contexts"][0]["context"]})
    (kube / "config").write_text(json.dumps(cfg), "utf-8")
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "gpufabric"
    shim.write_text(
        f"#!/bin/sh\nexec {sys.executable} -c "
        "'import sys; from gpufabric.cli import main; sys.exit(main(sys.argv[1:]))' \"$@\"\n",
        "utf-8",
    )
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    return {
        **os.environ,
        "HOME": str(tmp / "home"),
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PYTHONPATH": str(REPO),
        "K": str(kube / "config"),
    }


@pytest.mark.parametrize("doc", sorted(DOCS))
def test_the_discover_commands_the_docs_print_run(doc: str, tmp_path: Path) -> None:
    lines = discover_lines(DOCS[doc])
    assert any("--kubeconfig" in line for line in lines), lines
    # a cluster made by stack prod, the stack the docs' commands discover it as
    plan = build_plan("prod", load_stack("lab-roce").model)
    with FakeKube() as fake:
        for obj in nodes(plan) + objects(plan):
            fake.add(obj)
        env = _workdir(tmp_path, fake)
        for line in lines:
            # `K` in the docs stands for a kubeconfig file
            command = line.replace("--kubeconfig K ", '--kubeconfig "$K" ')
            done = subprocess.run(
                ["bash", "-c", command],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, f"{line}\n{done.stderr}"
        methods = {m for m, _ in fake.requests}
    assert methods == {"GET"}
    stack = tmp_path / "stacks" / "Pulumi.prod.yaml"
    assert stack.is_file()
    assert (tmp_path / "stacks" / "Pulumi.prod.import.json").is_file()
