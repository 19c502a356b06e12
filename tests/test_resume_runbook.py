"""The runbook's "Resume after failure" section and its triage row: the contract where the
stack gives tenants a checkpoints claim, the example for the kinds torchrun starts, and the
honest alternative where there is no claim. (Every command in them runs against the fake API
server in test_runbook_commands.py.)"""

from __future__ import annotations

from conftest import example_config, sections

from gpufabric.model.stackfile import load_stack, model_from_config
from gpufabric.outputs.runbook import render
from gpufabric.plan.build import build_plan
from gpufabric.plan.pulls import collect


def runbook_of(name: str, config: dict | None = None) -> str:  # type: ignore[type-arg]
    model = (
        load_stack(name).model
        if config is None
        else model_from_config(sections(config), name, from_file=True)
    )
    return render(build_plan(name, model), collect(name, model))


def section(text: str) -> str:
    return text.split("## Resume after failure\n")[1].split("\n## ")[0]


def test_a_stack_with_claims_shows_the_contract_the_example_and_the_checks() -> None:
    text = runbook_of("prod-ib")
    resume = section(text)
    assert "`GPUFABRIC_CHECKPOINT_DIR=/checkpoints/<kind>/<job>`" in resume
    assert "`gpufabric.io/checkpoint-dir`" in resume
    assert (
        "gpufabric job --stack prod-ib --tenant llm-pretrain --kind pytorchjob --name ddp-demo "
        "--entrypoint examples/train --command 'torchrun ddp_resume.py --steps 2000'"
    ) in resume
    assert "logs -l training.kubeflow.org/job-name=<job> --prefix --tail=-1" in resume
    assert 'python3 checkpoint.py "$GPUFABRIC_CHECKPOINT_DIR"' in resume
    triage = text.split("## Triage")[1]
    row = next(ln for ln in triage.splitlines() if ln.startswith("| A job restarted"))
    assert "--previous" in row
    assert "involvedObject.name=<job>" in row
    assert row.count(" | ") == 2  # three cells: no pipe inside a command breaks the table


def test_a_trainjob_only_stack_reads_the_jobsets_pods() -> None:
    config = example_config("prod-ib")
    config["gpufabric:training"] = {
        "mpiOperator": False,
        "trainer": {"enabled": True, "runtimes": ["torch-distributed"]},
    }
    resume = section(runbook_of("prod-ib", config))
    assert "--kind trainjob" in resume
    assert "logs -l jobset.sigs.k8s.io/jobset-name=<job>" in resume


def test_an_mpijob_only_stack_shows_the_contract_without_the_torchrun_example() -> None:
    config = example_config("prod-ib")
    config["gpufabric:training"] = {"mpiOperator": True}
    resume = section(runbook_of("prod-ib", config))
    assert "get mpijobs -o custom-columns=" in resume
    assert "--name ddp-demo" not in resume
    assert "ddp-demo.yaml" not in resume  # nothing to delete that the section did not write
    assert "torchrun, which this stack's MPIJobs" in resume


def test_a_stack_without_a_checkpoints_claim_says_restarts_start_over() -> None:
    resume = section(runbook_of("roce-sriov-volcano"))
    assert "no checkpoints claim" in resume
    assert "starts from the beginning" in resume
    assert "kubectl" not in resume
