"""Running ``verify storage``'s pods: a round of pods at most ``parallel`` at a time, each
within its own deadline, every one deleted whatever ends the run.

Each pod is created, watched until it ends (Succeeded or Failed), its log read, and deleted
by the thread that made it. Whatever stops the run (Ctrl-C, SIGTERM, an error), the main
thread stops the others, waits for them, and then confirms every pod it ever created gone
(also one whose create was still in flight), with signals held; a pod it cannot confirm is
recorded with the ``kubectl delete`` that removes it.
"""

from __future__ import annotations

import math
import shlex
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from gpufabric.verify.interrupts import left_behind, shielded
from gpufabric.verify.kube import Kube, KubeError, Malformed, object_path, path_of, records, text
from gpufabric.verify.results import Check
from gpufabric.verify.storage.judge import (
    PodResult,
    StorageJudge,
    StorageTarget,
    judge_node,
    new_run,
    node_key,
    pod,
    pod_name,
    read_script,
    ring,
    write_script,
)

LOG_RESERVE = 10.0
"""Seconds of a pod's --timeout kept for reading its log."""


@dataclass(kw_only=True)
class Runner:
    kube: Kube
    timeout: float
    poll: float = 2.0
    parallel: int = 4
    progress: Callable[[str], None] = lambda _msg: None
    stop: threading.Event = field(default_factory=threading.Event)
    created: list[dict[str, Any]] = field(default_factory=list)
    gone: set[str] = field(default_factory=set)
    """Names of the created pods whose deletion was confirmed."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    clock: Callable[[], float] = time.monotonic

    def _claim(self, body: dict[str, Any]) -> bool:
        """Record a pod about to be created; False once the run is stopping."""
        with self.lock:
            if self.stop.is_set():
                return False
            self.created.append(body)
            return True

    def run_round(self, pods: Sequence[tuple[str, dict[str, Any]]]) -> dict[str, PodResult]:
        """(node, pod) each run to its end; the results by node. Whatever interrupts
        the round stops every pod and propagates once they are gone (:meth:`cleanup`)."""
        pool = ThreadPoolExecutor(max_workers=max(1, self.parallel), thread_name_prefix="pod")
        futures: list[tuple[str, Future[PodResult]]] = []
        try:
            futures = [(node, pool.submit(self.run_pod, node, body)) for node, body in pods]
            results = {node: f.result() for node, f in futures}
        except BaseException:
            self.stop.set()
            raise
        finally:
            with shielded():
                pool.shutdown(wait=True, cancel_futures=True)
        for result in results.values():
            result.parse()
        return results

    def run_pod(self, node: str, body: dict[str, Any]) -> PodResult:
        meta = body["metadata"]
        ns, name = meta["namespace"], meta["name"]
        path = object_path("v1", "Pod", name, ns)
        with self.kube.limit(self.timeout):
            try:
                if self.kube.get(path) is not None:
                    return PodResult(
                        node=node,
                        state="Error",
                        message=f"pod {ns}/{name} already exists (not ours)",
                    )
                if not self._claim(body):
                    return PodResult(
                        node=node, state="Interrupted", message="not started: the run was stopped"
                    )
                try:
                    self.kube.create(body)
                    return self._watch(node, path, ns, name)
                finally:
                    self.remove(body)
            except KubeError as exc:
                return PodResult(node=node, state="Error", message=str(exc))

    def _watch(self, node: str, path: str, ns: str, name: str) -> PodResult:
        until = self.clock() + max(self.timeout - min(LOG_RESERVE, self.timeout * 0.2), 0)
        status = "created, no status yet"
        while True:
            live = self.kube.get(path)
            if live is None:
                return PodResult(
                    node=node, state="Failed", message="the pod disappeared (deleted by someone?)"
                )
            phase, status = pod_status(live)
            if phase in ("Succeeded", "Failed"):
                return PodResult(
                    node=node, state=phase, message=status, log=self.kube.log(ns, name)
                )
            if self.stop.is_set():
                return PodResult(
                    node=node, state="Interrupted", message=f"stopped; last state: {status}"
                )
            if self.clock() >= until:
                describe = shlex.join(["kubectl", "-n", ns, "describe", "pod", name])
                return PodResult(
                    node=node, state="Timeout", message=f"timed out after {self.timeout:g}s; last state: "
                    f"{status} (`{describe}` while it runs)",
                )  # fmt: skip
            self.stop.wait(min(self.poll, max(until - self.clock(), 0.01)))

    def remove(self, body: dict[str, Any]) -> bool:
        """Delete the pod and confirm it gone; record the command when that fails."""
        meta = body["metadata"]
        command = delete_command(meta["namespace"], meta["name"])
        with self.kube.grace():
            try:
                if self.kube.remove(body):
                    with self.lock:
                        self.gone.add(meta["name"])
                    return True
                why = "its deletion could not be confirmed in time"
            except KubeError as exc:
                why = str(exc)
        left_behind(command)
        self.progress(f"could not delete {path_of(body)}: {why}; delete it with `{command}`")
        return False

    def cleanup(self) -> None:
        """Stop every pod and confirm each one this run created gone (signals held)."""
        self.stop.set()
        with shielded():
            with self.lock:
                created = [b for b in self.created if b["metadata"]["name"] not in self.gone]
            for body in created:
                self.remove(body)


def delete_command(namespace: str, name: str) -> str:
    return shlex.join(
        ["kubectl", "-n", namespace, "delete", "pod", name, "--ignore-not-found", "--wait=false"]
    )


def pod_status(live: dict[str, Any]) -> tuple[str, str]:
    """(phase, words) of a pod: its phase and why it waits or ended, as far as readable."""
    try:
        phase = text(live, "status", "phase") or "Pending"
        words = [phase]
        for cond in records(live, "status", "conditions"):
            if text(cond, "status") == "False" and text(cond, "message"):
                words.append(f"{text(cond, 'type')}: {text(cond, 'message')[:200]}")
        for cs in records(live, "status", "containerStatuses"):
            for state in ("waiting", "terminated"):
                got = cs.get("state", {}).get(state) if isinstance(cs.get("state"), dict) else None
                if isinstance(got, dict) and got.get("reason"):
                    words.append(f"{state}: {str(got.get('reason'))[:80]}")
        return phase, "; ".join(words)
    except Malformed as exc:
        return "Unknown", f"unreadable status: {exc}"


@dataclass(frozen=True)
class Options:
    """How one ``verify storage`` run goes."""

    image: str
    judge: StorageJudge
    tolerations: tuple[Mapping[str, Any], ...] = ()
    pull_secrets: tuple[str, ...] = ()
    """``sources.pullSecrets``: the pods pull the image from an authenticated mirror."""


def _write_pods(
    target: StorageTarget, nodes: Sequence[str], run: str, tokens: Mapping[str, str],
    opts: Options, deadline_s: int, readback: bool,
) -> list[tuple[str, dict[str, Any]]]:  # fmt: skip
    script = write_script(target, opts.judge.mib, token=readback)
    return [
        (
            n,
            pod(
                target,
                n,
                pod_name(run, "w", target.namespace, n),
                opts.image,
                script,
                {"GF_RUN": run, "GF_TOKEN": tokens[n], "GF_NODE": node_key(n)},
                opts.tolerations,
                deadline_s,
                opts.pull_secrets,
            ),
        )
        for n in nodes
    ]


def _read_pods(
    target: StorageTarget, partners: Mapping[str, str], run: str, opts: Options, deadline_s: int
) -> list[tuple[str, dict[str, Any]]]:
    script = read_script(target)
    return [
        (
            reader,
            pod(
                target,
                reader,
                pod_name(run, "r", target.namespace, reader),
                opts.image,
                script,
                {"GF_RUN": run, "GF_PARTNER": node_key(writer)},
                opts.tolerations,
                deadline_s,
                opts.pull_secrets,
            ),
        )
        for writer, reader in sorted(partners.items())
    ]


DRY_RUN_NODES = ("<node-a>", "<node-b>")
"""The nodes a dry run shows its pods on (a real run: every Ready GPU node, or --sample)."""
DRY_RUN_ID = "dryrun"
DRY_RUN_TOKEN = "<token>"


def dry_run_pods(target: StorageTarget, opts: Options, timeout: float) -> list[dict[str, Any]]:
    """The pods one tenant's run creates, for review: its write round on two placeholder
    nodes, then (with a writable claim) its read-back round; run id and tokens are
    placeholders (a real run draws them at random)."""
    nodes = DRY_RUN_NODES
    tokens = dict.fromkeys(nodes, DRY_RUN_TOKEN)
    partners = ring(nodes) if target.writable else {}
    deadline_s = max(1, math.ceil(timeout))
    pods = _write_pods(target, nodes, DRY_RUN_ID, tokens, opts, deadline_s, bool(partners))
    if partners:
        pods += _read_pods(target, partners, DRY_RUN_ID, opts, deadline_s)
    return [body for _, body in pods]


def verify_tenant(
    runner: Runner, target: StorageTarget, nodes: Sequence[str], opts: Options
) -> list[Check]:
    """Both rounds on ``nodes`` for one tenant, and every check of every node."""
    run, token_of = new_run()
    tokens = {n: token_of(16) for n in nodes}
    partners = ring(nodes) if target.writable else {}
    deadline_s = max(1, math.ceil(runner.timeout))
    runner.progress(
        f"{target.namespace}: write round on {len(nodes)} GPU nodes, "
        f"{runner.parallel} pods at a time (run {run})"
    )
    pods = _write_pods(target, nodes, run, tokens, opts, deadline_s, bool(partners))
    writes = runner.run_round(pods)
    reads: dict[str, PodResult] = {}
    if partners:
        runner.progress(f"{target.namespace}: read-back round (each node reads the previous)")
        reads = runner.run_round(_read_pods(target, partners, run, opts, deadline_s))
    checks: list[Check] = []
    for node in nodes:
        reader = reads.get(partners[node]) if node in partners else None
        checks += judge_node(target, writes[node], reader, tokens[node], opts.judge)
    return checks
