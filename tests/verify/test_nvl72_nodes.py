"""``verify nodes`` on GB200/GB300 NVL72 trays: the fabric state of every GPU as
``nvidia-smi -q`` prints it (tests/nvsmi.py, every print format public reports show), the
IMEX channel devices and the host's nvidia-imex.service, judged on fixture trees through
the gather script as ``verify nodes`` runs it, and across trays per NVLink domain."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import nodefs
import nvsmi
import pytest
from fleetfake import gather_checks
from test_nodes import TreeProbe

from gpufabric.exitcodes import CheckStatus
from gpufabric.verify import expect
from gpufabric.verify.nodes import checks as nodes
from gpufabric.verify.nodes import fabric
from gpufabric.verify.results import Check, passed

NVL = expect.Expectation(
    stack="gb200",
    gpus=4,
    driver_version=None,
    gpudirect="dmabuf",
    fabric="infiniband",
    rdma=False,
    link_rate_gbps=400,
    mtu=None,
    pfc_priority=None,
    nvlink="GB200",
)
NVL_IDS = ("nvlink.fabric", "imex.channels", "imex.host-service")


def tray(tmp_path: Path, **overrides: object) -> dict[str, Check]:
    node = nodefs.Node(gpus=4, rails=[], nvsmi=nvsmi.tray(), **overrides)  # type: ignore[arg-type]
    root = nodefs.build(tmp_path / "node", node)
    gathered, round_trips = gather_checks(NVL, root)
    assert gathered == list(nodes.run_checks(TreeProbe(root), NVL))
    assert round_trips == 1
    return {c.check: c for c in gathered}


@pytest.fixture
def nvsmi_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Trays carry a fake nvidia-smi printing the tool's format (tests/nvsmi.py)."""
    monkeypatch.setenv("PATH", f"{tmp_path / 'node/usr/bin'}:{Path('/usr/bin')}:{Path('/bin')}")


# ------------------------------------------------------------------- the print's parser


@pytest.mark.parametrize("fmt", nvsmi.FORMATS)
def test_every_print_format_reads_the_same_fabric(fmt: str) -> None:
    gpus = fabric.parse_fabric(nvsmi.tray(fmt))
    assert [g.bus_id for g in gpus] == [b.lower() for b in nvsmi.BUS_IDS]
    for g in gpus:
        assert (g.state, g.status, g.clique_id, g.cluster_uuid) == (
            "Completed",
            "Success",
            "2",
            nvsmi.CLUSTER,
        )
        assert g.clique == f"{nvsmi.CLUSTER}.2"
        assert g.problems() == []
        assert g.uuid is not None
        assert g.uuid.startswith("GPU-")
    health = gpus[0].health
    assert set(health) == set(nvsmi.HEALTHY_ROWS.get(fmt, {}))


def test_keys_outside_the_fabric_section_are_not_read_as_fabric() -> None:
    """Platform Info and Capabilities hold keys at the same depth as Fabric's rows."""
    text = nvsmi.tray("580").replace("        Slot Number", "        State")
    assert {g.state for g in fabric.parse_fabric(text)} == {"Completed"}


def test_no_fabric_section_is_a_problem_not_a_pass() -> None:
    text = "\n".join(ln for ln in nvsmi.tray("570").splitlines() if "Fabric" not in ln)
    text = text.replace("        State", "        Other")
    gpus = fabric.parse_fabric(text)
    assert all(not g.has_section and g.problems() for g in gpus)


# ---------------------------------------------------------------- judging one tray's print


def judge(text: str, rc: int = 0, gpus: int = 4) -> Check:
    return fabric.judge_fabric("tray-1", rc, text, gpus)


@pytest.mark.parametrize("fmt", nvsmi.FORMATS)
def test_a_healthy_tray_passes_in_every_format(fmt: str) -> None:
    c = judge(nvsmi.tray(fmt))
    assert c.status == CheckStatus.PASS, c.message
    assert c.details["clique"] == f"{nvsmi.CLUSTER}.2"


@pytest.mark.parametrize(
    ("gpu", "said"),
    [
        # Azure/azhpc-images#506: Completed but not Success, zero clique and UUID
        (
            nvsmi.GpuState(
                status="Insufficient Resources",
                clique_id="0",
                cluster_uuid="00000000-0000-0000-0000-000000000000",
            ),
            "Status Insufficient Resources, CliqueId 0, ClusterUUID 0000",
        ),
        (nvsmi.GpuState(state="In Progress", status="N/A"), "State In Progress"),
        (nvsmi.GpuState(state="Not Started"), "State Not Started"),
        # kubernetes-sigs/dra-driver-nvidia-gpu#626: joined, but the fabric is unhealthy
        (nvsmi.GpuState(health={"Summary": "Unhealthy"}), "Health Summary Unhealthy"),
        (
            nvsmi.GpuState(health={"Summary": "Limited Capacity", "Bandwidth": "Degraded"}),
            "Bandwidth Degraded",
        ),
        (nvsmi.GpuState(health={"Route Unhealthy": "True"}), "Route Unhealthy True"),
        (
            nvsmi.GpuState(health={"Incorrect Configuration": "Insufficient NVLinks"}),
            "Incorrect Configuration",
        ),
    ],
)
def test_a_gpu_outside_a_healthy_domain_fails_the_tray(gpu: nvsmi.GpuState, said: str) -> None:
    states = [nvsmi.GpuState(), nvsmi.GpuState(), gpu, nvsmi.GpuState()]
    c = judge(nvsmi.tray("580", states))
    assert c.status == CheckStatus.FAIL
    assert said in c.message
    assert "00000018:01:00.0" in c.message
    assert "1 of 4" in c.message


def test_a_tray_split_across_cliques_fails() -> None:
    states = [nvsmi.GpuState(), nvsmi.GpuState(clique_id="3"), nvsmi.GpuState(), nvsmi.GpuState()]
    c = judge(nvsmi.tray("570", states))
    assert c.status == CheckStatus.FAIL
    assert "2 NVLink cliques" in c.message


def test_a_missing_gpu_fails_and_a_tool_that_did_not_run_is_not_verified() -> None:
    assert judge(nvsmi.tray("580", [nvsmi.GpuState()] * 3)).status == CheckStatus.FAIL
    assert judge("", rc=127).status == CheckStatus.ERROR
    assert judge("No devices were found\n").status == CheckStatus.ERROR


# ------------------------------------------------------------ on a tree, as verify runs it


def test_a_healthy_tray_passes_through_the_gather_script(
    tmp_path: Path, nvsmi_on_path: None
) -> None:
    found = tray(tmp_path, imex_channels=1)
    for cid in NVL_IDS:
        assert found[cid].status == CheckStatus.PASS, found[cid].message
    assert "channel0" in found["imex.channels"].message
    assert "masked" in found["imex.host-service"].message


def test_checks_do_not_run_on_other_pools() -> None:
    plain = dataclasses.replace(NVL, nvlink=None)
    assert not {c.id for c in nodes.node_checks(plain)} & set(NVL_IDS)
    assert set(NVL_IDS) <= {c.id for c in nodes.node_checks(NVL)}
    assert "nvlink" not in plain.to_json()
    assert '"nvlink": "GB200"' in NVL.to_json()
    assert expect.Expectation.from_dict(__import__("json").loads(NVL.to_json())) == NVL


def test_an_unhealthy_gpu_fails_through_the_gather_script(
    tmp_path: Path, nvsmi_on_path: None
) -> None:
    text = nvsmi.tray("570h", [nvsmi.GpuState()] * 3 + [nvsmi.GpuState(state="In Progress")])
    node = nodefs.Node(gpus=4, rails=[], nvsmi=text)
    root = nodefs.build(tmp_path / "node", node)
    gathered, _ = gather_checks(NVL, root)
    c = {c.check: c for c in gathered}["nvlink.fabric"]
    assert c.status == CheckStatus.FAIL
    assert "00000019:01:00.0: State In Progress" in c.message


@pytest.mark.parametrize(
    ("unit", "status", "said"),
    [
        ("masked", CheckStatus.PASS, "masked"),
        ("masked-empty", CheckStatus.PASS, "masked"),
        ("absent", CheckStatus.PASS, "not installed"),
        ("disabled", CheckStatus.PASS, "not enabled"),
        ("enabled", CheckStatus.FAIL, "multi-user.target.wants"),
    ],
)
def test_the_host_imex_service(
    tmp_path: Path, nvsmi_on_path: None, unit: str, status: CheckStatus, said: str
) -> None:
    c = tray(tmp_path, imex_unit=unit)["imex.host-service"]
    assert c.status == status, c.message
    assert said in c.message


def test_imex_channels_none_made_yet(tmp_path: Path, nvsmi_on_path: None) -> None:
    none_yet = tray(tmp_path)["imex.channels"]
    assert none_yet.status == CheckStatus.PASS
    assert "no channel device yet" in none_yet.message
    assert fabric.judge_imex_channels("n", [], None).status == CheckStatus.ERROR


def test_imex_channels_unsupported_by_the_driver(tmp_path: Path, nvsmi_on_path: None) -> None:
    unsupported = tray(tmp_path, imex_registered=False)["imex.channels"]
    assert unsupported.status == CheckStatus.FAIL
    assert "registers no" in unsupported.message


# ------------------------------------------------------------------ across a rack's trays


def fabric_pass(node: str, clique: str) -> Check:
    return passed("nvlink.fabric", node, "ok", clique=clique)


def test_domains_across_trays() -> None:
    racks = {f"{nvsmi.CLUSTER}.{r}": [f"r{r}-t{t}" for t in range(18)] for r in (1, 2)}
    results = [fabric_pass(n, c) for c, ns in racks.items() for n in ns]
    labels = {n: c for c, ns in racks.items() for n in ns}
    (ok,) = fabric.domain_checks(results, 18, labels)
    assert ok.status == CheckStatus.PASS
    assert "2 NVLink domains" in ok.message
    over = fabric.domain_checks([*results, fabric_pass("stray", f"{nvsmi.CLUSTER}.1")], 18)
    assert over[0].status == CheckStatus.FAIL
    assert "19 trays" in over[0].message
    labels["r2-t5"] = f"{nvsmi.CLUSTER}.1"
    del labels["r1-t0"]
    (wrong,) = fabric.domain_checks(results, 18, labels)
    assert wrong.status == CheckStatus.FAIL
    assert "on 2 nodes" in wrong.message
    assert "r1-t0 (label missing" in wrong.message
    assert fabric.domain_checks([], 18) == []
