"""The whole Pulumi program under mocks, for every example stack: what is registered is
exactly the Plan, with the Plan's dependencies, parents and protection, on one explicit
provider."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import pytest
from conftest import EXAMPLE_STACKS, example_config
from pulumi.runtime import mocks as pulumi_mocks

from components.items import type_token
from gpufabric.model.stackfile import load_stack
from gpufabric.outputs import runbook
from gpufabric.plan import ids as plan_ids
from gpufabric.plan.build import build_plan
from gpufabric.plan.items import HelmChart, K8sObject, KustomizeOverlay


@dataclass
class Registration:
    type: str
    name: str
    parent: str
    dependencies: list[str]
    protect: bool
    retain_on_delete: bool
    provider: str
    inputs: dict[str, Any] = field(default_factory=dict)


class Recorder(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.inputs: dict[str, dict[str, Any]] = {}
        self.transforms: dict[str, list[Any]] = {}

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        self.inputs[args.name] = args.inputs
        self.transforms[args.name] = list(args.transforms)
        return f"{args.name}-id", args.inputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict[str, Any]:
        return {}


class RecordingMonitor(pulumi_mocks.MockMonitor):
    """Keeps the engine's view of each registration: parent, dependencies, options."""

    def __init__(self, mocks: Recorder) -> None:
        super().__init__(mocks)
        self.registrations: dict[str, Registration] = {}

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)
        self.registrations[request.name] = Registration(
            type=request.type,
            name=request.name,
            parent=request.parent,
            dependencies=list(request.dependencies),
            protect=bool(request.protect),
            retain_on_delete=bool(request.retainOnDelete),
            provider=request.provider,
        )
        return response


def _run(stack_name: str, config: dict[str, Any]) -> tuple[RecordingMonitor, Recorder]:
    recorder = Recorder()
    monitor = RecordingMonitor(recorder)
    pulumi.runtime.set_mocks(
        recorder, project="gpufabric", stack=stack_name, preview=False, monitor=monitor
    )
    pulumi.runtime.set_all_config({key: json.dumps(value) for key, value in config.items()})
    from components.program import main

    fabric = main()
    # Wait for every child to be registered before inspecting the monitor.
    done = pulumi.Output.all(*[r.urn for r in fabric.resources.values()])
    _await(done)
    return monitor, recorder


def _await(output: pulumi.Output[Any]) -> Any:
    from pulumi.runtime import sync_await

    return sync_await._sync_await(output.future())


@pytest.fixture(autouse=True)
def _reset_config() -> Iterator[None]:
    yield
    pulumi.runtime.set_all_config({})


@pytest.mark.parametrize("name", EXAMPLE_STACKS)
def test_registered_resources_are_exactly_the_plan(name: str) -> None:
    monitor, recorder = _run(name, example_config(name))
    model = load_stack(name).model
    plan = build_plan(name, model)
    root = model.cluster.name
    regs = {n: r for n, r in monitor.registrations.items() if r.type != "pulumi:pulumi:Stack"}

    # Root component, one explicit provider with a stable cluster identifier.
    assert regs[root].type == "gpufabric:index:TrainingFabric"
    provider = regs[f"{root}-k8s"]
    assert provider.type == "pulumi:providers:kubernetes"
    assert recorder.inputs[f"{root}-k8s"]["clusterIdentifier"] == model.cluster.name
    if model.cluster.kubeContext:
        assert recorder.inputs[f"{root}-k8s"]["context"] == model.cluster.kubeContext

    item_names = {plan_ids.child_name(root, it.layer.value, it.id): it for it in plan.items}
    infra = {root, f"{root}-k8s"} | {f"{root}-{it.layer.value}" for it in plan.items}
    assert set(regs) == item_names.keys() | infra

    urns = {urn.rsplit("::", 1)[-1]: urn for urn in monitor.resources}

    for res_name, item in item_names.items():
        reg = regs[res_name]
        payload = item.payload
        if isinstance(payload, K8sObject):
            assert reg.type == type_token(payload.api_version, payload.kind)
            # Inputs are the rendered body, unchanged.
            assert recorder.inputs[res_name] == json.loads(json.dumps(dict(payload.body)))
        elif isinstance(payload, KustomizeOverlay):
            assert reg.type == "kubernetes:kustomize/v2:Directory"
            directory = Path(recorder.inputs[res_name]["directory"])
            # kustomize reads exactly the overlay that render shows.
            on_disk = {
                p.relative_to(directory).as_posix(): p.read_text()
                for p in directory.rglob("*")
                if p.is_file()
            }
            assert on_disk == payload.files()
            assert recorder.inputs[res_name]["namespace"] == payload.namespace
        else:
            assert isinstance(payload, HelmChart)
            assert reg.type == "kubernetes:helm.sh/v4:Chart"
            inputs = recorder.inputs[res_name]
            assert inputs["chart"] == payload.chart_ref
            assert inputs["version"] == payload.version
            assert inputs["namespace"] == payload.namespace
            assert inputs["values"] == json.loads(json.dumps(dict(payload.values)))
            # Charts whose objects are awaited carry the readiness transform.
            assert len(recorder.transforms[res_name]) == (1 if payload.awaits else 0)
        layer_component = f"{root}-{item.layer.value}"
        assert reg.parent.rsplit("::", 1)[-1] == layer_component
        expected_deps = {
            urns[plan_ids.child_name(root, plan.item(d).layer.value, d)] for d in item.depends_on
        }
        assert set(reg.dependencies) == expected_deps
        assert reg.protect == item.protect
        assert reg.retain_on_delete == item.retain_on_delete
        assert reg.provider.startswith(urns[f"{root}-k8s"])


def test_tenants_layer_component_type() -> None:
    monitor, _ = _run("lab-roce", example_config("lab-roce"))
    assert monitor.registrations["lab-roce-tenants"].type == "gpufabric:index:Tenants"


def test_bad_config_stops_before_anything_is_registered() -> None:
    config = example_config("lab-roce")
    config["gpufabric:fabric"]["mtu"] = 12000
    config["gpufabric:fabrik"] = {}
    recorder = Recorder()
    monitor = RecordingMonitor(recorder)
    pulumi.runtime.set_mocks(recorder, project="gpufabric", stack="lab-roce", monitor=monitor)
    pulumi.runtime.set_all_config({k: json.dumps(v) for k, v in config.items()})
    from components.program import main

    with pytest.raises(pulumi.RunError) as info:
        main()
    text = str(info.value)
    assert "fabric.mtu: 12000 is outside" in text
    assert "gpufabric:fabrik" in text
    assert [r.type for r in monitor.registrations.values() if r.type != "pulumi:pulumi:Stack"] == []


def _glob(pattern: str) -> re.Pattern[str]:
    """A `pulumi up --target` URN pattern: `**` and `*` match any characters."""
    return re.compile("^" + ".*".join(re.escape(p) for p in re.split(r"\*\*?", pattern)) + "$")


@pytest.mark.parametrize("name", EXAMPLE_STACKS)
def test_runbook_phase_targets_select_exactly_their_layers(name: str) -> None:
    """The runbook's `pulumi up --target` URNs match the resources the program registers:
    each phase selects its items (and the items of later layers they depend on) and nothing
    a later phase brings, and the phases together cover every resource."""
    monitor, _ = _run(name, example_config(name))
    model = load_stack(name).model
    plan = build_plan(name, model)
    root = model.cluster.name
    by_name = {
        urn.rsplit("::", 1)[-1]: urn
        for urn in monitor.resources
        if urn.split("::")[2] != "pulumi:pulumi:Stack"  # the stack itself is always part
    }
    covered: set[str] = set()
    applied: set[str] = set()
    for phase in runbook.phases(plan):
        patterns = [_glob(t) for t in phase.targets]
        selected = {u for u in by_name.values() if any(p.match(u) for p in patterns)}
        for t, p in zip(phase.targets, patterns, strict=True):
            assert any(p.match(u) for u in by_name.values()), f"{t} matches nothing"
        mine = {by_name[plan_ids.child_name(root, it.layer.value, it.id)] for it in phase.items}
        assert mine <= selected
        later = {
            by_name[plan_ids.child_name(root, it.layer.value, it.id)]
            for it in plan.items
            if it.id not in applied and it not in phase.items
        }
        assert not (later & selected), (
            f"phase {phase.number} also selects {sorted(later & selected)}"
        )
        applied.update(it.id for it in phase.items)
        covered |= selected
    assert covered == set(by_name.values())
