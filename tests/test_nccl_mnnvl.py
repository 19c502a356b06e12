"""``verify nccl`` on NVL72 runs: NCCL's own multi-node NVLink lines (tests/ncclmnnvl.py,
from NVIDIA/nccl's source at 2.25-2.30), the version it needs, one clique and no NET channel
inside a domain, the system's bar at 8 GiB; across domains the InfiniBand bar as today."""

from __future__ import annotations

import dataclasses

import pytest
from nccllogs import IB_8X400, text
from ncclmnnvl import FAMILIES, MnnvlLog, rack

from gpufabric.exitcodes import Verdict
from gpufabric.verify.nccl import rules
from gpufabric.verify.nccl.parse import parse
from gpufabric.verify.nccl.report import judge

GB200 = dataclasses.replace(IB_8X400, gpus_per_node=4, nvlink=rules.nvlink_domain("GB200"))


def verdict(log: MnnvlLog, exp: rules.NcclExpectation = GB200) -> tuple[Verdict, tuple[str, ...]]:
    v = judge(parse(text(log)), exp)
    return v.verdict, tuple(v.reasons)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_healthy_rack_passes_in_every_nccl_format(family: str) -> None:
    run = parse(text(MnnvlLog(version=FAMILIES[family])))
    assert run.cliques == {"2": 72}
    assert run.mnnvl
    assert run.nvls is True
    assert run.mnnvl_channels == 36
    assert run.inter_node == []
    assert verdict(MnnvlLog(version=FAMILIES[family])) == (Verdict.PASS, ())


def test_the_bar_per_system_and_the_flag() -> None:
    assert rules.nvlink_domain("GB200").threshold_gbps == 750.0
    assert rules.nvlink_domain("GB300").threshold_gbps == 800.0
    slow = MnnvlLog(busbw=700.0)
    v, why = verdict(slow)
    assert v == Verdict.FAIL
    assert "below the NVLink domain bar 750 GB/s" in why[0]
    assert "coreweave/nccl-tests" in why[0]
    own = dataclasses.replace(GB200, nvlink=rules.nvlink_domain("GB200", min_busbw=650.0))
    assert verdict(slow, own) == (Verdict.PASS, ())
    gb300 = dataclasses.replace(GB200, nvlink=rules.nvlink_domain("GB300"))
    assert verdict(MnnvlLog(busbw=780.0), gb300)[0] == Verdict.FAIL


def test_no_8gib_row_is_not_judged_against_the_bar() -> None:
    v, why = verdict(MnnvlLog(sizes=(1 << 30, 2 << 30, 4 << 30)))
    assert v == Verdict.INCONCLUSIVE
    assert any("no results at >= 8 GiB" in r for r in why)


def test_nccl_older_than_2_25_2_fails_and_no_version_is_not_a_pass() -> None:
    v, why = verdict(MnnvlLog(version="2.25.1+cuda12.8"))
    assert v == Verdict.FAIL
    assert "NCCL 2.25.1 is older than 2.25.2" in why[0]
    log = MnnvlLog()
    lines = [ln for ln in text(log).splitlines() if "NCCL version" not in ln]
    found = judge(parse("\n".join(lines) + "\n"), GB200)
    assert found.verdict == Verdict.INCONCLUSIVE
    assert "NCCL version not in the log" in found.reasons[0]


def test_mnnvl_off_inside_a_domain_fails_silence_is_inconclusive() -> None:
    v, why = verdict(MnnvlLog(mnnvl=False, net_channels=True))
    assert v == Verdict.FAIL
    assert any("MNNVL 0" in r for r in why)
    assert any("channels over NET (IB) inside one NVLink domain" in r for r in why)
    lines = [ln for ln in text(MnnvlLog()).splitlines() if "MNNVL" not in ln]
    found = judge(parse("\n".join(lines) + "\n"), GB200)
    assert found.verdict == Verdict.INCONCLUSIVE
    assert any("multi-node NVLink not proven" in r for r in found.reasons)


def test_net_channels_inside_a_domain_fail() -> None:
    v, why = verdict(MnnvlLog(net_channels=True))
    assert v == Verdict.FAIL
    assert "36 channels over NET (IB)" in why[0]


def test_a_run_over_two_cliques_is_not_one_domain() -> None:
    two = MnnvlLog(hosts=rack(1, 9) + rack(2, 9), cliques=((2, 9), (3, 9)))
    v, why = verdict(two)
    assert v == Verdict.FAIL
    assert "spans 2 NVLink cliques (2 (36 ranks), 3 (36 ranks))" in why[0]


def test_the_imex_warning_names_the_channel_claim() -> None:
    v, why = verdict(MnnvlLog(warn_imex=True))
    assert v == Verdict.FAIL
    assert "no IMEX channel" in why[0]


def test_across_domains_the_infiniband_bar_applies_as_today() -> None:
    across = dataclasses.replace(GB200, nvlink=rules.nvlink_domain("GB200", scope="across"))
    ib = "gb200-r01-t00:1000:1000 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB eth0:10.0.0.1<0>"
    two = MnnvlLog(
        hosts=rack(1) + rack(2),
        cliques=((2, 18), (3, 18)),
        busbw=810.41,
        net_channels=True,
        extra=[ib],
    )
    assert verdict(two, across) == (Verdict.PASS, ())
    low = dataclasses.replace(two, busbw=300.0)
    v, why = verdict(low, across)
    assert v == Verdict.FAIL
    assert "below the threshold 360 GB/s" in why[0]


def test_other_pools_read_none_of_it() -> None:
    """Without the NVLink expectation an NVL72 log is judged exactly as before."""
    plain = judge(parse(text(MnnvlLog(version="2.20.5+cuda12.4"))), IB_8X400)
    assert not any("NCCL 2.20.5" in r or "NVLink" in r for r in plain.reasons)
