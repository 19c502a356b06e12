"""Ready-to-run training jobs wired for one stack and tenant (``gpufabric job``).

Every job carries what RDMA training needs on this fabric, taken from the Plan rather than
copied by hand: the queue (Kueue label or Volcano queue), the tenant's priority class, the
Multus annotation for all rails, the RDMA resources and GPUs per pod, the tenant's
``nccl-env`` as environment, ``IPC_LOCK``, a memory-backed ``/dev/shm`` sized for the GPUs,
and the topology hint for Kueue's topology-aware scheduling. MPIJobs set ``slotsPerWorker``
to the GPUs per node, an explicit ``cleanPodPolicy`` and a launcher that waits for workers.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from gpufabric.config import StackModel, Tenant
from gpufabric.plan import Plan, TenantWiring, scheduling
from gpufabric.problems import Problem, StackError

JobKind = Literal["mpijob", "pytorchjob", "trainjob"]
JOB_KINDS: tuple[JobKind, ...] = ("mpijob", "pytorchjob", "trainjob")

NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
SHM_PER_GPU_GIB = 8
"""/dev/shm size per GPU: NCCL's intra-node buffers and data-loader workers live there; the
container runtime's 64 MiB default makes NCCL fail with 'failed to extend /dev/shm'."""
CLEAN_POD_POLICY = "Running"
"""Delete still-running pods when a job finishes (the MPI Operator would default to None)."""
TTL_SECONDS = 24 * 3600
JOB_MANAGER = "gpufabric.io/job"
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@dataclass(frozen=True)
class JobRequest:
    tenant: str
    kind: JobKind
    nodes: int = 2
    image: str | None = None
    command: str | None = None
    name: str | None = None
    runtime: str | None = None


def _fail(path: str, message: str) -> StackError:
    return StackError("gpufabric job", [Problem(path, message)])


def check_request(model: StackModel, req: JobRequest) -> Tenant:
    """The tenant of a request that this stack can run; StackError naming the option if not."""
    tenants = {t.namespace: t for t in model.tenants}
    if req.tenant not in tenants:
        accepted = ", ".join(sorted(tenants)) or "none: the stack has no tenants"
        raise _fail(
            "--tenant", f"{req.tenant!r} is not a tenant of this stack; accepted: {accepted}"
        )
    t = model.training
    installed = {
        "mpijob": (t.mpiOperator, "training.mpiOperator is false"),
        "pytorchjob": (
            "pytorchjob" in t.trainingOperator.schemes,
            "'pytorchjob' is not in training.trainingOperator.schemes",
        ),
        "trainjob": (t.trainer.enabled, "training.trainer.enabled is false"),
    }
    ok, why = installed[req.kind]
    if not ok:
        kinds = ", ".join(k for k, (on, _) in installed.items() if on) or "none"
        raise _fail(
            "--kind",
            f"{req.kind}: {why}, so the cluster has no operator for it; this stack runs: {kinds}",
        )
    if req.nodes < 1 or req.nodes > model.gpuNodes.count:
        raise _fail(
            "--nodes",
            f"{req.nodes} is not between 1 and the stack's {model.gpuNodes.count} GPU nodes",
        )
    name = req.name or default_name(req)
    if len(name) > 50 or not _NAME.match(name):
        raise _fail(
            "--name",
            f"{name!r} is not a valid job name; expected lowercase letters, "
            "digits and '-', at most 50 characters (pods append their own suffixes)",
        )
    if req.kind == "trainjob":
        runtime = req.runtime or t.trainer.runtimes[0]
        if runtime not in t.trainer.runtimes:
            raise _fail(
                "--runtime",
                f"{runtime!r} is not installed; accepted: {', '.join(t.trainer.runtimes)}",
            )
    elif req.runtime is not None:
        raise _fail("--runtime", "applies to --kind trainjob only")
    return tenants[req.tenant]


def default_name(req: JobRequest) -> str:
    return f"{req.tenant}-{req.kind}"[:50].rstrip("-")


# ------------------------------------------------------------------------- pod wiring


@dataclass(frozen=True)
class Wiring:
    """What every GPU pod of a job gets, for one stack and tenant."""

    model: StackModel
    tenant: Tenant
    tenant_wiring: TenantWiring

    @property
    def gpus(self) -> int:
        return self.model.gpuNodes.gpusPerNode

    @property
    def volcano(self) -> bool:
        return self.model.scheduling.gang == "volcano"

    def limits(self) -> dict[str, Any]:
        return {scheduling.GPU_RESOURCE: self.gpus, **dict(self.tenant_wiring.rdma_resources)}

    def pod_annotations(self) -> dict[str, str]:
        out = {NETWORKS_ANNOTATION: self.tenant_wiring.networks}
        if not self.volcano:
            out.update(topology_annotation(self.model))
        return out

    def security_context(self) -> dict[str, Any]:
        return {"capabilities": {"add": ["IPC_LOCK"]}}

    def shm_volume(self) -> dict[str, Any]:
        size = f"{SHM_PER_GPU_GIB * self.gpus}Gi"
        return {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": size}}

    def shm_mount(self) -> dict[str, Any]:
        return {"name": "dshm", "mountPath": "/dev/shm"}

    def env_from(self) -> list[dict[str, Any]]:
        return [{"configMapRef": {"name": "nccl-env"}}]

    def placement(self) -> dict[str, Any]:
        """Node selector and tolerations of the GPU nodes (Kueue's flavor would add them on
        admission; set here so the job reads the same under either authority)."""
        out: dict[str, Any] = {"nodeSelector": dict(self.model.gpuNodes.nodeSelector)}
        tolerations = scheduling.tolerations(self.model)
        if tolerations:
            out["tolerations"] = tolerations
        return out

    def gpu_container(self, name: str, image: str, command: list[str] | None) -> dict[str, Any]:
        c: dict[str, Any] = {"name": name, "image": image}
        if command:
            c["command"] = command
        c.update(
            envFrom=self.env_from(),
            resources={"limits": self.limits()},
            securityContext=self.security_context(),
            volumeMounts=[self.shm_mount()],
        )
        return c

    def gpu_pod(self, container: dict[str, Any]) -> dict[str, Any]:
        spec: dict[str, Any] = {"containers": [container], **self.placement()}
        spec["volumes"] = [self.shm_volume()]
        return {"metadata": {"annotations": self.pod_annotations()}, "spec": spec}

    def job_metadata(self, name: str) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name, "namespace": self.tenant.namespace}
        if self.volcano:
            meta["annotations"] = {scheduling.VOLCANO_QUEUE_ANNOTATION: self.tenant.namespace}
        else:
            meta["labels"] = {
                scheduling.QUEUE_LABEL: scheduling.LOCAL_QUEUE_NAME,
                scheduling.PRIORITY_LABEL: scheduling.priority_class_name(self.tenant),
            }
        return meta

    def scheduling_policy(self, min_available: int) -> dict[str, Any]:
        return {
            "minAvailable": min_available,
            "queue": self.tenant.namespace,
            "priorityClass": scheduling.priority_class_name(self.tenant),
        }


def topology_annotation(model: StackModel) -> dict[str, str]:
    """Kueue TAS: prefer the narrowest switch level (all pods under one leaf), climbing to
    wider levels when the gang does not fit; the node level alone when there are no switches."""
    levels = scheduling.topology_levels(model)
    level = levels[-2] if len(levels) > 1 else levels[-1]
    return {"kueue.x-k8s.io/podset-preferred-topology": level}


# ------------------------------------------------------------------------------- kinds


def mpirun_command(
    w: Wiring, nodes: int, program: list[str], env: Mapping[str, str] | None = None
) -> list[str]:
    """mpirun over every GPU; NCCL variables are exported to the ranks explicitly, since ranks
    started over ssh do not inherit the worker container's environment. ``env`` adds
    variables set for this run only (``-x NAME=value``)."""
    args = [
        "mpirun",
        "--allow-run-as-root",
        "-np",
        str(nodes * w.gpus),
        "-bind-to",
        "none",
        "-map-by",
        "slot",
    ]
    for var in sorted(w.tenant_wiring.nccl_env):
        args += ["-x", var]
    for var, value in sorted((env or {}).items()):
        args += ["-x", f"{var}={value}"]
    args += ["-x", "LD_LIBRARY_PATH", "-x", "PATH", *program]
    return args


DEFAULT_MPI_PROGRAM = "all_reduce_perf_mpi -b 1G -e 8G -f 2 -g 1"
DEFAULT_TORCH_PROGRAM = (
    "python -c \"import os, torch, torch.distributed as d; d.init_process_group('nccl'); "
    "r = int(os.environ['LOCAL_RANK']); torch.cuda.set_device(r); "
    "t = torch.ones(1 << 28, device='cuda'); d.all_reduce(t); "
    "print('rank', d.get_rank(), 'of', d.get_world_size(), 'ok', t[0].item())\""
)


def mpijob(w: Wiring, name: str, nodes: int, image: str, program: list[str]) -> dict[str, Any]:
    launcher = {
        "name": "launcher",
        "image": image,
        "command": mpirun_command(w, nodes, program),
        "envFrom": w.env_from(),
    }
    worker = w.gpu_container("worker", image, ["/usr/sbin/sshd", "-De"])
    run_policy: dict[str, Any] = {
        "cleanPodPolicy": CLEAN_POD_POLICY,
        "ttlSecondsAfterFinished": TTL_SECONDS,
        "backoffLimit": 0,
    }
    if w.volcano:
        run_policy["schedulingPolicy"] = w.scheduling_policy(nodes + 1)
    launcher_pod: dict[str, Any] = {"spec": {"containers": [launcher]}}
    if not w.volcano:
        launcher_pod["metadata"] = {"annotations": topology_annotation(w.model)}
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": w.job_metadata(name),
        "spec": {
            "slotsPerWorker": w.gpus,
            "runLauncherAsWorker": False,
            "launcherCreationPolicy": "WaitForWorkersReady",
            "mpiImplementation": "OpenMPI",
            "runPolicy": run_policy,
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "restartPolicy": "OnFailure", "template": launcher_pod},
                "Worker": {
                    "replicas": nodes,
                    "restartPolicy": "Never",
                    "template": w.gpu_pod(worker),
                },
            },
        },
    }


def pytorchjob(w: Wiring, name: str, nodes: int, image: str, program: list[str]) -> dict[str, Any]:
    container = w.gpu_container("pytorch", image, ["torchrun", *_torchrun_args(program)])
    replica = {"restartPolicy": "OnFailure", "template": w.gpu_pod(container)}
    specs: dict[str, Any] = {"Master": {"replicas": 1, **replica}}
    if nodes > 1:
        specs["Worker"] = {"replicas": nodes - 1, **replica}
    run_policy: dict[str, Any] = {
        "cleanPodPolicy": CLEAN_POD_POLICY,
        "ttlSecondsAfterFinished": TTL_SECONDS,
        "backoffLimit": 0,
    }
    if w.volcano:
        run_policy["schedulingPolicy"] = w.scheduling_policy(nodes)
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": w.job_metadata(name),
        "spec": {
            "nprocPerNode": str(w.gpus),
            "runPolicy": run_policy,
            "pytorchReplicaSpecs": specs,
        },
    }


def _torchrun_args(program: list[str]) -> list[str]:
    """torchrun reads PET_NNODES / PET_NODE_RANK / PET_NPROC_PER_NODE from the operator; a
    python program is run as a module-less script."""
    if program[:1] == ["python"] and program[1:2] == ["-c"]:
        return ["--no-python", "python", *program[1:]]
    if program[:1] == ["torchrun"]:
        return program[1:]
    return program


def trainjob(
    w: Wiring, name: str, nodes: int, image: str, program: list[str], runtime: str
) -> dict[str, Any]:
    env = [
        {"name": var, "valueFrom": {"configMapKeyRef": {"name": "nccl-env", "key": var}}}
        for var in sorted(w.tenant_wiring.nccl_env)
    ]
    trainer: dict[str, Any] = {
        "numNodes": nodes,
        "image": image,
        "command": program,
        "resourcesPerNode": {"limits": w.limits()},
        "env": env,
    }
    trainer["numProcPerNode"] = w.gpus
    # runtimePatches may set a container's env, securityContext and volumeMounts only.
    node_pod = w.gpu_pod(
        {"name": "node", "securityContext": w.security_context(), "volumeMounts": [w.shm_mount()]}
    )
    template: dict[str, Any] = {
        "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": node_pod}}}]}
    }
    if w.volcano:
        template["metadata"] = {
            "annotations": {scheduling.VOLCANO_QUEUE_ANNOTATION: w.tenant.namespace}
        }
    metadata = w.job_metadata(name)
    metadata.pop("annotations", None)
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": metadata,
        "spec": {
            "runtimeRef": {
                "apiGroup": "trainer.kubeflow.org",
                "kind": "ClusterTrainingRuntime",
                "name": runtime,
            },
            "trainer": trainer,
            "runtimePatches": [
                {"manager": JOB_MANAGER, "trainingRuntimeSpec": {"template": template}}
            ],
        },
    }


def job_manifest(plan: Plan, model: StackModel, req: JobRequest) -> dict[str, Any]:
    """The manifest of one job; StackError (naming the option) when the request does not fit
    the stack."""
    tenant = check_request(model, req)
    w = Wiring(model, tenant, plan.wiring[tenant.namespace])
    image = req.image or plan.components["training-image"].image_ref or ""
    name = req.name or default_name(req)
    default = DEFAULT_MPI_PROGRAM if req.kind == "mpijob" else DEFAULT_TORCH_PROGRAM
    program = shlex.split(req.command or default)
    if not program:
        raise _fail("--command", "is empty")
    if req.kind == "mpijob":
        return mpijob(w, name, req.nodes, image, program)
    if req.kind == "pytorchjob":
        return pytorchjob(w, name, req.nodes, image, program)
    runtime = req.runtime or model.training.trainer.runtimes[0]
    return trainjob(w, name, req.nodes, image, program, runtime)
