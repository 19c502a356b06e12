"""Generated jobs survive failures as the stack's failure policy promises, and never loop:
failure scripts replayed against each operator's restart rules (tests/failsim.py, every rule
cited from the controllers' source at the pinned commits), for every job kind under every
queueing authority on the example stacks."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from builders import body, plan_of
from failsim import RULES, SCRIPTS, Result, Script, Setting, main, simulate
from test_gang import config_for

from gpufabric.outputs.jobs import JobRequest, job_manifest
from gpufabric.plan import ids
from gpufabric.plan.build import Plan

STACKS = ("lab-roce", "prod-ib", "roce-sriov-volcano")
KINDS = ("mpijob", "pytorchjob", "trainjob")
SCRIPT = {s.name: s for s in SCRIPTS}
NODES = 4


def setup(stack: str, gang: str) -> Plan:
    config = config_for(stack, gang)
    # NODES x 8 GPUs: a first tenant with less quota (lab-roce's 16) borrows the rest, which
    # the other tenants' idle quota covers, so its jobs are admitted
    first = config["gpufabric:tenants"][0]
    first["gpuBorrowingLimit"] = max(
        first.get("gpuBorrowingLimit", 0), NODES * 8 - first["gpuQuota"]
    )
    return plan_of(config, stack)


def run(plan: Plan, kind: str, script: str, **request: Any) -> tuple[dict[str, Any], Result]:
    tenant = next(iter(plan.facts.tenants))
    job = job_manifest(plan, JobRequest(tenant=tenant, kind=kind, nodes=NODES, **request))  # type: ignore[arg-type]
    runtime = body(plan, ids.trainer_runtime("torch-distributed"))
    setting = Setting(plan.facts.gang.authority, plan.facts.failure.requeue_limit)
    return job, simulate(job, runtime, setting, SCRIPT[script])


def expected(plan: Plan, kind: str, script: str) -> tuple[str, int, int]:
    """(outcome, restarts, requeues) the failure policy promises."""
    policy = plan.facts.failure
    kueue = plan.facts.gang.authority == "kueue"
    if script in ("node-loss", "eviction"):
        return "finished", 1, 0
    if script == "preemption":
        return ("finished", 0, 1) if kueue else ("finished", 1, 0)
    if script in ("user-error", "ttl-after-failure") and kind == "trainjob":
        return "failed", 0, 0  # exit 2 fails a TrainJob at once (podFailurePolicy)
    if script == "no-capacity":
        return (
            ("deactivated", 0, policy.requeue_limit or 0) if kueue else ("failed (deadline)", 0, 0)
        )
    return "failed", policy.max_restarts, 0


CASES = [
    (stack, gang, kind, script.name)
    for stack in STACKS
    for gang in ("kueue", "volcano")
    for kind in KINDS
    for script in SCRIPTS
]


@pytest.mark.parametrize(("stack", "gang", "kind", "script"), CASES)
def test_failure_script_ends_as_the_policy_says(
    stack: str, gang: str, kind: str, script: str
) -> None:
    """Restarted with the same checkpoint directory, failed without looping, or requeued
    with a bound."""
    plan = setup(stack, gang)
    job, result = run(plan, kind, script)
    outcome, restarts, requeues = expected(plan, kind, script)
    assert (result.outcome, result.restarts, result.requeues) == (outcome, restarts, requeues), (
        result.rules
    )
    storage = plan.facts.storage_of(job["metadata"]["namespace"])
    claim = storage.checkpoint_claim if storage else None
    # <checkpoints mount>/<kind>/<name>: the job's own directory, the same on every attempt
    want = None if claim is None else f"{claim.mount_path}/{kind}/{job['metadata']['name']}"
    assert result.checkpoint_dirs == {want}, "every attempt resumes from the same directory"
    assert set(result.rules) <= set(RULES)


def test_a_stack_with_checkpoints_is_simulated() -> None:
    """The checkpoint-directory assertion above bites on at least one example stack."""
    plan = setup("prod-ib", "kueue")
    _, result = run(plan, "pytorchjob", "node-loss")
    assert None not in result.checkpoint_dirs


def test_the_old_policy_failed_on_the_first_node_loss() -> None:
    """backoffLimit 0 (what gpufabric job wrote before the failure policy) fails an MPIJob
    and a PyTorchJob on the first lost node: the simulation tells the difference."""
    plan = setup("roce-sriov-volcano", "kueue")
    setting = Setting("kueue", 5)
    for kind in ("mpijob", "pytorchjob"):
        job, _ = run(plan, kind, "node-loss")
        job["spec"]["runPolicy"]["backoffLimit"] = 0
        assert simulate(job, None, setting, SCRIPT["node-loss"]).outcome == "failed"


def test_a_runtime_without_failure_policy_fails_on_the_first_node_loss() -> None:
    """Upstream's torch runtime sets no JobSet failurePolicy: one lost pod fails the
    TrainJob (kubeflow/trainer#3779's first half)."""
    plan = setup("roce-sriov-volcano", "kueue")
    job, _ = run(plan, "trainjob", "node-loss")
    runtime = copy.deepcopy(body(plan, ids.trainer_runtime("torch-distributed")))
    del runtime["spec"]["template"]["spec"]["failurePolicy"]
    result = simulate(job, runtime, Setting("kueue", 5), SCRIPT["node-loss"])
    assert result.outcome == "failed"
    assert "js.no-policy" in result.rules


def test_a_jobset_ttl_would_restart_a_failed_trainjob_until_its_deadline() -> None:
    """kubeflow/trainer#3779: a TTL deletes the failed JobSet and the Trainer builds a new
    one with its restarts at 0. gpufabric's runtimes set no TTL, and the TrainJob's own
    deadline (a Failed reason the Trainer keeps) is the bound the TTL cannot reset."""
    plan = setup("roce-sriov-volcano", "kueue")
    runtime = body(plan, ids.trainer_runtime("torch-distributed"))
    assert "ttlSecondsAfterFinished" not in runtime["spec"]["template"]["spec"]
    job, _ = run(plan, "trainjob", "ttl-after-failure")
    with_ttl = copy.deepcopy(runtime)
    with_ttl["spec"]["template"]["spec"]["ttlSecondsAfterFinished"] = 60
    setting = Setting("kueue", 5)
    looping = SCRIPT["ttl-after-failure"]
    assert simulate(job, with_ttl, setting, looping).outcome == "failed (deadline)"
    del job["spec"]["activeDeadlineSeconds"]
    assert simulate(job, with_ttl, setting, looping).outcome == "LOOPS"


def test_a_job_overrides_the_restarts() -> None:
    plan = setup("prod-ib", "volcano")
    job, result = run(plan, "mpijob", "nccl-timeout", max_restarts=5)
    assert job["spec"]["runPolicy"]["backoffLimit"] == 5
    assert (result.outcome, result.restarts) == ("failed", 5)
    _, result = run(plan, "pytorchjob", "oom-loop", max_restarts=0)
    assert (result.outcome, result.restarts) == ("failed", 0)


def test_an_elastic_pytorchjob_restarts_inside_torchrun_then_fails_at_once() -> None:
    """torchrun restarts its workers elasticPolicy.maxRestarts times; its exit 1 then fails
    the ExitCode job without a pod-level retry."""
    plan = setup("prod-ib", "kueue")
    job, result = run(plan, "pytorchjob", "nccl-timeout", elastic=f"2:{NODES}")
    assert job["spec"]["elasticPolicy"]["maxRestarts"] == plan.facts.failure.max_restarts
    assert (result.outcome, result.restarts) == ("failed", plan.facts.failure.max_restarts)
    assert "to.not-retryable" in result.rules
    _, result = run(plan, "pytorchjob", "node-loss", elastic=f"2:{NODES}")
    assert (result.outcome, result.restarts) == ("finished", 1)


def test_no_script_loops() -> None:
    """A script that never stops failing ends within the policy's bounds everywhere."""
    endless = Script("endless", "fails every attempt", (("rank", 134),), repeat=True)
    for stack in STACKS:
        for gang in ("kueue", "volcano"):
            plan = setup(stack, gang)
            for kind in KINDS:
                tenant = next(iter(plan.facts.tenants))
                job = job_manifest(plan, JobRequest(tenant=tenant, kind=kind, nodes=2))  # type: ignore[arg-type]
                runtime = body(plan, ids.trainer_runtime("torch-distributed"))
                setting = Setting(gang, plan.facts.failure.requeue_limit)
                assert simulate(job, runtime, setting, endless).outcome == "failed"


def test_the_table_prints_every_row(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--stack", "prod-ib"]) == 0
    out = capsys.readouterr().out
    rows = [
        line
        for line in out.splitlines()
        if line.startswith(("| mpijob", "| pytorchjob", "| trainjob"))
    ]
    assert len(rows) == len(KINDS) * 2 * len(SCRIPTS)
    assert "LOOPS" not in out
    for rule, source in RULES.items():
        assert f"| {rule} | {source} |" in out
