"""The deciding steps of running one acceptance MPIJob (``nccl._wait``) and of a fleet
of node checks (``fleet._overdue``), each alone."""

from __future__ import annotations

from typing import Any

from gpufabric.verify.nccl import job as nccl
from gpufabric.verify.nodes import fleet
from gpufabric.verify.results import Check

PATH = "/apis/kubeflow.org/v2beta1/namespaces/team/mpijobs/acc"


class Api:
    """Answers ``get`` with the given MPIJob states in turn (None: gone)."""

    def __init__(self, *states: dict[str, Any] | None) -> None:
        self.states = list(states)

    def get(self, path: str) -> dict[str, Any] | None:
        assert path == PATH
        return self.states.pop(0) if len(self.states) > 1 else self.states[0]


def job(kind: str | None = None, message: str = "", suspend: bool = False) -> dict[str, Any]:
    conditions = [{"type": kind, "status": "True", "message": message}] if kind else []
    return {"spec": {"runPolicy": {"suspend": suspend}}, "status": {"conditions": conditions}}


def wait(api: Api, now: list[float], until: float = 100.0) -> tuple[tuple[str, str], list[str]]:
    said: list[str] = []

    def sleep(seconds: float) -> None:
        now[0] += seconds

    got = nccl._wait(
        api,  # type: ignore[arg-type]
        PATH,
        "team",
        "acc",
        until,
        120.0,
        10.0,
        said.append,
        lambda: now[0],
        sleep,
    )
    return got, said


def test_wait_ends_on_the_terminal_condition_and_says_each_new_state_once() -> None:
    api = Api(job(suspend=True), job(suspend=True), job("Running"), job("Succeeded", "done"))
    (state, text), said = wait(api, [0.0])
    assert (state, text) == ("Succeeded", "done")
    assert said == [
        "suspended: waiting for admission by the queue (quota, gang, topology)",
        "Running: ",
        "done",
    ]


def test_wait_fails_when_the_job_disappears() -> None:
    (state, text), _ = wait(Api(job(), None), [0.0])
    assert (state, text) == ("Failed", "the MPIJob disappeared (deleted by someone else?)")


def test_wait_times_out_at_its_deadline_naming_the_last_state() -> None:
    now = [0.0]
    (state, text), _ = wait(Api(job(suspend=True)), now, until=25.0)
    assert state == "Timeout"
    assert text.startswith("timed out after 120s; last state: suspended: waiting")
    assert "`kubectl -n team describe mpijob acc`" in text
    assert now[0] == 25.0  # the last sleep stops at the deadline


def test_overdue_hosts_are_those_started_too_long_ago_without_a_result() -> None:
    started = {"a": 0.0, "b": 5.0, "c": 0.0}
    results: dict[str, list[Check]] = {"c": []}
    assert fleet._overdue(started, results, host_timeout=10.0, now=12.0) == ["a"]
    assert fleet._overdue(started, results, host_timeout=10.0, now=15.5) == ["a", "b"]
    assert fleet._overdue(started, results, host_timeout=10.0, now=10.0) == []
