"""The sweep's record as a ledger (sweep_ledger.Ledger): what the planner and the judge read of
it after every round is kept up to date as jobs are appended, and must be exactly what they
read of a plain list of the same jobs, whatever faults the jobs show and however the list
changed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sweepfleet

from gpufabric.verify.sweep import judge as sweep_judge
from gpufabric.verify.sweep import ledger as sweep_ledger
from gpufabric.verify.sweep import rounds as sweep_rounds
from gpufabric.verify.sweep.job import Job
from gpufabric.verify.sweep.ledger import Ledger
from gpufabric.verify.sweep.run import sweep


def _swept(kind: str, n: int, group: int) -> tuple[sweepfleet.Fleet, list[Job]]:
    fleet = sweepfleet.build(n, kind, max(1, n // 32), 1000)
    report = sweep(
        fleet.nodes, fleet.run_pair, 8, topology=fleet.topology, levels=fleet.levels,
        run_group=fleet.run_group if group > 2 else None, group=group,
    )  # fmt: skip
    assert isinstance(report.jobs, Ledger)
    return fleet, list(report.jobs)


def _reads(fleet: sweepfleet.Fleet, jobs: list[Job], round_: int) -> tuple[object, ...]:
    """Everything the planner and the judge read of ``jobs`` (a list or a ledger)."""
    nodes, topo, levels = fleet.nodes, fleet.topology, fleet.levels
    verdict = sweep_judge.judge(nodes, topo, levels, jobs, 3, expose=8)
    return (
        verdict,
        list(sweep_ledger.expand(jobs)),
        sweep_ledger.passing_jobs(jobs),
        sweep_rounds.split_jobs(jobs, verdict.faulty, verdict.suspects),
        sweep_judge.adaptive_pairs(nodes, topo, levels, jobs, verdict, round_, 3, 8),
        sweep_rounds.scoped_pairs(nodes, topo, None, jobs, str(round_)),
        sweep_rounds.exhausted([j.pair for j in jobs[-3:]], jobs),
    )


@pytest.mark.parametrize(("kind", "group"), [("mixed", 16), ("uplink", 16), ("partner", 2)])
def test_a_ledger_reads_as_the_list_of_its_jobs_round_by_round(kind: str, group: int) -> None:
    """Round by round as the sweep appends them (path faults, flaky and partner-dependent
    nodes, failing and passing groups): the judgement, the pairs, the next round's jobs."""
    fleet, jobs = _swept(kind, 64, group)
    ledger = Ledger()
    for round_ in sorted({j.round for j in jobs}):
        ledger.extend(j for j in jobs if j.round == round_)
        plain = [j for j in jobs if j.round <= round_]
        assert _reads(fleet, ledger, round_ + 1) == _reads(fleet, plain, round_ + 1)


def test_a_ledger_changed_otherwise_than_by_appending_is_read_again() -> None:
    """A job replaced (the last or one before), the list cut or reordered: nothing is read
    from what was kept of the old record."""
    fleet, jobs = _swept("bad", 64, 16)
    ledger = Ledger(jobs)
    last = len(jobs) - 1
    assert _reads(fleet, ledger, 99) == _reads(fleet, jobs, 99)
    flipped = Job(jobs[last].round, jobs[last].pair, "FAIL" if jobs[last].verdict == "PASS" else "PASS")  # fmt: skip
    ledger[last] = flipped
    assert _reads(fleet, ledger, 99) == _reads(fleet, [*jobs[:last], flipped], 99)
    middle = len(jobs) // 3
    failed = Job(jobs[middle].round, jobs[middle].pair, "FAIL")
    ledger[middle] = failed
    changed = [*jobs[:middle], failed, *jobs[middle + 1 : last], flipped]
    assert _reads(fleet, ledger, 99) == _reads(fleet, changed, 99)
    del ledger[len(jobs) // 2 :]
    assert _reads(fleet, ledger, 99) == _reads(fleet, changed[: len(jobs) // 2], 99)
    ledger.insert(0, ledger.pop())
    assert _reads(fleet, ledger, 99) == _reads(fleet, list(ledger), 99)
