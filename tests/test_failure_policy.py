"""training.failurePolicy as users see it: the restarts, deadline and rules every generated
job and ClusterTrainingRuntime carries, read from one fact; the per-job flags and their
errors; Kueue's requeue bound checked against it; and no job tolerating the quarantine
taint."""

from __future__ import annotations

import re
from typing import Any

import pytest
from builders import body, example_config, model_of, plan_of, problems_of
from test_gang import config_for

from gpufabric.cli import main
from gpufabric.model.stackfile import stack_warnings
from gpufabric.outputs.jobs import JobRequest, job_manifest
from gpufabric.plan import ids
from gpufabric.plan.build import Plan
from gpufabric.plan.monitoring import QUARANTINE_TAINT
from gpufabric.verify.nccl.job import acceptance_job

RUNTIMES = ("torch-distributed", "deepspeed-distributed")
JOBSET_RULE_NAME = r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?"


def plan_with(policy: dict[str, Any] | None = None, gang: str = "kueue") -> Plan:
    config = config_for("prod-ib", gang)
    config["gpufabric:training"]["trainer"]["runtimes"] = list(RUNTIMES)
    if policy is not None:
        config["gpufabric:training"]["failurePolicy"] = policy
    return plan_of(config, "prod-ib")


def job(plan: Plan, kind: str, **request: Any) -> dict[str, Any]:
    # llm-finetune: 64 GPUs of quota admit a four-node job (eval's 16 would never)
    request = JobRequest(tenant="llm-finetune", kind=kind, nodes=4, **request)  # type: ignore[arg-type]
    return job_manifest(plan, request)


def test_default_policy_three_restarts_fourteen_days() -> None:
    plan = plan_with()
    mpi = job(plan, "mpijob")["spec"]
    assert mpi["runPolicy"]["backoffLimit"] == 3
    assert mpi["runPolicy"]["activeDeadlineSeconds"] == 14 * 86400
    torch = job(plan, "pytorchjob")["spec"]
    # The Training Operator sums every pod's in-place restarts: 3 gang restarts of 4 pods.
    assert torch["runPolicy"]["backoffLimit"] == 3 * 4 + 1
    assert {r["restartPolicy"] for r in torch["pytorchReplicaSpecs"].values()} == {"OnFailure"}
    assert job(plan, "trainjob")["spec"]["activeDeadlineSeconds"] == 14 * 86400


def test_stack_policy_reaches_every_kind_and_runtime() -> None:
    plan = plan_with({"maxRestarts": 5, "activeDeadline": "36h"})
    assert job(plan, "mpijob")["spec"]["runPolicy"]["backoffLimit"] == 5
    assert job(plan, "pytorchjob")["spec"]["runPolicy"]["activeDeadlineSeconds"] == 36 * 3600
    for runtime in RUNTIMES:
        spec = body(plan, ids.trainer_runtime(runtime))["spec"]["template"]["spec"]
        policy = spec["failurePolicy"]
        assert policy["maxRestarts"] == 5
        assert [(r["action"], r["onJobFailureReasons"]) for r in policy["rules"]] == [
            ("FailJobSet", ["PodFailurePolicy"]),
            ("RestartJobSet", ["BackoffLimitExceeded"]),
        ]
        # JobSet's webhook admits only these rule names (jobset pkg/webhooks/
        # jobset_webhook.go:418-422,465 @f22e565); the CRD schema does not check them.
        assert all(re.fullmatch(JOBSET_RULE_NAME, r["name"]) for r in policy["rules"])
        assert "ttlSecondsAfterFinished" not in spec  # kubeflow/trainer#3779
        for replicated in spec["replicatedJobs"]:
            child = replicated["template"]["spec"]
            assert child["backoffLimit"] == 0
            assert child["template"]["spec"]["restartPolicy"] == "Never"
            rules = child["podFailurePolicy"]["rules"]
            assert rules[0] == {
                "action": "Count",
                "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
            }
            assert rules[1]["action"] == "FailJob"
            assert rules[1]["onExitCodes"]["values"] == list(range(2, 128))


def test_the_acceptance_test_never_restarts() -> None:
    """A failed NCCL test is a result: no retries, no JobSet failurePolicy."""
    config = config_for("prod-ib", "kueue")
    plan = plan_of(config, "prod-ib")
    assert acceptance_job(plan, "eval", 2)["spec"]["runPolicy"]["backoffLimit"] == 0
    config["gpufabric:training"]["mpiOperator"] = False
    plan = plan_of(config, "prod-ib")
    runtime = body(plan, ids.trainer_runtime("gpufabric-nccl-tests"))
    assert "failurePolicy" not in runtime["spec"]["template"]["spec"]


def test_elastic_pytorchjob() -> None:
    plan = plan_with(gang="volcano")
    spec = job(plan, "pytorchjob", elastic="2:4", max_restarts=6)["spec"]
    assert spec["elasticPolicy"] == {
        "minReplicas": 2,
        "maxReplicas": 4,
        "rdzvBackend": "c10d",
        "maxRestarts": 6,
    }
    assert list(spec["pytorchReplicaSpecs"]) == ["Worker"]
    assert spec["pytorchReplicaSpecs"]["Worker"]["replicas"] == 4
    assert spec["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] == "ExitCode"
    assert spec["runPolicy"]["backoffLimit"] == 6
    # Volcano's gang is the minimum: the job keeps running on MIN nodes.
    assert spec["runPolicy"]["schedulingPolicy"]["minAvailable"] == 2


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--kind", "trainjob", "--max-restarts", "2"], "--max-restarts: a TrainJob restarts"),
        (["--kind", "mpijob", "--max-restarts", "21"], "--max-restarts: 21 is not between 0"),
        (["--kind", "mpijob", "--max-restarts", "-1"], "--max-restarts: -1 is not between 0"),
        (["--kind", "mpijob", "--active-deadline", "1y"], "--active-deadline: '1y' is not a"),
        (["--kind", "mpijob", "--active-deadline", "91d"], "--active-deadline: '91d' is not"),
        (["--kind", "mpijob", "--elastic", "1:2"], "--elastic: applies to --kind pytorchjob"),
        (["--kind", "pytorchjob", "--elastic", "x"], "--elastic: 'x' is not MIN:MAX"),
        (["--kind", "pytorchjob", "--elastic", "3:2"], "--elastic: '3:2': expected 1 <= MIN"),
        (["--kind", "pytorchjob", "--elastic", "1:4"], "MAX equal to --nodes (2)"),
    ],
)
def test_bad_policy_flags_exit_2_naming_the_flag(
    args: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["job", "--stack", "prod-ib", "--tenant", "eval", *args]) == 2
    captured = capsys.readouterr()
    assert expected in captured.err
    assert captured.out == ""
    assert "Traceback" not in captured.err


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"maxRestarts": 21}, "less than or equal to 20"),
        ({"maxRestarts": -1}, "greater than or equal to 0"),
        ({"activeDeadline": "30m"}, "not between 1h and 90d"),
        ({"activeDeadline": "forever"}, "not a duration"),
        ({"restarts": 3}, "did you mean 'maxRestarts'"),
    ],
)
def test_bad_stack_policy_names_the_path(value: dict[str, Any], message: str) -> None:
    config = example_config("prod-ib")
    config["gpufabric:training"]["failurePolicy"] = value
    problems = problems_of(config)
    assert any(path.startswith("training.failurePolicy") for path in problems), problems
    assert any(message in m for m in problems.values()), problems


def test_kueue_warns_when_it_would_deactivate_before_the_restarts_are_spent() -> None:
    config = config_for("prod-ib", "kueue")
    config["gpufabric:training"]["failurePolicy"] = {"maxRestarts": 8}
    config["gpufabric:scheduling"]["requeuing"] = {"backoffLimitCount": 5}
    warnings = {p.path: p.message for p in stack_warnings(model_of(config))}
    assert (
        "below training.failurePolicy.maxRestarts 8"
        in warnings["scheduling.requeuing.backoffLimitCount"]
    )
    config["gpufabric:scheduling"]["requeuing"] = {"backoffLimitCount": 8}
    assert not [p for p in stack_warnings(model_of(config)) if "requeuing" in p.path]
    plan = plan_of(config, "prod-ib")
    assert plan.facts.failure.requeue_limit == 8
    assert plan_with(gang="volcano").facts.failure.requeue_limit is None


# ------------------------------------------------------------------------- quarantine


def tolerates(toleration: dict[str, Any], key: str, effect: str) -> bool:
    """Kubernetes' rule (core/v1 Toleration.ToleratesTaint): an empty key with Exists
    matches every taint; an empty effect matches every effect."""
    if toleration.get("effect") and toleration["effect"] != effect:
        return False
    if not toleration.get("key"):
        return toleration.get("operator") == "Exists"
    return bool(toleration["key"] == key)


def every_toleration(obj: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == "tolerations" and isinstance(v, list):
                found.extend(v)
            else:
                found.extend(every_toleration(v))
    elif isinstance(obj, list):
        for item in obj:
            found.extend(every_toleration(item))
    return found


def test_no_job_or_runtime_tolerates_the_quarantine_taint() -> None:
    config = config_for("prod-ib", "kueue")
    config["gpufabric:gpuNodes"]["tolerations"] = [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "dedicated", "operator": "Equal", "value": "training"},
    ]
    plan = plan_of(config, "prod-ib")
    objects = [job(plan, kind) for kind in ("mpijob", "pytorchjob", "trainjob")]
    objects += [acceptance_job(plan, "eval", 2)]
    objects += [body(plan, ids.trainer_runtime("torch-distributed"))]
    tolerations = [t for o in objects for t in every_toleration(o)]
    assert len(tolerations) >= 2 * len(objects)  # the GPU nodes' taints are tolerated
    assert not [t for t in tolerations if tolerates(t, QUARANTINE_TAINT, "NoSchedule")]


@pytest.mark.parametrize(
    ("toleration", "path", "message"),
    [
        ({"key": QUARANTINE_TAINT}, "gpuNodes.tolerations[1].key", "restarts on the node"),
        (
            {"key": QUARANTINE_TAINT, "operator": "Equal", "value": "xid"},
            "gpuNodes.tolerations[1].key",
            "gpufabric health",
        ),
        ({"operator": "Exists"}, "gpuNodes.tolerations[1].key", "required"),
    ],
)
def test_a_toleration_matching_the_quarantine_taint_is_refused(
    toleration: dict[str, Any], path: str, message: str
) -> None:
    """Including the wildcard (operator Exists, no key), which tolerates every taint."""
    config = example_config("prod-ib")
    config["gpufabric:gpuNodes"]["tolerations"] = [{"key": "nvidia.com/gpu"}, toleration]
    problems = problems_of(config)
    assert message in problems[path], problems
