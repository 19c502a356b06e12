"""How training jobs survive failures: the stack's ``training.failurePolicy``, resolved once
and translated here for every job kind, as far as each operator's restart rules allow
(tests/failsim.py replays those rules, taken from the controllers' source):

- a failure of the cluster restarts the whole gang from its last checkpoint, at most
  ``max_restarts`` times: a node lost, a pod evicted, drained or preempted (the
  ``DisruptionTarget`` condition), a process killed by a signal (OOM kill, the NCCL
  watchdog's abort);
- where the operator can tell, the program's own deliberate error fails the job at once:
  exit codes 2-127 (a usage error, ``sys.exit(n)``, 126/127 command not runnable or not
  found). Exit code 1 is ambiguous: Python's uncaught exception and torchrun's report of any
  failed worker (ChildFailedError), an NCCL timeout included, so it restarts, bounded;
- no job runs longer than ``active_deadline_s`` (restarts included).

The MPI Operator and a fixed-size PyTorchJob cannot tell exit codes apart (the MPI
Operator's ``ExitCode`` becomes ``Never``; a PyTorchJob's ``ExitCode`` would fail on
torchrun's 1): they retry every failure until the bound. Restarted pods that are created
anew are scheduled again and never land on a node carrying the quarantine taint (no
toleration gpufabric writes matches it).
"""

from __future__ import annotations

from typing import Any

from msgspec import Struct
from msgspec.structs import replace

USER_ERROR_EXIT_CODES: tuple[int, ...] = tuple(range(2, 128))
"""Exit codes that are the program's own deliberate error: fail at once where the operator
can tell (a TrainJob's podFailurePolicy). 1 is ambiguous (see above); 128 and above mean the
process was killed by a signal (128 + signal): the cluster's doing."""
RDZV_BACKEND = "c10d"


class FailurePolicyFacts(Struct, frozen=True):
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
        """runPolicy's failure keys where one failed pod is one failure (an MPIJob's launcher
        Job, an elastic PyTorchJob): backoffLimit and the deadline."""
        return {"backoffLimit": self.max_restarts, "activeDeadlineSeconds": self.active_deadline_s}

    def run_policy_counting_restarts(self, pods: int) -> dict[str, Any]:
        """runPolicy of a job whose pods restart in place (OnFailure): the Training Operator
        sums the restart counts of all its pods against backoffLimit (``result >=
        backoffLimit``; 0: any restart fails), and a gang restart restarts every pod once:
        max_restarts gang restarts survive, the next fails the job."""
        limit = self.max_restarts * pods + 1 if self.max_restarts else 0
        return {"backoffLimit": limit, "activeDeadlineSeconds": self.active_deadline_s}

    @staticmethod
    def pytorch_restart_policy(elastic: bool) -> str:
        """An elastic PyTorchJob's torchrun restarts its workers itself; its pods are ExitCode:
        killed by a signal (>= 128) the pod is created anew (scheduled again), torchrun's 1
        after its restarts are spent fails the job. A fixed-size job is OnFailure: torchrun
        exits 1 on any worker's failure, which ExitCode would take for the program's error."""
        return "ExitCode" if elastic else "OnFailure"

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
                    "name": "ProgramError",
                    "action": "FailJobSet",
                    "onJobFailureReasons": ["PodFailurePolicy"],
                },
                {
                    "name": "ClusterFailure",
                    "action": "RestartJobSet",
                    "onJobFailureReasons": ["BackoffLimitExceeded"],
                },
            ],
        }

    def child_job_failure(self) -> dict[str, Any]:
        """Each replicated Job's keys: one failed pod fails the Job (the gang restarts as a
        whole); a disrupted pod counts as a cluster failure even if its program then exits
        on SIGTERM; an exit code 2-127 fails the Job with reason PodFailurePolicy."""
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
    "RDZV_BACKEND",
    "USER_ERROR_EXIT_CODES",
    "FailurePolicyFacts",
]
