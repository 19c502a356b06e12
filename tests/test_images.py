"""Mirrors (the `sources` section) and `gpufabric images`: what a stack pulls, and an
overridden stack that pulls nothing from upstream."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from builders import model_of, problem_lines
from conftest import EXAMPLE_STACKS, REPO, SHARED, example_config
from kustomize_lite import build

from gpufabric.cli import main
from gpufabric.model.sources import Mirrors, full_name, remote_base, split_registry, split_tag
from gpufabric.model.versions import load_catalog
from gpufabric.outputs.render import render_files
from gpufabric.plan.build import Plan, build_plan
from gpufabric.plan.items import HelmChart, KustomizeOverlay
from gpufabric.plan.pulls import collect

FIXTURES = REPO / "tests" / "fixtures" / "upstream"
UPSTREAM_HOSTS = (
    "nvcr.io",
    "ghcr.io",
    "registry.k8s.io",
    "docker.io",
    "helm.ngc.nvidia.com",
    "raw.githubusercontent.com",
    "github.com",
    "volcano-sh.github.io",
    "us-central1-docker.pkg.dev",
)
MIRROR = "mirror.example.internal"
EVERYTHING = {
    "registries": {
        "nvcr.io": f"{MIRROR}/nvcr",
        "ghcr.io": f"{MIRROR}/ghcr",
        "registry.k8s.io": f"{MIRROR}/k8s",
        "docker.io": f"{MIRROR}/hub",
        "us-central1-docker.pkg.dev": f"{MIRROR}/staging",
        "gcr.io": f"{MIRROR}/gcr",
        "quay.io": f"{MIRROR}/quay",
    },
    "charts": {
        "https://helm.ngc.nvidia.com/nvidia": f"oci://{MIRROR}/charts/nvidia",
        "oci://registry.k8s.io/kueue/charts": f"oci://{MIRROR}/charts/kueue",
        "oci://registry.k8s.io/dra-driver-nvidia/charts": f"oci://{MIRROR}/charts/dra",
        "oci://ghcr.io/kubeflow/charts": f"https://{MIRROR}/helm/kubeflow",
        "https://volcano-sh.github.io/helm-charts": f"oci://{MIRROR}/charts/volcano",
        "https://prometheus-community.github.io/helm-charts": f"oci://{MIRROR}/charts/prom",
        "https://raw.githubusercontent.com/kubernetes-csi/csi-driver-nfs/master/charts": (
            f"oci://{MIRROR}/charts/csi-driver-nfs"
        ),
    },
    "manifests": f"https://{MIRROR}/upstream",
    "airGapped": True,
}


def mirrored(name: str, sources: dict[str, Any] | None = None) -> dict[str, Any]:
    config = example_config(name)
    config["gpufabric:sources"] = sources or EVERYTHING
    return config


# ------------------------------------------------------------------------ reference parsing


@pytest.mark.parametrize(
    ("ref", "registry", "rest"),
    [
        ("nvcr.io/nvidia/driver:595.91.07", "nvcr.io", "nvidia/driver:595.91.07"),
        ("mpioperator/mpi-operator:0.8.0", "docker.io", "mpioperator/mpi-operator:0.8.0"),
        ("alpine:3.21", "docker.io", "library/alpine:3.21"),
        ("localhost:5000/x/y:1", "localhost:5000", "x/y:1"),
        ("index.docker.io/library/busybox", "docker.io", "library/busybox"),
        ("ghcr.io", "ghcr.io", ""),
    ],
)
def test_registry_of_an_image_reference(ref: str, registry: str, rest: str) -> None:
    assert split_registry(ref) == (registry, rest)


def test_tags_and_registry_ports_are_told_apart() -> None:
    assert split_tag("host:5000/img") == ("host:5000/img", "")
    assert split_tag("host:5000/img:v1") == ("host:5000/img", "v1")
    assert full_name("pytorch/pytorch:2") == "docker.io/pytorch/pytorch:2"


def test_mirrors_rewrite_images_charts_and_manifests() -> None:
    m = Mirrors(
        registries={"nvcr.io": "reg.example/nvcr", "docker.io": "reg.example/hub"},
        charts={"https://helm.ngc.nvidia.com/nvidia": "oci://reg.example/charts"},
        manifests="https://files.example/up",
    )
    assert m.image("nvcr.io/nvidia/driver:1") == "reg.example/nvcr/nvidia/driver:1"
    assert m.image("nvcr.io/nvidia") == "reg.example/nvcr/nvidia"  # a repository prefix
    assert m.image("docker.io") == "reg.example/hub"  # a registry value (Volcano)
    assert m.image("alpine:3") == "reg.example/hub/library/alpine:3"
    assert m.image("ghcr.io/a/b:1") == "ghcr.io/a/b:1"  # not mirrored: unchanged
    assert m.chart_repository("https://helm.ngc.nvidia.com/nvidia/") == "oci://reg.example/charts"
    assert (
        m.manifest("https://raw.githubusercontent.com/o/r/v1/f.yaml")
        == "https://files.example/up/raw.githubusercontent.com/o/r/v1/f.yaml"
    )


# ------------------------------------------------------------------------ gpufabric images


def object_images(body: Any) -> Iterator[str]:
    """Every image string an object references: container images and NVIDIA ImageSpecs."""
    if isinstance(body, dict):
        if isinstance(body.get("image"), str):
            if "repository" in body and "version" in body:
                yield f"{body['repository']}/{body['image']}:{body['version']}"
            else:
                yield body["image"]
        for v in body.values():
            yield from object_images(v)
    elif isinstance(body, list):
        for v in body:
            yield from object_images(v)


@pytest.mark.parametrize("name", EXAMPLE_STACKS)
def test_images_lists_every_image_of_the_rendered_objects(name: str) -> None:
    m = model_of(example_config(name))
    pulled = {i.pulled for i in collect(name, m).images}
    rendered = render_files(build_plan(name, m))
    for path, text in rendered.items():
        if not path.startswith("objects/"):
            continue
        for doc in yaml.safe_load_all(text):
            for ref in object_images(doc):
                assert full_name(ref) in pulled or ref in pulled, f"{path}: {ref} not listed"


@pytest.mark.parametrize("name", EXAMPLE_STACKS)
def test_images_lists_the_charts_default_images_the_stack_switches_on(name: str) -> None:
    m = model_of(example_config(name))
    plan = build_plan(name, m)
    listed = collect(name, m)
    upstream = {i.upstream for i in listed.images}
    charts = [it.payload for it in plan.items if isinstance(it.payload, HelmChart)]
    assert {(c.chart, c.version) for c in listed.charts} == {(c.chart, c.version) for c in charts}
    for chart in charts:
        component = plan.components[chart.release]
        assert component.chart_images, f"{chart.release}: no chart-default images pinned"
        # The operator itself is always pulled and always listed.
        first = component.expand(component.chart_images[0].image) or ""
        assert full_name(first) in upstream
    overlays = [it.payload for it in plan.items if isinstance(it.payload, KustomizeOverlay)]
    assert len(listed.manifests) == len(overlays)
    for overlay in overlays:
        ref = plan.components[overlay.component].upstream_image_ref
        assert ref is not None
        assert full_name(ref) in upstream


def test_images_follow_the_stacks_chart_values() -> None:
    config = example_config("lab-roce")
    base = {i.upstream for i in collect("t", model_of(config)).images}
    assert not any("/gdrdrv:" in ref for ref in base)
    assert any("/dcgm-exporter:" in ref for ref in base)
    config["gpufabric:gpuOperator"] = {
        "gdrcopy": True,
        "dcgmExporter": {"enabled": False},
        "driver": {"version": "580.105.08"},
    }
    after = {i.upstream for i in collect("t", model_of(config)).images}
    assert "nvcr.io/nvidia/cloud-native/gdrdrv:v2.6" in after
    assert not any("/dcgm-exporter:" in ref for ref in after)
    assert "nvcr.io/nvidia/driver:580.105.08" in after  # the stack's driver, not the default


def test_images_cli_text_json_and_refs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["images", "--stack", "lab-roce"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("Stack lab-roce: 3 charts, 3 manifests,")
    assert "nvcr.io/nvidia/mellanox/k8s-rdma-shared-dev-plugin:network-operator-v26.4.1" in text
    assert "note: the operator pulls the tag suffixed with the nodes' OS" in text
    assert main(["images", "--stack", "lab-roce", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["mirrored"] is False
    assert {"image", "pulled", "usedBy"} <= set(doc["images"][0])
    assert main(["images", "--stack", "prod-ib", "--format", "refs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert (
        "nvcr.io/nvidia/gpu-operator:v26.7.0 harbor.prod-ib.example.internal/nvcr/nvidia/gpu-operator:v26.7.0"
        in lines
    )
    assert all(len(line.split()) == 2 for line in lines)  # prod-ib mirrors everything


def test_images_tell_how_to_make_the_file_a_file_mirror_serves_for_a_git_base(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["images", "--stack", "prod-ib", "--format", "json"]) == 0
    manifests = {m["component"]: m for m in json.loads(capsys.readouterr().out)["manifests"]}
    training = manifests["training-operator"]
    assert training["build_file"] == "trainer-v1.9.4-standalone.yaml"
    assert training["build"] == (
        f"kubectl kustomize '{training['url']}' > trainer-v1.9.4-standalone.yaml"
    )
    assert training["pulled_url"].endswith("/trainer/v1.9.4/manifests/overlays/standalone.yaml")
    assert "build" not in manifests["multus"]  # a plain file is copied as it is
    assert main(["images", "--stack", "prod-ib"]) == 0
    text = capsys.readouterr().out
    assert f"{training['build']} ; then serve trainer-v1.9.4-standalone.yaml at" in text


# ------------------------------------------------------------------- overridden stack render


def upstream_hosts_in(path: str, text: str) -> list[str]:
    """Upstream hosts left in a rendered file. A kustomize `images[].name` is the name the
    overlay replaces (what the upstream manifest says), not something pulled."""
    if path.startswith("kustomize/") and path.endswith("kustomization.yaml"):
        doc = yaml.safe_load(text)
        for image in doc.get("images", []):
            image.pop("name")
        text = yaml.safe_dump(doc)
    if path == "plan.json":
        return []
    # A host in host position: starting a URL's authority or an image reference. The
    # manifest mirror keeps the upstream host as a path segment (BASE/HOST/PATH): not a pull.
    return [
        h
        for h in UPSTREAM_HOSTS
        if re.search(rf"(?:^|[\s\"'\[,=]|://){re.escape(h)}(?=[/:\"'\s,\]]|$)", text, re.M)
    ]


@pytest.mark.parametrize("name", EXAMPLE_STACKS)
def test_an_overridden_stack_renders_with_no_upstream_host_left(name: str) -> None:
    m = model_of(mirrored(name))
    rendered = render_files(build_plan(name, m))
    left = {
        path: hosts for path, text in rendered.items() if (hosts := upstream_hosts_in(path, text))
    }
    assert left == {}
    # and what it would pull is all on the mirror
    pulled = collect(name, m)
    assert all(i.pulled.startswith(MIRROR) for i in pulled.images)
    assert all(MIRROR in c.pulled_repository for c in pulled.charts)
    assert all(u.pulled_url.startswith(f"https://{MIRROR}/") for u in pulled.manifests)


def test_the_example_air_gapped_stack_is_fully_mirrored() -> None:
    rendered = render_files(build_plan("prod-ib", model_of(example_config("prod-ib"))))
    left = {p: h for p, t in rendered.items() if (h := upstream_hosts_in(p, t))}
    assert left == {}


def built_images(plan: Plan, item_id: str, fixture: str) -> list[str]:
    """Container images of the Deployments the overlay builds over the upstream fixture."""
    overlay = plan.item(item_id).payload
    assert isinstance(overlay, KustomizeOverlay)
    upstream = yaml.safe_load((FIXTURES / fixture).read_text())
    return [
        c["image"]
        for o in build(overlay.files()["kustomization.yaml"], upstream)
        if o["kind"] == "Deployment"
        for c in o["spec"]["template"]["spec"]["containers"]
    ]


def test_mirrored_overlays_rename_images_and_keep_the_pinned_tags() -> None:
    plan = build_plan("t", model_of(mirrored("prod-ib")))
    assert built_images(plan, "training/mpi-operator", "mpi-operator-v0.8.yaml") == [
        f"{MIRROR}/hub/mpioperator/mpi-operator:0.8.0"
    ]
    assert built_images(plan, "training/training-operator", "training-operator-v1.9.yaml") == [
        f"{MIRROR}/ghcr/kubeflow/training-v1/training-operator:v1-93c5489"
    ]
    to = plan.item("training/training-operator").payload
    assert isinstance(to, KustomizeOverlay)
    text = to.files()["kustomization.yaml"]
    # a plain file mirror serves the git base as the one file rendered from it at the tag
    served = f"https://{MIRROR}/upstream/github.com/kubeflow/trainer/v1.9.4/manifests/overlays"
    assert f'"{served}/standalone.yaml"' in text
    assert "?ref=" not in text


@pytest.mark.parametrize(
    ("url", "served", "local"),
    [
        (
            "https://github.com/kubeflow/trainer//manifests/overlays/standalone?ref=v1.9.4",
            "github.com/kubeflow/trainer/v1.9.4/manifests/overlays/standalone.yaml",
            "trainer-v1.9.4-standalone.yaml",
        ),
        (  # nested groups, a trailing slash, other query parameters, a ref with a slash
            "https://git.example/a/b/repo//deploy/base/?timeout=90s&ref=release/1.2",
            "git.example/a/b/repo/release/1.2/deploy/base.yaml",
            "repo-release-1.2-base.yaml",
        ),
    ],
)
def test_a_kustomize_git_base_is_served_as_one_rendered_file(
    url: str, served: str, local: str
) -> None:
    base = remote_base(url)
    assert base is not None
    assert (base.served_path, base.local_file) == (served, local)
    assert base.build_command == f"kubectl kustomize '{url}' > {local}"
    assert Mirrors(manifests="https://files.example/up").manifest(url) == (
        f"https://files.example/up/{served}"
    )


@pytest.mark.parametrize(
    "url",
    [
        "https://raw.githubusercontent.com/o/r/v1/f.yaml",  # a plain file
        "https://github.com/o/r//dir",  # no tag: not pinned, nothing to render once
        "https://github.com/o/r//dir?ref=",
        "http://github.com/o/r//dir?ref=v1",
        "https://github.com/o/r//?ref=v1",
    ],
)
def test_other_urls_are_no_remote_base(url: str) -> None:
    assert remote_base(url) is None


def test_without_sources_overlays_name_no_mirror() -> None:
    plan = build_plan("t", model_of(example_config("lab-roce")))
    to = plan.item("training/training-operator").payload
    assert isinstance(to, KustomizeOverlay)
    assert "images:" not in to.files()["kustomization.yaml"]


def test_jobs_and_probes_use_the_mirror(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["job", "--stack", "prod-ib", "--tenant", "eval", "--kind", "mpijob"]
    assert main(argv) == 0
    job = yaml.safe_load(capsys.readouterr().out)
    specs = job["spec"]["mpiReplicaSpecs"]
    for spec in specs.values():
        for c in spec["template"]["spec"]["containers"]:
            assert c["image"] == "harbor.prod-ib.example.internal/nvcr/nvidia/pytorch:26.01-py3"


# --------------------------------------------------------------------------------- validation


def test_air_gapped_stack_names_every_upstream_left() -> None:
    sources = json.loads(json.dumps(EVERYTHING))
    del sources["registries"]["docker.io"]
    del sources["charts"]["oci://registry.k8s.io/kueue/charts"]
    del sources["manifests"]
    found = problem_lines(mirrored("lab-roce", sources))
    assert any(
        p.startswith("sources.registries: no mirror for registry docker.io")
        and "docker.io/mpioperator/mpi-operator:0.8.0" in p
        for p in found
    ), found
    assert any(
        p.startswith(
            "sources.charts: no mirror for chart repository oci://registry.k8s.io/kueue/charts"
        )
        for p in found
    ), found
    assert any(p.startswith("sources.manifests: not set") for p in found), found
    assert len(found) == 3


def test_without_air_gapped_a_partial_mirror_is_fine() -> None:
    sources = {"registries": {"nvcr.io": f"{MIRROR}/nvcr"}}
    m = model_of(mirrored("lab-roce", sources))
    pulled = collect("t", m)
    assert any(i.pulled == i.upstream for i in pulled.images)  # docker.io etc. from upstream
    assert all(i.pulled.startswith(MIRROR) for i in pulled.images if i.registry == "nvcr.io")


def test_misspelt_upstreams_are_named() -> None:
    sources = {
        "registries": {"nvrc.io": f"{MIRROR}/nvcr"},
        "charts": {"https://helm.ngc.nvidia.com/nvida": f"oci://{MIRROR}/c"},
    }
    found = problem_lines(mirrored("lab-roce", sources))
    assert found[0].startswith(
        "sources.registries.nvrc.io: 'nvrc.io' is not a registry any pinned release pulls "
        "from; did you mean 'nvcr.io'? (accepted: docker.io, gcr.io, ghcr.io, nvcr.io,"
    ), found
    assert found[1].startswith(
        "sources.charts.https://helm.ngc.nvidia.com/nvida: 'https://helm.ngc.nvidia.com/nvida' "
        "is not a chart repository of the pinned releases; did you mean"
    ), found


def test_malformed_mirrors_are_named() -> None:
    sources = {
        "registries": {"ghcr.io": f"https://{MIRROR}/ghcr"},
        "charts": {"https://helm.ngc.nvidia.com/nvidia": "ftp://x/y"},
        "manifests": "artifacts.example/up",
    }
    text = "\n".join(problem_lines(mirrored("lab-roce", sources)))
    assert "https://mirror.example.internal/ghcr" in text
    assert "without scheme or tag" in text
    assert "expected an https:// or oci:// URL" in text
    assert "sources.manifests" in text
    assert "expected https://HOST[/PATH]" in text


def test_validate_cli_reports_air_gap_gaps(
    write_stack: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    sources = json.loads(json.dumps(EVERYTHING))
    del sources["registries"]["ghcr.io"]
    path = write_stack(mirrored("lab-roce", sources))
    assert main(["validate", "--stack", str(path)]) == 2
    err = capsys.readouterr().err
    assert "sources.registries: no mirror for registry ghcr.io" in err
    assert "Traceback" not in err


# ------------------------------------------------------- chart values of the pinned releases

CHART_VALUES = SHARED / "chart-values"
KUEUE_OVERRIDDEN = "controllerManager.manager.image.repository"  # the plan pins the release image


def image_keys(values: Any, prefix: str = "") -> Iterator[tuple[str, str]]:
    """(values key a mirror must rewrite, image it locates) for every image the chart's
    default values reference, in the layouts these charts use."""
    if not isinstance(values, dict):
        return
    here = f"{prefix}." if prefix else ""
    repo, image = values.get("repository"), values.get("image")
    if isinstance(repo, str) and repo and isinstance(image, str):  # NVIDIA: repo + image + version
        yield f"{here}repository", f"{repo}/{image}"
    elif isinstance(repo, str) and repo and isinstance(values.get("name"), str):  # repo + name
        yield f"{here}repository", f"{repo}/{values['name']}"
    elif isinstance(values.get("registry"), str) and isinstance(repo, str):  # registry + repo
        yield f"{here}registry", f"{values['registry']}/{repo}"
    elif isinstance(repo, str) and repo and "tag" in values:  # full name + tag
        yield f"{here}repository", repo
    if isinstance(values.get("image_registry"), str):  # Volcano
        for key, value in values.items():
            if key.endswith("_image_name"):
                yield f"{here}image_registry", f"{values['image_registry']}/{value}"
    for key, value in values.items():
        if key == "images" and isinstance(value, dict):
            for k, ref in value.items():
                yield f"{here}images.{k}", split_tag(ref)[0]
        elif isinstance(value, dict):
            yield from image_keys(value, f"{here}{key}")


@pytest.mark.parametrize(
    "component", ["gpu-operator", "network-operator", "trainer", "kueue", "volcano"]
)
def test_every_image_in_the_pinned_charts_values_is_catalogued(component: str) -> None:
    pinned = load_catalog().components[component]
    path = CHART_VALUES / f"{pinned.chart}-v{pinned.version.lstrip('v')}.values.yaml"
    if not path.is_file():
        pytest.skip(f"{path.name} is absent (../shared is not part of a user's clone)")
    values = yaml.safe_load(path.read_text())
    catalog = {
        (e.key, split_tag(full_name(pinned.expand(e.image) or ""))[0]) for e in pinned.chart_images
    }
    keys = {k for k, _ in catalog}
    found = list(image_keys(values))
    assert found, "the values walker found no images"
    for key, name in found:
        assert key in keys, f"{component}: {key} ({name}) has no catalogue entry"
        assert (key, full_name(name)) in catalog or key == KUEUE_OVERRIDDEN, (
            f"{component}: {key} locates {name}, the catalogue says otherwise"
        )


def test_mirrors_reach_subchart_images_passed_by_key_or_env() -> None:
    """Defects the real charts showed: JobSet reads image.repository (not registry), and the
    SR-IOV operator gets its metrics exporter and kube-rbac-proxy images through env from
    the subchart's values; all three must be set to the mirror."""
    plan = build_plan("prod-ib", model_of(example_config("prod-ib")))
    trainer = plan.item("training/trainer").payload.values  # type: ignore[union-attr]
    assert trainer["jobset"]["image"]["repository"] == (
        "harbor.prod-ib.example.internal/k8s/jobset/jobset"
    )
    network = plan.item("network/network-operator").payload.values  # type: ignore[union-attr]
    images = network["sriov-network-operator"]["images"]
    assert images["metricsExporterKubeRbacProxy"] == (
        "harbor.prod-ib.example.internal/quay/brancz/kube-rbac-proxy:v0.21.2"
    )
    assert images["metricsExporter"].startswith("harbor.prod-ib.example.internal/ghcr/")
    # a stack that pins Network Operator 26.1 gets that release's proxy, through its mirror
    config = example_config("prod-ib")
    config["gpufabric:versions"] = {"network-operator": "26.1.2"}
    older = build_plan("prod-ib", model_of(config)).item("network/network-operator")
    assert older.payload.values["sriov-network-operator"]["images"][  # type: ignore[union-attr]
        "metricsExporterKubeRbacProxy"
    ] == ("harbor.prod-ib.example.internal/gcr/kubebuilder/kube-rbac-proxy:v0.15.0")
    assert "sriovDraDriver" not in older.payload.values["sriov-network-operator"]["images"]  # type: ignore[union-attr]


@pytest.mark.parametrize("command", ["runbook", "images", "plan"])
def test_a_stack_is_planned_once_per_command(
    command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The edge builds Stack -> Plan once: the air-gap check's view of what prod-ib pulls is
    the one the runbook and `images` print, and the command's own Plan is built once."""
    from gpufabric.plan import build as build_module

    built: list[bool] = []
    real = build_module.build_plan

    def counting(stack: str, model: Any) -> Plan:
        built.append(bool(model.sources.mirrors().active))
        return real(stack, model)

    monkeypatch.setattr(build_module, "build_plan", counting)
    monkeypatch.setattr("gpufabric.plan.pulls.build_plan", counting)
    monkeypatch.setattr("gpufabric.model.stackfile.build_plan", counting)
    assert main([command, "--stack", "prod-ib"]) == 0
    capsys.readouterr()
    upstream, mirrored = built.count(False), built.count(True)
    assert upstream == 1  # what it pulls: computed once, at load, for the air-gap check
    assert mirrored == (0 if command == "images" else 1)
