"""Every command of every generated runbook runs: each parses (``bash -n``, ``shellcheck``),
every kubectl command runs with the real kubectl against the fake API server seeded with the
stack's objects and a healthy cluster (and each gate the runbook states shows what a healthy
cluster has), and gpufabric's own commands run with the real command line: for two stacks
(one per queueing authority) each in a fresh interpreter through ``bash -c`` as a user runs
it, for the others through ``gpufabric.cli.main`` in this process, with the same words,
environment, working directory and ``> file`` redirection (a line using any other shell
construct still runs through bash).

The stacks: the shipped examples and the golden matrix's variants (every fabric x NIC mode x
scheduler the model accepts). Without ../shared's kubectl or without shellcheck the parts
that need them skip.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import example_config
from conformance.upstream import LOCAL_BASES, UPSTREAM
from conftest import REPO, SHARED, sections
from fake_kube import FakeKube, PyTorchJobOperator
from golden import variants
from test_runbook import code_blocks, inline_commands

from gpufabric.model.stackfile import model_from_config
from gpufabric.model.versions import load_catalog
from gpufabric.outputs.runbook import render
from gpufabric.plan.build import Plan, build_plan
from gpufabric.plan.facts import PoolFacts
from gpufabric.plan.items import K8sObject
from gpufabric.plan.pulls import collect
from gpufabric.support import yamlcodec

KUBECTL = SHARED / "upstream" / "bin" / "kubectl"
STACKS = {name: cfg for name, cfg in variants().items() if name != "stress"}
TRAINER_ONLY = {
    "mpiOperator": False,
    "trainer": {"enabled": True, "runtimes": ["torch-distributed"]},
}
STACKS["trainer-only"] = {**STACKS["lab-roce"], "gpufabric:training": TRAINER_ONLY}
# Only the Training Operator (the acceptance test runs as a PyTorchJob),
# its manifests from a plain file mirror (the kustomize git base rendered into one file).
STACKS["pytorch-only-mirrored"] = {
    **STACKS["lab-roce"],
    "gpufabric:training": {"mpiOperator": False, "trainingOperator": {"schemes": ["pytorchjob"]}},
    "gpufabric:sources": {"manifests": "https://files.example.internal/upstream"},
}
# A job operator gpufabric job cannot write for (JAXJob only): no printed command may name
# a kind the stack lacks.
STACKS["jax-only"] = {
    **STACKS["lab-roce"],
    "gpufabric:training": {"mpiOperator": False, "trainingOperator": {"schemes": ["jaxjob"]}},
}
# A fleet (two node pools on two fabrics): per pool its node checks, host prerequisites,
# acceptance and sweep, each naming its pool (one fleet: its commands are many and slow).
STACKS["fleet-mixed"] = example_config("fleet-mixed")
COMPONENTS = load_catalog().components
PLACEHOLDER = re.compile(r"<([a-z][a-z0-9 _-]*)>")
COUNTS: dict[str, int] = {}


@functools.cache
def _runbook(name: str) -> tuple[Plan, str]:
    """The stack's plan and runbook, once per process (three tests read them; none changes
    the plan: the fake cluster gets copies of its objects)."""
    model = model_from_config(sections(STACKS[name]), name, from_file=True)
    plan = build_plan(name, model)
    return plan, render(plan, collect(name, model))


def commands(text: str) -> list[str]:
    return code_blocks(text) + inline_commands(text)


def filled(command: str, plan: Plan) -> str:
    """A command with the reader's placeholders filled in as a reader would."""
    tenant = next(iter(plan.facts.tenants), "default")
    values = {"node": "gpu-node-0", "tenant": tenant, "pod": f"{tenant}-mpijob-worker-0"}
    return PLACEHOLDER.sub(lambda m: values.get(m.group(1), "x"), command)


@pytest.mark.parametrize("name", sorted(STACKS))
def test_every_runbook_command_parses(name: str) -> None:
    plan, text = _runbook(name)
    for command in commands(text):
        line = filled(command, plan)
        done = subprocess.run(["bash", "-n", "-c", line], capture_output=True, text=True)
        assert done.returncode == 0, f"{name}: `{command}` does not parse: {done.stderr}"


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
@pytest.mark.parametrize("name", sorted(STACKS))
def test_every_runbook_command_passes_shellcheck(name: str, tmp_path: Path) -> None:
    plan, text = _runbook(name)
    script = tmp_path / "runbook.sh"
    lines = [filled(c, plan) for c in commands(text)]
    script.write_text("#!/bin/bash\n" + "\n".join(lines) + "\n")
    done = subprocess.run(
        ["shellcheck", "--shell=bash", "--severity=info", "-f", "gcc", str(script)],
        capture_output=True,
        text=True,
    )
    problems = [
        f"{lines[int(m.group(1)) - 2]}\n    {m.group(2)}"
        for m in re.finditer(r"^[^:]+:(\d+):\d+: (.*)$", done.stdout, re.M)
    ]
    assert not problems, f"{name}:\n" + "\n".join(problems)


# ------------------------------------------------------------------ the healthy cluster


@functools.cache
def _crds() -> list[dict[str, Any]]:
    out = []
    pending = sorted((SHARED / "upstream" / "crds-pending").glob("*/*.yaml"))
    for path in [*sorted((SHARED / "crds").glob("*/*.yaml")), *pending]:
        for doc in yamlcodec.load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                out.append(doc)
    # One CRD per name, as on a healthy cluster: the MPI Operator's mpijobs (v2beta1), not
    # the Training Operator's v1 copy the stacks never install.
    return list({crd["metadata"]["name"]: crd for crd in reversed(out)}.values())


def _ready_deployment(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "generation": 1},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}},
        "status": {
            "observedGeneration": 1,
            "replicas": 1,
            "updatedReplicas": 1,
            "readyReplicas": 1,
            "availableReplicas": 1,
        },
    }


def _monitoring(plan: Plan) -> list[dict[str, Any]]:
    """What the GPU Operator chart and the node-problem-detector overlay create."""
    m, comps = plan.facts.monitoring, plan.components
    if not m.enabled:
        return []
    objs: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": m.dcgm_config, "namespace": comps["gpu-operator"].namespace},
            "data": {"dcgm-metrics.csv": m.dcgm_counters_csv},
        }
    ]
    if m.node_problem_detector:
        n = plan.facts.nodes.count
        objs.append(
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": {
                    "name": "node-problem-detector",
                    "namespace": comps["node-problem-detector"].namespace,
                    "generation": 1,
                },
                "spec": {
                    "selector": {"matchLabels": {"app": "node-problem-detector"}},
                    "updateStrategy": {"type": "RollingUpdate"},  # the API server's default
                },
                "status": {
                    "observedGeneration": 1,
                    "desiredNumberScheduled": n,
                    "currentNumberScheduled": n,
                    "updatedNumberScheduled": n,
                    "numberAvailable": n,
                    "numberReady": n,
                },
            }
        )
    return objs


def _ready_daemonset(name: str, namespace: str, nodes: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace, "generation": 1},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "updateStrategy": {"type": "RollingUpdate"},
        },
        "status": {
            "observedGeneration": 1,
            "desiredNumberScheduled": nodes,
            "currentNumberScheduled": nodes,
            "updatedNumberScheduled": nodes,
            "numberReady": nodes,
            "numberAvailable": nodes,
        },
    }


def _with_status(body: dict[str, Any]) -> dict[str, Any]:
    """What the operators report for a healthy object of the stack."""
    obj = dict(body)
    kind = obj["kind"]
    if kind in ("NicClusterPolicy", "NicNodePolicy"):
        obj["status"] = {"state": "ready"}
    elif kind == "ClusterQueue":
        obj["status"] = {"conditions": [{"type": "Active", "status": "True"}]}
    elif kind == "Queue":
        obj["status"] = {"state": "Open"}
    return obj


def _gpu_nodes(plan: Plan) -> list[tuple[PoolFacts, str]]:
    """Every GPU node of every pool (gpu-node-0 ... across the pools), with its pool."""
    pools = [p for p in plan.facts.pools for _ in range(p.nodes.count)]
    return [(pool, f"gpu-node-{i}") for i, pool in enumerate(pools)]


def healthy_cluster(plan: Plan) -> list[dict[str, Any]]:
    """The stack's own objects as its operators leave them, and what the charts and
    upstream manifests create on a healthy cluster (GPU nodes, operators, CRDs)."""
    facts, comps = plan.facts, plan.components
    objs = [
        _with_status(copy.deepcopy(dict(it.payload.body)))
        for it in plan.items
        if isinstance(it.payload, K8sObject)
    ]
    for pool, node in _gpu_nodes(plan):
        allocatable = {"nvidia.com/gpu": str(pool.nodes.gpus_per_node)}
        allocatable |= {r: str(n) for r, n in pool.fabric.rdma_resources.items()}
        labels = {**pool.nodes.selector, "kubernetes.io/hostname": node}
        if pool.nodes.nvlink is not None:  # GFD's label: the tray's rack
            rack = int(node.rsplit("-", 1)[1]) // pool.nodes.nvlink.trays_per_domain
            labels[pool.nodes.nvlink.clique_label] = f"5d2b7e1c-0a4f-4b8e-9c1d-{rack:012d}.32766"
        objs.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": node, "labels": labels},
                "status": {"allocatable": allocatable, "capacity": allocatable},
            }
        )
        objs.append(
            {
                "apiVersion": "sriovnetwork.openshift.io/v1",
                "kind": "SriovNetworkNodeState",
                "metadata": {"name": node, "namespace": comps["network-operator"].namespace},
                "status": {"syncStatus": "Succeeded"},
            }
        )
    objs.append(
        {
            "apiVersion": "nvidia.com/v1",
            "kind": "ClusterPolicy",
            "metadata": {"name": "cluster-policy"},
            "status": {"state": "ready"},
        }
    )
    for component, deployment in (
        ("mpi-operator", "mpi-operator"),
        ("training-operator", "training-operator"),
        ("kueue", "kueue-controller-manager"),
    ):
        if component in comps:
            objs.append(_ready_deployment(deployment, comps[component].namespace))
    if "kueue" in comps:
        objs.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "kueue-manager-config", "namespace": comps["kueue"].namespace},
                "data": {"controller_manager_config.yaml": "integrations: {}"},
            }
        )
    objs += _monitoring(plan)
    objs += _compute_domains(plan)
    for claim in (c for t in facts.storage for c in t.claims):
        for obj in objs:
            meta = obj.get("metadata", {})
            if obj["kind"] == "PersistentVolumeClaim" and (
                meta.get("namespace"),
                meta.get("name"),
            ) == (claim.namespace, claim.name):
                obj["status"] = {"phase": "Bound"}
    for backend in facts.storage_backends:
        if backend.class_parameters is None:  # the site's own class, as the site made it
            objs.append(
                {
                    "apiVersion": "storage.k8s.io/v1",
                    "kind": "StorageClass",
                    "metadata": {"name": backend.storage_class},
                    "provisioner": backend.provisioner or "example.csi.vendor.io",
                }
            )
        if backend.driver is not None:
            ns = comps[backend.driver].namespace
            objs.append(_ready_deployment("csi-nfs-controller", ns))
            objs.append(_ready_daemonset("csi-nfs-node", ns, facts.nodes.count))
    for runtime in facts.operators.trainer_runtimes:
        objs.append(
            {
                "apiVersion": "trainer.kubeflow.org/v1alpha1",
                "kind": "ClusterTrainingRuntime",
                "metadata": {"name": runtime},
            }
        )
    return objs


def _compute_domains(plan: Plan) -> list[dict[str, Any]]:
    """On a stack with NVL72 pools: the DRA driver's pods, and the acceptance run's
    ComputeDomain (kept with --keep) Ready with a Ready IMEX daemon per tray."""
    if not plan.facts.nvl72_pools:
        return []
    ns = plan.components["dra-driver-nvidia-gpu"].namespace
    tenant = next(iter(plan.facts.tenants), "default")
    nodes = [n for p, n in _gpu_nodes(plan) if p.nodes.nvlink is not None][:2]
    return [
        _ready_deployment("dra-driver-nvidia-gpu-controller", ns),
        _ready_daemonset("dra-driver-nvidia-gpu-kubelet-plugin", ns, len(nodes)),
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomain",
            "metadata": {"name": "gpufabric-nccl-imex", "namespace": tenant},
            "spec": {
                "numNodes": len(nodes),
                "channel": {"resourceClaimTemplate": {"name": "gpufabric-nccl-imex-channel"}},
            },
            "status": {
                "status": "Ready",
                "nodes": [
                    {
                        "name": n,
                        "cliqueID": "32766",
                        "index": i,
                        "ipAddress": f"10.32.0.{i + 1}",
                        "status": "Ready",
                    }
                    for i, n in enumerate(nodes)
                ],
            },
        },
    ]


# ------------------------------------------------------------------ running the commands


def gates(text: str) -> dict[str, str]:
    """Inline commands the runbook says print an exact value on a healthy cluster."""
    return dict(re.findall(r"`(kubectl [^`]+)` prints `([^`]+)`", text))


def _gpufabric(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    code = "import sys; from gpufabric.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _run(line: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


SUBPROCESS_STACKS = frozenset({"lab-roce", "roce-sriov-volcano"})
"""Stacks whose gpufabric lines each run in a fresh interpreter through bash and the
``gpufabric`` program on PATH (one per queueing authority); the others run them in-process."""

SIMPLE_GPUFABRIC = re.compile(r"(gpufabric [-\w./:=@,+' ]+?)(?: > ([\w.-]+))?")
"""A gpufabric line whose only shell syntax is single quotes and one trailing ``> file``: no
expansion, substitution, glob, pipe or list, so its words are shlex's and its output goes
to that file, as bash would run it. Any other line runs through bash."""


def test_lines_run_in_process_get_the_words_and_file_bash_gives_them(tmp_path: Path) -> None:
    """What the in-process runner reads of a line is what bash does with it: the same
    words (printed by bash's own printf) and the same file written."""
    lines = {
        filled(c, plan)
        for name in sorted(STACKS)
        for plan, text in [_runbook(name)]
        for c in commands(text)
    }
    simple = [m for m in map(SIMPLE_GPUFABRIC.fullmatch, sorted(lines)) if m is not None]
    assert len(simple) >= 5 * len(STACKS)
    for m in simple:
        words = shlex.split(m.group(1))
        said = subprocess.run(
            ["bash", "-c", "printf '%s\\0' " + m.group(0).split(" ", 1)[1]],
            cwd=tmp_path, capture_output=True, text=True, check=True,
        )  # fmt: skip
        target = tmp_path / m.group(2) if m.group(2) else None
        printed = target.read_text() if target else said.stdout
        assert printed.split("\0")[:-1] == words[1:], m.group(0)
        if target:
            target.unlink()


def _in_process(
    line: str, cwd: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> subprocess.CompletedProcess[str] | None:
    """The line run by ``gpufabric.cli.main`` in this process, with the environment and
    working directory bash would give it; None when the line needs a shell."""
    from kubernetes.config import kube_config

    from gpufabric.cli import main

    m = SIMPLE_GPUFABRIC.fullmatch(line)
    if m is None:
        return None
    words, target = shlex.split(m.group(1)), m.group(2)
    out, err = io.StringIO(), io.StringIO()
    with monkeypatch.context() as patch, contextlib.ExitStack() as stack:
        patch.chdir(cwd)
        for key in set(os.environ) - set(env):
            patch.delenv(key)
        for key, value in env.items():
            patch.setenv(key, value)
        # the Kubernetes client reads KUBECONFIG once, when it is imported
        default = env.get("KUBECONFIG", "~/.kube/config")
        patch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", default)
        # bash opens (truncates) the file before the command runs, and writes to it even
        # when the command fails
        sink = stack.enter_context((cwd / target).open("w")) if target else out
        stack.enter_context(contextlib.redirect_stdout(sink))
        stack.enter_context(contextlib.redirect_stderr(err))
        try:
            code = main(words[1:])
        except SystemExit as exc:  # argparse
            code = exc.code if isinstance(exc.code, int) else 1
    return subprocess.CompletedProcess(words, code, out.getvalue(), err.getvalue())


def _workdir(tmp_path: Path, name: str) -> tuple[Path, dict[str, str]]:
    (tmp_path / "stacks").mkdir()
    (tmp_path / "Pulumi.yaml").write_text((REPO / "Pulumi.yaml").read_text())
    (tmp_path / "examples").symlink_to(REPO / "examples")  # what --entrypoint ships
    stack = tmp_path / "stacks" / f"Pulumi.{name}.yaml"
    stack.write_text(yaml.safe_dump({"config": STACKS[name]}, sort_keys=True))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    shim = bindir / "gpufabric"
    shim.write_text(
        f"#!/bin/sh\nexec {sys.executable} -c "
        "'import sys; from gpufabric.cli import main; sys.exit(main(sys.argv[1:]))' \"$@\"\n"
    )
    shim.chmod(0o755)
    (bindir / "kubectl").symlink_to(KUBECTL)
    env = dict(os.environ)
    env["PATH"] = f"{bindir}{os.pathsep}{env['PATH']}"
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    # kubectl caches discovery under $HOME/.kube: keep it in the test's directory, never in
    # the checkout or the user's home.
    env["HOME"] = str(tmp_path / "home")
    env["KUBECACHEDIR"] = str(tmp_path / "home" / ".kube" / "cache")
    return tmp_path, env


RUNNABLE_GPUFABRIC = re.compile(
    r"^gpufabric (validate|plan|images|job|runbook) |^gpufabric verify nccl .*--dry-run"
    r"|^gpufabric health .*--dry-run"
)


@pytest.mark.skipif(not KUBECTL.is_file(), reason="../shared/upstream/bin/kubectl is absent")
@pytest.mark.parametrize("name", sorted(STACKS))
def test_every_kubectl_and_gpufabric_command_runs_on_a_healthy_cluster(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan, text = _runbook(name)
    cwd, env = _workdir(tmp_path, name)
    with FakeKube() as fake:
        fake.anonymous = True
        PyTorchJobOperator("").install(fake)  # a PyTorchJob the runbook applies gets pods
        for crd in _crds():
            fake.register_crd(crd)
            fake.add(crd)
        fake.add(*healthy_cluster(plan))
        for _, obj in plan.objects():  # gpufabric's own CRDs (NodeAcceptance), as applied
            if obj.kind == "CustomResourceDefinition":
                fake.register_crd(copy.deepcopy(dict(obj.body)))
        env["KUBECONFIG"] = str(_with_stack_context(fake.kubeconfig(tmp_path), plan))
        ran = in_process = 0
        expected = gates(text)
        for command in commands(text):
            line = filled(command, plan)
            if line.startswith("kubectl ") or RUNNABLE_GPUFABRIC.match(line):
                done = None
                if line.startswith("gpufabric ") and name not in SUBPROCESS_STACKS:
                    done = _in_process(line, cwd, env, monkeypatch)
                    in_process += done is not None
                if done is None:
                    done = _run(_against_the_fake(line), cwd, env)
                ran += 1
                assert done.returncode == 0, (
                    f"{name}: `{line}` exit {done.returncode}: {done.stderr}"
                )
                if command in expected:
                    assert done.stdout.strip() == expected[command], (
                        f"{name}: `{line}` printed {done.stdout!r}, the runbook says "
                        f"{expected[command]!r}"
                    )
                _check_listing_gate(name, text, command, done.stdout, plan)
        COUNTS[name] = ran
    assert ran >= 15, f"{name}: only {ran} commands ran"
    if name not in SUBPROCESS_STACKS:
        assert in_process >= 3, f"{name}: only {in_process} gpufabric commands ran in-process"
    print(f"{name}: {ran} commands ran, {in_process} of them in-process")


def _with_stack_context(kubeconfig: Path, plan: Plan) -> Path:
    """The kubeconfig a user of the stack has: also a context named as the stack's
    cluster.kubeContext (which the gpufabric commands that ask the cluster use)."""
    context = plan.facts.kube_context
    if context:
        cfg = yaml.safe_load(kubeconfig.read_text())
        cfg["contexts"].append({"name": context, "context": cfg["contexts"][0]["context"]})
        kubeconfig.write_text(yaml.safe_dump(cfg))
    return kubeconfig


def _against_the_fake(line: str) -> str:
    """The fake API server serves no OpenAPI v2 document, which kubectl's client-side
    validation of a create falls back to; the server side is the fake's own. A kustomize
    remote base (the air-gap step that renders it for a file mirror) is read from
    ../shared's copy at the same tag: the tests reach no network."""
    if line.startswith("kubectl kustomize "):
        return _local_base(line)
    return line + " --validate=false" if line.startswith("kubectl apply ") else line


def _local_base(line: str) -> str:
    words = shlex.split(line.split(" > ")[0])
    remote = words[2]
    for component, local in LOCAL_BASES.items():
        if remote == COMPONENTS[component].upstream_manifest_url:
            return line.replace(shlex.quote(remote), shlex.quote(str(UPSTREAM / "src" / local)))
    raise AssertionError(f"no local copy of {remote}")


def _check_listing_gate(name: str, text: str, command: str, out: str, plan: Plan) -> None:
    m = re.search(re.escape(f"`{command}`") + r" lists (\d+) nodes with (\d+) GPUs each", text)
    if m:
        rows = [ln.split() for ln in out.strip().splitlines()[1:]]
        assert len(rows) == int(m.group(1)), f"{name}: `{command}` printed {out!r}"
        assert all(r[1] == m.group(2) for r in rows), f"{name}: `{command}` printed {out!r}"
    if "sriovnetworknodestates" in command and "custom-columns" in command:
        rows = [ln.split() for ln in out.strip().splitlines()[1:]]
        assert len(rows) == plan.facts.nodes.count
        assert all(r[1] == "Succeeded" for r in rows), f"{name}: `{command}` printed {out!r}"


# ------------------------------------------------------------------ hostile values

HOSTILE = "x`$(touch PWNED)`|<B>\n## y"
"""A value that would run a command in a shell line, end a code span, a table cell and a
line, and start a heading: the model refuses such values; the runbook must be safe anyway."""


def _hostile_plan() -> tuple[Plan, str]:
    """lab-roce with hostile names in its facts, past the model's validation."""
    model = model_from_config(sections(STACKS["lab-roce"]), "lab-roce", from_file=True)
    f = model.fabric
    model = model.model_copy(
        update={
            "tenants": [
                model.tenants[0].model_copy(update={"namespace": HOSTILE}),
                *model.tenants[1:],
            ],
            "fabric": f.model_copy(
                update={"rails": [f.rails[0].model_copy(update={"netdev": HOSTILE}), *f.rails[1:]]}
            ),
            "cluster": model.cluster.model_copy(update={"kubeContext": HOSTILE}),
            "gpuNodes": model.gpuNodes.model_copy(update={"gpuModel": HOSTILE}),
        }
    )
    plan = build_plan("lab-roce", model)
    return plan, render(plan, collect("lab-roce", model))


def test_hostile_values_stay_inside_their_code_span_and_shell_word(tmp_path: Path) -> None:
    plan, text = _hostile_plan()
    assert "PWNED" in text  # the values reach the runbook...
    assert HOSTILE not in text  # ...but never raw: no line break, heading or cell break
    assert "\n## y" not in text
    assert "|<B>" not in text
    for line in text.splitlines():
        if "PWNED" in line:
            assert line.count("`") % 2 == 0, f"a code span is broken open: {line}"
    shell_lines = [filled(c, plan) for c in code_blocks(text) + inline_commands(text)]
    hostile_lines = [line for line in shell_lines if "PWNED" in line]
    assert len(hostile_lines) >= 8
    for line in hostile_lines:
        # The command's words, printed instead of run: the hostile value is one word, whole.
        words = "printf '%s\\n' " + line.split(" ", 1)[1]
        done = subprocess.run(["bash", "-c", words], cwd=tmp_path, capture_output=True, text=True)
        if ">" not in line:
            assert f"\n{HOSTILE}\n" in done.stdout, line
    assert not (tmp_path / "PWNED").exists(), "a stack value ran as a command"
