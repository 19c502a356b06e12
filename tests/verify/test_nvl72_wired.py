"""The NVL72 proof wired to the stack (issue 38): ``verify nodes`` runs the fabric and IMEX
checks on an NVL72 pool's trays and, through the API, checks GFD's clique labels against
the GPUs' fabric; ``verify cluster`` counts trays per clique; ``verify nccl`` judges a run
inside one NVLink domain by the system's bar (or --nvlink-min-busbw) and a larger one by
the InfiniBand bar, with NCCL's version read from the log; the runbook states the bar and
runs the test in one rack. Fixtures: tests/nvsmi.py (nvidia-smi -q), tests/ncclmnnvl.py
(NCCL's MNNVL/NVLS lines), the fake API server."""

from __future__ import annotations

import argparse
import json
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nodefs
import nvsmi
import pytest
from builders import example_config, plan_of
from fake_kube import FakeKube
from nccllogs import text
from ncclmnnvl import MnnvlLog
from nvl72variants import gb200, gb300
from test_nodes import node_for

from gpufabric.cli import main
from gpufabric.exitcodes import CheckStatus, Verdict
from gpufabric.model.nvlink import CLIQUE_LABEL
from gpufabric.outputs.runbook import render
from gpufabric.plan.items import Layer
from gpufabric.plan.pulls import collect
from gpufabric.verify import cluster, expect
from gpufabric.verify.kube import Kube
from gpufabric.verify.nccl import rules
from gpufabric.verify.nccl.parse import parse
from gpufabric.verify.nccl.report import judge
from gpufabric.verify.nodes import checks as nodes
from gpufabric.verify.nodes import fleet as node_fleet

CLIQUE_2 = f"{nvsmi.CLUSTER}.2"
CLIQUE_3 = f"{nvsmi.CLUSTER}.3"
SELECTOR = "nvidia.com/gpu.present"


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    with FakeKube() as f:
        yield f


# ----------------------------------------------------------------- item 1: expectations


@pytest.mark.parametrize(("variant", "system"), [(gb200, "GB200"), (gb300, "GB300")])
def test_an_nvl72_pools_expectation_turns_the_fabric_checks_on(variant: Any, system: str) -> None:
    exp = expect.from_facts(plan_of(variant()).facts)
    assert exp.nvlink == system
    assert json.loads(exp.to_json())["nvlink"] == system
    ids = {c.id for c in nodes.node_checks(exp)}
    assert {"nvlink.fabric", "imex.channels", "imex.host-service"} <= ids


def test_other_pools_expectations_carry_no_nvlink_key() -> None:
    for stack in ("prod-ib", "lab-roce"):
        exp = expect.from_facts(plan_of(example_config(stack)).facts)
        assert exp.nvlink is None
        assert "nvlink" not in exp.to_json()


def test_write_expect_on_the_nvl72_stack(tmp_path: Path) -> None:
    out = tmp_path / "exp.json"
    argv = ["verify", "nodes", "--stack", "gb200-nvl72", "--write-expect", str(out)]
    assert main(argv) == 0
    assert json.loads(out.read_text())["nvlink"] == "GB200"


# --------------------------------------------- item 2: verify nodes --via-cluster, labels


class _ProbeTrees(dict[str, Path]):
    """Probe pod host specs (kubectl://probe-<node>?...) -> the tree of the pod's node."""

    def __init__(self, trees: dict[str, Path]) -> None:
        super().__init__()
        self.trees = trees

    def __missing__(self, spec: str) -> Path:
        pod = spec.removeprefix("kubectl://").split("?", 1)[0]
        return self.trees[pod.removeprefix("probe-")]


def _tray_tree(path: Path, clique: str) -> Path:
    exp = expect.from_facts(plan_of(gb200()).facts)
    states = [nvsmi.GpuState(clique_id=clique) for _ in nvsmi.BUS_IDS]
    node = node_for(exp, driver="580.95.05", nvsmi=nvsmi.tray("580", states))
    return nodefs.build(path, node)


def _via_cluster(
    fake: FakeKube,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    trays: dict[str, tuple[str, str | None]],
) -> tuple[int, dict[str, Any]]:
    """``verify nodes --via-cluster`` on gb200-nvl72: each tray (name -> the clique its
    GPUs report, its GFD label or None) a node of the fake API server, its probe pod
    played by the tray's fixture tree."""
    from fleetfake import LatencyTransport

    from gpufabric.verify.nodes import daemonset

    trees = {c: _tray_tree(tmp_path / f"clique-{c}", c) for c in {c for c, _ in trays.values()}}
    for name, (_, label) in trays.items():
        labels = {"kubernetes.io/hostname": name, SELECTOR: "true"}
        if label is not None:
            labels[CLIQUE_LABEL] = label
        fake.add(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": labels},
                "spec": {},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
            }
        )

    def start(kube: Kube, nodes_: Any, image: str, **_: Any) -> dict[str, str]:
        found = kube.list("/api/v1/nodes", nodes_.selector_text)
        return {f"probe-{n['metadata']['name']}": n["metadata"]["name"] for n in found}

    monkeypatch.setattr(daemonset, "require_kubectl", lambda: None)
    monkeypatch.setattr(daemonset, "start", start)
    monkeypatch.setattr(daemonset, "stop", lambda *_a, **_k: None)
    transport = LatencyTransport(_ProbeTrees({n: trees[c] for n, (c, _) in trays.items()}))
    monkeypatch.setattr(node_fleet, "testinfra_transport", lambda _root: transport)
    argv = [
        "verify", "nodes", "--stack", "gb200-nvl72", "--via-cluster", "--json",
        "--kubeconfig", str(fake.kubeconfig(tmp_path)), "--context", "fake",
    ]  # fmt: skip
    code = main(argv)
    return code, json.loads(capsys.readouterr().out)


def _by_check(doc: dict[str, Any], check: str) -> list[dict[str, Any]]:
    return [c for c in doc["checks"] if c["check"] == check]


def test_via_cluster_runs_the_fabric_checks_and_agrees_with_the_clique_labels(
    fake: FakeKube,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    trays = {f"r1-t{i}": ("2", CLIQUE_2) for i in range(3)} | {"r2-t0": ("3", CLIQUE_3)}
    code, doc = _via_cluster(fake, tmp_path, monkeypatch, capsys, trays)
    fabric = _by_check(doc, "nvlink.fabric")
    assert {c["target"] for c in fabric} == set(trays)
    assert {c["status"] for c in fabric} == {"PASS"}
    assert {c["status"] for c in _by_check(doc, "imex.host-service")} == {"PASS"}
    (domains,) = _by_check(doc, "fleet.nvlink-domains")
    assert domains["status"] == "PASS", domains["message"]
    assert "2 NVLink domains" in domains["message"]
    failing = [c for c in doc["checks"] if c["status"] != "PASS"]
    assert failing == [], failing
    assert code == 0


def test_via_cluster_fails_a_clique_label_that_is_not_the_gpus_fabric(
    fake: FakeKube,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    trays = {
        "r1-t0": ("2", CLIQUE_2),
        "r1-t1": ("2", CLIQUE_3),  # labelled with the other rack's clique
        "r2-t0": ("3", None),  # no label (GFD not run yet)
    }
    code, doc = _via_cluster(fake, tmp_path, monkeypatch, capsys, trays)
    assert code == 4
    (domains,) = _by_check(doc, "fleet.nvlink-domains")
    assert domains["status"] == "FAIL"
    assert "differs from the GPUs' fabric on 2 nodes" in domains["message"]
    assert f"r1-t1 (label {CLIQUE_3}, GPUs {CLIQUE_2})" in domains["message"]
    assert "r2-t0 (label missing" in domains["message"]


def test_hosts_count_the_trays_per_clique_without_labels(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--hosts reaches the trays without the API: the trays per clique are still judged."""
    root = _tray_tree(tmp_path / "tray", "2")
    monkeypatch.setenv("PATH", f"{root}/usr/bin:/usr/bin:/bin")
    argv = ["verify", "nodes", "--stack", "gb200-nvl72", "--json", "--root", str(root)]
    main([*argv, "--hosts", "local://"])
    doc = json.loads(capsys.readouterr().out)
    (domains,) = _by_check(doc, "fleet.nvlink-domains")
    assert domains["status"] == "PASS", domains["message"]
    assert "1 NVLink domains" in domains["message"]


# ------------------------------------------------------- item 2: verify cluster, per clique


def _tray_node(name: str, clique: str | None) -> dict[str, Any]:
    labels = {SELECTOR: "true"} | ({CLIQUE_LABEL: clique} if clique else {})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "allocatable": {"nvidia.com/gpu": "4"},
        },
    }


def _cluster_checks(fake: FakeKube, tmp_path: Path, variant: Any = gb200) -> dict[str, Any]:
    kube = Kube(str(fake.kubeconfig(tmp_path)), "fake")
    checks = cluster.readiness(kube, plan_of(variant()), frozenset({Layer.GPU}))
    (domains,) = [c for c in checks if c.check == cluster.CLIQUE_CHECK]
    return {"status": domains.status, "message": domains.message, "details": domains.details}


def test_verify_cluster_counts_the_trays_of_each_clique(fake: FakeKube, tmp_path: Path) -> None:
    fake.add(*(_tray_node(f"r1-t{i:02d}", CLIQUE_2) for i in range(18)))
    fake.add(*(_tray_node(f"r2-t{i:02d}", CLIQUE_3) for i in range(5)))
    found = _cluster_checks(fake, tmp_path)
    assert found["status"] == CheckStatus.PASS, found["message"]
    assert "23 trays in 2 NVLink domains" in found["message"]
    assert found["details"]["cliques"] == {CLIQUE_2: 18, CLIQUE_3: 5}


def test_verify_cluster_fails_a_clique_of_more_trays_than_a_rack(
    fake: FakeKube, tmp_path: Path
) -> None:
    fake.add(*(_tray_node(f"r1-t{i:02d}", CLIQUE_2) for i in range(19)))
    found = _cluster_checks(fake, tmp_path)
    assert found["status"] == CheckStatus.FAIL
    assert f"{CLIQUE_2}: 19 trays" in found["message"]
    assert "more than 18 trays" in found["message"]


def test_verify_cluster_fails_a_tray_without_the_label(fake: FakeKube, tmp_path: Path) -> None:
    fake.add(_tray_node("r1-t00", CLIQUE_2), _tray_node("r1-t01", None))
    found = _cluster_checks(fake, tmp_path, gb300)
    assert found["status"] == CheckStatus.FAIL
    assert f"1 trays without {CLIQUE_LABEL}: r1-t01" in found["message"]


def test_verify_cluster_on_other_stacks_has_no_clique_check(fake: FakeKube, tmp_path: Path) -> None:
    kube = Kube(str(fake.kubeconfig(tmp_path)), "fake")
    checks = cluster.readiness(kube, plan_of(example_config("prod-ib")), frozenset({Layer.GPU}))
    assert not [c for c in checks if c.check == cluster.CLIQUE_CHECK]


# ------------------------------------------------------------------- item 3: verify nccl


def _args(nodes: int, **given: Any) -> argparse.Namespace:
    return argparse.Namespace(
        nodes=nodes,
        min_busbw=given.get("min_busbw"),
        fraction=given.get("fraction", 0.9),
        nvlink_min_busbw=given.get("nvlink_min_busbw"),
    )


def _expectation(variant: Any, nodes: int, **given: Any) -> rules.NcclExpectation:
    from gpufabric.cli.verify_run import _nccl_expectation

    return _nccl_expectation(plan_of(variant()), _args(nodes, **given))


@pytest.mark.parametrize(("variant", "bar"), [(gb200, 750.0), (gb300, 800.0)])
def test_a_run_that_fits_one_clique_is_judged_inside_the_domain(variant: Any, bar: float) -> None:
    for nodes_ in (2, 18):
        exp = _expectation(variant, nodes_)
        assert exp.nvlink is not None
        assert exp.nvlink.scope == "domain"
        assert (exp.threshold_gbps, exp.nvlink.threshold_gbps) == (bar, bar)
        assert exp.line_rate_gbytes is None  # no NIC ceiling over NVLink


def test_a_larger_run_is_judged_across_domains_by_the_infiniband_bar() -> None:
    exp = _expectation(gb200, 36)
    assert exp.nvlink is not None
    assert exp.nvlink.scope == "across"
    assert exp.threshold_gbps == 180.0  # 0.9 x 4 rails x 400 Gb/s
    assert exp.line_rate_gbytes == 200.0


def test_other_pools_runs_are_judged_as_before() -> None:
    facts = plan_of(example_config("prod-ib")).facts
    assert rules.expectation(facts, None, 0.9, nodes=2) == rules.expectation(facts, None, 0.9)
    assert rules.expectation(facts, None, 0.9, nodes=2).nvlink is None


def _verdict(log: MnnvlLog, exp: rules.NcclExpectation) -> tuple[Verdict, tuple[str, ...]]:
    v = judge(parse(text(log)), exp)
    return v.verdict, tuple(v.reasons)


def test_an_acceptance_log_inside_a_rack_is_judged_by_the_bar_and_its_nccl_version() -> None:
    exp = _expectation(gb200, 18)
    assert _verdict(MnnvlLog(), exp) == (Verdict.PASS, ())
    verdict, why = _verdict(MnnvlLog(busbw=700.0), exp)
    assert verdict == Verdict.FAIL
    assert "below the NVLink domain bar 750 GB/s" in why[0]
    verdict, why = _verdict(MnnvlLog(version="2.25.1+cuda12.8"), exp)
    assert verdict == Verdict.FAIL
    assert "NCCL 2.25.1 is older than 2.25.2" in why[0]
    assert "coreweave/nccl-tests" in exp.threshold_source  # the report's threshold line
    own = _expectation(gb200, 18, nvlink_min_busbw=650.0)
    assert own.threshold_source == "--nvlink-min-busbw"
    assert _verdict(MnnvlLog(busbw=700.0), own) == (Verdict.PASS, ())


def test_the_bar_is_all_reduces_other_kinds_only_with_the_flag() -> None:
    """The systems' bars are stated for all_reduce; all_gather inside a rack is held to
    --nvlink-min-busbw when given, and otherwise to the transport rules only."""
    gather = MnnvlLog(test="all_gather_perf_mpi", busbw=700.0)
    assert _verdict(gather, _expectation(gb200, 18)) == (Verdict.PASS, ())
    verdict, why = _verdict(gather, _expectation(gb200, 18, nvlink_min_busbw=720.0))
    assert verdict == Verdict.FAIL
    assert "below the NVLink domain bar 720 GB/s (--nvlink-min-busbw)" in why[0]


def test_an_old_nccl_across_racks_fails_too() -> None:
    across = _expectation(gb200, 36)
    verdict, why = _verdict(MnnvlLog(version="2.24.3+cuda12.8", busbw=190.0), across)
    assert verdict == Verdict.FAIL
    assert any("NCCL 2.24.3 is older than 2.25.2" in r for r in why)


@pytest.mark.parametrize(
    ("extra", "flag", "words"),
    [
        (["--nodes", "36", "--nvlink-min-busbw", "700"], "--nvlink-min-busbw", "spans NVLink domains"),
        (["--nodes", "2", "--min-busbw", "150"], "--min-busbw", "inside one NVLink domain"),
        (["--nodes", "2", "--fraction", "0.8"], "--fraction", "--nvlink-min-busbw"),
        (["--sweep", "--nvlink-min-busbw", "700"], "--nvlink-min-busbw", "only without --sweep"),
        (["--nodes", "2", "--nvlink-min-busbw", "0"], "--nvlink-min-busbw", "expected GB/s > 0"),
    ],
)  # fmt: skip
def test_a_flag_the_runs_scope_would_ignore_is_refused(
    extra: list[str], flag: str, words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["verify", "nccl", "--stack", "gb200-nvl72", "--tenant", "frontier-pretrain"]
    with _exits_2():
        assert main([*argv, *extra, "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert flag in err
    assert words in err
    assert "Traceback" not in err


def test_the_flag_on_a_stack_without_nvl72_trays_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["verify", "nccl", "--stack", "prod-ib", "--tenant", "llm-pretrain", "--nodes", "2"]
    assert main([*argv, "--nvlink-min-busbw", "700", "--dry-run"]) == 2
    assert "no NVL72 trays (gpuNodes.nvlink)" in capsys.readouterr().err


class _exits_2:
    """argparse's own refusals exit 2 through SystemExit; gpufabric's return 2."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: Any, _tb: Any) -> bool:
        return kind is SystemExit and exc.code == 2


# ------------------------------------------------------------------- item 4: the runbook


def _acceptance(variant: Any) -> tuple[str, list[str]]:
    config = variant()
    from builders import model_of

    plan = plan_of(config)
    body = render(plan, collect(plan.stack, model_of(config)))
    section = body.split("## Acceptance", 1)[1].split("\n## ", 1)[0]
    lines = re.findall(r"^gpufabric verify nccl .*$", section, re.M)
    return section, lines


@pytest.mark.parametrize(("variant", "bar"), [(gb200, "750"), (gb300, "800")])
def test_the_runbook_states_the_nvlink_bar_and_runs_the_test_in_one_rack(
    variant: Any, bar: str
) -> None:
    section, lines = _acceptance(variant)
    assert f"at 8 GiB at least {bar} GB/s" in section
    assert "--nvlink-min-busbw" in section
    assert "NCCL\n2.25.2 or later" in section or "NCCL 2.25.2 or later" in section
    assert any(" --nodes 18 --junit nccl-rack.xml" in line for line in lines)


@pytest.mark.parametrize("variant", [gb200, gb300])
def test_every_acceptance_line_of_the_runbook_is_accepted_by_verify_nccl(
    variant: Any, write_stack: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each printed ``verify nccl`` line, run as a dry run against its stack: the flags and
    --nodes the runbook gives are accepted for the run's scope (exit 0, the job printed)."""
    config = variant()
    stack = write_stack(config, config["gpufabric:cluster"]["name"])
    _, lines = _acceptance(variant)
    assert lines
    for line in lines:
        words = shlex.split(line)[1:]
        words[words.index("--stack") + 1] = str(stack)
        if "--dry-run" not in words:
            words.append("--dry-run")
        assert main(words) == 0, (line, capsys.readouterr().err)
        capsys.readouterr()
