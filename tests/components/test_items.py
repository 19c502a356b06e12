"""Mapping of each kind of Plan item to pulumi-kubernetes, under mocks."""

from __future__ import annotations

from typing import Any

import pulumi
from builders import example_config, plan_of
from msgspec.structs import replace
from pulumi.runtime import rpc
from pulumi.runtime.sync_await import _sync_await
from test_program import Recorder, RecordingMonitor, _await

from components.fabric import TrainingFabric
from components.items import type_token, with_secrets
from gpufabric.model.config import SecretValue
from gpufabric.model.stackfile import load_stack
from gpufabric.plan.items import HelmChart, Item, K8sObject, Layer, SecretRef


def test_type_tokens() -> None:
    assert type_token("v1", "Namespace") == "kubernetes:core/v1:Namespace"
    assert type_token("nvidia.com/v1", "ClusterPolicy") == "kubernetes:nvidia.com/v1:ClusterPolicy"


def test_secrets_become_pulumi_secrets() -> None:
    pulumi.runtime.set_mocks(Recorder(), project="gpufabric", stack="t", preview=False)
    out = with_secrets({"a": [SecretRef("x.y", SecretValue(plaintext="hunter2"))]})
    value = out["a"][0]
    assert _sync_await(value.is_secret()) is True
    assert _await(value) == "hunter2"


def test_charts_and_objects_register_with_their_inputs() -> None:
    recorder = Recorder()
    monitor = RecordingMonitor(recorder)
    pulumi.runtime.set_mocks(
        recorder, project="gpufabric", stack="t", preview=False, monitor=monitor
    )
    secret = SecretRef("fabric.infiniband.ufm.password", SecretValue(plaintext="hunter2"))
    items = (
        Item(
            id="gpu/gpu-operator",
            layer=Layer.GPU,
            payload=HelmChart(
                repository="https://helm.ngc.nvidia.com/nvidia",
                chart="gpu-operator",
                version="v26.7.0",
                namespace="gpu-operator",
                release="gpu-operator",
                values={"driver": {"rdma": {"enabled": False}}},
            ),
        ),
        Item(
            id="scheduling/kueue",
            layer=Layer.SCHEDULING,
            payload=HelmChart(
                repository="oci://registry.k8s.io/kueue/charts",
                chart="kueue",
                version="0.19.2",
                namespace="kueue-system",
                release="kueue",
                values={},
            ),
        ),
        Item(
            id="network/ufm",
            layer=Layer.NETWORK,
            payload=K8sObject(
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": "ufm", "namespace": "nvidia-network-operator"},
                    "stringData": {"UFM_PASSWORD": secret},
                }
            ),
            depends_on=("gpu/gpu-operator",),
        ),
    )
    plan = replace(plan_of(example_config("kind-dev")), items=items)
    model = load_stack("kind-dev").model
    fabric = TrainingFabric("t", model, plan)
    _await(pulumi.Output.all(*[r.urn for r in fabric.resources.values()]))

    gpu: dict[str, Any] = recorder.inputs["t-gpu-gpu/gpu-operator"]
    assert monitor.registrations["t-gpu-gpu/gpu-operator"].type == "kubernetes:helm.sh/v4:Chart"
    assert gpu["chart"] == "gpu-operator"
    assert gpu["version"] == "v26.7.0"
    assert gpu["repositoryOpts"] == {"repo": "https://helm.ngc.nvidia.com/nvidia"}
    assert gpu["namespace"] == "gpu-operator"
    assert gpu["values"] == {"driver": {"rdma": {"enabled": False}}}
    kueue = recorder.inputs["t-scheduling-scheduling/kueue"]
    assert kueue["chart"] == "oci://registry.k8s.io/kueue/charts/kueue"
    assert "repositoryOpts" not in kueue
    ufm = recorder.inputs["t-network-network/ufm"]
    # The engine receives the value marked secret, never as plain state.
    assert ufm["stringData"][rpc._special_sig_key] == rpc._special_secret_sig
    assert ufm["stringData"]["value"] == {"UFM_PASSWORD": "hunter2"}
    assert monitor.registrations["t-network-network/ufm"].dependencies
    # Layers are created in apply order, each with its own component.
    layer_types = [
        r.type for r in monitor.registrations.values() if r.type.startswith("gpufabric:")
    ]
    assert layer_types == [
        "gpufabric:index:TrainingFabric",
        "gpufabric:index:Layer",
        "gpufabric:index:Layer",
        "gpufabric:index:Layer",
    ]
