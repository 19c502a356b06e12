"""The NCCL acceptance test: an MPIJob with the tenant's full wiring, judged by the analyzer.

The job is the one ``gpufabric job --kind mpijob`` prints (queue, priority, rails, RDMA
resources, nccl-env, IPC_LOCK, /dev/shm), with a launcher that runs nccl-tests twice under
``NCCL_DEBUG=INFO`` (INIT,NET: the transport lines the verdict needs): ``all_reduce_perf_mpi``
(with ``NCCL_ALGO=Ring`` on two nodes, where tree algorithms report bus bandwidth above the
NICs' rate) then ``all_gather_perf_mpi``, each over 1-8 GiB. The launcher log is split per
test at gpufabric's marker lines and judged by :mod:`gpufabric.verify.nccl_report`.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from gpufabric.exitcodes import Verdict
from gpufabric.outputs.jobs import JobRequest, Wiring, mpijob, mpirun_command, wiring_for
from gpufabric.plan.build import Plan
from gpufabric.plan.resolve import on_one_rail
from gpufabric.verify import nccl_report
from gpufabric.verify.arguments import NCCL_JOB_NAME, NCCL_TIMEOUT
from gpufabric.verify.interrupts import left_behind, shielded
from gpufabric.verify.kube import (
    Kube,
    KubeError,
    collection_path,
    mapping,
    name_of,
    object_path,
    records,
    text,
)

SIZES = ["-b", "1G", "-e", "8G", "-f", "2", "-g", "1"]
TESTS = ("all_reduce_perf_mpi", "all_gather_perf_mpi")
DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}
MARKER = "==> gpufabric nccl-test: {test} <=="
JOB_LABEL = "training.kubeflow.org/job-name"
ROLE_LABEL = "training.kubeflow.org/job-role"
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


def acceptance_job(
    plan: Plan,
    tenant: str,
    nodes: int = 2,
    image: str | None = None,
    name: str = DEFAULT_NAME,
    pin_nodes: tuple[str, ...] = (),
    rail: str | None = None,
) -> dict[str, Any]:
    """The MPIJob ``verify nccl`` submits; StackError naming the option when it cannot run.
    With ``pin_nodes`` its workers run on exactly those nodes (a sweep's pair); with
    ``rail`` its pods attach only that rail, and NCCL can use no other."""
    req = JobRequest(tenant=tenant, kind="mpijob", nodes=nodes, image=image, name=name)
    w = wiring_for(plan, req)
    overrides: dict[str, str] = {}
    if rail is not None:
        narrow = on_one_rail(plan.facts.fabric, w.contract, rail)
        overrides = {k: v for k, v in narrow.nccl_env.items() if w.contract.nccl_env.get(k) != v}
        w = replace(w, contract=narrow)
    job = mpijob(w, name, nodes, image or plan.components["training-image"].image_ref or "", [])
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    launcher["command"] = ["/bin/bash", "-c", launcher_script(w, nodes, overrides)]
    job["metadata"].setdefault("labels", {})["app.kubernetes.io/managed-by"] = "gpufabric-verify"
    if pin_nodes:
        worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
        worker["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": "kubernetes.io/hostname",
                                    "operator": "In",
                                    "values": list(pin_nodes),
                                }
                            ]
                        }
                    ]
                }
            },
            # one worker per node of the pair
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {JOB_LABEL: name}},
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            },
        }
    return job


def split_log(log: str) -> dict[str, str]:
    """The launcher log per test, by gpufabric's markers (the whole log when none)."""
    parts: dict[str, list[str]] = {}
    current = None
    for line in log.splitlines():
        for test in TESTS:
            if line.strip() == MARKER.format(test=test):
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


@dataclass
class Outcome:
    state: str  # Succeeded | Failed | Timeout
    message: str
    log: str
    waited_s: float


def _condition(job: dict[str, Any]) -> tuple[str | None, str]:
    """Terminal state of an MPIJob from its conditions, and the latest condition's text;
    Malformed when its status cannot be read. Succeeded and Failed both True is Failed."""
    conds = records(job, "status", "conditions")
    true = {text(c, "type") for c in conds if text(c, "status") == "True"}
    if {"Succeeded", "Failed"} <= true:
        return "Failed", "the MPIJob reports both Succeeded and Failed (contradictory status)"
    for kind in ("Succeeded", "Failed"):
        for c in conds:
            if text(c, "type") == kind and text(c, "status") == "True":
                return kind, text(c, "message") or text(c, "reason") or kind
    last = conds[-1] if conds else None
    if mapping(job, "spec", "runPolicy").get("suspend"):
        return None, "suspended: waiting for admission by the queue (quota, gang, topology)"
    if last:
        return None, f"{text(last, 'type')}: {text(last, 'message') or text(last, 'reason')}"
    return None, "created, no status yet"


def launcher_log(kube: Kube, namespace: str, name: str) -> str:
    pods = kube.list(
        collection_path("v1", "Pod", namespace), f"{JOB_LABEL}={name},{ROLE_LABEL}=launcher"
    )
    if not pods:
        return ""
    newest = max(pods, key=lambda p: (text(p, "metadata", "creationTimestamp"), name_of(p)))
    return kube.log(namespace, name_of(newest))


LOG_RESERVE = 30.0
"""Seconds of the --timeout kept for collecting the launcher log."""


def _already_exists(ns: str, name: str) -> KubeError:
    return KubeError(
        f"MPIJob {ns}/{name} already exists (a previous run?); delete it with "
        f"`kubectl -n {ns} delete mpijob {name}` or pass --name"
    )


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
) -> tuple[str, str]:
    """(state, message) once the MPIJob at ``path`` ends, disappears or ``wait_until``
    passes (Timeout); each new condition text is reported once."""
    last = ""
    while True:
        live = kube.get(path)
        if live is None:
            return "Failed", "the MPIJob disappeared (deleted by someone else?)"
        found, text = _condition(live)
        if text != last:
            last = text
            progress(text)
        if found is not None:
            return found, text
        if clock() >= wait_until:
            return "Timeout", (
                f"timed out after {timeout:g}s; last state: {text}. Check "
                f"`kubectl -n {ns} describe mpijob {name}` and the workload's admission"
            )
        sleep(min(poll, max(wait_until - clock(), 0.01)))


def delete_command(ns: str, name: str) -> str:
    """The command a person runs to delete an acceptance MPIJob cleanup could not confirm
    gone (it may never have been created, hence --ignore-not-found)."""
    return shlex.join(["kubectl", "-n", ns, "delete", "mpijob", name, "--ignore-not-found"])


def _delete(
    kube: Kube, job: dict[str, Any], ns: str, name: str, progress: Callable[[str], None]
) -> None:
    """Delete the MPIJob and confirm it gone (also when its create was still in flight),
    holding signals meanwhile; what cannot be confirmed is reported with the command that
    deletes it, not raised."""
    command = delete_command(ns, name)
    with shielded(), kube.grace():
        try:
            if kube.remove(job):
                progress(f"deleted MPIJob {ns}/{name}")
                return
            why = "its deletion could not be confirmed in time"
        except KubeError as exc:
            why = str(exc)
    left_behind(command)
    progress(f"could not delete MPIJob {ns}/{name}: {why}; delete it with `{command}`")


def run_job(
    kube: Kube,
    job: dict[str, Any],
    timeout: float = DEFAULT_TIMEOUT,
    poll: float = 10.0,
    keep: bool = False,
    progress: Callable[[str], None] = lambda _msg: None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Outcome:
    """Create the job, wait for it to finish or time out, collect the launcher log, and
    delete the job (unless ``keep``) whatever happened: success, failure, timeout, an API
    error, Ctrl-C (also during the create, and a second one during the delete), SIGTERM or
    SIGHUP. ``timeout`` bounds everything but that delete."""
    ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
    path = object_path(job["apiVersion"], job["kind"], name, ns)
    start = clock()
    with kube.limit(timeout):
        if kube.get(path) is not None:
            raise _already_exists(ns, name)
        wait_until = start + max(timeout - min(LOG_RESERVE, timeout * 0.2), 0)
        state, text_, log = "Failed", "", ""
        try:
            kube.create(job)
            progress(f"created MPIJob {ns}/{name}; waiting up to {timeout:g}s")
            state, text_ = _wait(
                kube, path, ns, name, wait_until, timeout, poll, progress, clock, sleep
            )
            try:
                log = launcher_log(kube, ns, name)
            except KubeError as exc:
                text_ = f"{text_}; the launcher log could not be read: {exc}"
        finally:
            if not keep:
                _delete(kube, job, ns, name, progress)
    return Outcome(state, text_, log, clock() - start)


def judge(outcome: Outcome, exp: nccl_report.Expectation) -> nccl_report.Report:
    """The analyzer's report on the collected log, with the job's own outcome."""
    if not outcome.log.strip():
        doc = nccl_report.Report(
            verdict=Verdict.INCONCLUSIVE,
            reasons=("no launcher log to judge",),
            threshold_gbps=exp.threshold_gbps,
            threshold_source=exp.threshold_source,
            runs=(),
        )
    else:
        doc = nccl_report.report(split_log(outcome.log), exp)
    verdict, reasons = doc.verdict, doc.reasons
    if outcome.state == "Timeout":
        reasons = (outcome.message, *reasons)
        if verdict != Verdict.FAIL:  # a timed-out run never passes
            verdict = Verdict.INCONCLUSIVE
    elif outcome.state == "Failed":
        reasons = (f"the MPIJob failed: {outcome.message}", *reasons)
        verdict = Verdict.FAIL
    return replace(
        doc,
        verdict=verdict,
        reasons=reasons,
        job=nccl_report.JobOutcome(outcome.state, outcome.message, outcome.waited_s),
    )
