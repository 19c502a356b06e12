"""The NIC room: each link and mode is one module behind one protocol, found by name, never
a fallback; each hook is checked on its own here (the whole pipeline in tests/plan)."""

from __future__ import annotations

import inspect
from typing import get_args

import jinja2
import pytest
from builders import REPO, example_config, model_of, plan_of
from msgspec.structs import replace

from gpufabric import nics
from gpufabric.model.config import Fabric, FabricType, Infiniband, RdmaMode
from gpufabric.nics import cni
from gpufabric.nics.base import Link, NicMode
from gpufabric.plan.resolve import fabric_facts

RUNBOOKS = REPO / "manifests" / "runbooks"


def fabric(**changes: object) -> Fabric:
    """The lab-roce example's fabric with ``changes`` applied (validated as a stack)."""
    config = example_config("lab-roce")
    config["gpufabric:fabric"].update(changes)
    return model_of(config).fabric


def test_the_stack_model_accepts_exactly_the_rooms_members() -> None:
    assert nics.MODES.names() == tuple(sorted(get_args(RdmaMode)))
    assert nics.LINKS.names() == tuple(sorted(get_args(FabricType)))


@pytest.mark.parametrize("name", nics.MODES.names())
def test_each_mode_is_complete_and_defines_its_runbook_macros(name: str) -> None:
    mode = nics.mode(name)
    assert isinstance(mode, NicMode)
    assert mode.name == name
    assert not inspect.isabstract(type(mode))
    assert _macros(mode.runbook_fragment) == set(NicMode.runbook_macros)


@pytest.mark.parametrize("name", nics.LINKS.names())
def test_each_link_is_complete_and_defines_its_runbook_macros(name: str) -> None:
    link = nics.link(name)
    assert isinstance(link, Link)
    assert link.name == name
    assert not inspect.isabstract(type(link))
    assert _macros(link.runbook_fragment) == set(Link.runbook_macros)
    assert link.mtu_range[0] <= link.default_mtu <= link.mtu_range[1]


def _macros(fragment: str) -> set[str]:
    tree = jinja2.Environment().parse((RUNBOOKS / fragment).read_text())
    return {m.name for m in tree.find_all(jinja2.nodes.Macro)}


def test_an_unknown_member_is_never_served_by_another() -> None:
    with pytest.raises(KeyError, match="unknown NIC mode 'bogus'"):
        nics.mode("bogus")
    with pytest.raises(KeyError, match="unknown fabric link 'ethernet'"):
        nics.link("ethernet")
    with pytest.raises(KeyError):
        nics.mode("base")  # the protocol module is not a mode


@pytest.mark.parametrize(
    ("mode", "link", "plugin"),
    [
        ("shared", "roce", "macvlan"),
        ("shared", "infiniband", "ipoib"),
        ("none", "roce", "macvlan"),
        ("sriov", "roce", "sriov"),
        ("sriov", "infiniband", "ib-sriov"),
        ("hostdevice", "roce", "host-device"),
        ("hostdevice", "infiniband", "host-device"),
    ],
)
def test_a_mode_picks_the_cni_plugin_for_its_link(mode: str, link: str, plugin: str) -> None:
    assert nics.mode(mode).cni(nics.link(link)) == plugin
    assert plugin in cni.BUILDERS


@pytest.mark.parametrize(
    ("mode", "resource"),
    [
        ("shared", "rdma/rail_0"),
        ("sriov", "nvidia.com/sriov_rail_0"),
        ("hostdevice", "nvidia.com/hostdev_rail_0"),
        ("none", None),
    ],
)
def test_a_mode_names_the_resource_a_pod_requests_per_rail(mode: str, resource: str) -> None:
    m = nics.mode(mode)
    plugin = m.device_plugin_resource("rail-0")
    assert (f"{m.resource_prefix}/{plugin}" if plugin else None) == resource


def test_none_runs_nccl_over_the_rails_sockets_and_rdma_modes_bootstrap_on_eth0() -> None:
    f = fabric_facts(fabric(rdma="none"))
    assert nics.mode("none").nccl_env(f.rails) == {
        "NCCL_IB_DISABLE": "1",
        "NCCL_SOCKET_IFNAME": "=" + ",".join(r.pod_interface for r in f.rails),
    }
    for name in ("sriov", "hostdevice"):
        env = nics.mode(name).nccl_env(f.rails)
        assert env["NCCL_SOCKET_IFNAME"] == "=eth0"
        assert env["NCCL_IB_DISABLE"] == "0"


def test_shared_and_whole_devices_pin_hca_names_only_when_every_rail_names_one() -> None:
    f = fabric_facts(fabric())
    for name in ("shared", "hostdevice"):
        assert nics.mode(name).pins_hca_names(f.rails) == all(r.hca for r in f.rails)
    assert not nics.mode("sriov").pins_hca_names(f.rails)


def test_roce_marks_rdma_traffic_with_the_lossless_class() -> None:
    f = fabric_facts(fabric(roce={"dscp": 24, "gidIndex": 3}, rdma="sriov", sriov={"numVfs": 4}))
    assert nics.link("roce").nccl_env(f) == {"NCCL_IB_TC": "96", "NCCL_IB_GID_INDEX": "3"}


def test_roce_refuses_what_is_not_roce() -> None:
    base = fabric()
    ib_rail = base.rails[0].model_copy(update={"netdev": "ibp24s0"})
    bad = base.model_copy(update={"mtu": 9300, "infiniband": Infiniband(), "rails": [ib_rail]})
    problems = list(nics.link("roce").problems(bad, nics.mode("shared")))
    assert [(p.path, p.warning) for p in problems] == [
        ("fabric.mtu", False),
        ("fabric.infiniband", False),
        ("fabric.rails[0].netdev", True),
    ]
    assert list(nics.link("roce").problems(base, nics.mode("shared"))) == []


def test_a_small_roce_mtu_is_a_warning_only_with_rdma_devices() -> None:
    small = fabric().model_copy(update={"mtu": 1500})
    assert [p.warning for p in nics.link("roce").problems(small, nics.mode("shared"))] == [True]
    assert list(nics.link("roce").problems(small, nics.mode("none"))) == []


def test_sriov_needs_its_section_and_others_refuse_it() -> None:
    f = fabric()
    assert [p.path for p in nics.mode("sriov").problems(f, nics.link("roce"))] == ["fabric.sriov"]
    with_vfs = f.model_copy(update={"sriov": fabric(rdma="sriov", sriov={"numVfs": 4}).sriov})
    assert [p.path for p in nics.mode("shared").problems(with_vfs, nics.link("roce"))] == [
        "fabric.sriov"
    ]
    assert list(nics.mode("hostdevice").problems(with_vfs, nics.link("roce"))) == []


def test_none_needs_ethernet_rails_and_no_peermem() -> None:
    paths = [
        p.path
        for p in nics.mode("none").problems(
            fabric().model_copy(update={"gpuDirect": "peermem"}), nics.link("infiniband")
        )
    ]
    assert paths == ["fabric.rdma", "fabric.gpuDirect"]


def test_the_cni_of_a_tenant_network_carries_the_tenants_own_vlan() -> None:
    stack = example_config("lab-roce")
    stack["gpufabric:fabric"].update(rdma="sriov", sriov={"numVfs": 4})
    facts = plan_of(stack).facts
    f, rail = facts.fabric, facts.fabric.rails[0]
    tenant = replace(next(iter(facts.tenants.values())), vlan=42)
    config = cni.cni_config(f, rail, tenant)
    assert config["plugins"][0]["vlan"] == 42
    assert "vlan" not in cni.cni_config(f, rail)["plugins"][0]


def test_an_unknown_cni_is_refused() -> None:
    f = fabric_facts(fabric())
    with pytest.raises(ValueError, match="no CNI configuration for 'bridge'"):
        cni.cni_config(f, replace(f.rails[0], cni="bridge"))
