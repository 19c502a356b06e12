"""Bootstrap runbooks: the committed docs/runbooks/ are what the templates render; each names
its stack's interfaces, HCAs, versions and thresholds; every command in it is one the
project or a named upstream tool provides (gpufabric commands parse with gpufabric's own
command line)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLE_STACKS, REPO, example_config, sections

from gpufabric.cli import main, parser
from gpufabric.model.config import Roce
from gpufabric.model.stackfile import load_stack, model_from_config
from gpufabric.outputs.runbook import render
from gpufabric.plan.build import build_plan
from gpufabric.plan.pulls import collect
from gpufabric.verify.nccl import rules as nccl_rules

RUNBOOKS = REPO / "docs" / "runbooks"

# First words of the commands a runbook may show, and who provides them.
TOOLS = {
    "gpufabric": "this project",
    "pulumi": "Pulumi CLI",
    "kubectl": "Kubernetes",
    "helm": "Helm",
    "skopeo": "skopeo",
    "git": "git",
    "mlnx_qos": "NVIDIA mlnx-tools (DOCA-OFED)",
    "ibstat": "infiniband-diags",
    "sminfo": "infiniband-diags",
    "ibv_devinfo": "rdma-core",
    "ofed_info": "DOCA-OFED / MLNX_OFED",
    "nv": "NVIDIA Cumulus Linux NVUE",
    "roce": "NVIDIA Onyx",
    "ip": "iproute2",
    "lspci": "pciutils",
    "setpci": "pciutils",
    "lsmod": "kmod",
    "dmesg": "util-linux",
    "nvidia-smi": "NVIDIA driver",
    "modprobe": "kmod",
    "systemctl": "systemd",
    "uname": "coreutils",
    "cat": "coreutils",
    "sort": "coreutils",
    "uniq": "coreutils",
    "echo": "shell",
    "grep": "grep",
    "zgrep": "gzip (grep in compressed files)",
    "ping": "iputils",
    "lldpctl": "lldpd",
    "iblinkinfo": "infiniband-diags",
    "while": "shell",
    "make": "this project's Makefile",
    "awk": "POSIX awk",
    "python3": "Python (in the job's image)",
}
PULUMI = {"up", "preview", "stack", "config", "state", "destroy"}
KUBECTL = {
    "get",
    "describe",
    "logs",
    "rollout",
    "apply",
    "delete",
    "label",
    "kustomize",
    "cordon",
    "uncordon",
    "taint",
    "annotate",
}


def _has_verify(command: str) -> bool:
    """Whether this checkout's CLI has ``gpufabric verify <command>``."""
    try:
        parser().parse_args(["verify", command, "--help"])
    except SystemExit as exc:
        return exc.code == 0
    return True


def runbook(name: str) -> str:
    model = load_stack(name).model
    return render(build_plan(name, model), collect(name, model))


@pytest.mark.parametrize("name", EXAMPLE_STACKS)
def test_committed_runbooks_are_what_the_templates_render(name: str) -> None:
    committed = RUNBOOKS / f"{name}.md"
    assert committed.is_file(), f"docs/runbooks/{name}.md is missing: run `make runbooks`"
    assert committed.read_text() == runbook(name), (
        f"docs/runbooks/{name}.md is out of date: run `make runbooks`"
    )


def test_every_runbook_belongs_to_an_example_stack() -> None:
    assert sorted(p.stem for p in RUNBOOKS.glob("*.md")) == EXAMPLE_STACKS


@pytest.mark.parametrize("name", EXAMPLE_STACKS)
def test_runbook_names_the_stacks_hardware_versions_and_thresholds(name: str) -> None:
    model = load_stack(name).model
    plan = build_plan(name, model)
    text = runbook(name)
    f = model.fabric
    for rail in f.rails:
        assert f"`{rail.netdev}`" in text
        assert f"`{rail.subnet}`" in text
        if rail.hca:
            assert f"`{rail.hca}`" in text
        assert f"ip link show {rail.netdev}" in text
    assert f"MTU {f.mtu}" in text
    for it in plan.items:
        assert f"`{it.id}`" in text  # every item appears in a phase
    for component in ("gpu-operator", "network-operator", model.scheduling.gang):
        assert f"| {component} | {plan.components[component].version} |" in text
    threshold = nccl_rules.expectation(build_plan(name, model).facts, None).threshold_gbps
    assert f"at least {threshold:g} GB/s" in text
    for tenant in model.tenants:
        assert f"`{tenant.namespace}`" in text
    if f.type == "roce":
        r = f.roce or Roce()
        pfc = ["0"] * 8
        pfc[r.pfcPriority] = "1"
        for rail in f.rails:
            assert f"mlnx_qos -i {rail.netdev} --trust dscp --pfc {','.join(pfc)}" in text
        assert f"DSCP {r.dscp}" in text
        tc = r.trafficClass if r.trafficClass is not None else r.dscp * 4
        assert f"traffic class {tc}" in text
    else:
        assert "sminfo" in text
        if f.rdma == "sriov":
            assert "virt_enabled 2" in text


def code_blocks(text: str) -> list[str]:
    """Command lines of the ```sh blocks, continuation lines joined."""
    lines: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        block = block.replace("\\\n", " ")
        lines += [line.strip() for line in block.splitlines() if line.strip()]
    return lines


def inline_commands(text: str) -> list[str]:
    """Inline code spans that read as commands: a lowercase word, then arguments."""
    outside = re.sub(r"```.*?```", "", text, flags=re.S)
    spans = re.findall(r"`([^`\n]+)`", outside)
    return [s for s in spans if re.match(r"^[a-z][a-z0-9_]*(?:\s|$)", s) and " " in s]


def first_words(command: str) -> list[list[str]]:
    """Each pipeline stage's words (redirections and placeholders kept as words)."""
    stages = []
    for part in re.split(r"\s[|;]\s|\s&&\s", command):
        part = part.split(" > ")[0].split(" < ")[0]
        stages.append(shlex.split(part))
    return stages


@pytest.mark.parametrize("name", EXAMPLE_STACKS)
def test_runbook_commands_come_from_the_project_or_named_tools(name: str) -> None:
    text = runbook(name)
    commands = code_blocks(text) + inline_commands(text)
    assert len(commands) > 20
    seen: set[str] = set()
    for command in commands:
        for words in first_words(command):
            if not words:
                continue
            tool = words[0]
            if tool in ("do", "done") or tool.startswith(("src", "dst")):
                continue
            assert tool in TOOLS, f"{name}: `{command}` uses {tool!r}, not a known tool"
            seen.add(tool)
            if tool == "pulumi":
                assert words[1] in PULUMI, command
            if tool == "kubectl":
                verb = words[3] if words[1] == "-n" else words[1]
                assert verb in KUBECTL, command
            if tool == "gpufabric":
                if "<" in command and "kubectl://" not in command:
                    continue  # a placeholder the reader fills in
                if words[1:3] == ["verify", "storage"] and not _has_verify("storage"):
                    continue  # the storage gate's command lands with `gpufabric verify storage`
                args = parser().parse_args(words[1:])
                assert args.stack == name, f"{command}: not for stack {name}"
    assert {"gpufabric", "pulumi", "kubectl"} <= seen


def test_pulumi_phases_follow_the_plan_and_pull_volcano_forward() -> None:
    text = runbook("roce-sriov-volcano")
    phases = re.findall(r"^### Phase (\d): (.+) \(`(\w+)`\)$", text, re.M)
    assert [p[2] for p in phases] == [
        "gpu",
        "network",
        "training",
        "scheduling",
        "tenants",
        "monitoring",
    ]
    training = text.split("### Phase 3")[1].split("### Phase 4")[0]
    # the job operators run with Volcano's gang flags: Volcano is applied with them
    assert "`scheduling/volcano`: Helm chart `volcano` 1.15.1" in training
    assert "(from the scheduling layer, needed first)" in training
    assert (
        "--target 'urn:pulumi:roce-sriov-volcano::gpufabric::**::roce-sriov-scheduling-scheduling/volcano*'"
        in training
    )
    assert (
        "gpufabric verify cluster --stack roce-sriov-volcano --layers gpu,network,training"
        in training
    )


def test_peermem_stack_covers_the_driver_ordering_pitfall(tmp_path: Path) -> None:
    config = example_config("lab-roce")
    config["gpufabric:fabric"]["gpuDirect"] = "peermem"
    config["gpufabric:fabric"]["nicDriver"] = {"source": "operator"}
    model = model_from_config(sections(config), "t", from_file=True)
    text = render(build_plan("lab-roce", model), collect("lab-roce", model))
    assert "nvidia-peermem CrashLoops" in text
    assert "the GPU Operator is installed only after the NicClusterPolicy is ready" in text
    assert "this stack runs it from the Network Operator" in text  # NFD moves with the order
    assert "doca3.4.1-26.04-1.1.0.0-1" in text  # the DOCA driver of Network Operator 26.4.1


def test_mirrored_runbook_pulls_from_the_mirror() -> None:
    text = runbook("prod-ib")
    assert "## 0. Fill the mirror" in text
    assert "gpufabric images --stack prod-ib --format refs > images.txt" in text
    assert (
        "| gpu-operator | v26.7.0 | chart `gpu-operator` from `oci://harbor.prod-ib.example.internal/charts/nvidia` |"
        in text
    )
    assert "helm.ngc.nvidia.com" not in text.split("## 0. Fill the mirror")[0]
    assert "## 0. Fill the mirror" not in runbook("lab-roce")


def test_runbook_cli_prints_and_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runbook", "--stack", "lab-roce"]) == 0
    assert capsys.readouterr().out == runbook("lab-roce")
    out = tmp_path / "rb" / "lab.md"
    assert main(["runbook", "--stack", "lab-roce", "--out", str(out)]) == 0
    assert out.read_text() == runbook("lab-roce")
    assert main(["runbook", "--stack", "no-such-stack"]) == 2


def _runbook_of(config: dict[str, Any], name: str) -> str:
    model = model_from_config(sections(config), "t", from_file=True)
    return render(build_plan(name, model), collect(name, model))


def test_topology_labels_step_prints_the_exact_commands_from_the_node_table() -> None:
    config = example_config("prod-ib")
    config["gpufabric:scheduling"]["nodeTopology"] = {
        "gpu-node-0": {"topology.gpufabric.io/block": "b1", "topology.gpufabric.io/leaf": "l1"},
        "gpu-node-1": {"topology.gpufabric.io/block": "b1", "topology.gpufabric.io/leaf": "l2"},
    }
    text = _runbook_of(config, "prod-ib")
    assert "### Topology labels" in text
    assert (
        "kubectl label node gpu-node-0 topology.gpufabric.io/block=b1 "
        "topology.gpufabric.io/leaf=l1 --overwrite"
    ) in text
    assert "kubectl label node gpu-node-1 topology.gpufabric.io/block=b1" in text


def test_topology_step_without_a_table_says_how_to_find_the_switches() -> None:
    text = runbook("prod-ib")
    assert "iblinkinfo" in text
    assert "kubectl label node <node> topology.gpufabric.io/block=<block>" in text
    assert "scheduling.nodeTopology" in text
    assert "### Topology labels" not in runbook("lab-roce")  # Kueue at the node level only


def test_routed_rails_get_their_switch_prerequisite() -> None:
    text = runbook("roce-sriov-volcano")
    assert "### Routed rails: leaf switches" in text
    assert "| `rail0` | `172.20.0.0/21` | `172.20.0.1` |" in text
    assert "### Routed rails" not in runbook("lab-roce")


def test_sriov_triage_does_not_promise_an_hca_list_the_jobs_never_set() -> None:
    text = runbook("roce-sriov-volcano")
    row = next(ln for ln in text.splitlines() if "Bootstrap : no socket interface" in ln)
    assert "NCCL_IB_HCA it sets" not in row
    assert "mlx5_0" not in row
    assert "sets no NCCL_IB_HCA" in row


def test_host_driver_stack_waits_for_no_driver_pods_and_triages_on_the_host() -> None:
    """DGX OS: the hosts bring the GPU driver, the NIC driver and nvidia-peermem."""
    model = load_stack("dgx-h100").model
    assert model.gpuOperator.driver.enabled is False
    assert model.fabric.gpuDirect == "peermem"
    text = runbook("dgx-h100")
    phase1 = text.split("### Phase 1")[1].split("### Phase 2")[0]
    assert "shows the driver," not in phase1
    assert (
        "there are no driver pods: the hosts run the NVIDIA driver and load nvidia-peermem"
        in phase1
    )
    assert "nvidia-driver-daemonset" not in text
    assert "nvidia-peermem-ctr" not in text
    assert "modprobe nvidia-peermem" in text.split("## Triage")[1]
    # an operator-managed driver keeps its pods and their triage
    lab = runbook("prod-ib")
    assert "shows the driver, toolkit" in lab.split("### Phase 1")[1]


def test_trainer_only_stack_runbook_runs_only_kinds_it_installs(
    write_stack: Callable[..., Path],
) -> None:
    """No MPI Operator: the acceptance test runs as a TrainJob (through gpufabric's
    nccl-tests runtime), and no command asks for an MPIJob (`job --kind mpijob` would exit 2)."""
    config = example_config("lab-roce")
    config["gpufabric:training"] = {
        "mpiOperator": False,
        "trainer": {"enabled": True, "runtimes": ["torch-distributed"]},
    }
    text = _runbook_of(config, "lab-roce")
    assert "--kind mpijob" not in text
    acceptance = text.split("## Acceptance")[1].split("## Triage")[0]
    assert "gpufabric verify nccl --stack lab-roce --tenant team-vision --nodes 2" in acceptance
    assert "`gpufabric-nccl-tests` ClusterTrainingRuntime" in acceptance
    assert "gpufabric job --stack lab-roce --tenant team-vision --kind trainjob --nodes 2" in text
    for command in code_blocks(text) + inline_commands(text):
        if command.startswith("gpufabric job") or (
            command.startswith("gpufabric verify nccl") and "--dry-run" in command
        ):
            words = shlex.split(command.split(" > ")[0])
            words[words.index("--stack") + 1] = str(write_stack(config, "lab-roce"))
            assert main(words[1:]) == 0, command


def test_pytorchjob_only_stack_runbook_accepts_it_with_a_pytorchjob(
    write_stack: Callable[..., Path],
) -> None:
    """Only the Training Operator: the runbook said the stack had no acceptance test; now
    verify nccl runs it as a PyTorchJob, and the triage names that job's pods and Secret.
    Every gpufabric command it prints for review runs."""
    config = example_config("lab-roce")
    config["gpufabric:training"] = {
        "mpiOperator": False,
        "trainingOperator": {"schemes": ["pytorchjob"]},
    }
    text = _runbook_of(config, "lab-roce")
    acceptance = text.split("## Acceptance")[1].split("## Triage")[0]
    assert "gpufabric verify nccl --stack lab-roce --tenant team-vision --nodes 2" in acceptance
    assert "the test runs as a PyTorchJob" in acceptance
    assert "--kind pytorchjob" in acceptance
    assert "--kind mpijob" not in text
    triage = text.split("## Triage")[1]
    assert "training.kubeflow.org/replica-type=master" in triage
    assert "gpufabric-nccl-ssh" in triage
    for command in code_blocks(text) + inline_commands(text):
        if command.startswith("gpufabric job") or (
            command.startswith("gpufabric verify nccl") and "--dry-run" in command
        ):
            words = shlex.split(command.split(" > ")[0])
            words[words.index("--stack") + 1] = str(write_stack(config, "lab-roce"))
            assert main(words[1:]) == 0, command


def test_a_stack_without_an_acceptance_kind_runbook_says_what_accepts_it() -> None:
    """Only JAXJobs: no kind verify nccl runs as, so no verify nccl command (it would exit
    2); the runbook names the options that give one (it said the stack installed no job
    operator)."""
    config = example_config("lab-roce")
    config["gpufabric:training"] = {
        "mpiOperator": False,
        "trainingOperator": {"schemes": ["jaxjob"]},
    }
    text = _runbook_of(config, "lab-roce")
    acceptance = text.split("## Acceptance")[1].split("## Triage")[0]
    assert "gpufabric verify nccl" not in acceptance
    assert "`training.mpiOperator: true` (MPIJob)" in acceptance
    assert "`pytorchjob` to\n`training.trainingOperator.schemes` (PyTorchJob)" in acceptance
    assert "(jaxjob only)" in acceptance
    assert "installs no job operator" not in acceptance  # it said so, of the Training Operator


def test_a_leaf_with_one_gpu_node_gets_no_acceptance_run_of_its_own() -> None:
    """verify nccl refuses --nodes 1 (no fabric between nodes): the runbook prints a per-leaf
    acceptance run only for leaves with two nodes or more."""
    import copy

    config = copy.deepcopy(example_config("routed-b200"))
    table = config["gpufabric:scheduling"]["nodeTopology"]
    label = next(iter(table["gpu-node-0"]))
    before = _runbook_of(copy.deepcopy(config), "routed-b200")
    assert "--leaf leaf-02" in before
    for node, labels in table.items():  # every node under leaf-01 but one
        if labels[label] == "leaf-02" and node != "gpu-node-8":
            labels[label] = "leaf-01"
    text = _runbook_of(config, "routed-b200")
    assert "--leaf leaf-01" in text
    assert "--leaf leaf-02" not in text
    assert "--nodes 1 " not in text


OFFLINE = ("validate", "plan", "images", "runbook", "job")
"""gpufabric's commands that read only the stack (no cluster): the runbook's run here."""


@pytest.mark.parametrize("given", ["stacks-dir", "path"])
def test_printed_commands_find_a_stack_given_by_path_or_stacks_dir(
    given: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A stack outside the project's stacks/ (a file given by path, or a name in
    --stacks-dir): the runbook names its file, and the gpufabric commands it prints find
    that stack the same way (a bare ``--stack edge`` would find no such stack)."""
    (tmp_path / "envs").mkdir()
    text = (REPO / "stacks" / "Pulumi.kind-dev.yaml").read_text()
    (tmp_path / "envs" / "Pulumi.edge.yaml").write_text(text)
    monkeypatch.chdir(tmp_path)
    found = ["--stacks-dir", "envs"] if given == "stacks-dir" else []
    stack = "edge" if given == "stacks-dir" else "envs/Pulumi.edge.yaml"
    assert main([*found, "runbook", "--stack", stack]) == 0
    runbook = capsys.readouterr().out
    assert "from `envs/Pulumi.edge.yaml`" in runbook
    ran = 0
    for command in code_blocks(runbook) + inline_commands(runbook):
        words = first_words(command)[0]
        if words[0] != "gpufabric" or not set(OFFLINE) & set(words):
            continue
        assert words[1 : 1 + len(found)] == found, command
        assert words[words.index("--stack") + 1] == stack, command
        assert main(words[1:]) == 0, (command, capsys.readouterr().err)
        capsys.readouterr()
        ran += 1
    assert ran >= 5


def test_a_fleet_runbook_has_its_host_checks_acceptance_and_sweep_per_pool() -> None:
    text = runbook("fleet-mixed")
    h100, l40s = text.split("### Pool `l40s`", 1)[0], text.split("### Pool `l40s`", 1)[1]
    assert "### Pool `h100`" in h100
    # each pool's nodes listed by its own selector, with its own GPUs
    assert "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3 -o" in text
    assert "lists 16 nodes with 8 GPUs each" in text
    assert "lists 8 nodes with 4 GPUs each" in text
    # host prerequisites by the pool's layout: the RoCE pool's lossless class on its netdevs
    assert "mlnx_qos -i ens1f0np0 --trust dscp" in text
    assert "ip link show ibp24s0" in text
    # acceptance and sweep per pool, through a tenant with a quota in it, naming the pool
    assert (
        "gpufabric verify nccl --stack fleet-mixed --tenant llm-pretrain --pool h100 --nodes 2\n"
        in text
    )
    assert (
        "gpufabric verify nccl --stack fleet-mixed --tenant inference-eval --pool l40s "
        "--nodes 8 --junit nccl-l40s.xml" in text
    )
    assert "--pool l40s --tenant inference-eval --sweep --junit sweep-l40s.xml" in text
    assert "at least 22.5 GB/s" in l40s
    assert "at least 360 GB/s" in text
