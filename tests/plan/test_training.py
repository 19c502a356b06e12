"""Training layer: the job operators' overlays (applied to fixtures of the upstream
manifests), the flags each runs with per authority, the Trainer chart and runtimes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import plan_of
from conftest import EXAMPLE_STACKS, REPO, example_config
from kustomize_lite import build

from gpufabric.outputs.schema import validate_objects
from gpufabric.plan import ids as plan_ids
from gpufabric.plan.build import Plan
from gpufabric.plan.items import HelmChart, K8sObject, KustomizeOverlay

FIXTURES = REPO / "tests" / "fixtures" / "upstream"


def built(plan: Plan, item_id: str, fixture: str) -> list[dict[str, Any]]:
    overlay = plan.item(item_id).payload
    assert isinstance(overlay, KustomizeOverlay)
    upstream = yaml.safe_load((FIXTURES / fixture).read_text())
    return build(overlay.files()["kustomization.yaml"], upstream)


def deployment(objects: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (dep,) = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == name]
    return dep


def container(dep: dict[str, Any]) -> dict[str, Any]:
    c: dict[str, Any] = dep["spec"]["template"]["spec"]["containers"][0]
    return c


def crds(objects: list[dict[str, Any]]) -> set[str]:
    return {o["metadata"]["name"] for o in objects if o["kind"] == "CustomResourceDefinition"}


def with_gang(config: dict[str, Any], gang: str) -> dict[str, Any]:
    config["gpufabric:scheduling"] = {**config.get("gpufabric:scheduling", {}), "gang": gang}
    return config


@pytest.mark.parametrize("gang", ["kueue", "volcano"])
def test_training_operator_overlay_never_applies_a_second_mpijob_crd(gang: str) -> None:
    config = with_gang(example_config("prod-ib"), gang)
    plan = plan_of(config)
    objects = built(plan, plan_ids.TRAINING_OPERATOR, "training-operator-v1.9.yaml")
    assert "mpijobs.kubeflow.org" not in crds(objects)
    assert crds(objects) == {
        "jaxjobs.kubeflow.org",
        "paddlejobs.kubeflow.org",
        "pytorchjobs.kubeflow.org",
        "tfjobs.kubeflow.org",
        "xgboostjobs.kubeflow.org",
    }
    args = container(deployment(objects, "training-operator"))["args"]
    schemes = [a.split("=", 1)[1] for a in args if a.startswith("--enable-scheme=")]
    # Exactly the stack's kinds: without the flag the operator would run every scheme,
    # MPIJob included, and start a second launcher for every MPIJob.
    assert schemes == config["gpufabric:training"]["trainingOperator"]["schemes"]
    assert "mpijob" not in [s.lower() for s in schemes]
    gang_flags = [a for a in args if a.startswith("--gang-scheduler-name")]
    assert gang_flags == (["--gang-scheduler-name=volcano"] if gang == "volcano" else [])


def test_training_operator_comes_after_the_mpi_operator() -> None:
    plan = plan_of(example_config("prod-ib"))
    ids = [it.id for it in plan.items]
    assert plan_ids.MPI_OPERATOR in plan.item(plan_ids.TRAINING_OPERATOR).depends_on
    assert ids.index(plan_ids.MPI_OPERATOR) < ids.index(plan_ids.TRAINING_OPERATOR)


@pytest.mark.parametrize(
    ("gang", "extra"), [("kueue", []), ("volcano", ["--gang-scheduling=volcano"])]
)
def test_mpi_operator_flags_and_pinned_image(gang: str, extra: list[str]) -> None:
    plan = plan_of(with_gang(example_config("lab-roce"), gang))
    objects = built(plan, plan_ids.MPI_OPERATOR, "mpi-operator-v0.8.yaml")
    c = container(deployment(objects, "mpi-operator"))
    assert c["args"] == ["-alsologtostderr", "--lock-namespace=mpi-operator", *extra]
    # The release manifest names a branch tag; the overlay pins the release image.
    assert (
        c["image"]
        == f"mpioperator/mpi-operator:{plan.components['mpi-operator'].version.lstrip('v')}"
    )
    assert crds(objects) == {"mpijobs.kubeflow.org"}


def test_overlays_reference_the_pinned_upstream() -> None:
    plan = plan_of(example_config("prod-ib"))
    for item_id, component in (
        (plan_ids.MPI_OPERATOR, "mpi-operator"),
        (plan_ids.TRAINING_OPERATOR, "training-operator"),
    ):
        k = yaml.safe_load(built_text(plan, item_id))
        version = plan.components[component].version
        (resource,) = k["resources"]
        assert version in resource
        assert plan.item(item_id).protect  # the overlays carry CRDs holding users' jobs


def built_text(plan: Plan, item_id: str) -> str:
    overlay = plan.item(item_id).payload
    assert isinstance(overlay, KustomizeOverlay)
    return overlay.files()["kustomization.yaml"]


def test_operators_are_only_installed_when_selected() -> None:
    config = example_config("kind-dev")
    config["gpufabric:training"] = {"mpiOperator": True}
    ids = {it.id for it in plan_of(config).items}
    assert plan_ids.MPI_OPERATOR in ids
    assert plan_ids.TRAINING_OPERATOR not in ids
    assert plan_ids.TRAINER not in ids


def runtime(plan: Plan, name: str) -> dict[str, Any]:
    obj = plan.item(f"training/runtime-{name}").payload
    assert isinstance(obj, K8sObject)
    return dict(obj.body)


def test_trainer_chart_and_runtimes_under_kueue() -> None:
    plan = plan_of(example_config("prod-ib"))
    chart = plan.item(plan_ids.TRAINER).payload
    assert isinstance(chart, HelmChart)
    # (prod-ib's mirror also points the chart's image registries at it)
    assert chart.values["runtimes"]["defaultEnabled"] is False
    assert chart.values["jobset"]["install"] is True
    rt = runtime(plan, "torch-distributed")
    assert "podGroupPolicy" not in rt["spec"]  # Kueue admits TrainJobs through its integration
    assert plan.item("training/runtime-torch-distributed").depends_on == (plan_ids.TRAINER,)


def test_trainer_runtimes_carry_the_volcano_pod_group_policy() -> None:
    plan = plan_of(example_config("roce-sriov-volcano"))
    for name in ("torch-distributed", "deepspeed-distributed"):
        spec = runtime(plan, name)["spec"]
        # One switch level (leaf) above the nodes: a job may span one tier, softly.
        assert spec["podGroupPolicy"] == {
            "volcano": {"networkTopology": {"mode": "soft", "highestTierAllowed": 1}}
        }
    mpi = runtime(plan, "deepspeed-distributed")["spec"]["mlPolicy"]["mpi"]
    assert mpi["numProcPerNode"] == 8


def test_volcano_without_topology_still_gang_schedules_trainjobs() -> None:
    config = example_config("roce-sriov-volcano")
    del config["gpufabric:scheduling"]["topologyLevels"]
    spec = runtime(plan_of(config), "torch-distributed")["spec"]
    assert spec["podGroupPolicy"] == {"volcano": {}}


@pytest.mark.parametrize("name", EXAMPLE_STACKS)
def test_training_objects_validate_against_the_crds(name: str, crd_dir: Path) -> None:
    plan = plan_of(example_config(name))
    bodies = [o.body for it, o in plan.objects() if it.layer.value == "training"]
    report = validate_objects(bodies, "1.33", crd_dir)
    assert report.ok, report.errors
    assert not report.unchecked
