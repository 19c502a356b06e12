"""Every manifest a mirrored stack pulls is servable from a plain HTTPS file mirror: the
Training Operator's kustomize git base is rendered once into a file (the command `gpufabric
images` and the runbook print, run here with the real kubectl over ../shared's copy of the base
at the pinned tag), served by a plain HTTP file server, and the stack's overlay builds on that
URL with the real `kubectl kustomize`: no MPIJob CRD, the stack's scheme flags, the mirrored
image."""

from __future__ import annotations

import functools
import http.server
import shlex
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import example_config, model_of, plan_of
from upstream import LOCAL_BASES, UPSTREAM, documents, tool

from gpufabric.model.sources import remote_base
from gpufabric.plan import ids
from gpufabric.plan.items import KustomizeOverlay
from gpufabric.plan.pulls import collect

pytestmark = pytest.mark.conformance

MIRROR = "https://files.example.internal/upstream"


def mirrored_config() -> dict[str, Any]:
    cfg = example_config("lab-roce")
    cfg["gpufabric:sources"] = {"manifests": MIRROR}
    return cfg


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A plain HTTP file server over ``tmp_path / 'www'``: (its root, its base URL)."""
    root = tmp_path / "www"
    root.mkdir()
    handler = functools.partial(Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_kustomize_git_base_is_pulled_as_one_rendered_file() -> None:
    plan = plan_of(mirrored_config())
    overlay = plan.item(ids.TRAINING_OPERATOR).payload
    assert isinstance(overlay, KustomizeOverlay)
    component = plan.components["training-operator"]
    upstream = component.upstream_manifest_url or ""
    assert "?ref=" in upstream  # the pinned git base
    manifest = overlay.parameters["manifest"]
    base = remote_base(upstream)
    assert base is not None
    assert manifest == f"{MIRROR}/{base.served_path}"
    assert manifest.endswith(f"/{component.version}/manifests/overlays/standalone.yaml")
    assert "?" not in manifest
    assert "//" not in manifest.removeprefix("https://")
    pulled = {m.component: m for m in collect("t", model_of(mirrored_config())).manifests}
    assert pulled["training-operator"].pulled_url == manifest
    assert pulled["training-operator"].build == base.build_command
    # plain file URLs stay plain files: no build step
    assert pulled["mpi-operator"].build is None


@pytest.mark.shared
def test_the_printed_build_serves_a_file_the_overlay_builds_on(
    tmp_path: Path, served: tuple[Path, str]
) -> None:
    local = UPSTREAM / "src" / LOCAL_BASES["training-operator"]
    if not local.is_dir():
        pytest.skip("../shared/upstream/src has no Training Operator base")
    kubectl = tool("kubectl")
    root, base_url = served
    model = model_of(mirrored_config())
    plan = plan_of(mirrored_config())
    entry = next(m for m in collect("t", model).manifests if m.component == "training-operator")
    assert entry.build is not None
    # 1. the printed command, as the user runs it on a connected machine (here: the same base
    #    at the same tag from ../shared instead of the network)
    command = entry.build.replace(shlex.quote(entry.url), shlex.quote(str(local)))
    command = command.replace("kubectl ", shlex.quote(kubectl) + " ", 1)
    subprocess.run(["bash", "-c", command], cwd=tmp_path, check=True, timeout=120)
    assert entry.build_file is not None
    written = tmp_path / entry.build_file
    # 2. the file, put on the file mirror at the path the stack pulls it from
    served_path = entry.pulled_url.removeprefix(MIRROR + "/")
    (root / served_path).parent.mkdir(parents=True)
    written.rename(root / served_path)
    # 3. the stack's overlay, its mirror base pointed at the local file server
    overlay = plan.item(ids.TRAINING_OPERATOR).payload
    assert isinstance(overlay, KustomizeOverlay)
    work = tmp_path / "overlay"
    for rel, text in overlay.files().items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text.replace(MIRROR, base_url))
    out = subprocess.run(
        [kubectl, "kustomize", str(work)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    objects = documents(out.stdout)
    crds = {o["metadata"]["name"] for o in objects if o["kind"] == "CustomResourceDefinition"}
    assert "pytorchjobs.kubeflow.org" in crds
    assert "mpijobs.kubeflow.org" not in crds
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == list(plan.facts.operators.training_operator_args)
    assert container["image"] == plan.components["training-operator"].image_ref
    assert yaml.safe_load((work / "kustomization.yaml").read_text())["resources"] == [
        f"{base_url}/{served_path}"
    ]
