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


def per_tenant_ib() -> dict[str, Any]:
    """prod-ib with per-tenant networks; three tenants own a key, eval uses the stack's."""
    config = example_config("prod-ib")
    config["gpufabric:fabric"]["nadScope"] = "tenant"
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
    config = per_tenant_ib()
    del config["gpufabric:fabric"]["infiniband"]["pkey"]
    ib = plan_of(config).facts.fabric.infiniband
    assert ib is not None
    default = [p for p in ib.partitions if p.name == "Default"]
    assert default
    assert default[0].full_member == "0xffff"
    assert default[0].tenants == ("eval",)


def test_shared_ipoib_devices_carry_no_partition() -> None:
    config = example_config("prod-ib")
    config["gpufabric:fabric"].update(rdma="shared")
    del config["gpufabric:fabric"]["sriov"]
    del config["gpufabric:fabric"]["infiniband"]["pkey"]
    ib = plan_of(config).facts.fabric.infiniband
    assert ib is not None
    assert ib.partitions == ()
    assert "partitions.conf" not in runbook(config)


def test_subnet_manager_step_defines_every_partition_in_opensm_syntax() -> None:
    text = runbook(per_tenant_ib())
    assert "Default=0x7fff, ipoib, defmember=full : ALL, ALL_SWITCHES=full, SELF=full;" in text
    for namespace, key in TENANT_KEYS.items():
        line = f"gpufabric_{namespace.replace('-', '_')}={key}, ipoib, defmember=full : ALL;"
        assert line in text
        assert f"| `{key}` | full, every GPU node's rail ports | {namespace} |" in text
    assert "gpufabric=0x8001, ipoib, defmember=full : ALL;" in text
    assert "/ufmRest/resources/pkeys" in text


def test_expectation_carries_the_partitions_to_the_nodes(tmp_path: Path) -> None:
    exp = expect.from_facts(plan_of(per_tenant_ib()).facts)
    assert exp.pkeys == ("0x8001", "0x8010", "0x8020", "0x8030")
    again = expect.Expectation.from_dict(json.loads(exp.to_json()))
    assert again == exp


def _check(tmp_path: Path, exp: expect.Expectation, node: nodefs.Node) -> dict[str, Any]:
    root = nodefs.build(tmp_path / "node", node)
    probe = HostProbe(testinfra.get_host("local://"), root=str(root), name="node")
    return {c.check: c for c in nodes.run_checks(probe, exp)}


def _node(exp: expect.Expectation, **overrides: Any) -> nodefs.Node:
    rails = [(r.hca or f"mlx5_{i}", r.netdev) for i, r in enumerate(exp.rails)]
    return nodefs.Node(rails=rails, **overrides)


def test_node_check_passes_when_every_port_is_a_full_member(tmp_path: Path) -> None:
    exp = expect.from_facts(plan_of(per_tenant_ib()).facts)
    results = _check(tmp_path, exp, _node(exp, pkeys=("0xffff", *(exp.pkeys or ()))))
    pkeys = {k: c for k, c in results.items() if k.endswith(".pkeys")}
    assert set(pkeys) == {f"rail.{r.name}.pkeys" for r in exp.rails}
    assert all(c.status == "PASS" for c in pkeys.values())


def test_node_check_fails_naming_missing_and_limited_keys(tmp_path: Path) -> None:
    exp = expect.from_facts(plan_of(per_tenant_ib()).facts)
    # mlx5_2 was left out of 0x8020 and is only a limited member of 0x8030 (0x0030).
    node = _node(exp, pkeys=("0xffff", "0x8001", "0x8010", "0x8020", "0x8030"))
    node.port_pkeys = {"mlx5_2": ("0xffff", "0x8001", "0x8010", "0x0030")}
    results = _check(tmp_path, exp, node)
    bad = results["rail.rail2.pkeys"]
    assert bad.status == "FAIL"
    assert "0x8020 missing" in bad.message
    assert "0x8030 limited member only" in bad.message
    assert "subnet manager" in bad.hint
    assert results["rail.rail1.pkeys"].status == "PASS"


def test_unreadable_pkey_table_is_not_a_pass(tmp_path: Path) -> None:
    exp = expect.from_facts(plan_of(per_tenant_ib()).facts)
    results = _check(tmp_path, exp, _node(exp, pkeys=()))
    assert results["rail.rail0.pkeys"].status not in ("PASS", "FAIL")
