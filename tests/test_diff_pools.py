"""`gpufabric diff` on a fleet: every change names the node pool its object belongs to, and a
pool added to (or removed from) the stack shows as such, with its objects. One-pool stacks'
renders and diffs carry no pool at all (their bytes are unchanged: tests/test_golden.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import example_config, sections

from gpufabric.cli import main
from gpufabric.model.stackfile import model_from_config
from gpufabric.outputs import diff
from gpufabric.outputs.render import render_files
from gpufabric.plan.build import Plan, build_plan
from gpufabric.plan.items import Item, K8sObject, Layer
from gpufabric.plan.poolitems import pool_of


def _plan(config: dict[str, Any], name: str = "fleet-mixed") -> Plan:
    return build_plan(name, model_from_config(sections(config), name, from_file=True))


def _config_map(name: str) -> Item:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {}}
    return Item(id=f"tenants/{name}", layer=Layer.TENANTS, payload=K8sObject(body))


def test_items_of_a_fleet_name_their_pool_cluster_wide_ones_none() -> None:
    plan = _plan(example_config("fleet-mixed"))
    by_id = {it.id: pool_of(it, plan.facts) for it in plan.items}
    assert by_id["network/nad/ib0"] == "h100"  # a rail only h100 has
    assert by_id["network/pool/ib7"] == "h100"
    # each pool's flavor: its nodeLabels select that pool's nodes
    assert by_id["scheduling/resource-flavor/h100"] == "h100"
    assert by_id["scheduling/resource-flavor/l40s"] == "l40s"
    assert by_id["network/nic-cluster-policy"] is None  # cluster-wide
    assert by_id["gpu/gpu-operator"] is None
    assert pool_of(_config_map("nccl-env-l40s"), plan.facts) == "l40s"
    assert pool_of(_config_map("nccl-env-a100"), plan.facts) is None  # no such pool
    explicit = Item(id="x", layer=Layer.NETWORK, payload=_config_map("y").payload, pool="l40s")
    assert pool_of(explicit, plan.facts) == "l40s"


def test_plan_json_lists_a_fleets_pools_and_none_for_one_pool() -> None:
    fleet = json.loads(render_files(_plan(example_config("fleet-mixed")))["plan.json"])
    assert fleet["pools"] == ["h100", "l40s"]
    assert {i["id"]: i.get("pool") for i in fleet["items"]}["network/nad/ib3"] == "h100"
    one = json.loads(render_files(_plan(example_config("lab-roce"), "lab-roce"))["plan.json"])
    assert "pools" not in one
    assert not any("pool" in i for i in one["items"])


def _side(pools: list[str], items: list[dict[str, Any]]) -> diff.Side:
    plan: dict[str, Any] = {"stack": "s", "items": items}
    if pools:
        plan["pools"] = pools
    files = {"plan.json": json.dumps(plan)}
    for it in items:
        files[it["files"][0]] = yaml.safe_dump(
            {"apiVersion": "v1", "kind": it["kind"], "metadata": {"name": it["name"]}}
        )
    return diff.side_from_files(files)


def _item(item_id: str, kind: str, name: str, pool: str | None = None) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "object",
        "layer": "network",
        "kind": kind,
        "name": name,
        "files": [f"objects/{item_id}.yaml"],
        **({"pool": pool} if pool else {}),
    }


def test_a_pool_added_shows_as_added_with_its_objects() -> None:
    shared = _item("network/nic-cluster-policy", "NicClusterPolicy", "nic-cluster-policy")
    base = _side([], [shared])  # one pool: it becomes the fleet's first
    head = _side(
        ["h100", "l40s"],
        [
            shared,
            _item("network/nic-node-policy/l40s", "NicNodePolicy", "l40s", "l40s"),
            _item("tenants/nccl-env-l40s", "ConfigMap", "nccl-env-l40s", "l40s"),
        ],
    )
    diffs = diff.diff(base, head)
    pools = diff.pools_changed(base, head)
    assert pools == (["l40s"], [])
    text = diff.to_markdown("s", "main", diffs, pools)
    assert "#### pool l40s added (2 items)" in text
    assert "- `network/nic-node-policy/l40s` NicNodePolicy l40s\n" in text
    assert "- `tenants/nccl-env-l40s` ConfigMap nccl-env-l40s, pool l40s: added, update" in text
    doc = json.loads(diff.to_json("s", "main", diffs, pools))
    assert doc["poolsAdded"] == ["l40s"]
    assert {i["id"]: i.get("pool") for i in doc["items"]} == {
        "network/nic-node-policy/l40s": "l40s",
        "tenants/nccl-env-l40s": "l40s",
    }
    removed = diff.pools_changed(head, base)
    assert removed == ([], ["l40s"])
    assert "#### pool l40s removed (2 items)" in diff.to_markdown(
        "s", "main", diff.diff(head, base), removed
    )


def test_a_one_pool_diff_names_no_pool() -> None:
    item = _item("network/nad/ib0", "NetworkAttachmentDefinition", "ib0")
    changed = {**item, "name": "ib0", "protect": True}
    diffs = diff.diff(_side([], [item]), _side([], [changed]))
    assert diff.pools_changed(_side([], [item]), _side([], [changed])) == ([], [])
    assert all(d.pool is None and "pool" not in d.as_dict() for d in diffs)


def test_a_disruptive_change_in_a_fleet_names_its_pool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    head = example_config("fleet-mixed")
    base = example_config("fleet-mixed")
    base["gpufabric:fabric"]["mtu"] = 2044  # h100's fabric (the stack's)
    for directory, config in (("base-src", base), ("head-src", head)):
        (tmp_path / directory).mkdir()
        (tmp_path / directory / "Pulumi.fleet-mixed.yaml").write_text(
            yaml.safe_dump({"config": config})
        )
    src = tmp_path / "base-src" / "Pulumi.fleet-mixed.yaml"
    assert main(["render", "--stack", str(src), "--out", str(tmp_path / "base")]) == 0
    capsys.readouterr()
    head_file = tmp_path / "head-src" / "Pulumi.fleet-mixed.yaml"
    code = main(["diff", "--stack", str(head_file), "--base", str(tmp_path / "base")])
    out = capsys.readouterr().out
    assert code == 0
    assert (
        "- **network/nad/ib0** (NetworkAttachmentDefinition gpufabric-networks/ib0, pool h100, "
        "changed)" in out
    )
    assert "MTU change on ib0 (2044 -> 4092)" in out
    assert "#### pool" not in out  # the same pools on both sides
