"""Training layer: the job operators, started with the flags the queue authority needs.

- MPI Operator (MPIJob v2beta1): upstream manifest at the pinned tag through a local
  overlay; ``--gang-scheduling=volcano`` under Volcano.
- Training Operator v1: its standalone overlay without the MPIJob CRD, running with
  ``--enable-scheme`` for exactly the stack's kinds (never mpijob) and
  ``--gang-scheduler-name=volcano`` under Volcano; installed after the MPI Operator, so the
  cluster never holds two MPIJob CRDs or two controllers for one MPIJob.
- Kubeflow Trainer v2 (TrainJob): Helm chart (with JobSet), and the ClusterTrainingRuntimes the
  stack enables, written by gpufabric so that under Volcano they carry the PodGroup policy.
"""

from __future__ import annotations

from typing import Any

from gpufabric.config import StackModel
from gpufabric.plan import (
    Item,
    K8sObject,
    Layer,
    PlanContext,
    helm_chart,
    scheduling,
    system_namespace,
    upstream_overlay,
)
from gpufabric.templates import render_object

MPI_OPERATOR_ID = "training/mpi-operator"
TRAINING_OPERATOR_ID = "training/training-operator"
TRAINER_CHART_ID = "training/trainer"
TRAINER_NAMESPACE_ID = "training/trainer-namespace"

MPI_OPERATOR_BASE_ARGS = ("-alsologtostderr", "--lock-namespace=mpi-operator")
"""The upstream Deployment's own arguments, kept when the overlay sets the list."""

RUNTIME_IMAGES = {
    "torch-distributed": "torch-runtime",
    "deepspeed-distributed": "deepspeed-runtime",
}


def operator_ids(model: StackModel) -> tuple[str, ...]:
    """Plan ids of the job operators (and their CRDs) the stack installs."""
    t = model.training
    out: list[str] = []
    if t.mpiOperator:
        out.append(MPI_OPERATOR_ID)
    if t.trainingOperator.schemes:
        out.append(TRAINING_OPERATOR_ID)
    if t.trainer.enabled:
        out.append(TRAINER_CHART_ID)
    return tuple(out)


def mpi_operator_args(model: StackModel) -> list[str]:
    args = list(MPI_OPERATOR_BASE_ARGS)
    if model.scheduling.gang == "volcano":
        args.append("--gang-scheduling=volcano")
    return args


def training_operator_args(model: StackModel) -> list[str]:
    args = [f"--enable-scheme={s}" for s in model.training.trainingOperator.schemes]
    if model.scheduling.gang == "volcano":
        args.append("--gang-scheduler-name=volcano")
    return args


def pod_group_policy(model: StackModel) -> dict[str, Any] | None:
    """Volcano gang scheduling for TrainJobs, topology-aware when the stack has levels: soft,
    so a job that cannot fit under one switch still runs, spanning at most every tier."""
    if model.scheduling.gang != "volcano":
        return None
    tiers = scheduling.switch_tiers(model)
    if not tiers:
        return {"volcano": {}}
    return {"volcano": {"networkTopology": {"mode": "soft", "highestTierAllowed": tiers}}}


def _after_volcano(model: StackModel) -> tuple[str, ...]:
    # Under Volcano the operators create PodGroups: its CRDs and webhooks come first.
    return (scheduling.VOLCANO_CHART_ID,) if model.scheduling.gang == "volcano" else ()


def build(ctx: PlanContext) -> list[Item]:
    model, t = ctx.model, ctx.model.training
    items: list[Item] = []
    volcano = _after_volcano(model)
    if t.mpiOperator:
        items.append(
            Item(
                id=MPI_OPERATOR_ID,
                layer=Layer.TRAINING,
                payload=upstream_overlay(
                    ctx.components["mpi-operator"],
                    "overlays/mpi-operator",
                    args=mpi_operator_args(model),
                ),
                depends_on=volcano,
                # The overlay carries the MPIJob CRD: deleting it deletes every MPIJob.
                protect=True,
            )
        )
    if t.trainingOperator.schemes:
        items.append(
            Item(
                id=TRAINING_OPERATOR_ID,
                layer=Layer.TRAINING,
                payload=upstream_overlay(
                    ctx.components["training-operator"],
                    "overlays/training-operator",
                    args=training_operator_args(model),
                ),
                depends_on=(*volcano, *((MPI_OPERATOR_ID,) if t.mpiOperator else ())),
                protect=True,
            )
        )
    if t.trainer.enabled:
        items.extend(_trainer(ctx, volcano))
    return items


def _trainer(ctx: PlanContext, after: tuple[str, ...]) -> list[Item]:
    model = ctx.model
    component = ctx.components["trainer"]
    values = {
        # CRDs and JobSet (the TrainJob's workload API) come with the chart; the upstream
        # runtimes stay off because gpufabric writes its own (below).
        "crds": {"enabled": True},
        "jobset": {"install": True},
        "runtimes": {"defaultEnabled": False},
    }
    items = [
        system_namespace(
            ctx.stack, TRAINER_NAMESPACE_ID, Layer.TRAINING, component.namespace, "baseline"
        ),
        Item(
            id=TRAINER_CHART_ID,
            layer=Layer.TRAINING,
            payload=helm_chart(component, values),
            depends_on=(TRAINER_NAMESPACE_ID, *after),
            protect=True,
        ),
    ]
    for runtime in model.training.trainer.runtimes:
        image = ctx.components[RUNTIME_IMAGES[runtime]].image_ref
        items.append(
            Item(
                id=f"training/runtime-{runtime}",
                layer=Layer.TRAINING,
                payload=K8sObject(
                    render_object(
                        f"training/runtime-{runtime}.yaml.j2",
                        stack=ctx.stack,
                        image=image,
                        gpus_per_node=model.gpuNodes.gpusPerNode,
                        tolerations=scheduling.tolerations(model),
                        pod_group_policy=pod_group_policy(model),
                    )
                ),
                # Runtimes are validated by the Trainer's webhook: only once it serves.
                depends_on=(TRAINER_CHART_ID,),
            )
        )
    return items
