"""Schema validation of rendered objects: strict for built-in kinds, CRD-derived for
custom resources, with the server-side rules users hit on apply."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import CRD_DIR, EXAMPLE_STACKS, SHARED

from gpufabric.model.stackfile import load_stack
from gpufabric.outputs.schema import crd_to_jsonschema, load_crds, validate_objects
from gpufabric.plan.build import build_plan

PENDING = SHARED / "upstream" / "crds-pending" / "prometheus-operator-0.93.1"
"""The Prometheus Operator's CRDs, beside the pinned set (../shared/upstream/README.md)."""


@pytest.fixture(scope="module")
def crds_and_pending(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The pinned CRDs plus the pending ones where they are there (a copy: the CRD loader
    reads regular files only)."""
    if not CRD_DIR.is_dir():
        pytest.skip("../shared/crds is absent (a user's clone has none)")
    both = tmp_path_factory.mktemp("crds")
    for source in [*CRD_DIR.iterdir(), *([PENDING] if PENDING.is_dir() else [])]:
        if source.is_dir():
            shutil.copytree(source, both / source.name)
    return both


def _cm(**extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "x", "namespace": "y"},
        **extra,
    }


def test_builtin_kinds_are_checked_strictly() -> None:
    assert validate_objects([_cm(data={"A": "1"})], "1.33").ok
    report = validate_objects([_cm(data={"A": 1}), _cm(dataa={"A": "1"})], "1.33")
    assert len(report.errors) == 2
    assert any("dataa" in e.message for e in report.errors)


CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.io"},
    "spec": {
        "group": "example.io",
        "names": {"kind": "Widget", "plural": "widgets"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {
                                    "port": {"x-kubernetes-int-or-string": True},
                                    "config": {
                                        "type": "object",
                                        "x-kubernetes-preserve-unknown-fields": True,
                                    },
                                    "note": {"type": "string", "nullable": True},
                                    "items": {
                                        "type": "array",
                                        "items": {
                                            "type": "object",
                                            "properties": {"n": {"type": "integer"}},
                                        },
                                    },
                                },
                            }
                        },
                    }
                },
            }
        ],
    },
}


def _widget(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "example.io/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": "n"},
        "spec": spec,
    }


@pytest.fixture
def crds(tmp_path: Path) -> Path:
    (tmp_path / "widgets.yaml").write_text(yaml.safe_dump(CRD))
    return tmp_path


def test_custom_resources_follow_server_side_strictness(crds: Path) -> None:
    good = _widget(
        {"port": "http", "config": {"anything": {"goes": 1}}, "note": None, "items": [{"n": 1}]}
    )
    assert validate_objects([good], "1.33", crds).ok
    assert validate_objects([_widget({"port": 8080})], "1.33", crds).ok
    bad = validate_objects([_widget({"prot": 1}), _widget({"items": [{"m": 1}]})], "1.33", crds)
    assert len(bad.errors) == 2
    assert any("prot" in e.message for e in bad.errors)


def test_custom_resources_without_a_crd(crds: Path) -> None:
    other = {"apiVersion": "example.io/v2", "kind": "Widget", "metadata": {"name": "w"}}
    report = validate_objects([other], "1.33", crds)
    assert report.ok
    assert report.unchecked == ["Widget/w (no CRD for example.io/v2 Widget)"]
    unchecked = validate_objects([other], "1.33", None)
    assert unchecked.ok
    assert unchecked.unchecked == ["Widget/w"]


def test_conversion_keeps_the_input_intact() -> None:
    schema = CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]  # type: ignore[index]
    converted = crd_to_jsonschema(schema)
    assert converted["properties"]["spec"]["additionalProperties"] is False
    assert "additionalProperties" not in schema["properties"]["spec"]


def test_pinned_crds_load(crd_dir: Path) -> None:
    index = load_crds(crd_dir)
    for key in [
        ("nvidia.com/v1", "ClusterPolicy"),
        ("mellanox.com/v1alpha1", "NicClusterPolicy"),
        ("k8s.cni.cncf.io/v1", "NetworkAttachmentDefinition"),
        ("kubeflow.org/v2beta1", "MPIJob"),
        ("kueue.x-k8s.io/v1beta2", "ClusterQueue"),
        ("scheduling.volcano.sh/v1beta1", "Queue"),
        ("trainer.kubeflow.org/v1alpha1", "TrainJob"),
    ]:
        assert key in index.schemas, key
    nad = {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": "rail0", "namespace": "gpufabric-networks"},
        "spec": {"config": "{}", "bogus": True},
    }
    report = validate_objects([nad], "1.33", crd_dir)
    assert [e.path for e in report.errors] == ["spec"]


@pytest.mark.parametrize("name", EXAMPLE_STACKS)
def test_example_stacks_render_valid_objects(name: str, crds_and_pending: Path) -> None:
    stack = load_stack(name)
    plan = build_plan(name, stack.model)
    both = crds_and_pending
    report = validate_objects(
        (o.body for _, o in plan.objects()), stack.model.cluster.kubernetes_minor, both
    )
    assert report.errors == []
    assert report.checked_core + report.checked_custom + len(report.unchecked) == len(
        list(plan.objects())
    )
    # Only kinds whose upstream ships no CRD in the pinned set go unchecked.
    unchecked_ok = ("nv-ipam.nvidia.com/v1alpha1",) + (
        () if PENDING.is_dir() else ("monitoring.coreos.com/v1",)
    )
    assert all(any(ok in u for ok in unchecked_ok) for u in report.unchecked), report.unchecked
