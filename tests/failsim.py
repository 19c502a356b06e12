"""What happens to a generated job when something fails: each job operator's and queueing
authority's restart rules, replayed against failure scripts (node lost mid-run, eviction,
preemption, a rank's error, the same failure on every attempt, a TTL after the failure, no
capacity left after a loss).

The model reads the job exactly as ``gpufabric job`` writes it (and, for a TrainJob, the
ClusterTrainingRuntime the stack installs), so what it proves holds for what users apply.
Every rule cites the controller's source at the pinned commit (manifests/versions.yaml;
../shared/upstream/src/SOURCES.tsv names the commits):

- MPI Operator v0.8.0 @101db14, pkg/controller/mpi_job_controller.go
- Training Operator v1.9.4 (kubeflow/trainer) @4445c12, pkg/controller.v1/common, pkg/core
- Trainer v2.3.0 (kubeflow/trainer) @658725b, pkg/controller, pkg/runtime/framework/plugins
- JobSet v0.12.0 @f22e565, pkg/controllers/failure_policy.go, jobset_controller.go
- Kueue v0.19.2 @8eab687, apis/config/v1beta2/configuration_types.go
- Volcano v1.15.1 @0a56ed3, pkg/scheduler/cache/cache.go

Facts outside those controllers, stated where used: the batch Job controller's backoffLimit
and podFailurePolicy (Kubernetes API reference, batch/v1 JobSpec), and torchrun reporting
any failed worker as exit code 1 (torch.distributed.elastic raises ChildFailedError).

Run ``python tests/failsim.py [--stack NAME]`` for the table (kind x scheduler x script ->
outcome, with the rules applied).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpufabric.plan.facts import CHECKPOINT_DIR_ENV

MAX_STEPS = 200
"""Attempts after which a run counts as looping: every bound the policy sets is far below."""

# Rule ids -> where the rule is in the source (file:line@commit).
RULES: dict[str, str] = {
    "mpi.worker-recreated": "mpi-operator pkg/controller/mpi_job_controller.go:1014-1016@101db14",
    "mpi.launcher-backoff": "mpi-operator pkg/controller/mpi_job_controller.go:1541-1543@101db14",
    "mpi.launcher-failed": "mpi-operator pkg/controller/mpi_job_controller.go:1124-1125@101db14",
    "mpi.no-exit-codes": "mpi-operator pkg/controller/mpi_job_controller.go:1693-1697@101db14",
    "mpi.suspend": "mpi-operator pkg/controller/mpi_job_controller.go:711-722@101db14",
    "mpi.finished": "mpi-operator pkg/controller/mpi_job_controller.go:625-628@101db14",
    "to.pod-recreated": "training-operator pkg/controller.v1/common/pod.go:316-321@4445c12",
    "to.retryable": "training-operator pkg/controller.v1/common/pod.go:352-365@4445c12",
    "to.not-retryable": "training-operator pkg/controller.v1/common/pod.go:367-372@4445c12",
    "to.exit-code-rule": "training-operator pkg/util/train/train_util.go:24-25@4445c12",
    "to.past-backoff": "training-operator pkg/core/job.go:95-132@4445c12",
    "to.suspend": "training-operator pkg/controller.v1/common/job.go:146-171@4445c12",
    "to.deadline": "training-operator pkg/controller.v1/common/job.go:211-213@4445c12",
    "js.no-policy": "jobset pkg/controllers/failure_policy.go:52-60@f22e565",
    "js.rules": "jobset pkg/controllers/failure_policy.go:64-74,142-147@f22e565",
    "js.default-restart": "jobset pkg/controllers/failure_policy.go:45@f22e565",
    "js.max-restarts": "jobset pkg/controllers/failure_policy.go:225-231@f22e565",
    "js.count": "jobset pkg/controllers/failure_policy.go:194-198@f22e565",
    "js.ttl": "jobset pkg/controllers/jobset_controller.go:162-168@f22e565",
    "js.restart-default": "jobset pkg/webhooks/jobset_webhook.go:125-126@f22e565",
    "tr.suspend": "trainer pkg/runtime/framework/plugins/jobset/jobset.go:425@658725b",
    "tr.clears-failed": "trainer pkg/controller/trainjob_controller.go:98-108@658725b",
    "tr.recreates-jobset": "trainer pkg/runtime/framework/plugins/jobset/jobset.go:331-341@658725b",
    "tr.deadline-kept": "trainer pkg/controller/trainjob_controller.go:246-251@658725b",
    "tr.failed": "trainer pkg/runtime/framework/plugins/jobset/jobset.go:454-456@658725b",
    "kueue.recovery": "kueue apis/config/v1beta2/configuration_types.go:320-328@8eab687",
    "kueue.backoff-limit": "kueue apis/config/v1beta2/configuration_types.go:412-426@8eab687",
    "volcano.evict": "volcano pkg/scheduler/cache/cache.go:270-307@0a56ed3",
    "k8s.job-backoff": "batch/v1 JobSpec.backoffLimit (failed pods > backoffLimit fail the Job)",
    "k8s.pod-failure-policy": "batch/v1 JobSpec.podFailurePolicy (first matching rule wins)",
    "torchrun.exit1": "torchrun: a failed worker raises ChildFailedError, the agent exits 1",
}

NODE_LOST = "node-lost"
"""A node of the gang is gone: its pod is deleted (pod GC, DisruptionTarget)."""
EVICTED = "evicted"
"""A pod is evicted through the Eviction API (drain, `gpufabric health`): DisruptionTarget,
then deleted."""
PREEMPTED = "preempted"
"""The queueing authority takes the gang's GPUs for a higher priority."""
NO_CAPACITY = "no-capacity"
"""A node is lost and no node is left for its replacement pod."""
RANK = "rank"
"""A training process fails with an exit code (the attempt's ``code``)."""


@dataclass(frozen=True)
class Script:
    name: str
    what: str
    events: tuple[tuple[str, int], ...]
    """(event, exit code of the failing process) per attempt; after the last, the run
    finishes, or, with ``repeat``, the last event recurs on every attempt."""
    repeat: bool = False
    ttl_after: bool = False
    """The finished object's TTL expires after it fails."""

    def event(self, attempt: int) -> tuple[str, int] | None:
        if attempt < len(self.events):
            return self.events[attempt]
        return self.events[-1] if self.repeat else None


SCRIPTS: tuple[Script, ...] = (
    Script("node-loss", "a node is lost mid-run, once", ((NODE_LOST, 0),)),
    Script("eviction", "a pod is evicted (drain), once", ((EVICTED, 0),)),
    Script("preemption", "the gang is preempted, once", ((PREEMPTED, 0),)),
    Script("user-error", "a rank exits 2 (usage error) on every attempt", ((RANK, 2),), True),
    Script("exception", "a rank raises (exit 1) on every attempt", ((RANK, 1),), True),
    Script("nccl-timeout", "NCCL watchdog abort (134) on every attempt", ((RANK, 134),), True),
    Script("oom-loop", "a rank is OOM-killed (137) on every attempt", ((RANK, 137),), True),
    Script(
        "ttl-after-failure",
        "a rank exits 2, then the failed object's TTL expires",
        ((RANK, 2),),
        True,
        ttl_after=True,
    ),
    Script("no-capacity", "a node is lost and no node is left", ((NO_CAPACITY, 0),), True),
)


@dataclass
class Result:
    """How one run ended: ``outcome`` is finished, failed, deactivated or LOOPS."""

    outcome: str = ""
    restarts: int = 0
    requeues: int = 0
    rules: list[str] = field(default_factory=list)
    checkpoint_dirs: set[str | None] = field(default_factory=set)

    def cite(self, *rule_ids: str) -> None:
        for r in rule_ids:
            if r not in self.rules:
                self.rules.append(r)

    @property
    def summary(self) -> str:
        parts = [self.outcome]
        if self.restarts:
            parts.append(f"after {self.restarts} restart{'s' * (self.restarts != 1)}")
        if self.requeues:
            parts.append(f"{self.requeues} requeue{'s' * (self.requeues != 1)}")
        return ", ".join(parts)


@dataclass(frozen=True)
class Setting:
    """What the authority contributes: Kueue suspends preempted jobs and requeues gangs not
    ready in time (at most ``requeue_limit``); Volcano evicts pods and keeps gangs queued."""

    authority: str
    requeue_limit: int | None


# ----------------------------------------------------------------------------- helpers


def _containers(job: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "containers" and isinstance(value, list):
                    found.extend(c for c in value if isinstance(c, dict))
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(job)
    return found


def checkpoint_dir(job: dict[str, Any]) -> str | None:
    """The checkpoint directory the job's pods are told (env, or mpirun's -x)."""
    dirs = set()
    for c in _containers(job):
        for env in c.get("env", []) or []:
            if env.get("name") == CHECKPOINT_DIR_ENV:
                dirs.add(env["value"])
        for word in c.get("command", []) or []:
            if isinstance(word, str) and word.startswith(f"{CHECKPOINT_DIR_ENV}="):
                dirs.add(word.split("=", 1)[1])
    for env in job.get("spec", {}).get("trainer", {}).get("env", []) or []:
        if env.get("name") == CHECKPOINT_DIR_ENV:
            dirs.add(env["value"])
    assert len(dirs) <= 1, f"pods of one job told different checkpoint dirs: {dirs}"
    return next(iter(dirs), None)


def _runs_torchrun(job: dict[str, Any]) -> bool:
    return any((c.get("command") or [""])[0] == "torchrun" for c in _containers(job))


def _pods(job: dict[str, Any]) -> int:
    if job["kind"] == "PyTorchJob":
        return sum(r["replicas"] for r in job["spec"]["pytorchReplicaSpecs"].values())
    if job["kind"] == "MPIJob":
        return int(job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"])
    return int(job["spec"]["trainer"]["numNodes"])


def _run(
    job: dict[str, Any],
    setting: Setting,
    script: Script,
    step: Callable[[Result, str, int, bool], str | None],
) -> Result:
    """Attempts until the job finishes, fails or is deactivated; ``step`` applies one
    failure and returns a terminal outcome or None (the gang runs again)."""
    result = Result()
    for attempt in range(MAX_STEPS):
        result.checkpoint_dirs.add(checkpoint_dir(job))
        event = script.event(attempt)
        if event is None:
            result.outcome = "finished"
            return result
        kind, code = event
        if kind == PREEMPTED and setting.authority == "kueue":
            # Kueue suspends the job (the operators delete its pods) and readmits it later:
            # no failure is counted; the start time (and deadline) begin again.
            result.requeues += 1
            suspend = {"MPIJob": "mpi.suspend", "PyTorchJob": "to.suspend"}
            result.cite(suspend.get(job["kind"], "tr.suspend"))
            continue
        if kind == PREEMPTED:
            kind = EVICTED  # Volcano evicts the pods: DisruptionTarget, then deleted.
            result.cite("volcano.evict")
        if kind == NO_CAPACITY:
            outcome = _no_capacity(job, setting, result)
            if outcome is not None:
                result.outcome = outcome
                return result
            continue
        outcome = step(result, kind, code, _runs_torchrun(job))
        if outcome is not None:
            result.outcome = outcome
            return result
        result.restarts += 1
    result.outcome = "LOOPS"
    return result


def _no_capacity(job: dict[str, Any], setting: Setting, result: Result) -> str | None:
    """A replacement pod that cannot be placed: Kueue evicts and requeues the workload after
    recoveryTimeout, at most backoffLimitCount times, then deactivates it; under Volcano the
    gang waits until the job's deadline fails it."""
    if setting.authority == "kueue" and setting.requeue_limit is not None:
        result.cite("kueue.recovery", "kueue.backoff-limit")
        if result.requeues >= setting.requeue_limit:
            return "deactivated"
        result.requeues += 1
        return None
    deadline = _deadline(job)
    if deadline is None:
        return "waits forever"
    rule = {"MPIJob": "mpi.launcher-backoff", "PyTorchJob": "to.deadline"}
    result.cite(rule.get(job["kind"], "tr.deadline-kept"))
    return "failed (deadline)"


def _matches(rule: dict[str, Any], disrupted: bool, code: int) -> bool:
    """A podFailurePolicy rule matching a failed pod (DisruptionTarget, or its exit code)."""
    conditions = {c["type"] for c in rule.get("onPodConditions", [])}
    if disrupted and "DisruptionTarget" in conditions:
        return True
    codes = rule.get("onExitCodes")
    if not codes:
        return False
    return (code in codes["values"]) == (codes["operator"] == "In")


def _deadline(job: dict[str, Any]) -> int | None:
    if job["kind"] == "TrainJob":
        return job["spec"].get("activeDeadlineSeconds")
    return job["spec"].get("runPolicy", {}).get("activeDeadlineSeconds")


# -------------------------------------------------------------------------- MPI Operator


def simulate_mpijob(job: dict[str, Any], setting: Setting, script: Script) -> Result:
    """MPIJob v2beta1: a lost or evicted worker pod is created again; the launcher's mpirun
    fails with it (or with a failed rank, whatever its exit code: the operator maps ExitCode
    to Never and sets no podFailurePolicy); the launcher Job retries up to runPolicy's
    backoffLimit, then the MPIJob fails and, finished, is never reconciled again."""
    limit = job["spec"]["runPolicy"].get("backoffLimit", 6)
    failures = 0

    def step(result: Result, kind: str, code: int, torchrun: bool) -> str | None:
        nonlocal failures
        if kind in (NODE_LOST, EVICTED):
            result.cite("mpi.worker-recreated")
        else:
            result.cite("mpi.no-exit-codes")
        failures += 1
        result.cite("mpi.launcher-backoff", "k8s.job-backoff")
        if failures > limit:
            result.cite("mpi.launcher-failed")
            if script.ttl_after:
                result.cite("mpi.finished")
            return "failed"
        return None

    return _run(job, setting, script, step)


# ---------------------------------------------------------------------- Training Operator


def simulate_pytorchjob(job: dict[str, Any], setting: Setting, script: Script) -> Result:
    """PyTorchJob v1: a deleted pod is created again; a failed pod is restarted in place
    (OnFailure, the restarts of all pods summed against backoffLimit) or, with ExitCode,
    deleted and created again when its exit code is >= 128 and the job failed otherwise.
    Under torchrun a failed worker reaches Kubernetes as exit 1; an elastic job's torchrun
    first restarts its workers itself, elasticPolicy.maxRestarts times."""
    spec = job["spec"]
    limit = spec["runPolicy"].get("backoffLimit")
    policy = next(iter(spec["pytorchReplicaSpecs"].values()))["restartPolicy"]
    elastic = spec.get("elasticPolicy")
    pods = _pods(job)
    state = {"restart_counts": 0, "torchrun_left": elastic["maxRestarts"] if elastic else 0}

    def container_fails(result: Result, code: int, torchrun: bool, n: int) -> str | None:
        """``n`` pods' containers exit ``code`` (torchrun: 1)."""
        if torchrun and state["torchrun_left"] > 0:
            state["torchrun_left"] -= 1  # the agent restarts its workers in the pod
            return None
        if torchrun:
            code = 1
            result.cite("torchrun.exit1")
        if policy == "ExitCode":
            result.cite("to.exit-code-rule")
            if code < 128:
                result.cite("to.not-retryable")
                return "failed"
            result.cite("to.retryable")
            return None
        state["restart_counts"] += n
        result.cite("to.past-backoff")
        over = state["restart_counts"] > 0 if limit == 0 else state["restart_counts"] >= limit
        return "failed" if limit is not None and over else None

    def step(result: Result, kind: str, code: int, torchrun: bool) -> str | None:
        if kind in (NODE_LOST, EVICTED):
            result.cite("to.pod-recreated")
            # The survivors' collectives time out: their workers abort (134).
            return container_fails(result, 134, torchrun, pods - 1)
        return container_fails(result, code, torchrun, pods)

    return _run(job, setting, script, step)


# ------------------------------------------------------------------ Trainer v2 / JobSet


def simulate_trainjob(
    job: dict[str, Any], runtime: dict[str, Any], setting: Setting, script: Script
) -> Result:
    """TrainJob through a ClusterTrainingRuntime: each replicated Job fails by its
    backoffLimit and podFailurePolicy; the JobSet's failurePolicy then restarts every Job
    (bounded by maxRestarts) or fails; without one, the first failed Job fails it. A JobSet
    deleted by its TTL after failing is created anew by the Trainer, restarts at 0."""
    jobset = runtime["spec"]["template"]["spec"]
    child = jobset["replicatedJobs"][0]["template"]["spec"]
    state = {"restarts": 0, "child_failures": 0}

    def child_fails(result: Result, disrupted: bool, code: int) -> str:
        """The failed child Job's reason, or "restarted-pod" while it has retries left."""
        result.cite("k8s.pod-failure-policy", "k8s.job-backoff")
        for rule in (child.get("podFailurePolicy") or {}).get("rules", []):
            if _matches(rule, disrupted, code):
                if rule["action"] == "FailJob":
                    return "PodFailurePolicy"
                if rule["action"] == "Ignore":
                    return "restarted-pod"
                break  # Count: the default handling
        state["child_failures"] += 1
        if state["child_failures"] > child.get("backoffLimit", 6):
            state["child_failures"] = 0  # a JobSet restart recreates the Jobs
            return "BackoffLimitExceeded"
        return "restarted-pod"

    def jobset_acts(result: Result, reason: str) -> str | None:
        policy = jobset.get("failurePolicy")
        if policy is None:
            result.cite("js.no-policy")
            return "failed"
        result.cite("js.rules")
        rule = next(
            (
                r
                for r in policy.get("rules", [])
                if reason in r.get("onJobFailureReasons", [reason])
            ),
            None,
        )
        action = rule["action"] if rule else "RestartJobSet"
        if rule is None:
            result.cite("js.default-restart")
        if action == "FailJobSet":
            return "failed"
        if state["restarts"] >= policy.get("maxRestarts", 0):
            result.cite("js.max-restarts")
            return "failed"
        state["restarts"] += 1
        result.cite("js.count")
        return None

    def step(result: Result, kind: str, code: int, torchrun: bool) -> str | None:
        disrupted = kind in (NODE_LOST, EVICTED)
        if disrupted:
            code = 143  # SIGTERM on deletion
        elif torchrun:
            code = 1
            result.cite("torchrun.exit1")
        reason = child_fails(result, disrupted, code)
        if reason == "restarted-pod":
            return None
        outcome = jobset_acts(result, reason)
        if outcome is None or not script.ttl_after:
            return outcome
        return _after_ttl(result, outcome)

    def _after_ttl(result: Result, outcome: str) -> str | None:
        result.cite("tr.failed")
        if jobset.get("ttlSecondsAfterFinished") is None:
            return outcome  # the failed JobSet stays; the TrainJob stays Failed
        # The TTL deletes the JobSet; the Trainer clears Failed and builds a new one with
        # its restarts at 0: only the TrainJob's deadline (a Failed condition it keeps)
        # ends the cycle.
        result.cite("js.ttl", "tr.clears-failed", "tr.recreates-jobset")
        state["restarts"] = 0
        if job["spec"].get("activeDeadlineSeconds") is not None:
            result.cite("tr.deadline-kept")
            return "failed (deadline)"
        return None

    return _run(job, setting, script, step)


# ---------------------------------------------------------------------------- the table


def simulate(
    job: dict[str, Any], runtime: dict[str, Any] | None, setting: Setting, script: Script
) -> Result:
    if job["kind"] == "MPIJob":
        return simulate_mpijob(job, setting, script)
    if job["kind"] == "PyTorchJob":
        return simulate_pytorchjob(job, setting, script)
    assert runtime is not None, "a TrainJob needs its runtime"
    return simulate_trainjob(job, runtime, setting, script)


def table(stack: str) -> list[tuple[str, str, str, Result]]:
    """(kind, scheduler, script, result) for every job kind and scheduler of the stack."""
    from builders import body, plan_of
    from test_gang import config_for

    from gpufabric.outputs.jobs import JobRequest, job_manifest
    from gpufabric.plan import ids

    rows = []
    for gang in ("kueue", "volcano"):
        plan = plan_of(config_for(stack, gang), stack)
        tenant = next(iter(plan.facts.tenants))
        setting = Setting(gang, plan.facts.failure.requeue_limit)
        runtime = body(plan, ids.trainer_runtime("torch-distributed"))
        for kind in ("mpijob", "pytorchjob", "trainjob"):
            job = job_manifest(plan, JobRequest(tenant=tenant, kind=kind, nodes=4))  # type: ignore[arg-type]
            for script in SCRIPTS:
                rows.append((kind, gang, script.name, simulate(job, runtime, setting, script)))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stack", default="roce-sriov-volcano")
    args = parser.parse_args(argv)
    rows = table(args.stack)
    print(f"Failure scripts, stack {args.stack}, 4-node jobs, the stack's failure policy\n")
    print("| kind | scheduler | script | outcome | rules (source) |")
    print("|---|---|---|---|---|")
    for kind, gang, script, result in rows:
        print(f"| {kind} | {gang} | {script} | {result.summary} | {', '.join(result.rules)} |")
    print("\n| rule | source |\n|---|---|")
    for rule, where in RULES.items():
        print(f"| {rule} | {where} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
