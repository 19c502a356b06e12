"""The bootstrap runbook of a stack: Markdown rendered from manifests/runbooks/*.md.j2.

Everything stack-specific comes from the model and the Plan computed here (phases in apply
order with their ``pulumi up --target`` URNs, readiness and verify commands, thresholds,
mirrors); the templates hold the prose. ``gpufabric runbook --stack S`` prints it;
docs/runbooks/<stack>.md are the committed renders of the example stacks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpufabric import nccl_report, rails
from gpufabric.config import StackModel
from gpufabric.images import StackSources, collect
from gpufabric.plan import LAYER_ORDER, HelmChart, Item, KustomizeOverlay, Layer, Plan, build_plan
from gpufabric.plan import network as network_plan
from gpufabric.plan import scheduling as scheduling_plan
from gpufabric.plan import training as training_plan
from gpufabric.templates import MANIFESTS_DIR, environment

RUNBOOK_DIR = MANIFESTS_DIR / "runbooks"
PROJECT = "gpufabric"  # Pulumi.yaml name: part of every URN
LAYER_TITLES = {
    Layer.GPU: "GPU Operator",
    Layer.NETWORK: "RDMA network",
    Layer.TRAINING: "Training operators",
    Layer.SCHEDULING: "Gang scheduling and queues",
    Layer.TENANTS: "Tenants",
}


@dataclass(frozen=True)
class Phase:
    number: int
    layer: Layer
    title: str
    items: tuple[Item, ...]
    """Items this phase applies for the first time: the layer's own, plus items of later
    layers they depend on (e.g. Volcano before the job operators)."""
    pulled_forward: tuple[Item, ...]
    targets: tuple[str, ...]
    layers_so_far: tuple[Layer, ...]

    @property
    def layers_arg(self) -> str:
        return ",".join(layer.value for layer in self.layers_so_far)


def _urn(stack: str, type_chain: str, name: str) -> str:
    return f"urn:pulumi:{stack}::{PROJECT}::{type_chain}::{name}"


def _closure(ids: Sequence[str], by_id: Mapping[str, Item], applied: set[str]) -> list[str]:
    """``ids`` and everything they depend on that is not applied yet, dependencies first."""
    out: list[str] = []

    def need(item_id: str) -> None:
        if item_id in applied or item_id in out:
            return
        for dep in by_id[item_id].depends_on:
            need(dep)
        out.append(item_id)

    for item_id in ids:
        need(item_id)
    return out


def phases(stack: str, model: StackModel, plan: Plan) -> list[Phase]:
    """One phase per layer in apply order. A phase also applies the items of later layers
    that its own items depend on, so each ``pulumi up --target`` is complete by itself."""
    cluster = model.cluster.name
    by_id = {it.id: it for it in plan.items}
    applied: set[str] = set()
    out: list[Phase] = []
    so_far: list[Layer] = []
    for layer in LAYER_ORDER:
        own = [it for it in plan.items if it.layer == layer]
        if not own:
            continue
        so_far.append(layer)
        needed = _closure([it.id for it in own], by_id, applied)
        items = tuple(it for it in plan.items if it.id in needed)
        pulled = tuple(it for it in items if it.layer != layer)
        applied.update(needed)
        # Names are unique in the stack; `**` spans the parent type chain (root component,
        # its provider, the layer components, their items and the charts' children).
        targets = [_urn(stack, "**", cluster), _urn(stack, "**", f"{cluster}-k8s")]
        for other in dict.fromkeys(it.layer for it in pulled):
            targets.append(_urn(stack, "**", f"{cluster}-{other.value}"))
            for it in pulled:
                if it.layer == other:
                    targets.append(_urn(stack, "**", f"{cluster}-{other.value}-{it.id}*"))
        targets.append(_urn(stack, "**", f"{cluster}-{layer.value}"))
        targets.append(_urn(stack, "**", f"{cluster}-{layer.value}-*"))
        out.append(
            Phase(
                number=len(out) + 1,
                layer=layer,
                title=LAYER_TITLES[layer],
                items=items,
                pulled_forward=pulled,
                targets=tuple(targets),
                layers_so_far=tuple(so_far),
            )
        )
    return out


def _describe(item: Item, plan: Plan) -> str:
    p = item.payload
    if isinstance(p, HelmChart):
        return f"Helm chart `{p.chart}` {p.version} in `{p.namespace}`"
    if isinstance(p, KustomizeOverlay):
        c = plan.components[p.component]
        return f"{c.name} {c.version} (upstream manifest + overlay) in `{p.namespace}`"
    ns = f"{p.namespace}/" if p.namespace else ""
    return f"{p.kind} `{ns}{p.name}`"


def context(stack: str, model: StackModel) -> dict[str, Any]:
    plan = build_plan(stack, model)
    fabric = model.fabric
    expectation = nccl_report.expectation(model, None)
    pulled: StackSources = collect(stack, model)
    pfc = ["0"] * 8
    if fabric.type == "roce":
        pfc[fabric.roce_settings.pfcPriority] = "1"
    charts = {
        it.payload.release: it.payload for it in plan.items if isinstance(it.payload, HelmChart)
    }
    return {
        "stack": stack,
        "model": model,
        "fabric": fabric,
        "roce": fabric.roce_settings if fabric.type == "roce" else None,
        "ib": fabric.infiniband_settings if fabric.type == "infiniband" else None,
        "pfc_vector": ",".join(pfc),
        "rails": fabric.rails,
        "rdma_resources": rails.rdma_resources(fabric),
        "rail_resource": lambda rail: rails.resource_name(fabric, rail),
        "phases": phases(stack, model, plan),
        "describe": lambda item: _describe(item, plan),
        "components": plan.components,
        "charts": charts,
        "overlays": [it.payload for it in plan.items if isinstance(it.payload, KustomizeOverlay)],
        "expectation": expectation,
        "first_tenant": model.tenants[0].namespace if model.tenants else None,
        "sources": pulled,
        "mirrors": model.sources.mirrors(),
        "nfd_from_network_operator": network_plan.network_operator_runs_nfd(model),
        "gpu_waits_for_nic": network_plan.gpu_waits_for_nic_driver(model),
        "frameworks": scheduling_plan.frameworks(model) if model.scheduling.gang == "kueue" else [],
        "mpi_args": training_plan.mpi_operator_args(model),
        "training_args": training_plan.training_operator_args(model),
        "networks_namespace": None if fabric.nadScope == "tenant" else fabric.networkNamespace,
        "gpu_selector": ",".join(
            f"{k}={v}" for k, v in sorted(model.gpuNodes.nodeSelector.items())
        ),
        "first_netdev": fabric.rails[0].netdev,
    }


def render(stack: str, model: StackModel) -> str:
    env = environment(RUNBOOK_DIR)
    env.filters["sq"] = _single_quote
    text = env.get_template("runbook.md.j2").render(**context(stack, model))
    # One blank line between blocks, a single trailing newline: stable, diff-friendly output.
    lines: list[str] = []
    for line in text.splitlines():
        line = line.rstrip()
        if not line and (not lines or not lines[-1]):
            continue
        lines.append(line)
    return "\n".join(lines).rstrip("\n") + "\n"


def _single_quote(value: str) -> str:
    """Quote for a POSIX shell (URNs carry `$` and `*`)."""
    return "'" + str(value).replace("'", "'\\''") + "'"


__all__ = ["RUNBOOK_DIR", "Phase", "context", "phases", "render"]
