"""What a new user reading README.md and a generated runbook relies on, found by writing
stacks of shapes the examples do not have: every gate names what the plan creates, every
rollback line says how, no gate waits for an empty value or a job that cannot start, and the
RoCE text says the traffic class the stack sets."""

from __future__ import annotations

import re
from typing import Any

import pytest
from conftest import EXAMPLE_STACKS, REPO, example_config, sections
from golden import variants

from gpufabric.model.stackfile import load_stack, model_from_config
from gpufabric.outputs.runbook import render
from gpufabric.plan.build import Plan, build_plan
from gpufabric.plan.pulls import collect

VARIANTS = {name: cfg for name, cfg in variants().items() if name != "stress"}


def _runbook(config: dict[str, Any], name: str) -> tuple[Plan, str]:
    model = model_from_config(sections(config), name, from_file=True)
    plan = build_plan(name, model)
    return plan, render(plan, collect(name, model))


def _section(text: str, heading: str) -> str:
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_every_phase_has_its_rollback(name: str) -> None:
    """Each phase of the bring-up has a rollback line that says something (the monitoring
    and storage phases had only their title)."""
    _plan, text = _runbook(VARIANTS[name], name)
    rollback = _section(text, "Rollback")
    lines = re.findall(r"^- Phase (\d+) \(([^)]*)\):(.*)$", rollback, re.MULTILINE)
    titles = re.findall(r"^### Phase (\d+): ([^(]+) \(", text, re.MULTILINE)
    assert [(n, t.strip()) for n, t in titles] == [(n, t) for n, t, _ in lines]
    for number, title, says in lines:
        assert len(says.strip()) > 20, f"{name}: phase {number} ({title}) has no rollback"


def test_storage_rollback_speaks_only_of_what_the_stack_installs() -> None:
    _, nfs = _runbook(example_config("prod-ib"), "prod-ib")
    _, existing = _runbook(example_config("lab-roce"), "lab-roce")
    nfs_line = next(ln for ln in nfs.splitlines() if ln.startswith("- Phase 7 (Shared storage)"))
    assert "gpufabric:versions.csi-driver-nfs" in nfs_line
    assert "StorageClass" in nfs_line
    existing_line = next(
        ln for ln in existing.splitlines() if ln.startswith("- Phase 6 (Shared storage)")
    )
    # an existing class: gpufabric installs no driver and writes no class
    assert "csi-driver-nfs" not in existing_line
    assert "StorageClass" not in existing_line
    assert "stays in the cluster" in existing_line


NAD_GATE = re.compile(r"`kubectl -n (\S+) get network-attachment-definitions` lists ([^;]+);")


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_network_gate_lists_exactly_the_networks_the_plan_creates(name: str) -> None:
    """The network phase's gate names, per namespace, the NetworkAttachmentDefinitions the
    plan writes there: a routed rail's are `<rail>-<leaf>` (the gate listed the rail names,
    which never exist there), and tenant-scoped ones are listed per tenant namespace (the
    gate said they came in the tenants phase and gave no command)."""
    plan, text = _runbook(VARIANTS[name], name)
    created: dict[str, set[str]] = {}
    for _, obj in plan.objects():
        if obj.kind == "NetworkAttachmentDefinition":
            body = obj.body["metadata"]
            created.setdefault(str(body["namespace"]), set()).add(str(body["name"]))
    gated = {ns: set(re.findall(r"`([^`]+)`", names)) for ns, names in NAD_GATE.findall(text)}
    assert gated == created
    assert "created in the tenants phase" not in text


def _tenantless(gang: str) -> dict[str, Any]:
    config = example_config("lab-roce")
    config["gpufabric:tenants"] = []
    del config["gpufabric:storage"]
    config["gpufabric:scheduling"] = {"gang": gang}
    return config


@pytest.mark.parametrize("gang", ["kueue", "volcano"])
def test_a_stack_without_tenants_has_no_queue_gate_waiting_for_nothing(gang: str) -> None:
    """With no tenant there is no queue: the scheduling gate printed "prints ``" (Kueue) or
    "lists  in state Open" (Volcano), a gate nobody can tell passed."""
    _, text = _runbook(_tenantless(gang), "lab")
    assert "prints ``" not in text
    assert "lists  in state Open" not in text
    assert "kubectl get clusterqueues" not in text
    assert "kubectl get queues.scheduling.volcano.sh" not in text
    # with tenants, the gate is there
    _, with_tenants = _runbook(example_config("lab-roce"), "lab-roce")
    assert "prints `team-speech=True team-vision=True`" in with_tenants


def test_roce_text_names_the_traffic_class_the_stack_sets() -> None:
    """`fabric.roce.trafficClass: 106` (DSCP 26 with the ECN bits set) was explained as
    "DSCP 26 x 4", which is 104."""
    config = example_config("lab-roce")
    config["gpufabric:fabric"]["roce"]["trafficClass"] = 106
    _, text = _runbook(config, "lab-roce")
    assert "106 (DSCP 26 x 4)" not in text
    assert "106 (DSCP 26 in its upper six bits, ECN bits 2" in text
    _, default = _runbook(example_config("lab-roce"), "lab-roce")
    assert "104 (DSCP 26 x 4)" in default


def test_example_runbooks_are_among_the_variants() -> None:
    assert set(EXAMPLE_STACKS) <= set(VARIANTS)


def test_tenant_vlans_are_a_switch_prerequisite() -> None:
    """`tenants[].vlan` tags a tenant's RDMA traffic: the switch ports must trunk those
    VLANs, which the runbook's switch step did not say."""
    config = variants()["roce-sriov-vlans"]
    tagged = [t for t in config["gpufabric:tenants"] if t.get("vlan")]
    assert tagged
    _, text = _runbook(config, "roce-sriov-vlans")
    step = text.split("### Lossless RoCE: switches", 1)[1].split("\n### ", 1)[0]
    for t in tagged:
        assert f"VLAN {t['vlan']} (`{t['namespace']}`)" in step
    _, plain = _runbook(example_config("roce-sriov-volcano"), "roce-sriov-volcano")
    assert "tenants[].vlan" not in plain


VERIFY_NCCL = re.compile(
    r"gpufabric verify nccl --stack \S+ --tenant (\S+)(?: --leaf \S+)? --nodes (\d+)"
)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_every_acceptance_run_fits_the_tenants_quota(name: str) -> None:
    """The runbook's widest NCCL test ran `--nodes <gpuNodes.count>` through the first
    tenant, whose GPU quota (and the namespace's ResourceQuota) may hold fewer nodes: that
    job could never start and the gate timed out (lab-roce: 4 nodes through 16 GPUs)."""
    plan, text = _runbook(VARIANTS[name], name)
    runs = VERIFY_NCCL.findall(text)
    per_node = plan.facts.nodes.gpus_per_node
    for tenant, nodes in runs:
        limit = plan.facts.tenants[tenant].gpu_limit
        assert int(nodes) * per_node <= limit, f"{name}: --nodes {nodes} through {tenant}"
        assert int(nodes) <= plan.facts.nodes.count


def test_a_quota_below_the_fleet_is_said_with_the_sweep_that_covers_it() -> None:
    plan, text = _runbook(example_config("lab-roce"), "lab-roce")
    assert plan.facts.tenants["team-vision"].gpu_limit == 16
    assert "--tenant team-vision --nodes 2 --junit nccl.xml" in text
    assert "spans 2 of 4 GPU nodes" in text
    assert "gpufabric verify nccl --stack lab-roce --tenant team-vision --sweep" in text
    config = example_config("lab-roce")
    config["gpufabric:tenants"][0]["gpuBorrowingLimit"] = 16  # the whole fleet, borrowed
    _, whole = _runbook(config, "lab-roce")
    assert "--tenant team-vision --nodes 4 --junit nccl.xml" in whole
    assert "GPU nodes: a larger job" not in whole
    acceptance = whole.split("## Acceptance", 1)[1].split("\n## ", 1)[0]
    assert "may hold" not in acceptance


def test_a_first_tenant_below_two_nodes_gets_no_test_it_cannot_run() -> None:
    config = example_config("lab-roce")
    config["gpufabric:tenants"][0]["gpuQuota"] = 8  # one node's GPUs
    _, text = _runbook(config, "lab-roce")
    acceptance = text.split("## Acceptance", 1)[1].split("\n## ", 1)[0]
    assert "fewer than two\nGPU nodes' 16" in acceptance
    assert "--tenant team-vision --nodes" not in acceptance
    # the pod check runs a job the quota holds: one node
    assert "--tenant team-vision --kind mpijob --nodes 1 > job.yaml" in acceptance


README_JOB = re.compile(
    r"gpufabric (?:job|verify nccl) --stack (\S+) --tenant (\S+)[^\n]*?--nodes (\d+)"
)


def test_readme_job_examples_fit_their_tenants_quota() -> None:
    """README's `gpufabric job --stack prod-ib --tenant eval ... --nodes 4` printed a job of
    32 GPUs for a tenant that may hold 16: pasted into `kubectl apply`, it never starts. Held
    for every page written by hand: README.md and docs/ but the generated runbooks."""
    pages = [REPO / "README.md", *(REPO / "docs").rglob("*.md")]
    text = "\n".join(p.read_text() for p in pages if "runbooks" not in p.parts)
    examples = README_JOB.findall(text)
    assert examples
    for stack, tenant, nodes in examples:
        plan = build_plan(stack, load_stack(stack).model)
        limit = plan.facts.tenants[tenant].gpu_limit
        assert int(nodes) * plan.facts.nodes.gpus_per_node <= limit, (stack, tenant, nodes)


@pytest.mark.parametrize("gang", ["kueue", "volcano"])
def test_a_stack_without_tenants_prints_no_command_that_needs_one(gang: str) -> None:
    """Triage rows printed `gpufabric job --stack S --tenant <tenant> ...` and `kubectl -n
    <tenant> get configmap nccl-env` on a stack with no tenant: `job` refuses every tenant
    (exit 2, "the stack has no tenants") and no nccl-env exists."""
    _, text = _runbook(_tenantless(gang), "lab")
    assert "gpufabric job --stack" not in text
    assert "get configmap nccl-env" not in text
    assert "no tenant, so no `nccl-env` sets it" in text
