"""Ready-to-run training jobs wired for one stack and tenant (``gpufabric job``).

Every job carries what RDMA training needs on this fabric, taken from the Plan rather than
copied by hand: the queue (Kueue label or Volcano queue), the tenant's priority class, the
Multus annotation for all rails, the RDMA resources and GPUs per pod, the tenant's
``nccl-env`` as environment, ``IPC_LOCK``, a memory-backed ``/dev/shm`` sized for the GPUs,
and the topology hint for Kueue's topology-aware scheduling. MPIJobs set ``slotsPerWorker``
to the GPUs per node, an explicit ``cleanPodPolicy`` and a launcher that waits for workers.
Where the tenant has shared storage, every GPU pod mounts its claims (datasets read-only)
and learns where to checkpoint: ``GPUFABRIC_CHECKPOINT_DIR=<checkpoints mount>/<kind>/<job name>``
(the resume contract: examples/train/checkpoint.py), also shown on the job as the
``gpufabric.io/checkpoint-dir`` annotation. ``--entrypoint`` ships the program's files in a
ConfigMap of the job, mounted read-only as every GPU pod's working directory.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from pydantic_core import PydanticCustomError

from gpufabric.authorities.base import GPU_RESOURCE, Authority
from gpufabric.model import nvlink
from gpufabric.model.config import MAX_RESTARTS, deadline_seconds
from gpufabric.model.problems import Problem, StackError, suggest
from gpufabric.model.sources import REFERENCE_FORM, reference_problem, split_registry
from gpufabric.model.storage import CHECKPOINTS, ENTRYPOINT_DIR, SSH_DIR
from gpufabric.plan.build import Plan
from gpufabric.plan.facts import CHECKPOINT_DIR_ENV, NCCL_ENV, Facts, TenantContract, TenantStorage
from gpufabric.plan.failure import FailurePolicyFacts
from gpufabric.plan.resolve import on_one_leaf

JobKind = Literal["mpijob", "pytorchjob", "trainjob"]
JOB_KINDS: tuple[JobKind, ...] = ("mpijob", "pytorchjob", "trainjob")

NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
CLEAN_POD_POLICY = "Running"
"""Delete still-running pods when a job finishes (the MPI Operator would default to None)."""
TTL_SECONDS = 24 * 3600
JOB_MANAGER = "gpufabric.io/job"
CHECKPOINT_DIR_ANNOTATION = "gpufabric.io/checkpoint-dir"
COMPUTE_DOMAIN_API = "resource.nvidia.com/v1beta1"
CHANNEL_CLAIM = "imex-channel"
"""The pod's claim of its job's IMEX channel (spec.resourceClaims[].name)."""
ENTRYPOINT_MAX_BYTES = 900 * 1024
"""The files of one ``--entrypoint``, names and contents together: the API server refuses a
ConfigMap whose keys and values add up to more than 1 MiB (``CONFIGMAP_MAX_BYTES``)."""
CONFIGMAP_MAX_BYTES = 1024 * 1024
"""What the API server lets a ConfigMap's keys and values add up to (core validation's
MaxSecretSize, which ConfigMaps share)."""
CONFIGMAP_KEY_MAX = 253
"""The longest ConfigMap key the API server takes (IsConfigMapKey: a DNS subdomain's length)."""
ANNOTATIONS_MAX_BYTES = 256 * 1024
"""What the API server lets an object's annotations (keys and values) add up to. Client-side
``kubectl apply`` writes the whole object into one of them,
``kubectl.kubernetes.io/last-applied-configuration``: that is the apply path's lower limit."""
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_NOT_INSTALLED = {
    "mpijob": "training.mpiOperator is false",
    "pytorchjob": "'pytorchjob' is not in training.trainingOperator.schemes",
    "trainjob": "training.trainer.enabled is false",
}


@dataclass(frozen=True, kw_only=True)
class JobRequest:
    tenant: str
    kind: JobKind
    nodes: int = 2
    image: str | None = None
    command: str | None = None
    name: str | None = None
    runtime: str | None = None
    leaf: str | None = None
    """The leaf a job runs under, on a fabric whose rails are routed per leaf."""
    max_restarts: int | None = None
    """Gang restarts before the job fails (None: training.failurePolicy.maxRestarts)."""
    active_deadline: str | None = None
    """The job's wall-clock backstop, as the stack writes it (None: the stack's)."""
    elastic: str | None = None
    """``MIN:MAX`` nodes of an elastic PyTorchJob (None: a fixed-size job)."""
    entrypoint: tuple[tuple[str, str], ...] = ()
    """Files shipped with the job (name, text), read by the CLI from ``--entrypoint``."""
    min_nodes: int = 1
    """The fewest nodes the command runs a job on (the NCCL acceptance test: 2), for the
    sizes an error suggests."""


def _fail(path: str, message: str) -> StackError:
    return StackError("gpufabric job", [Problem(path, message)])


def plan_for_pool(plan: Plan, pool: str | None, command: str = "gpufabric job") -> Plan:
    """The Plan narrowed to ``--pool`` (:meth:`Plan.for_pool`): that pool's nodes, rails,
    RDMA resources, NCCL settings, acceptance threshold and tenant contracts. Without
    --pool: the only pool. StackError naming --pool (exit 2) when a fleet's command names
    none, or names a pool the stack does not have."""
    pools = plan.facts.pool_names
    if pool is None and plan.facts.fleet:
        raise StackError(
            command,
            [
                Problem(
                    "--pool",
                    f"the stack has {len(pools)} node pools and a job never mixes them: "
                    f"name one; accepted: {', '.join(pools)}",
                )
            ],
        )
    if pool is not None and pool not in pools:
        raise StackError(
            command,
            [
                Problem(
                    "--pool",
                    f"{pool[:60]!r} is not a node pool of this stack (gpuNodes[].name)"
                    f"{suggest(pool[:60], pools)}; accepted: {', '.join(pools)}",
                )
            ],
        )
    return plan.for_pool(pool)


def check_request(facts: Facts, req: JobRequest) -> TenantContract:
    """The tenant contract of a request this stack can run; StackError naming the option
    if not."""
    if req.tenant not in facts.tenants:
        accepted = ", ".join(sorted(facts.tenants)) or "none: the stack has no tenants"
        raise _fail(
            "--tenant", f"{req.tenant!r} is not a tenant of this stack; accepted: {accepted}"
        )
    served = facts.operators.job_kinds
    if req.kind not in served:
        kinds = ", ".join(k for k in JOB_KINDS if k in served) or "none"
        raise _fail(
            "--kind",
            f"{req.kind}: {_NOT_INSTALLED[req.kind]}, so the cluster has no operator for it; "
            f"this stack runs: {kinds}",
        )
    if req.kind == "trainjob" and needs_compute_domain(facts, req.nodes):
        kinds = ", ".join(k for k in JOB_KINDS if k in served and k != "trainjob") or "none"
        raise _fail(
            "--kind",
            f"trainjob on {req.nodes} trays of NVL72 pool {facts.pool}: every pod must claim "
            "its ComputeDomain's IMEX channel (pod resourceClaims), which a TrainJob's "
            f"runtimePatches cannot add in Trainer 2.3; use --kind {kinds}, or --nodes 1",
        )
    if req.nodes < 1 or req.nodes > facts.nodes.count:
        whose = f"pool {facts.pool}'s" if facts.fleet else "the stack's"
        raise _fail(
            "--nodes",
            f"{req.nodes} is not between 1 and {whose} {facts.nodes.count} GPU nodes",
        )
    name = req.name or default_name(req, facts)
    if len(name) > 50 or not _NAME.match(name):
        raise _fail(
            "--name",
            f"{name!r} is not a valid job name; expected lowercase letters, "
            "digits and '-', at most 50 characters (pods append their own suffixes)",
        )
    if req.entrypoint and (name == NCCL_ENV or name.startswith(NCCL_ENV + "-")):
        raise _fail(
            "--name",
            f"{name!r}: its --entrypoint ConfigMap would be {name}-entrypoint, and ConfigMaps "
            f"named {NCCL_ENV} or {NCCL_ENV}-... are the platform's in a tenant namespace; "
            "expected another name",
        )
    runtimes = facts.operators.trainer_runtimes
    if req.kind == "trainjob" and (req.runtime or runtimes):
        runtime = req.runtime or runtimes[0]
        if runtime not in runtimes:
            raise _fail(
                "--runtime",
                f"{runtime!r} is not installed; accepted: {', '.join(runtimes)}",
            )
    elif req.runtime is not None:
        raise _fail("--runtime", "applies to --kind trainjob only")
    contract = _leaf_contract(facts.tenants[req.tenant], req.leaf)
    _check_leaf_nodes(facts, contract, req)
    _check_admissible(facts, contract, req)
    job_failure_policy(facts, req)
    return contract


def job_failure_policy(facts: Facts, req: JobRequest) -> FailurePolicyFacts:
    """The stack's failure policy with the request's overrides; StackError naming the flag
    when one is out of range or does not apply to the kind."""
    if req.max_restarts is not None:
        if req.kind == "trainjob":
            raise _fail(
                "--max-restarts",
                "a TrainJob restarts as its ClusterTrainingRuntime's JobSet failurePolicy "
                "says (training.failurePolicy.maxRestarts, cluster-wide): the Trainer lets a "
                "TrainJob patch no failurePolicy; accepted with --kind mpijob or pytorchjob",
            )
        if not 0 <= req.max_restarts <= MAX_RESTARTS:
            raise _fail("--max-restarts", f"{req.max_restarts} is not between 0 and {MAX_RESTARTS}")
    deadline = None
    if req.active_deadline is not None:
        try:
            deadline = deadline_seconds(req.active_deadline)
        except PydanticCustomError as e:
            raise _fail("--active-deadline", str(e)) from None
    elastic_range(req)
    return facts.failure.for_job(req.max_restarts, deadline)


def elastic_range(req: JobRequest) -> tuple[int, int] | None:
    """(min, max) nodes of an elastic request; StackError naming --elastic if malformed."""
    if req.elastic is None:
        return None
    if req.kind != "pytorchjob":
        raise _fail("--elastic", "applies to --kind pytorchjob only (torchrun's elastic agent)")
    low, sep, high = req.elastic.partition(":")
    if not (sep and low.isdigit() and high.isdigit()):
        raise _fail("--elastic", f"{req.elastic!r} is not MIN:MAX nodes, e.g. 2:4")
    lo, hi = int(low), int(high)
    if not 1 <= lo <= hi or hi != req.nodes:
        raise _fail(
            "--elastic",
            f"{req.elastic!r}: expected 1 <= MIN <= MAX with MAX equal to --nodes "
            f"({req.nodes}): the job starts on MAX nodes and keeps training down to MIN",
        )
    return lo, hi


def _check_leaf_nodes(facts: Facts, contract: TenantContract, req: JobRequest) -> None:
    """A job pinned under a leaf fits the nodes the node table puts there (when it has one)."""
    if req.leaf is None or contract.leaf_label is None or not facts.gang.node_topology:
        return
    under = facts.gang.nodes_under(contract.leaf_label, req.leaf)
    if req.nodes > under:
        raise _fail(
            "--nodes",
            f"{req.nodes} GPU nodes do not fit under {req.leaf}: scheduling.nodeTopology puts "
            f"{under} there",
        )


def _check_admissible(facts: Facts, contract: TenantContract, req: JobRequest) -> None:
    """A job asking more GPUs than its tenant's queue can ever be admitted with would wait
    in the queue forever (``TenantContract.gpu_admissible``): refused, naming the --nodes
    and the tenants that would fit. A job within it is accepted even where it must borrow:
    it is admitted once the others' quota is idle."""
    per_node = facts.nodes.gpus_per_node
    asked = req.nodes * per_node
    most = contract.gpu_admissible
    if asked <= most:
        return
    fits = [
        f"--tenant {name} (up to {c.gpu_admissible})"
        for name, c in facts.tenants.items()
        if c.gpu_admissible >= asked
    ]
    low, high = req.min_nodes, most // per_node
    sizes = [f"--nodes {low}" if high == low else f"--nodes {low} to {high}"] if high >= low else []
    *others, last = [
        *sizes,
        *fits,
        "the tenant's gpuQuota or gpuBorrowingLimit raised in the stack",
    ]
    raise _fail(
        "--nodes",
        f"{req.nodes} nodes ask for {asked} GPUs ({per_node} a node), but tenant "
        f"{req.tenant!r} can never be admitted with more than {most} "
        f"({contract.gpu_admissible_why}): the job would wait in its queue forever; "
        f"accepted: {', '.join(others)}{', or ' if others else ''}{last}",
    )


def _leaf_contract(contract: TenantContract, leaf: str | None) -> TenantContract:
    """The contract under the request's leaf: required where rails are routed per leaf
    (each leaf has its own networks), optional where their networks span leaves, refused
    elsewhere."""
    if not contract.leaf_networks and not contract.span_leaves:
        if leaf is not None:
            raise _fail("--leaf", "applies only to stacks whose rails are routed per leaf")
        return contract
    if leaf is None and contract.span_leaves:
        return contract  # one network per rail spans every leaf
    if leaf is None:
        raise _fail(
            "--leaf",
            "this stack's rails are routed per leaf (fabric.rails[].blocks): a job runs under "
            f"one leaf; accepted: {', '.join(contract.leaf_networks)}",
        )
    try:
        return on_one_leaf(contract, leaf)
    except ValueError as e:
        raise _fail("--leaf", str(e)) from None


def inspection_kind(facts: Facts) -> JobKind | None:
    """The job kind a runbook's checks start: the MPIJob (the NCCL acceptance test's kind)
    when the stack installs the MPI Operator, else the first kind it runs; None without any."""
    served = facts.operators.job_kinds
    return next((k for k in JOB_KINDS if k in served), None)


def first_worker_pod(kind: JobKind, name: str) -> str | None:
    """The name of a job's first worker pod, where the operator names it predictably (the
    MPI and Training Operators; a TrainJob's JobSet pods carry a random suffix)."""
    return f"{name}-worker-0" if kind in ("mpijob", "pytorchjob") else None


def default_name(req: JobRequest, facts: Facts) -> str:
    return default_job_name(req.tenant, req.kind, facts)


def default_job_name(tenant: str, kind: str, facts: Facts) -> str:
    """``<tenant>-<kind>``; on a fleet ``<tenant>-<pool>-<kind>``, so one tenant's jobs on two
    pools do not overwrite each other."""
    pool = f"{facts.pool}-" if facts.fleet else ""
    return f"{tenant}-{pool}{kind}"[:50].rstrip("-")


# ------------------------------------------------------------------------- pod wiring


@dataclass(frozen=True, kw_only=True)
class Wiring:
    """What every GPU pod of a job gets, for one stack and tenant: read from the Plan's
    facts and the queueing authority, never from the raw stack."""

    facts: Facts
    contract: TenantContract
    authority: Authority
    storage: TenantStorage | None = None
    """The tenant's claims, mounted in every GPU pod (None: none, e.g. the NCCL test)."""
    job_name: str = ""
    job_kind: str = ""
    """The job's name and kind: its checkpoint directory is ``<checkpoints mount>/<kind>/<name>``,
    the same for every pod and every restart, and apart from any other job of the tenant
    (an MPIJob and a PyTorchJob may share a name; another tenant has its own claim)."""
    entrypoint: str | None = None
    """The ConfigMap of the job's ``--entrypoint`` files (None: the image's own program)."""
    failure: FailurePolicyFacts | None = None
    """How the job survives failures (None: it never restarts, e.g. the NCCL test, whose
    failure is its result)."""
    channel: str | None = None
    """The ResourceClaimTemplate of the job's ComputeDomain IMEX channel, claimed by every
    GPU pod (None: not a multi-node job on an NVL72 pool)."""
    within: str | None = None
    """A topology level the job must fit under one value of: the clique for an NVL72 job of
    at most one rack's trays (it is judged inside one NVLink domain, so it must run in one)."""

    @property
    def gpus(self) -> int:
        return self.facts.nodes.gpus_per_node

    def limits(self) -> dict[str, Any]:
        return {GPU_RESOURCE: self.gpus, **dict(self.contract.rdma_resources)}

    def pod_annotations(self) -> dict[str, str]:
        return {
            NETWORKS_ANNOTATION: self.contract.networks,
            **self.authority.pod_annotations(self.facts.gang, self.within),
        }

    def security_context(self) -> dict[str, Any]:
        return {"capabilities": {"add": ["IPC_LOCK"]}}

    def shm_volume(self) -> dict[str, Any]:
        size = f"{self.facts.nodes.shm_gib}Gi"
        return {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": size}}

    def shm_mount(self) -> dict[str, Any]:
        return {"name": "dshm", "mountPath": "/dev/shm"}

    def env_from(self) -> list[dict[str, Any]]:
        return [{"configMapRef": {"name": self.contract.nccl_env_name}}]

    def checkpoint_dir(self) -> str | None:
        """Where this job checkpoints (None: no checkpoints claim, or not a named job)."""
        claim = self.storage.checkpoint_claim if self.storage else None
        if claim is None or not self.job_name or not self.job_kind:
            return None
        return f"{claim.mount_path}/{self.job_kind}/{self.job_name}"

    def job_env(self) -> dict[str, str]:
        """Variables of this job beyond nccl-env: where to checkpoint, with a checkpoints
        claim."""
        where = self.checkpoint_dir()
        return {} if where is None else {CHECKPOINT_DIR_ENV: where}

    def env(self) -> list[dict[str, Any]]:
        return [{"name": k, "value": v} for k, v in sorted(self.job_env().items())]

    def claim_mounts(self) -> list[dict[str, Any]]:
        claims = self.storage.claims if self.storage else ()
        return [
            {"name": f"claim-{c.name}", "mountPath": c.mount_path, "readOnly": c.read_only}
            for c in claims
        ]

    def claim_volumes(self) -> list[dict[str, Any]]:
        claims = self.storage.claims if self.storage else ()
        return [
            {
                "name": f"claim-{c.name}",
                "persistentVolumeClaim": {"claimName": c.name, "readOnly": c.read_only},
            }
            for c in claims
        ]

    def entrypoint_mounts(self) -> list[dict[str, Any]]:
        if self.entrypoint is None:
            return []
        return [{"name": "entrypoint", "mountPath": ENTRYPOINT_DIR, "readOnly": True}]

    def entrypoint_volumes(self) -> list[dict[str, Any]]:
        if self.entrypoint is None:
            return []
        return [{"name": "entrypoint", "configMap": {"name": self.entrypoint}}]

    def volume_mounts(self) -> list[dict[str, Any]]:
        return [self.shm_mount(), *self.claim_mounts(), *self.entrypoint_mounts()]

    def placement(self) -> dict[str, Any]:
        """Node selector and tolerations of the GPU nodes (Kueue's flavor would add them on
        admission; set here so the job reads the same under either authority)."""
        selector = {**self.facts.nodes.selector, **self.contract.node_selector}
        out: dict[str, Any] = {"nodeSelector": selector}
        if self.facts.nodes.tolerations:
            out["tolerations"] = [dict(t) for t in self.facts.nodes.tolerations]
        return out

    def gpu_container(self, name: str, image: str, command: list[str] | None) -> dict[str, Any]:
        c: dict[str, Any] = {"name": name, "image": image}
        if command:
            c["command"] = command
        if self.entrypoint is not None:
            c["workingDir"] = ENTRYPOINT_DIR
        if self.job_env():
            c["env"] = self.env()
        c.update(
            envFrom=self.env_from(),
            resources=self.resources(),
            securityContext=self.security_context(),
            volumeMounts=self.volume_mounts(),
        )
        return c

    def pull_secrets(self) -> dict[str, Any]:
        """``imagePullSecrets`` of the stack's authenticated mirror (``sources.pullSecrets``),
        which the runbook creates in every tenant namespace; empty without one."""
        names = self.facts.pull_secrets
        return {"imagePullSecrets": [{"name": n} for n in names]} if names else {}

    def resources(self) -> dict[str, Any]:
        """The GPU container's resources: GPUs and rails, and the IMEX channel's claim."""
        out: dict[str, Any] = {"limits": self.limits()}
        if self.channel is not None:
            out["claims"] = [{"name": CHANNEL_CLAIM}]
        return out

    def gpu_pod(self, container: dict[str, Any]) -> dict[str, Any]:
        spec: dict[str, Any] = {"containers": [container], **self.placement()}
        spec.update(self.pull_secrets())
        spec["volumes"] = [self.shm_volume(), *self.claim_volumes(), *self.entrypoint_volumes()]
        if self.channel is not None:
            spec["resourceClaims"] = [
                {"name": CHANNEL_CLAIM, "resourceClaimTemplateName": self.channel}
            ]
        if self.authority.pod_scheduler_name is not None:
            spec["schedulerName"] = self.authority.pod_scheduler_name
        metadata: dict[str, Any] = {"annotations": self.pod_annotations()}
        labels = self.authority.pod_labels(self.contract)
        if labels:
            metadata["labels"] = labels
        return {"metadata": metadata, "spec": spec}

    def job_metadata(self, name: str, queue_annotations: bool = True) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name, "namespace": self.contract.namespace}
        annotations: dict[str, str] = {}
        if queue_annotations:
            annotations.update(self.authority.job_annotations(self.contract))
        if (where := self.checkpoint_dir()) is not None:
            annotations[CHECKPOINT_DIR_ANNOTATION] = where
        if annotations:
            meta["annotations"] = annotations
        labels = self.authority.job_labels(self.contract)
        if labels:
            meta["labels"] = labels
        return meta

    def run_policy(self, gang_pods: int) -> dict[str, Any]:
        """Kubeflow runPolicy: cleanup, TTL, the failure policy's restarts and deadline (no
        retries without one), and the authority's gang policy."""
        policy: dict[str, Any] = {
            "cleanPodPolicy": CLEAN_POD_POLICY,
            "ttlSecondsAfterFinished": TTL_SECONDS,
            "backoffLimit": 0,
        }
        if self.failure is not None:
            policy.update(self.failure.run_policy())
        scheduling = self.authority.scheduling_policy(self.contract, gang_pods)
        if scheduling is not None:
            policy["schedulingPolicy"] = scheduling
        return policy


def wiring_for(plan: Plan, req: JobRequest) -> Wiring:
    """The wiring of a request this stack can run; StackError naming the option if not.
    A multi-node job on an NVL72 pool claims its ComputeDomain's IMEX channel."""
    contract = check_request(plan.facts, req)
    name = req.name or default_name(req, plan.facts)
    channel = channel_template(name) if needs_compute_domain(plan.facts, req.nodes) else None
    one_rack = channel is not None and req.nodes <= nvlink.TRAYS_PER_DOMAIN
    return Wiring(
        facts=plan.facts,
        contract=contract,
        authority=plan.authority,
        channel=channel,
        within=nvlink.CLIQUE_LABEL if one_rack else None,
    )


def needs_compute_domain(facts: Facts, nodes: int) -> bool:
    """A job of ``nodes`` trays of the pool ``facts`` are narrowed to spans trays of an
    NVLink domain: its pods share GPU memory through IMEX, in a ComputeDomain."""
    return facts.nodes.nvlink is not None and nodes > 1


def compute_domain_name(job: str) -> str:
    return f"{job}-imex"


def channel_template(job: str) -> str:
    """The ResourceClaimTemplate the ComputeDomain controller creates for the job's pods."""
    return f"{compute_domain_name(job)}-channel"


def compute_domain(namespace: str, job: str, nodes: int, owner: Mapping[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """The ComputeDomain of a job of ``nodes`` trays: one IMEX daemon per tray, Ready when
    all ``nodes`` run (numNodes), its channel claimed by every pod through the template
    :func:`channel_template` names. ``owner`` (the job as created, with its uid): deleted
    with it."""
    meta: dict[str, Any] = {
        "name": compute_domain_name(job),
        "namespace": namespace,
        "labels": {JOB_MANAGER: job},
    }
    if owner is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
            }
        ]
    return {
        "apiVersion": COMPUTE_DOMAIN_API,
        "kind": "ComputeDomain",
        "metadata": meta,
        "spec": {
            "numNodes": nodes,
            "channel": {"resourceClaimTemplate": {"name": channel_template(job)}},
        },
    }


# ------------------------------------------------------------------------------- kinds


def mpirun_command(
    w: Wiring, nodes: int, program: list[str], env: Mapping[str, str] | None = None
) -> list[str]:
    """mpirun over every GPU; NCCL variables are exported to the ranks explicitly, since ranks
    started over ssh do not inherit the worker container's environment. ``env`` adds
    variables set for this run only (``-x NAME=value``, in place of the pod's value)."""
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
    for var in sorted(w.contract.nccl_env):
        if var not in (env or {}):
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
    command = mpirun_command(w, nodes, program, w.job_env())
    if w.entrypoint is not None:  # ranks start in the entrypoint's directory on the workers
        command[1:1] = ["-wdir", ENTRYPOINT_DIR]
    launcher = {"name": "launcher", "image": image, "command": command, "envFrom": w.env_from()}
    worker = w.gpu_container("worker", image, ["/usr/sbin/sshd", "-De"])
    launcher_pod: dict[str, Any] = {"spec": {"containers": [launcher], **w.pull_secrets()}}
    hint = w.authority.pod_annotations(w.facts.gang)
    if hint:
        launcher_pod["metadata"] = {"annotations": hint}
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": w.job_metadata(name),
        "spec": {
            "slotsPerWorker": w.gpus,
            "runLauncherAsWorker": False,
            "launcherCreationPolicy": "WaitForWorkersReady",
            "mpiImplementation": "OpenMPI",
            # The gang is the workers. The launcher is created only once they are ready
            # (mpirun needs their sshd), so it cannot count towards the PodGroup's minMember:
            # with workers + 1 (the operator's default) Volcano waits for a launcher that waits
            # for the workers (kubeflow/mpi-operator#608). The launcher needs no GPUs and joins
            # the running group.
            "runPolicy": w.run_policy(nodes),
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


def pytorchjob(
    w: Wiring,
    name: str,
    nodes: int,
    image: str,
    program: list[str],
    elastic: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """A PyTorchJob; ``elastic`` (min, max nodes) adds an elasticPolicy, the gang then being
    the minimum."""
    container = w.gpu_container("pytorch", image, ["torchrun", *_torchrun_args(program)])
    failure = w.failure
    restart = failure.pytorch_restart_policy(elastic is not None) if failure else "OnFailure"
    replica = {"restartPolicy": restart, "template": w.gpu_pod(container)}
    specs: dict[str, Any] = {"Master": {"replicas": 1, **replica}}
    if elastic is not None:
        # Elastic jobs are Workers only (the operator's webhook requires them; the c10d
        # rendezvous endpoint is then worker-0).
        specs = {"Worker": {"replicas": nodes, **replica}}
    elif nodes > 1:
        specs["Worker"] = {"replicas": nodes - 1, **replica}
    run_policy = w.run_policy(elastic[0] if elastic else nodes)
    if failure is not None and elastic is None:
        run_policy.update(failure.run_policy_counting_restarts(nodes))
    spec: dict[str, Any] = {
        "nprocPerNode": str(w.gpus),
        "runPolicy": run_policy,
        "pytorchReplicaSpecs": specs,
    }
    if elastic is not None and failure is not None:
        spec["elasticPolicy"] = failure.elastic_policy(*elastic)
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": w.job_metadata(name),
        "spec": spec,
    }


def _torchrun_args(program: list[str]) -> list[str]:
    """torchrun reads PET_NNODES / PET_NODE_RANK / PET_NPROC_PER_NODE from the operator; a
    python program is run as a module-less script, ``python X.py`` as torchrun's script."""
    if program[:1] in (["python"], ["python3"]) and program[1:2] == ["-c"]:
        return ["--no-python", *program]
    if program[:1] in (["torchrun"], ["python"], ["python3"]):
        return program[1:]
    return program


def trainjob(
    w: Wiring, name: str, nodes: int, image: str, program: list[str], runtime: str
) -> dict[str, Any]:
    env = [
        {
            "name": var,
            "valueFrom": {"configMapKeyRef": {"name": w.contract.nccl_env_name, "key": var}},
        }
        for var in sorted(w.contract.nccl_env)
    ] + w.env()
    if w.entrypoint is not None:  # a TrainJob's trainer has no workingDir
        program = ["sh", "-c", f'cd {ENTRYPOINT_DIR} && exec "$@"', "sh", *program]
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
        {"name": "node", "securityContext": w.security_context(), "volumeMounts": w.volume_mounts()}
    )
    template: dict[str, Any] = {
        "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": node_pod}}}]}
    }
    template_metadata = w.authority.trainjob_template_metadata(w.contract)
    if template_metadata is not None:
        template["metadata"] = template_metadata
    # the authority's annotations go on the JobSet's template (above), not on the TrainJob
    metadata = w.job_metadata(name, queue_annotations=False)
    spec: dict[str, Any] = {
        "runtimeRef": {
            "apiGroup": "trainer.kubeflow.org",
            "kind": "ClusterTrainingRuntime",
            "name": runtime,
        },
        "trainer": trainer,
        "runtimePatches": [{"manager": JOB_MANAGER, "trainingRuntimeSpec": {"template": template}}],
    }
    if w.failure is not None:
        # The TrainJob's own deadline: a Failed condition with reason DeadlineExceeded is the
        # one the Trainer never clears, so no JobSet TTL can restart the job after it.
        spec["activeDeadlineSeconds"] = w.failure.active_deadline_s
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": metadata,
        "spec": spec,
    }


def mpi_trainjob(
    w: Wiring, name: str, nodes: int, image: str, command: list[str], runtime: str
) -> dict[str, Any]:
    """A TrainJob through an MPI ClusterTrainingRuntime whose launcher is also a node
    (gpufabric's nccl-tests runtime): ``command`` (mpirun) runs in the launcher, and both
    replicated jobs get the tenant's pod wiring, since both hold GPU ranks."""
    job = trainjob(w, name, nodes, image, command, runtime)
    template = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]
    node = template["spec"]["replicatedJobs"][0]
    launcher = {"name": "launcher", "template": copy.deepcopy(node["template"])}
    template["spec"]["replicatedJobs"] = [launcher, node]
    return job


def entrypoint_configmap(w: Wiring, files: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """The ConfigMap that carries a job's ``--entrypoint`` files, in the tenant namespace."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": w.entrypoint,
            "namespace": w.contract.namespace,
            "labels": {JOB_MANAGER: w.job_name},
        },
        "data": dict(sorted(files)),
    }


def job_objects(plan: Plan, req: JobRequest) -> list[dict[str, Any]]:
    """What ``gpufabric job`` prints, in the order to apply it: the entrypoint's ConfigMap
    (with ``--entrypoint``), then the job."""
    job = job_manifest(plan, req)
    w = _named_wiring(plan, req)
    before: list[dict[str, Any]] = []
    if req.entrypoint:
        before.append(entrypoint_configmap(w, req.entrypoint))
    if w.channel is not None:
        before.append(compute_domain(w.contract.namespace, w.job_name, req.nodes))
    return [*before, job]


def _named_wiring(plan: Plan, req: JobRequest) -> Wiring:
    name = req.name or default_name(req, plan.facts)
    return replace(
        wiring_for(plan, req),
        storage=plan.facts.storage_of(req.tenant),
        job_name=name,
        job_kind=req.kind,
        entrypoint=f"{name}-entrypoint" if req.entrypoint else None,
        failure=job_failure_policy(plan.facts, req),
    )


def _default_program(req: JobRequest) -> str:
    """Without ``--command``: the NCCL test, or the one file ``--entrypoint`` ships."""
    if not req.entrypoint:
        return DEFAULT_MPI_PROGRAM if req.kind == "mpijob" else DEFAULT_TORCH_PROGRAM
    if len(req.entrypoint) > 1:
        names = ", ".join(n for n, _ in req.entrypoint)
        raise _fail(
            "--command",
            f"required with more than one --entrypoint file ({names}): name the one to run, "
            "e.g. 'torchrun ddp_resume.py --steps 1000'",
        )
    run = "python" if req.kind == "mpijob" else "torchrun"
    return f"{run} {shlex.quote(req.entrypoint[0][0])}"


def job_manifest(plan: Plan, req: JobRequest) -> dict[str, Any]:
    """The manifest of one job; StackError (naming the option) when the request does not fit
    the stack."""
    w = _named_wiring(plan, req)
    name = w.job_name
    image = job_image(plan, req.image)
    try:
        program = shlex.split(req.command if req.command is not None else _default_program(req))
    except ValueError as exc:
        raise _fail("--command", f"cannot be split into words as a shell would: {exc}") from None
    if not program:
        raise _fail(
            "--command",
            f"{req.command!r} is empty; give the program to run (e.g. 'torchrun train.py'), "
            "or leave --command out for the default (the NCCL test)",
        )
    if req.kind == "mpijob":
        return mpijob(w, name, req.nodes, image, program)
    if req.kind == "pytorchjob":
        return pytorchjob(w, name, req.nodes, image, program, elastic_range(req))
    runtime = req.runtime or plan.facts.operators.trainer_runtimes[0]
    return trainjob(w, name, req.nodes, image, program, runtime)


def job_image(plan: Plan, image: str | None) -> str:
    """The image a job's pods pull: the pinned training image, or ``--image`` checked
    against the distribution reference grammar and written through the stack's registry
    mirrors exactly as the stack's own images are. StackError naming ``--image`` when it is
    not a reference, or when an air-gapped stack has no mirror for its registry."""
    return pulled_image(plan, image, "--image", "training-image")


def pulled_image(plan: Plan, image: str | None, flag: str, component_name: str) -> str:
    """The image pods pull: the pinned ``component_name``, or ``image`` given with ``flag``,
    checked and written through the stack's mirrors as :func:`job_image` says."""
    component = plan.components[component_name]
    if image is None:
        return component.image_ref or ""
    why = reference_problem(image)
    if why is not None:
        raise _fail(flag, f"{image[:120]!r} {why}; expected {REFERENCE_FORM}")
    mirrors = component.mirrors
    pulled = mirrors.image(image)
    if mirrors.air_gapped and pulled == image and not mirrors.serves(image):
        registry = split_registry(image)[0]
        hosts = sorted({p.split("/", 1)[0] for p in mirrors.registries.values()})
        raise _fail(
            flag,
            f"{image!r} is pulled from {registry}, which this air-gapped stack has no mirror "
            f"for (sources.airGapped is on); accepted: an image of a mirrored registry "
            f"({', '.join(sorted(mirrors.registries)) or 'none'}) or of a mirror "
            f"({', '.join(hosts) or 'none'}), or add '{registry}: <mirror prefix>' to "
            "sources.registries",
        )
    return pulled


# ------------------------------------------------- the NCCL test as a PyTorchJob (mpirun)

HOSTFILE = "/tmp/gpufabric-hostfile"
SSH_OPTIONS = "-o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"
SSH_WAIT_TRIES = 120
SSH_WAIT_S = 5
"""The Master tries each Worker's sshd this often, this far apart (10 minutes in all)."""


def ssh_secret_name(job_name: str) -> str:
    """The per-run Secret holding a PyTorchJob acceptance run's SSH keys."""
    return f"{job_name}-ssh"


def replica_hosts(name: str, nodes: int) -> list[str]:
    """The hosts of a PyTorchJob: the Training Operator names each replica's pod and its
    headless Service ``<job>-<type>-<index>``, so the Master is ``<job>-master-0`` (its own
    hostname) and the Workers resolve by Service name in the namespace."""
    return [f"{name}-master-0", *(f"{name}-worker-{i}" for i in range(nodes - 1))]


def _mpi_launch_env(gpus: int) -> list[dict[str, str]]:
    """What the MPI Operator's launcher gets and a PyTorchJob's Master lacks: mpirun reads
    the hostfile from the environment (OpenMPI 4 and 5 spell it differently) and reaches
    the Workers over ssh with keys verify minted, host keys unknown beforehand."""
    rsh = f"-o ConnectionAttempts=10 {SSH_OPTIONS}"
    env = {
        "OMPI_MCA_orte_default_hostfile": HOSTFILE,
        "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
        "OMPI_MCA_orte_set_default_slots": str(gpus),
        "OMPI_MCA_plm_rsh_args": rsh,
        "PRTE_MCA_prte_default_hostfile": HOSTFILE,
        "PRTE_MCA_plm_ssh_args": rsh,
    }
    return [{"name": k, "value": v} for k, v in sorted(env.items())]


def master_script(name: str, nodes: int, gpus: int, program: str) -> str:
    """The Master's shell: its own sshd (mpirun may reach the local host over ssh), the
    hostfile with one slot per GPU, then each Worker's sshd awaited before ``program``
    (mpirun) runs; its exit status is the Master's, and so the job's."""
    hosts = replica_hosts(name, nodes)
    lines = [
        "set -u",
        "mkdir -p /run/sshd",
        "/usr/sbin/sshd || { echo 'gpufabric: sshd did not start on the master' >&2; exit 1; }",
        "printf '%s\\n' "
        + " ".join(shlex.quote(f"{h} slots={gpus}") for h in hosts)
        + f" > {HOSTFILE}",
    ]
    for host in hosts[1:]:
        h = shlex.quote(host)
        lines.append(
            f"n=0; until ssh {SSH_OPTIONS} -o ConnectTimeout=5 {h} true; do "
            f"n=$((n+1)); if [ $n -ge {SSH_WAIT_TRIES} ]; then "
            f"echo 'gpufabric: no sshd answered on '{h} >&2; exit 1; fi; sleep {SSH_WAIT_S}; done"
        )
    return "\n".join([*lines, program])


def _ssh_volume(secret: str) -> dict[str, Any]:
    """The per-run keys as the MPI Operator lays them out: the private key readable only
    by root, the public key also as authorized_keys (for the Workers' sshd)."""
    items = [
        {"key": "ssh-privatekey", "path": "id_ed25519"},
        {"key": "ssh-publickey", "path": "id_ed25519.pub"},
        {"key": "ssh-publickey", "path": "authorized_keys"},
    ]
    return {
        "name": "ssh-auth",
        "secret": {"secretName": secret, "defaultMode": 0o600, "items": items},
    }


def _with_ssh(pod: dict[str, Any], secret: str) -> dict[str, Any]:
    pod["spec"]["volumes"].append(_ssh_volume(secret))
    container = pod["spec"]["containers"][0]
    container["volumeMounts"].append({"name": "ssh-auth", "mountPath": SSH_DIR, "readOnly": True})
    return pod


def mpi_pytorchjob(w: Wiring, name: str, nodes: int, image: str, program: str) -> dict[str, Any]:
    """A PyTorchJob that runs ``program`` (mpirun, a shell line) from its Master over sshd
    Workers, for stacks whose only MPI-capable operator is the Training Operator. Every
    replica is a GPU node and a rank host; keys come from the Secret
    :func:`ssh_secret_name` names, created with the job. The Training Operator marks a job
    with a Master Succeeded once the Master succeeds (and cleanPodPolicy removes the
    Workers' sshd), Failed once any replica with restartPolicy Never fails."""
    secret = ssh_secret_name(name)
    script = master_script(name, nodes, w.gpus, program)
    master = w.gpu_container("pytorch", image, ["/bin/bash", "-c", script])
    master["env"] = [*master.get("env", []), *_mpi_launch_env(w.gpus)]
    worker = w.gpu_container("pytorch", image, ["/usr/sbin/sshd", "-De"])
    worker["readinessProbe"] = {"tcpSocket": {"port": 22}, "initialDelaySeconds": 5}
    specs: dict[str, Any] = {
        "Master": {
            "replicas": 1,
            "restartPolicy": "Never",
            "template": _with_ssh(w.gpu_pod(master), secret),
        }
    }
    if nodes > 1:
        specs["Worker"] = {
            "replicas": nodes - 1,
            "restartPolicy": "Never",
            "template": _with_ssh(w.gpu_pod(worker), secret),
        }
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": w.job_metadata(name),
        "spec": {"runPolicy": w.run_policy(nodes), "pytorchReplicaSpecs": specs},
    }


# ------------------------------------------------------------------------- entrypoint

_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")


def read_entrypoint(paths: Iterable[Path]) -> tuple[tuple[str, str], ...]:
    """The files ``--entrypoint`` ships (name, text): each path a file, or a directory whose
    regular top-level files are taken (hidden files and symbolic links are not, so a stray
    ``.env`` or a link out of the directory never reaches the cluster)."""
    files: dict[str, str] = {}
    for path in paths:
        if path.is_dir():
            found = [p for p in sorted(path.iterdir()) if _shipped(p)]
            if not found:
                raise _fail("--entrypoint", f"{str(path)!r} holds no file to ship")
        elif path.is_file():
            found = [path]
        else:
            raise _fail("--entrypoint", f"{str(path)!r} is not a file or a directory")
        for p in found:
            _add_file(files, p)
    total = sum(len(n.encode()) + len(t.encode()) for n, t in files.items())
    if total > ENTRYPOINT_MAX_BYTES:
        raise _fail(
            "--entrypoint",
            f"{total} bytes of file names and contents; gpufabric ships at most "
            f"{ENTRYPOINT_MAX_BYTES} (the API server refuses a ConfigMap whose keys and values "
            f"pass {CONFIGMAP_MAX_BYTES}): build larger programs into the image (--image)",
        )
    return tuple(files.items())


def last_applied_bytes(obj: Mapping[str, Any]) -> int:
    """The size of the annotation client-side ``kubectl apply`` adds: the object as compact
    JSON, with Go's escaping of <, > and & (six bytes each) and its key."""
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False, sort_keys=True)
    escaped = sum(text.count(c) for c in "<>&")
    return len(LAST_APPLIED) + len(text.encode()) + 5 * escaped


def borrowing_notes(facts: Facts, tenant: str) -> list[str]:
    """What to say about a job its tenant runs only on borrowed GPUs: no quota in the pool
    (a fleet) or the stack, only a borrowing limit, so it waits while others' quota is busy."""
    contract = facts.tenants.get(tenant)
    if contract is None or contract.gpu_quota or not contract.gpu_borrowing_limit:
        return []
    where = f"in pool {facts.pool}" if facts.fleet else "in the stack"
    return [
        f"{tenant} has no gpuQuota {where}, only a gpuBorrowingLimit of "
        f"{contract.gpu_borrowing_limit}: the job runs only while other tenants' quota there is "
        "idle, and waits in its queue otherwise"
    ]


def checkpoint_notes(plan: Plan, req: JobRequest) -> list[str]:
    """What to say of a job whose tenant has no checkpoints claim: nothing it writes
    outlives its pods, and ``GPUFABRIC_CHECKPOINT_DIR`` is not set; when the entrypoint
    reads that variable (the resume example), what to add to the stack."""
    storage = plan.facts.storage_of(req.tenant)
    if storage is not None and storage.checkpoint_claim is not None:
        return []
    where = (
        f"the stack has no storage section, so tenant {req.tenant!r} has no checkpoints claim"
        if not plan.facts.storage_backends
        else f"tenant {req.tenant!r} has no '{CHECKPOINTS}' claim (its tenants[].claims "
        "or storage.claims)"
    )
    notes = [
        f"{where}: this job's checkpoints will not persist (nothing it writes outlives its "
        f"pods, and {CHECKPOINT_DIR_ENV} is not set)"
    ]
    readers = [name for name, text in req.entrypoint if CHECKPOINT_DIR_ENV in text]
    if readers:
        add = (
            "a storage section with a backend and the claim, e.g. gpufabric:storage: "
            "{backends: [{name: shared, nfs: {server: <server>, share: <export>}}], "
            f"claims: [{{name: {CHECKPOINTS}, size: 10Ti}}]}}"
            if not plan.facts.storage_backends
            else f"{{name: {CHECKPOINTS}, size: <size>}} to the tenant's claims "
            "(tenants[].claims, or storage.claims when it lists none)"
        )
        notes.append(
            f"--entrypoint {', '.join(readers)} reads {CHECKPOINT_DIR_ENV}: every worker "
            f"would exit at start, and the job would restart until its limit; add {add} "
            "(docs/user/storage.md), run pulumi up, then print the job again"
        )
    return notes


def apply_notes(objects: Iterable[Mapping[str, Any]]) -> list[str]:
    """What to say about objects client-side ``kubectl apply`` would refuse: an entrypoint
    ConfigMap within the API server's 1 MiB whose last-applied annotation passes 256 KiB."""
    notes = []
    for obj in objects:
        size = last_applied_bytes(obj)
        if obj.get("kind") == "ConfigMap" and size > ANNOTATIONS_MAX_BYTES:
            notes.append(
                f"ConfigMap {obj['metadata']['name']}: client-side `kubectl apply` would store "
                f"it as its {LAST_APPLIED} annotation, about {size} bytes, over the "
                f"{ANNOTATIONS_MAX_BYTES} bytes the API server allows an object's annotations; "
                "apply it with `kubectl apply --server-side -f -` or `kubectl create -f -`"
            )
    return notes


def _shipped(p: Path) -> bool:
    return not p.name.startswith(".") and not p.is_symlink() and p.is_file()


def _add_file(files: dict[str, str], p: Path) -> None:
    if not _KEY.match(p.name) or p.name.startswith("..") or len(p.name) > CONFIGMAP_KEY_MAX:
        shown = p.name if len(p.name) <= 60 else p.name[:60] + "..."
        raise _fail(
            "--entrypoint",
            f"{shown!r} cannot be a ConfigMap key ({len(p.name)} characters); expected "
            f"letters, digits, '-', '_' and '.', not starting with '..', at most "
            f"{CONFIGMAP_KEY_MAX} characters",
        )
    if p.name in files:
        raise _fail("--entrypoint", f"two files are named {p.name!r}; names must differ")
    try:
        with p.open("rb") as f:  # at most what a ConfigMap takes: never a whole dataset
            data = f.read(ENTRYPOINT_MAX_BYTES + 1)
        files[p.name] = data.decode()
    except UnicodeDecodeError:
        raise _fail("--entrypoint", f"{str(p)!r} is not UTF-8 text") from None
    except OSError as e:
        raise _fail("--entrypoint", f"{str(p)!r} cannot be read: {e.strerror}") from None
    if _PRIVATE_KEY.search(files[p.name]):
        raise _fail(
            "--entrypoint",
            f"{str(p)!r} holds a private key; a ConfigMap is no secret (every member of the "
            "tenant reads it, and the job's YAML prints it): put the key in a Secret, or "
            "ship a directory without it",
        )


_PRIVATE_KEY = re.compile(r"-----BEGIN ([A-Z0-9]+ )*PRIVATE KEY( BLOCK)?-----")
"""PEM (RSA, EC, PKCS#8, encrypted), OpenSSH and PGP private keys."""


# ----------------------------------------------------------------- resume, for the runbook

JOB_LABEL = "training.kubeflow.org/job-name"
"""The label the MPI Operator and the Training Operator put on a job's pods."""
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
"""The label JobSet puts on a TrainJob's pods."""
POD_JOB_LABEL: dict[JobKind, str] = {
    "mpijob": JOB_LABEL,
    "pytorchjob": JOB_LABEL,
    "trainjob": JOBSET_LABEL,
}
"""The label each operator puts on a job's pods, valued with the job's name (a TrainJob's
JobSet has the TrainJob's name)."""
RESUMED_LOG = "resumed from step"
"""What the example entrypoint logs when it takes a checkpoint (examples/train/ddp_resume.py)."""


@dataclass(frozen=True)
class ResumeFacts:
    """What the runbook's "Resume after failure" shows: one tenant's jobs of one kind."""

    tenant: str
    kind: JobKind
    mount_path: str | None
    """Where the tenant's checkpoints claim is mounted (None: no tenant has one)."""
    claim: str | None
    pod_label: str
    program: str | None
    """The example's --command (None: an MPIJob, whose ranks torchrun does not start)."""

    @property
    def resource(self) -> str:
        """kubectl's plural of the kind."""
        return f"{self.kind}s"


def resume_facts(facts: Facts) -> ResumeFacts | None:
    """The tenant and kind the runbook's resume section shows: the first tenant with a
    checkpoints claim (else the first tenant), the torchrun kinds first (the example is DDP);
    None without a job kind or a tenant."""
    served = facts.operators.job_kinds
    kind = next((k for k in ("pytorchjob", "trainjob", "mpijob") if k in served), None)
    claims = [
        (t, c) for t in facts.tenants if (s := facts.storage_of(t)) and (c := s.checkpoint_claim)
    ]
    if kind is None or not facts.tenants:
        return None
    tenant, claim = claims[0] if claims else (next(iter(facts.tenants)), None)
    return ResumeFacts(
        tenant=tenant,
        kind=kind,
        mount_path=claim.mount_path if claim else None,
        claim=claim.name if claim else None,
        pod_label=POD_JOB_LABEL[kind],
        program=None if kind == "mpijob" else "torchrun ddp_resume.py --steps 2000",
    )
