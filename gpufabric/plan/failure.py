"""How training jobs survive failures: the stack's ``training.failurePolicy``, resolved once
and translated here for every job kind, so that an MPIJob, a PyTorchJob and a TrainJob of the
same stack restart, fail and stop alike.

One rule for every kind, the Training Operator's own (``IsRetryableExitCode``: exit code
>= 128 restarts, kubeflow/trainer v1.9.4 pkg/util/train/train_util.go:24):

- a failure of the cluster restarts the whole gang from its last checkpoint, at most
  ``max_restarts`` times: a node lost, a pod evicted, drained or preempted (the
  ``DisruptionTarget`` condition), a process killed by a signal (OOM kill 137, SIGTERM 143,
  the NCCL watchdog's abort 134);
- the program's own error, exit code 1-127, fails the job at once (no restart could fix it);
- no job runs longer than ``active_deadline_s`` (restarts and requeues included).

Where an operator cannot tell exit codes apart (the MPI Operator: ``ExitCode`` becomes
``Never`` and the launcher Job counts every failure), the program's error is retried until
the bound; tests/failsim.py replays each kind's rules from the controllers' source.

Restarted pods are new pods: they are scheduled again and never land on a node carrying the
quarantine taint (no toleration gpufabric writes matches it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

USER_ERROR_EXIT_CODES: tuple[int, ...] = tuple(range(1, 128))
"""Exit codes that are the program's own error: fail at once. 128 and above mean the process
was killed by a signal (128 + signal): the cluster's doing, restart."""
PYTORCH_RESTART_POLICY = "ExitCode"
"""PyTorchJob replicas: a pod failed with 1-127 fails the job, >= 128 is deleted and created
again (a new pod, scheduled anew), counted against backoffLimit."""
RDZV_BACKEND = "c10d"


@dataclass(frozen=True)
class FailurePolicyFacts:
    """The failure policy of one stack (or one job, after :meth:`for_job`)."""

    max_restarts: int
    """Gang restarts before the job fails."""
    active_deadline_s: int
    """Wall-clock backstop from the job's start."""
    requeue_limit: int | None
    """Requeues of a gang whose pods were not all ready in time before the queueing
    authority deactivates it (Kueue's backoffLimitCount); None: the authority keeps a gang
    queued and never requeues it."""

    def for_job(self, max_restarts: int | None, deadline_s: int | None) -> FailurePolicyFacts:
        """This policy with one job's overrides."""
        return replace(
            self,
            max_restarts=self.max_restarts if max_restarts is None else max_restarts,
            active_deadline_s=self.active_deadline_s if deadline_s is None else deadline_s,
        )

    # ------------------------------------------------------------ Kubeflow v1 / MPI

    def run_policy(self) -> dict[str, Any]:
        """runPolicy's failure keys (MPIJob, PyTorchJob): the launcher Job's or the job's
        backoffLimit, and the deadline."""
        return {"backoffLimit": self.max_restarts, "activeDeadlineSeconds": self.active_deadline_s}

    def elastic_policy(self, min_nodes: int, max_nodes: int) -> dict[str, Any]:
        """An elastic PyTorchJob's elasticPolicy: torchrun keeps training on min..max nodes
        and restarts its workers (c10d rendezvous) at most max_restarts times before the
        pod fails (the operator passes it as PET_MAX_RESTARTS)."""
        return {
            "minReplicas": min_nodes,
            "maxReplicas": max_nodes,
            "rdzvBackend": RDZV_BACKEND,
            "maxRestarts": self.max_restarts,
        }

    # ----------------------------------------------------------------- JobSet

    def jobset_failure_policy(self) -> dict[str, Any]:
        """The runtime's JobSet failurePolicy: a child Job failed by the program's exit code
        (podFailurePolicy) fails the JobSet; any other failure recreates every Job, at most
        max_restarts times. BlockingRecreate: the new gang starts only once the old pods are
        gone, so it never waits for GPUs it holds itself."""
        return {
            "maxRestarts": self.max_restarts,
            "restartStrategy": "BlockingRecreate",
            "rules": [
                {
                    "name": "program-error",
                    "action": "FailJobSet",
                    "onJobFailureReasons": ["PodFailurePolicy"],
                },
                {
                    "name": "cluster-failure",
                    "action": "RestartJobSet",
                    "onJobFailureReasons": ["BackoffLimitExceeded"],
                },
            ],
        }

    def child_job_failure(self) -> dict[str, Any]:
        """Each replicated Job's keys: one failed pod fails the Job (the gang restarts as a
        whole); a disrupted pod counts as a cluster failure even if its program then exits
        1-127 on SIGTERM; an exit code 1-127 fails the Job with reason PodFailurePolicy."""
        return {
            "backoffLimit": 0,
            "podFailurePolicy": {
                "rules": [
                    {
                        "action": "Count",
                        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                    },
                    {
                        "action": "FailJob",
                        "onExitCodes": {"operator": "In", "values": list(USER_ERROR_EXIT_CODES)},
                    },
                ]
            },
        }


__all__ = [
    "PYTORCH_RESTART_POLICY",
    "RDZV_BACKEND",
    "USER_ERROR_EXIT_CODES",
    "FailurePolicyFacts",
]
