"""The real upstream tools and artifacts, for the conformance suite.

Found through GPUFABRIC_SHARED (its upstream/ folder), ../shared/upstream beside the
checkout, or PATH for the binaries (a user's own helm and kubectl; charts are then pulled
by `helm pull` into a cache the user names with GPUFABRIC_CHARTS). Everything skips cleanly
when a piece is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import REPO

from gpufabric.outputs.render import to_yaml
from gpufabric.plan.items import HelmChart, KustomizeOverlay
from gpufabric.support.yamlcodec import Loader as YamlLoader

SHARED = Path(os.environ.get("GPUFABRIC_SHARED", REPO.parent / "shared"))
UPSTREAM = SHARED / "upstream"
CRDS = SHARED / "crds"

LOCAL_BASES = {
    # component -> (path under upstream/src, the remote manifest it stands for)
    "mpi-operator": "mpi-operator-v0.8.0/deploy/v2beta1/mpi-operator.yaml",
    "multus": "multus-v4.3.0/deployments/multus-daemonset-thick.yml",
    "node-problem-detector": "node-problem-detector-v1.36.0/deployment",
    "training-operator": "training-operator-v1.9.4/manifests/overlays/standalone",
}


@cache
def tool(name: str) -> str:
    local = UPSTREAM / "bin" / name
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not available (../shared/upstream/bin or PATH)")
    return found


def chart_archive(chart: HelmChart) -> Path:
    charts = Path(os.environ.get("GPUFABRIC_CHARTS", UPSTREAM / "charts"))
    for name in (
        f"{chart.chart}-{chart.version}.tgz",
        f"{chart.chart}-v{chart.version.lstrip('v')}.tgz",
        f"{chart.chart}-{chart.version.lstrip('v')}.tgz",
    ):
        if (charts / name).is_file():
            return charts / name
    pytest.skip(f"chart {chart.chart} {chart.version} is not in {charts}")


def run(args: list[str], cwd: Path | None = None) -> str:
    proc = subprocess.run(args, capture_output=True, text=True, cwd=cwd, check=False)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(args[:3])} failed:\n{proc.stderr[-3000:]}")
    return proc.stdout


def documents(text: str) -> list[dict[str, Any]]:
    # libyaml when PyYAML has it: the charts' CRDs are megabytes of YAML
    return [
        d for d in yaml.load_all(text, Loader=YamlLoader) if isinstance(d, dict) and d.get("kind")
    ]


def helm_template(chart: HelmChart, kube_minor: str) -> list[dict[str, Any]]:
    """`helm template` of the pinned chart with the stack's values, as Helm renders it."""
    archive = chart_archive(chart)
    with tempfile.TemporaryDirectory() as tmp:
        values = Path(tmp) / "values.yaml"
        values.write_text(to_yaml(chart.values))
        out = run(
            [
                tool("helm"),
                "template",
                chart.release,
                str(archive),
                "--namespace",
                chart.namespace,
                "--values",
                str(values),
                "--kube-version",
                f"{kube_minor}.0",
                "--include-crds",
            ]
        )
    return documents(out)


def kustomize(overlay: KustomizeOverlay) -> list[dict[str, Any]]:
    """`kubectl kustomize` of the overlay as applied, its remote base replaced by the local
    upstream copy at the pinned tag."""
    local = LOCAL_BASES.get(overlay.component)
    source = UPSTREAM / "src" / local if local else None
    if source is None or not source.exists():
        if os.environ.get("GPUFABRIC_CONFORMANCE_REMOTE") == "1":
            return _kustomize_remote(overlay)
        pytest.skip(
            f"no local upstream copy of {overlay.component} "
            "(set GPUFABRIC_CONFORMANCE_REMOTE=1 to fetch the pinned remote base)"
        )
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        # the whole upstream tree, so relative bases inside it resolve
        tree = root / "upstream"
        shutil.copytree(UPSTREAM / "src" / local.split("/", 1)[0], tree)
        base = tree / local.split("/", 1)[1]
        overlay_dir = root / "overlay"
        for rel, text in overlay.files().items():
            (overlay_dir / rel).parent.mkdir(parents=True, exist_ok=True)
            (overlay_dir / rel).write_text(text)
        kustomization = overlay_dir / "kustomization.yaml"
        doc = yaml.safe_load(kustomization.read_text())
        manifest = overlay.parameters["manifest"]
        assert manifest in doc["resources"], f"the overlay does not build on {manifest}"
        doc["resources"] = [
            os.path.relpath(base, overlay_dir) if r == manifest else r for r in doc["resources"]
        ]
        kustomization.write_text(yaml.safe_dump(doc, sort_keys=False))
        out = run(
            [
                tool("kubectl"),
                "kustomize",
                "--load-restrictor",
                "LoadRestrictionsNone",
                str(overlay_dir),
            ]
        )
    return documents(out)


def _kustomize_remote(overlay: KustomizeOverlay) -> list[dict[str, Any]]:
    """The overlay exactly as applied: kustomize fetches the pinned remote base."""
    with tempfile.TemporaryDirectory() as tmp:
        for rel, text in overlay.files().items():
            (Path(tmp) / rel).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / rel).write_text(text)
        return documents(run([tool("kubectl"), "kustomize", tmp]))


def crd_dir_with(objects: list[dict[str, Any]], into: Path) -> Path:
    """The pinned CRDs (../shared/crds) plus the CRDs a render itself carries."""
    if CRDS.is_dir():
        shutil.copytree(CRDS, into / "shared")
    (into / "rendered").mkdir(parents=True, exist_ok=True)
    for i, obj in enumerate(o for o in objects if o["kind"] == "CustomResourceDefinition"):
        (into / "rendered" / f"crd-{i}.yaml").write_text(yaml.safe_dump(obj))
    return into
