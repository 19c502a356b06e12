"""InfiniBand partitions: every pkey the rails' networks carry reaches the subnet-manager
step of the runbook (OpenSM partitions.conf, UFM) and the node checks, from one Plan fact.

Protects the day-one contract of per-tenant partitions: a tenant's pods only talk when the
subnet manager defines the tenant's key and every rail port is a full member of it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nodefs
import testinfra
from builders import example_config, model_of, plan_of

from gpufabric.nics.cni import cni_config
from gpufabric.outputs.runbook import render
from gpufabric.plan.pulls import collect
from gpufabric.verify import expect
from gpufabric.verify.nodes import checks as nodes
from gpufabric.verify.nodes.probe import HostProbe

TENANT_KEYS = {"llm-pretrain": "0x8010", "llm-finetune": "0x8020", "research": "0x8030"}


UFM = {"address": "ufm.example.internal", "username": "k8s", "password": {"secure": "v1:AAAA:BBBB"}}


def per_tenant_ib() -> dict[str, Any]:
    """prod-ib with per-tenant networks under UFM; three tenants own a key, eval uses the
    stack's."""
    config = example_config("prod-ib")
    config["gpufabric:fabric"]["nadScope"] = "tenant"
    config["gpufabric:fabric"]["infiniband"].update(pkeyManagement="ufm", ufm=UFM)
    for tenant in config["gpufabric:tenants"]:
        if tenant["namespace"] in TENANT_KEYS:
            tenant["pkey"] = TENANT_KEYS[tenant["namespace"]]
    return config


def runbook(config: dict[str, Any]) -> str:
    model = model_of(config)
    return render(plan_of(config), collect("t", model))


def test_partitions_are_every_key_the_networks_carry() -> None:
    plan = plan_of(per_tenant_ib())
    ib = plan.facts.fabric.infiniband
    assert ib is not None
    carried = {
        cni_config(plan.facts.fabric, rail, tenant)["pkey"]
        for rail in plan.facts.fabric.rails
        for tenant in plan.facts.tenants.values()
    }
    assert {p.pkey for p in ib.partitions} == carried == {"0x8001", "0x8010", "0x8020", "0x8030"}
    by_key = {p.pkey: p for p in ib.partitions}
    assert by_key["0x8001"].tenants == ("eval",)
    assert by_key["0x8010"].tenants == ("llm-pretrain",)
    assert by_key["0x8010"].name == "gpufabric_llm_pretrain"
    assert all(p.membership == "full" for p in ib.partitions)


def test_without_any_key_pods_use_the_default_partition() -> None:
    config = example_config("prod-ib")
    del config["gpufabric:fabric"]["infiniband"]["pkey"]
    ib = plan_of(config).facts.fabric.infiniband
    assert ib is not None
    (default,) = ib.partitions
    assert default.name == "Default"
    assert default.full_member == "0xffff"
    assert set(default.tenants) == {"llm-pretrain", "llm-finetune", "research", "eval"}
    assert ib.partitions_conf == (
        "Default=0x7fff, ipoib, defmember=full : ALL, ALL_SWITCHES=full, SELF=full;",
    )


def test_shared_ipoib_devices_carry_no_partition() -> None:
    config = example_config("prod-ib")
    config["gpufabric:fabric"].update(rdma="shared")
    del config["gpufabric:fabric"]["sriov"]
    del config["gpufabric:fabric"]["infiniband"]["pkey"]
    ib = plan_of(config).facts.fabric.infiniband
    assert ib is not None
    assert ib.partitions == ()
    assert "partitions.conf" not in runbook(config)


def test_subnet_manager_step_with_ufm_keeps_vfs_apart() -> None:
    """UFM: the keys hold only what ib-kubernetes adds; the default keeps every port limited."""
    text = runbook(per_tenant_ib())
    assert "Default=0x7fff, ipoib : ALL=limited, ALL_SWITCHES=full, SELF=full;" in text
    assert ": ALL;" not in text
    assert "defmember=full" not in text
    for namespace, key in TENANT_KEYS.items():
        line = f"# gpufabric_{namespace.replace('-', '_')}={key}: only the VF GUIDs ib-kubernetes"
        assert line in text
        assert (
            f"| `{key}` | the VFs of these tenants' pods, full, added by ib-kubernetes | {namespace} |"
            in text
        )
    assert "/ufmRest/resources/pkeys" in text


def test_subnet_manager_step_static_shares_every_partition() -> None:
    """Static: ALL is all partitions.conf can name, so the runbook says every tenant shares."""
    text = runbook(example_config("prod-ib"))
    assert "Default=0x7fff, ipoib, defmember=full : ALL, ALL_SWITCHES=full, SELF=full;" in text
    assert "gpufabric=0x8001, ipoib, defmember=full : ALL;" in text
    assert "every tenant's pods share them" in text
    assert "held to one key" not in text


def test_expectation_carries_the_partitions_to_the_nodes(tmp_path: Path) -> None:
    exp = expect.from_facts(plan_of(example_config("prod-ib")).facts)
    assert exp.pkeys == exp.vf_pkeys == ("0x8001",)
    assert exp.vf_pkey_rule == "every"
    exp = expect.from_facts(plan_of(per_tenant_ib()).facts)
    assert exp.pkeys is None  # with UFM the hosts' ports are in none of the keys
    assert exp.vf_pkeys == ("0x8001", "0x8010", "0x8020", "0x8030")
    assert exp.vf_pkey_rule == "one"
    again = expect.Expectation.from_dict(json.loads(exp.to_json()))
    assert again == exp


def _check(tmp_path: Path, exp: expect.Expectation, node: nodefs.Node) -> dict[str, Any]:
    root = nodefs.build(tmp_path / "node", node)
    probe = HostProbe(testinfra.get_host("local://"), root=str(root), name="node")
    return {c.check: c for c in nodes.run_checks(probe, exp)}


def _node(exp: expect.Expectation, **overrides: Any) -> nodefs.Node:
    rails = [(r.hca or f"mlx5_{i}", r.netdev) for i, r in enumerate(exp.rails)]
    return nodefs.Node(rails=rails, **overrides)


def static_ib() -> dict[str, Any]:
    """prod-ib (static) with its shared key and the default: two partitions on the ports."""
    return example_config("prod-ib")


def test_node_check_passes_when_every_port_is_a_full_member(tmp_path: Path) -> None:
    exp = expect.from_facts(plan_of(static_ib()).facts)
    results = _check(tmp_path, exp, _node(exp, pkeys=("0xffff", *(exp.pkeys or ()))))
    pkeys = {k: c for k, c in results.items() if k.endswith(".pkeys")}
    assert set(pkeys) == {f"rail.{r.name}.pkeys" for r in exp.rails}
    assert all(c.status == "PASS" for c in pkeys.values())


def test_node_check_fails_naming_missing_and_limited_keys(tmp_path: Path) -> None:
    exp = expect.from_facts(plan_of(static_ib()).facts)
    # mlx5_2 is only a limited member of 0x8001 (0x0001); mlx5_3 is in no partition.
    node = _node(exp, pkeys=("0xffff", "0x8001"))
    node.port_pkeys = {"mlx5_2": ("0xffff", "0x0001"), "mlx5_3": ("0xffff",)}
    results = _check(tmp_path, exp, node)
    bad = results["rail.rail2.pkeys"]
    assert bad.status == "FAIL"
    assert "0x8001 limited member only" in bad.message
    assert "0x8001 missing" in results["rail.rail3.pkeys"].message
    assert "subnet manager" in bad.hint
    assert results["rail.rail1.pkeys"].status == "PASS"


def test_unreadable_pkey_table_is_not_a_pass(tmp_path: Path) -> None:
    exp = expect.from_facts(plan_of(static_ib()).facts)
    results = _check(tmp_path, exp, _node(exp, pkeys=()))
    assert results["rail.rail0.pkeys"].status not in ("PASS", "FAIL")


def _vf_node(exp: expect.Expectation, vfs: dict[str, dict[str, tuple[str, ...]]]) -> nodefs.Node:
    node = _node(exp, pkeys=("0xffff", *(exp.pkeys or ())))
    node.vfs = vfs
    return node


def test_vf_check_with_ufm_holds_each_vf_to_one_partition(tmp_path: Path) -> None:
    """ib-kubernetes put a freed VF in 0x8010; the default partition limited (0x7fff)."""
    exp = expect.from_facts(plan_of(per_tenant_ib()).facts)
    good = {"mlx5_0": {"mlx5_20": ("0x8010", "0x7fff"), "mlx5_21": ("0x7fff",)}}
    results = _check(tmp_path / "good", exp, _vf_node(exp, good))
    assert results["rail.rail0.vfpkeys"].status == "PASS", results["rail.rail0.vfpkeys"]
    assert "2 VF(s) of mlx5_0" in results["rail.rail0.vfpkeys"].message
    assert results["rail.rail1.vfpkeys"].status == "SKIP"  # the host shows none of its VFs
    bad = {
        "mlx5_0": {"mlx5_20": ("0x8010", "0xffff")},  # UFM left the default full
        "mlx5_1": {"mlx5_21": ("0x8010", "0x8020", "0x7fff")},  # ALL in two tenants' keys
        "mlx5_2": {"mlx5_22": ("0x8099", "0x7fff")},  # a key no network of the stack uses
    }
    results = _check(tmp_path / "bad", exp, _vf_node(exp, bad))
    assert "default partition (0xffff)" in results["rail.rail0.vfpkeys"].message
    assert "a full member of 0x8010, 0x8020" in results["rail.rail1.vfpkeys"].message
    assert "0x8099 is no partition" in results["rail.rail2.vfpkeys"].message
    assert all(results[f"rail.rail{i}.vfpkeys"].status == "FAIL" for i in range(3))
    assert "ib-kubernetes" in results["rail.rail0.vfpkeys"].hint


def test_vf_check_static_wants_every_vf_in_the_shared_partition(tmp_path: Path) -> None:
    exp = expect.from_facts(plan_of(static_ib()).facts)
    vfs = {"mlx5_0": {"mlx5_20": ("0xffff", "0x8001")}, "mlx5_1": {"mlx5_21": ("0xffff", "0x0001")}}
    results = _check(tmp_path, exp, _vf_node(exp, vfs))
    assert results["rail.rail0.vfpkeys"].status == "PASS"
    assert results["rail.rail1.vfpkeys"].status == "FAIL"
    assert "mlx5_21: 0x8001 limited member only" in results["rail.rail1.vfpkeys"].message
