"""The NCCL acceptance test: a job with the tenant's full wiring, judged by the analyzer.

The job runs as the kind the stack installs for it (``facts.operators.acceptance_kind``): an
MPIJob (the one ``gpufabric job --kind mpijob`` prints) with the MPI Operator, else a TrainJob
through gpufabric's nccl-tests ClusterTrainingRuntime, whose MPI policy gives the launcher the
hostfile and SSH keys the MPI Operator would, else a PyTorchJob whose Master runs mpirun over
sshd Workers (hostfile from the Training Operator's per-replica Services, an SSH key pair
minted per run into a Secret the job owns, :mod:`gpufabric.verify.nccl.sshkeys`). All carry the queue, priority, rails, RDMA
resources, nccl-env, IPC_LOCK and /dev/shm, and a launcher that runs nccl-tests with mpirun
twice under ``NCCL_DEBUG=INFO`` (INIT,NET: the transport lines the verdict needs):
``all_reduce_perf_mpi`` (with ``NCCL_ALGO=Ring`` on two nodes, where tree algorithms report bus
bandwidth above the NICs' rate) then ``all_gather_perf_mpi``, each over 1-8 GiB. The launcher
log is split per test at gpufabric's marker lines and judged by
:mod:`gpufabric.verify.nccl.report`. A stack with none of the three kinds has no
acceptance job.

A sweep's group job (g > 2 nodes, pinned to them) runs both tests once per rank order of
:func:`gpufabric.verify.sweep.rounds.ring_orders`, each from a hostfile that lists the
operator's hosts in that order, with ``NCCL_ALGO=Ring`` so that each run loads exactly the
links between nodes adjacent in the order; its log is split per order and test at order
markers and is PASS only when every order ran and passed (:func:`judge` with ``orders``).
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gpufabric.exitcodes import Verdict, worst
from gpufabric.model.problems import Problem, StackError
from gpufabric.outputs.jobs import (
    JOB_LABEL,
    JOBSET_LABEL,
    JobRequest,
    Wiring,
    compute_domain,
    job_image,
    mpi_pytorchjob,
    mpi_trainjob,
    mpijob,
    mpirun_command,
    wiring_for,
)
from gpufabric.plan.build import Plan
from gpufabric.plan.facts import GPU_RESOURCE, AcceptanceKind
from gpufabric.plan.resolve import on_one_rail
from gpufabric.plan.training import NCCL_TESTS_RUNTIME
from gpufabric.verify.defaults import NCCL_JOB_NAME, NCCL_TIMEOUT
from gpufabric.verify.interrupts import left_behind, shielded
from gpufabric.verify.kube import (
    Kube,
    KubeError,
    collection_path,
    mapping,
    name_of,
    object_path,
    path_of,
    records,
    text,
)
from gpufabric.verify.nccl import parse as nccl_parse
from gpufabric.verify.nccl import report as nccl_report
from gpufabric.verify.nccl import rules as nccl_rules
from gpufabric.verify.nccl import sshkeys

SIZES = ["-b", "1G", "-e", "8G", "-f", "2", "-g", "1"]
TESTS = ("all_reduce_perf_mpi", "all_gather_perf_mpi")
DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}
MARKER = "==> gpufabric nccl-test: {test} <=="
ORDER_MARKER = "==> gpufabric order {index}/{count}:"
"""Precedes each rank order's runs in a group job's log, followed by its hosts in rank order
and ``<==``."""
_ORDER = re.compile(r"^==> gpufabric order ([0-9]+)/([0-9]+):((?: \S+)*) <==$")
ORDER_HOSTFILE = "/tmp/gpufabric-order-hostfile"
"""The hostfile of the rank order a group job's launcher runs next."""
GROUP_ENV = {**DEBUG_ENV, "NCCL_ALGO": "Ring"}
"""A group job's runs: rings only, for both tests, so each run loads exactly the links
between nodes adjacent in its rank order (trees, NVLS and CollNet would load others)."""
COMPUTE_DOMAIN_NODES = "gpufabric.io/compute-domain-nodes"
"""On an acceptance job on NVL72 trays: the size of the ComputeDomain a run creates beside it
(:func:`companions`), whose IMEX channel its GPU pods claim."""
ROLE_LABEL = "training.kubeflow.org/job-role"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"


@dataclass(frozen=True, kw_only=True)
class Shape:
    """How one acceptance kind is watched, read and deleted."""

    kind: str
    resource: str
    """The kubectl resource name (``kubectl delete <resource> <name>``)."""
    name_label: str
    """The label every pod of the job carries with the job's name."""
    launcher_selector: str
    """Selects the launcher pods of job ``{name}``."""
    success: str
    """The condition type of a job that succeeded."""
    suspend_path: tuple[str, ...]
    ssh_keys: bool = False
    """verify mints the run's SSH keys (a Secret the job owns): its operator makes none."""


SHAPES = {
    "MPIJob": Shape(
        kind="MPIJob",
        resource="mpijob",
        name_label=JOB_LABEL,
        launcher_selector=f"{JOB_LABEL}={{name}},{ROLE_LABEL}=launcher",
        success="Succeeded",
        suspend_path=("spec", "runPolicy"),
    ),
    # The Trainer names the JobSet after the TrainJob; JobSet labels its pods.
    "TrainJob": Shape(
        kind="TrainJob",
        resource="trainjob",
        name_label=JOBSET_LABEL,
        launcher_selector=f"{JOBSET_LABEL}={{name}},{REPLICATED_JOB_LABEL}=launcher",
        success="Complete",
        suspend_path=("spec",),
    ),
    # The Training Operator labels a PyTorchJob's pods with their replica type; the Master
    # runs mpirun.
    "PyTorchJob": Shape(
        kind="PyTorchJob",
        resource="pytorchjob",
        name_label=JOB_LABEL,
        launcher_selector=f"{JOB_LABEL}={{name}},{REPLICA_TYPE_LABEL}=master",
        success="Succeeded",
        suspend_path=("spec", "runPolicy"),
        ssh_keys=True,
    ),
}


def shape_of(job: Mapping[str, Any]) -> Shape:
    return SHAPES[str(job["kind"])]


DEFAULT_NAME = NCCL_JOB_NAME
DEFAULT_TIMEOUT = NCCL_TIMEOUT


def test_env(test: str, nodes: int) -> dict[str, str]:
    env = dict(DEBUG_ENV)
    if test.startswith("all_reduce") and nodes == 2:
        env["NCCL_ALGO"] = "Ring"
    return env


def launcher_script(w: Wiring, nodes: int, env: Mapping[str, str] | None = None) -> str:
    """Run every test even when one fails; exit non-zero when any did. ``env`` overrides
    the pods' NCCL variables for these runs."""
    steps = ["rc=0"]
    for test in TESTS:
        cmd = mpirun_command(w, nodes, [test, *SIZES], {**test_env(test, nodes), **(env or {})})
        steps.append(f"echo {shlex.quote(MARKER.format(test=test))}")
        steps.append(f"{shlex.join(cmd)} || rc=1")
    steps.append("exit $rc")
    return "\n".join(steps)


_HOSTFILE = (
    "${OMPI_MCA_orte_default_hostfile:-${PRTE_MCA_prte_default_hostfile:-/etc/mpi/hostfile}}"
)
"""The hostfile the job's operator gave the launcher (the MPI Operator's and the Trainer's
mount, or the one a PyTorchJob's Master writes), one line per rank host."""


def group_launcher_script(
    w: Wiring, nodes: int, orders: Sequence[Sequence[int]], env: Mapping[str, str] | None = None
) -> str:
    """Run both tests once per rank order: each from a hostfile listing the operator's hosts
    in that order (mpirun places ranks host by host in hostfile order, ``slots`` = GPUs per
    node), pointed at through the variables the operator uses, each preceded by a marker
    naming the order and its hosts. Each order is a ring, so it starts at host 0 (the same
    ring: the launcher's own host where it is a rank host, which OpenMPI maps first
    whatever the hostfile says). Only host indices reach the script: the hosts come from
    the operator's hostfile, read into an array, always quoted. Exit non-zero when any run
    failed or the hostfile does not list ``nodes`` hosts."""
    point = f"OMPI_MCA_orte_default_hostfile={ORDER_HOSTFILE} PRTE_MCA_prte_default_hostfile={ORDER_HOSTFILE}"
    steps = [
        "rc=0",
        "hosts=()",
        "while read -r host _; do",
        "  case $host in ''|'#'*) continue ;; esac",
        '  hosts+=("$host")',
        f'done < "{_HOSTFILE}"',
        f'if [ "${{#hosts[@]}}" -ne {nodes} ]; then',
        f'  echo "gpufabric: the hostfile lists ${{#hosts[@]}} hosts, expected {nodes}" >&2',
        "  exit 1",
        "fi",
    ]
    for index, order in enumerate(orders, 1):
        ring = [int(r) for r in order]
        ring = ring[ring.index(0) :] + ring[: ring.index(0)] if 0 in ring else ring
        ranks = " ".join(f'"${{hosts[{r}]}}"' for r in ring)
        marker = ORDER_MARKER.format(index=index, count=len(orders))
        steps.append(f"printf '%s slots={w.gpus}\\n' {ranks} > {ORDER_HOSTFILE}")
        steps.append(f"echo {shlex.quote(marker)} {ranks} '<=='")
        for test in TESTS:
            cmd = mpirun_command(w, nodes, [test, *SIZES], {**GROUP_ENV, **(env or {})})
            steps.append(f"echo {shlex.quote(MARKER.format(test=test))}")
            steps.append(f"{point} {shlex.join(cmd)} || rc=1")
    steps.append("exit $rc")
    return "\n".join(steps)


def acceptance_job(
    plan: Plan,
    tenant: str,
    nodes: int = 2,
    image: str | None = None,
    name: str = DEFAULT_NAME,
    pin_nodes: tuple[str, ...] = (),
    rail: str | None = None,
    leaf: str | None = None,
    tolerate: tuple[str, ...] = (),
    orders: Sequence[Sequence[int]] = (),
) -> dict[str, Any]:
    """The job ``verify nccl`` submits; StackError naming the option when it cannot run.
    ``leaf``: the leaf it runs under where rails are routed per leaf (required there).
    With ``pin_nodes`` its GPU pods run on exactly those nodes (a sweep's pair or group);
    with ``rail`` its pods attach only that rail, and NCCL can use no other; every pod of it
    tolerates the NoSchedule taints keyed ``tolerate`` (a re-certification's quarantine).
    With ``orders`` (a sweep's group job: rank orders of host indices,
    :func:`gpufabric.verify.sweep.rounds.ring_orders`) the launcher runs the tests once per
    order (:func:`group_launcher_script`)."""
    kind = acceptance_kind(plan)
    req = JobRequest(
        tenant=tenant, kind=kind, nodes=nodes, image=image, name=name, leaf=leaf, min_nodes=2
    )
    w, overrides = _acceptance_wiring(plan, req, bool(pin_nodes), rail)
    image_ref = job_image(plan, image)
    script = (
        group_launcher_script(w, nodes, orders, overrides)
        if orders
        else launcher_script(w, nodes, overrides)
    )
    command = ["/bin/bash", "-c", script]
    launchers: list[dict[str, Any]] = []  # pods beside the GPU pods (an MPIJob's launcher)
    if kind == "trainjob":
        job = mpi_trainjob(w, name, nodes, image_ref, command, NCCL_TESTS_RUNTIME)
        patch = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
        pods = [r["template"]["spec"]["template"]["spec"] for r in patch["replicatedJobs"]]
    elif kind == "pytorchjob":
        job = mpi_pytorchjob(w, name, nodes, image_ref, command[2])
        pods = [r["template"]["spec"] for r in job["spec"]["pytorchReplicaSpecs"].values()]
    else:
        job = mpijob(w, name, nodes, image_ref, [])
        replicas = job["spec"]["mpiReplicaSpecs"]
        launchers = [replicas["Launcher"]["template"]["spec"]]
        launchers[0]["containers"][0]["command"] = command
        pods = [replicas["Worker"]["template"]["spec"]]
    _mark(job, w, nodes)
    if pin_nodes:
        for pod in pods:
            pod["affinity"] = _pinned(pin_nodes, shape_of(job).name_label, name)
    tolerations = [{"key": k, "operator": "Exists", "effect": "NoSchedule"} for k in tolerate]
    for pod in [*pods, *launchers] if tolerations else ():
        pod["tolerations"] = [*pod.get("tolerations", []), *tolerations]
    return job


def _acceptance_wiring(
    plan: Plan, req: JobRequest, pinned: bool, rail: str | None
) -> tuple[Wiring, dict[str, str]]:
    """The acceptance job's wiring, and the NCCL variables ``rail`` alone changes."""
    w = wiring_for(plan, req)
    if pinned:
        # Pinned to its nodes (a sweep's pair or group, a re-certification): where it runs is
        # named, and a pair across racks must not be held to one clique.
        w = replace(w, within=None)
    overrides: dict[str, str] = {}
    if rail is not None:
        narrow = on_one_rail(plan.facts.fabric, w.contract, rail)
        overrides = {k: v for k, v in narrow.nccl_env.items() if w.contract.nccl_env.get(k) != v}
        w = replace(w, contract=narrow)
    return w, overrides


def _mark(job: dict[str, Any], w: Wiring, nodes: int) -> None:
    """gpufabric-verify's label, and on NVL72 trays the size of the run's ComputeDomain."""
    job["metadata"].setdefault("labels", {})["app.kubernetes.io/managed-by"] = "gpufabric-verify"
    if w.channel is not None:
        job["metadata"].setdefault("annotations", {})[COMPUTE_DOMAIN_NODES] = str(nodes)


def acceptance_kind(plan: Plan) -> AcceptanceKind:
    """The kind the stack's acceptance job runs as; StackError (exit 2, naming ``training``
    and the options that give one) for a stack without one, before anything is asked of the
    cluster."""
    kind = plan.facts.operators.acceptance_kind
    if kind is None:
        raise StackError("gpufabric verify nccl", [_no_acceptance_kind(plan)])
    if kind == "trainjob" and plan.facts.nodes.nvlink is not None:
        # A TrainJob cannot claim an IMEX channel; validation asks an NVL72 stack for
        # PyTorchJob where it has no MPI Operator.
        return "pytorchjob"
    return kind


def _no_acceptance_kind(plan: Plan) -> Problem:
    kinds = ", ".join(plan.facts.operators.job_kinds) or "none"
    return Problem(
        "training",
        f"this stack runs {kinds}: the NCCL acceptance test runs nccl-tests under mpirun from "
        "an MPIJob, a TrainJob or a PyTorchJob; accepted: training.mpiOperator: true (MPIJob), "
        "training.trainer.enabled: true (a TrainJob through gpufabric's nccl-tests runtime) "
        "or 'pytorchjob' in training.trainingOperator.schemes (a PyTorchJob)",
    )


def _pinned(pin_nodes: tuple[str, ...], label: str, name: str) -> dict[str, Any]:
    """Exactly the given nodes, one GPU pod of the job per node."""
    hostnames = {"key": "kubernetes.io/hostname", "operator": "In", "values": list(pin_nodes)}
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [hostnames]}]
            }
        },
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {label: name}},
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        },
    }


def split_log(log: str) -> dict[str, str]:
    """The launcher log per test, by gpufabric's markers (the whole log when none). A
    marker is found under any launcher prefix the analyzer strips (a log saved with
    ``kubectl logs --prefix`` or through ``srun -l``)."""
    parts: dict[str, list[str]] = {}
    current = None
    for line in log.splitlines():
        bare = nccl_parse.strip_prefixes(line)  # `kubectl logs --prefix`, srun -l, mpirun tags
        for test in TESTS:
            if bare == MARKER.format(test=test):
                current = test
                parts[current] = []
                break
        else:
            if current is not None:
                parts[current].append(line)
    if not parts:
        return {"launcher": log}
    # a test the launcher script ran but whose marker is absent has an empty log: judged
    # INCONCLUSIVE ("no data rows"), never left out of the verdict
    return {test: "\n".join(parts.get(test, [])) + "\n" for test in TESTS}


def split_orders(log: str, count: int) -> tuple[dict[str, str], dict[int, tuple[str, ...]]]:
    """A group job's launcher log per rank order and test (``order I/N TEST``), by
    gpufabric's markers, with each order's hosts as its marker names them. Every order and
    test of the ``count`` orders has an entry: one whose marker is absent (the run was cut
    off, the log truncated) has an empty log, judged INCONCLUSIVE, never left out."""
    parts: dict[tuple[int, str], list[str]] = {}
    hosts: dict[int, tuple[str, ...]] = {}
    order: int | None = None
    current: tuple[int, str] | None = None
    for line in log.splitlines():
        bare = nccl_parse.strip_prefixes(line)
        m = _ORDER.match(bare)
        if m is not None and int(m[2]) == count and 1 <= int(m[1]) <= count:
            order, current = int(m[1]), None
            hosts[order] = tuple(m[3].split())
            continue
        test = next((t for t in TESTS if bare == MARKER.format(test=t)), None)
        if test is not None and order is not None:
            current = (order, test)
            parts[current] = []
        elif current is not None:
            parts[current].append(line)
    files = {
        f"order {i}/{count} {test}": "\n".join(parts.get((i, test), [])) + "\n"
        for i in range(1, count + 1)
        for test in TESTS
    }
    return files, hosts


@dataclass(kw_only=True)
class Outcome:
    state: str  # Succeeded | Failed | Timeout
    message: str
    log: str
    waited_s: float
    kind: str = "MPIJob"
    placed: dict[str, str] = field(default_factory=dict)
    """Each of the job's pods that was seen on a node: its hostname (the rank host the
    launcher's hostfile names) -> the node (with ``run_job(placement=True)``)."""
    nodes: tuple[str, ...] = ()
    """The nodes its GPU pods ran on (read only when asked: ``run_job(find_nodes=True)``),
    from the same listings as ``placed``."""


def _condition(job: dict[str, Any], shape: Shape = SHAPES["MPIJob"]) -> tuple[str | None, str]:
    """Terminal state of an acceptance job from its conditions (Succeeded or Failed), and
    the latest condition's text; Malformed when its status cannot be read. Success and
    Failed both True is Failed."""
    conds = records(job, "status", "conditions")
    true = {text(c, "type") for c in conds if text(c, "status") == "True"}
    if {shape.success, "Failed"} <= true:
        return "Failed", (
            f"the {shape.kind} reports both {shape.success} and Failed (contradictory status)"
        )
    for kind, state in ((shape.success, "Succeeded"), ("Failed", "Failed")):
        for c in conds:
            if text(c, "type") == kind and text(c, "status") == "True":
                return state, text(c, "message") or text(c, "reason") or kind
    last = conds[-1] if conds else None
    if mapping(job, *shape.suspend_path).get("suspend"):
        return None, "suspended: waiting for admission by the queue (quota, gang, topology)"
    if last:
        return None, f"{text(last, 'type')}: {text(last, 'message') or text(last, 'reason')}"
    return None, "created, no status yet"


Seen = dict[str, tuple[str, bool]]
"""The job's pods as listed while it ran: each pod's hostname (the rank host the launcher's
hostfile names; its name without one) -> (its node, whether it runs GPUs)."""


def _look(kube: Kube, namespace: str, name: str, shape: Shape, seen: Seen) -> None:
    """One listing of the job's pods into ``seen``: a pod gone since keeps its entry (the
    workers' cleanPodPolicy deletes them once the job ends), one moved keeps its latest
    node. A list that fails is skipped (the job's own wait reports the API's trouble)."""
    try:
        pods = kube.list(collection_path("v1", "Pod", namespace), f"{shape.name_label}={name}")
    except KubeError:
        return
    for p in pods:
        node = text(p, "spec", "nodeName")
        if node:
            seen[text(p, "spec", "hostname") or name_of(p)] = (node, _uses_gpus(p))


def _uses_gpus(pod: Mapping[str, Any]) -> bool:
    return any(
        GPU_RESOURCE in mapping(c, "resources", "limits")
        or GPU_RESOURCE in mapping(c, "resources", "requests")
        for c in records(pod, "spec", "containers")
    )


def _placed(seen: Seen) -> dict[str, str]:
    return {host: node for host, (node, _gpus) in seen.items()}


def _gpu_nodes(seen: Seen) -> tuple[str, ...]:
    """The nodes the job's GPU pods ran on (its launcher, without GPUs, aside)."""
    return tuple(sorted({node for node, gpus in seen.values() if gpus}))


def launcher_log(kube: Kube, namespace: str, name: str, shape: Shape = SHAPES["MPIJob"]) -> str:
    pods = kube.list(
        collection_path("v1", "Pod", namespace), shape.launcher_selector.format(name=name)
    )
    if not pods:
        return ""
    newest = max(pods, key=lambda p: (text(p, "metadata", "creationTimestamp"), name_of(p)))
    return kube.log(namespace, name_of(newest))


LOG_RESERVE = 30.0
"""Seconds of the --timeout kept for collecting the launcher log."""


def _already_exists(obj: Mapping[str, Any]) -> KubeError:
    ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    command = shlex.join(["kubectl", "-n", ns, "delete", _resource(obj), name])
    return KubeError(
        f"{obj['kind']} {ns}/{name} already exists (a previous run?); delete it with "
        f"`{command}` or pass --name"
    )


def _resource(obj: Mapping[str, Any]) -> str:
    """The kubectl resource name of an acceptance job or of an object a run adds to it."""
    kind = str(obj["kind"])
    return SHAPES[kind].resource if kind in SHAPES else kind.lower()


def companions(job: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The objects a run of ``job`` creates beside it, by name (deleted with it): the SSH
    keys Secret of a kind whose operator mints none, and the ComputeDomain whose IMEX channel
    its pods claim (a job on NVL72 trays)."""
    out = [sshkeys.secret_ref(job)] if shape_of(job).ssh_keys else []
    nodes = compute_domain_nodes(job)
    if nodes:
        meta = job["metadata"]
        ref = compute_domain(meta["namespace"], meta["name"], nodes)
        out.append({k: ref[k] for k in ("apiVersion", "kind")} | {"metadata": {"name": ref["metadata"]["name"], "namespace": meta["namespace"]}})  # fmt: skip
    return out


def compute_domain_nodes(job: Mapping[str, Any]) -> int:
    """The trays of the ComputeDomain ``job`` runs in (0: none), from its annotation."""
    annotations = job.get("metadata", {}).get("annotations") or {}
    value = annotations.get(COMPUTE_DOMAIN_NODES, "")
    return int(value) if str(value).isdigit() else 0


def _wait(
    kube: Kube,
    path: str,
    ns: str,
    name: str,
    wait_until: float,
    timeout: float,
    poll: float,
    progress: Callable[[str], None],
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    shape: Shape = SHAPES["MPIJob"],
    look: Callable[[], None] = lambda: None,
) -> tuple[str, str]:
    """(state, message) once the job at ``path`` ends, disappears or ``wait_until``
    passes (Timeout); each new condition text is reported once; ``look`` runs at every
    poll."""
    last = ""
    while True:
        look()
        live = kube.get(path)
        if live is None:
            return "Failed", f"the {shape.kind} disappeared (deleted by someone else?)"
        found, text = _condition(live, shape)
        if text != last:
            last = text
            progress(text)
        if found is not None:
            return found, text
        if clock() >= wait_until:
            return "Timeout", (
                f"timed out after {timeout:g}s; last state: {text}. Check "
                f"`{shlex.join(['kubectl', '-n', ns, 'describe', shape.resource, name])}` "
                "and the workload's admission"
            )
        sleep(min(poll, max(wait_until - clock(), 0.01)))


def delete_command(job: Mapping[str, Any]) -> str:
    """The command a person runs to delete an acceptance job cleanup could not confirm
    gone (it may never have been created, hence --ignore-not-found)."""
    ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
    return shlex.join(["kubectl", "-n", ns, "delete", _resource(job), name, "--ignore-not-found"])


def _delete(kube: Kube, job: dict[str, Any], progress: Callable[[str], None]) -> None:
    """Delete the job (or an object its run created) and confirm it gone (also when its
    create was still in flight), holding signals meanwhile; what cannot be confirmed is
    reported with the command that deletes it, not raised."""
    command, kind = delete_command(job), str(job["kind"])
    ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
    with shielded(), kube.grace():
        try:
            if kube.remove(job):
                progress(f"deleted {kind} {ns}/{name}")
                return
            why = "its deletion could not be confirmed in time"
        except KubeError as exc:
            why = str(exc)
    left_behind(command)
    progress(f"could not delete {kind} {ns}/{name}: {why}; delete it with `{command}`")


def run_job(
    kube: Kube,
    job: dict[str, Any],
    timeout: float = DEFAULT_TIMEOUT,
    poll: float = 10.0,
    keep: bool = False,
    progress: Callable[[str], None] = lambda _msg: None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    placement: bool = False,
    find_nodes: bool = False,
) -> Outcome:
    """Create the job, wait for it to finish or time out, collect the launcher log (and,
    with ``find_nodes``, the nodes its GPU pods ran on), and
    delete the job (unless ``keep``) whatever happened: success, failure, timeout, an API
    error, Ctrl-C (also during the create, and a second one during the delete), SIGTERM or
    SIGHUP. ``timeout`` bounds everything but that delete. With ``placement`` or
    ``find_nodes``, the job's pods are listed at every poll and once when it ended, and
    both ``Outcome.placed`` and ``Outcome.nodes`` come from those listings."""
    ns, name, shape = job["metadata"]["namespace"], job["metadata"]["name"], shape_of(job)
    path = object_path(job["apiVersion"], job["kind"], name, ns)
    seen: Seen = {}
    watch = placement or find_nodes
    look: Callable[[], None] = (
        (lambda: _look(kube, ns, name, shape, seen)) if watch else (lambda: None)
    )
    start = clock()
    with kube.limit(timeout):
        for obj in (job, *companions(job)):
            if kube.get(path_of(obj)) is not None:
                raise _already_exists(obj)
        wait_until = start + max(timeout - min(LOG_RESERVE, timeout * 0.2), 0)
        state, text_, log = "Failed", "", ""
        made = [job]  # what cleanup deletes: each object whose create was started
        try:
            created = kube.create(job)
            progress(f"created {shape.kind} {ns}/{name}; waiting up to {timeout:g}s")
            _create_companions(kube, job, created, made, progress)
            state, text_ = _wait(
                kube, path, ns, name, wait_until, timeout, poll, progress, clock, sleep, shape,
                look,
            )  # fmt: skip
            look()  # pods placed since the last poll
            try:
                log = launcher_log(kube, ns, name, shape)
            except KubeError as exc:
                text_ = f"{text_}; the launcher log could not be read: {exc}"
        finally:
            if not keep:
                for obj in made:
                    _delete(kube, obj, progress)
    nodes = _gpu_nodes(seen) if find_nodes else ()
    return Outcome(
        state=state, message=text_, log=log, waited_s=clock() - start, kind=shape.kind,
        placed=_placed(seen), nodes=nodes,
    )  # fmt: skip


def _create_companions(
    kube: Kube,
    job: dict[str, Any],
    created: Mapping[str, Any],
    made: list[dict[str, Any]],
    progress: Callable[[str], None],
) -> None:
    """Create what the job's pods need beside it, owned by the job (its uid from the
    create's answer), each added to ``made`` before its create starts: the run's SSH keys.
    The pods wait for the Secret to mount."""
    nodes = compute_domain_nodes(job)
    if nodes:
        meta = job["metadata"]
        owner = {**job, "metadata": {**meta, "uid": text(created, "metadata", "uid")}}
        domain = compute_domain(meta["namespace"], meta["name"], nodes, owner)
        made.append(domain)
        kube.create(domain)
        progress(
            f"created ComputeDomain {meta['namespace']}/{domain['metadata']['name']} "
            f"({nodes} trays; its IMEX channel is claimed by every pod)"
        )
    if not shape_of(job).ssh_keys:
        return
    secret, ref = sshkeys.secret(job, text(created, "metadata", "uid")), sshkeys.secret_ref(job)
    made.append(ref)
    try:
        kube.create(secret)
    except KubeError as exc:
        if ": HTTP 409 " not in str(exc):
            raise
        made.remove(ref)  # created by someone else since the check: never touched
        raise _already_exists(ref) from None
    meta = secret["metadata"]
    progress(f"created Secret {meta['namespace']}/{meta['name']} (this run's SSH keys)")


def judge(
    outcome: Outcome, exp: nccl_rules.NcclExpectation, orders: int = 0
) -> nccl_report.NcclReport:
    """The analyzer's report on the collected log, with the job's own outcome. A group job
    (``orders`` rank orders) is judged per order and test: PASS only when every order ran
    and passed; the reasons start with each order that did not pass, named by its nodes."""
    if not outcome.log.strip():
        doc = nccl_report.NcclReport(
            verdict=Verdict.INCONCLUSIVE,
            reasons=("no launcher log to judge",),
            threshold_gbps=exp.threshold_gbps,
            threshold_source=exp.threshold_source,
            runs=(),
        )
    elif orders:
        files, hosts = split_orders(outcome.log, orders)
        doc = nccl_report.report(files, exp)
        doc = replace(
            doc, reasons=(*_order_reasons(doc, orders, hosts, outcome.placed), *doc.reasons)
        )
    else:
        doc = nccl_report.report(split_log(outcome.log), exp)
    verdict, reasons = doc.verdict, doc.reasons
    if outcome.state == "Timeout":
        reasons = (outcome.message, *reasons)
        if verdict != Verdict.FAIL:  # a timed-out run never passes
            verdict = Verdict.INCONCLUSIVE
    elif outcome.state == "Failed":
        reasons = (f"the {outcome.kind} failed: {outcome.message}", *reasons)
        verdict = Verdict.FAIL
    return replace(
        doc,
        verdict=verdict,
        reasons=reasons,
        job=nccl_report.JobOutcome(
            state=outcome.state, message=outcome.message, waited_s=outcome.waited_s
        ),
    )


_RUN_REASON = re.compile(r"^order [0-9]+/[0-9]+ \S+: ")


def headline(doc: nccl_report.NcclReport) -> list[str]:
    """A group job's reasons less each run's own: how the job ended and each order that
    did not pass (what a sweep prints for a group job that did not pass)."""
    return [r for r in doc.reasons if not _RUN_REASON.match(r)]


def _order_reasons(
    doc: nccl_report.NcclReport,
    count: int,
    hosts: Mapping[int, tuple[str, ...]],
    placed: Mapping[str, str],
) -> list[str]:
    """One line per rank order that did not pass: its nodes in rank order (the hosts its
    marker names, as nodes where the job's pods were seen), its verdict and its lowest
    best bus bandwidth."""
    out = []
    for i in range(1, count + 1):
        runs = [r for r in doc.runs if r.file.startswith(f"order {i}/{count} ")]
        verdict = worst(r.verdict for r in runs) if runs else Verdict.INCONCLUSIVE
        if verdict == Verdict.PASS:
            continue
        names = [placed.get(h.split(".", 1)[0], h) for h in hosts.get(i, ())]
        where = " ".join(names) if names else "its marker is missing: it did not run to the end"
        figures = [r.busbw_max_gbps for r in runs if r.busbw_max_gbps is not None]
        slowest = f"; best bus bandwidth {min(figures):g} GB/s" if figures else ""
        limit = (
            f" (threshold {doc.threshold_gbps:g} GB/s)" if figures and doc.threshold_gbps else ""
        )
        out.append(f"order {i}/{count} ({where}): {verdict}{slowest}{limit}")
    return out
