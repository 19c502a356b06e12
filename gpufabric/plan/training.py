"""Training layer: the job operators, started with the flags the queue authority needs.

- MPI Operator (MPIJob v2beta1): upstream manifest at the pinned tag through a local
  overlay, with the authority's gang flag (``--gang-scheduling=volcano`` under Volcano).
- Training Operator v1: its standalone overlay without the MPIJob CRD, running with
  ``--enable-scheme`` for exactly the stack's kinds (never mpijob) and the authority's gang
  flag; installed after the MPI Operator, so the cluster never holds two MPIJob CRDs or two
  controllers for one MPIJob.
- Kubeflow Trainer v2 (TrainJob): Helm chart (with JobSet), and the ClusterTrainingRuntimes the
  stack enables, written by gpufabric so that they carry the authority's PodGroup policy.

Flags and kinds come from the resolved facts; the authority decides whether the operators
follow its chart (they create its PodGroups) or precede it (it watches their CRDs).
"""

from __future__ import annotations

from gpufabric.plan import ids
from gpufabric.plan.context import LayerContext
from gpufabric.plan.items import (
    Item,
    K8sObject,
    Layer,
    helm_chart,
    system_namespace,
    upstream_overlay,
)
from gpufabric.support.templates import render_object

NCCL_TESTS_RUNTIME = "gpufabric-nccl-tests"
"""gpufabric's own ClusterTrainingRuntime for the NCCL acceptance test on stacks whose
acceptance kind is the TrainJob (no MPI Operator)."""
RUNTIME_IMAGES = {
    "torch-distributed": "torch-runtime",
    "deepspeed-distributed": "deepspeed-runtime",
    NCCL_TESTS_RUNTIME: "training-image",
}


def build(ctx: LayerContext) -> list[Item]:
    ops = ctx.facts.operators
    authority = ctx.authority
    # The authority's objects (PodGroups) are created by the operators: its CRDs come first.
    after: tuple[str, ...] = (
        () if authority.job_operators_first else (ids.authority_chart(authority.name),)
    )
    items: list[Item] = []
    if ops.mpi_operator:
        items.append(
            Item(
                id=ids.MPI_OPERATOR,
                layer=Layer.TRAINING,
                payload=upstream_overlay(
                    ctx.components["mpi-operator"],
                    "overlays/mpi-operator",
                    args=list(ops.mpi_operator_args),
                ),
                depends_on=after,
                # The overlay carries the MPIJob CRD: deleting it deletes every MPIJob.
                protect=True,
                holds="MPIJobs",
            )
        )
    if ops.training_operator_schemes:
        items.append(
            Item(
                id=ids.TRAINING_OPERATOR,
                layer=Layer.TRAINING,
                payload=upstream_overlay(
                    ctx.components["training-operator"],
                    "overlays/training-operator",
                    args=list(ops.training_operator_args),
                ),
                depends_on=(*after, *((ids.MPI_OPERATOR,) if ops.mpi_operator else ())),
                protect=True,
                holds="PyTorchJobs / JAXJobs / other v1 jobs",
            )
        )
    if ops.trainer:
        items.extend(_trainer(ctx, after))
    return items


def _trainer(ctx: LayerContext, after: tuple[str, ...]) -> list[Item]:
    component = ctx.components["trainer"]
    authority = ctx.authority
    values = {
        # CRDs and JobSet (the TrainJob's workload API) come with the chart; the upstream
        # runtimes stay off because gpufabric writes its own (below).
        "crds": {"enabled": True},
        "jobset": {"install": True},
        "runtimes": {"defaultEnabled": False},
    }
    items = [
        system_namespace(
            ctx.stack, ids.TRAINER_NAMESPACE, Layer.TRAINING, component.namespace, "baseline"
        ),
        Item(
            id=ids.TRAINER,
            layer=Layer.TRAINING,
            payload=helm_chart(component, values),
            depends_on=(ids.TRAINER_NAMESPACE, *after),
            protect=True,
            holds="TrainJobs",
        ),
    ]
    runtimes: list[str] = list(ctx.facts.operators.trainer_runtimes)
    if ctx.facts.operators.acceptance_kind == "trainjob":
        runtimes.append(NCCL_TESTS_RUNTIME)
    for runtime in runtimes:
        image = ctx.components[RUNTIME_IMAGES[runtime]].image_ref
        items.append(
            Item(
                id=ids.trainer_runtime(runtime),
                layer=Layer.TRAINING,
                payload=K8sObject(
                    render_object(
                        f"training/runtime-{runtime}.yaml.j2",
                        stack=ctx.stack,
                        image=image,
                        gpus_per_node=ctx.facts.nodes.gpus_per_node,
                        tolerations=[dict(t) for t in ctx.facts.nodes.tolerations],
                        pod_group_policy=authority.trainer_pod_group_policy(ctx.facts.gang),
                        **_failure_policy(ctx, runtime),
                    )
                ),
                # Runtimes are validated by the Trainer's webhook: only once it serves.
                depends_on=(ids.TRAINER,),
            )
        )
    return items


def _failure_policy(ctx: LayerContext, runtime: str) -> dict[str, object]:
    """The stack's failure policy as a runtime's JobSet failurePolicy and its child Jobs'
    podFailurePolicy; none for the NCCL test's runtime, whose failure is its result. No
    runtime sets ttlSecondsAfterFinished: a JobSet deleted after it failed is created anew
    by the Trainer with its restarts at 0 (kubeflow/trainer#3779), restarting forever."""
    if runtime == NCCL_TESTS_RUNTIME:
        return {}
    failure = ctx.facts.failure
    return {
        "failure_policy": failure.jobset_failure_policy(),
        "child_job": failure.child_job_failure(),
    }
