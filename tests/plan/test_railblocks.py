"""Routed rails with a subnet and gateway per leaf block (fabric.rails[].blocks): what a
stack is refused with (by config path), the IPPool and network each block renders, the
runbook's per-block gateway and route lines, and byte-identical output."""

from __future__ import annotations

import json
from typing import Any

import pytest
from builders import body, example_config, plan_of, problems_of
from conftest import sections

from gpufabric.model.stackfile import model_from_config
from gpufabric.outputs.runbook import render
from gpufabric.plan import ids
from gpufabric.plan.pulls import collect

LEAF = "topology.gpufabric.io/leaf"


@pytest.fixture
def routed() -> dict[str, Any]:
    return example_config("routed-b200")


def rail(config: dict[str, Any], i: int = 0) -> dict[str, Any]:
    rails: list[dict[str, Any]] = config["gpufabric:fabric"]["rails"]
    return rails[i]


def block(config: dict[str, Any], i: int = 0, j: int = 0) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = rail(config, i)["blocks"]
    return blocks[j]


# ----------------------------------------------------------------------- validation


def test_block_subnet_must_lie_inside_the_rail_aggregate(routed: dict[str, Any]) -> None:
    block(routed, 0, 1)["subnet"] = "172.31.1.0/24"
    block(routed, 0, 1)["gateway"] = "172.31.1.1"
    msg = problems_of(routed)["fabric.rails[0].blocks[1].subnet"]
    assert "172.31.1.0/24 is not inside the rail subnet 172.30.0.0/22" in msg


def test_blocks_of_a_rail_must_not_overlap(routed: dict[str, Any]) -> None:
    block(routed, 0, 1)["subnet"] = "172.30.0.128/25"
    block(routed, 0, 1)["gateway"] = "172.30.0.129"
    msg = problems_of(routed)["fabric.rails[0].blocks[1].subnet"]
    assert "overlaps blocks[0] 172.30.0.0/24" in msg


def test_blocks_of_different_rails_must_not_overlap(routed: dict[str, Any]) -> None:
    block(routed, 1, 0)["subnet"] = "172.30.0.0/24"
    block(routed, 1, 0)["gateway"] = "172.30.0.1"
    msg = problems_of(routed)["fabric.rails[1].blocks[0].subnet"]
    assert "overlaps rails[0].blocks[0] 172.30.0.0/24" in msg


@pytest.mark.parametrize(
    ("gateway", "expected"),
    [
        ("172.30.1.1", "172.30.1.1 is outside the block subnet 172.30.0.0/24"),
        ("172.30.0.0", "network or broadcast address of 172.30.0.0/24"),
        ("172.30.0.255", "network or broadcast address of 172.30.0.0/24"),
    ],
)
def test_gateway_lies_inside_its_block(routed: dict[str, Any], gateway: str, expected: str) -> None:
    block(routed)["gateway"] = gateway
    assert expected in problems_of(routed)["fabric.rails[0].blocks[0].gateway"]


def test_a_block_needs_a_gateway(routed: dict[str, Any]) -> None:
    del block(routed)["gateway"]
    assert "fabric.rails[0].blocks[0].gateway" in problems_of(routed)


def test_leaf_must_be_one_the_topology_labels_select(routed: dict[str, Any]) -> None:
    block(routed, 2, 1)["leaf"] = "leaf-03"
    problems = problems_of(routed)
    msg = problems["fabric.rails[2].blocks[1].leaf"]
    assert f"'leaf-03' is the {LEAF} of no node" in msg
    assert "known leaves: leaf-01, leaf-02" in msg
    # ... and the nodes under leaf-02 now have no block on rail2
    assert "no block for leaf leaf-02" in problems["fabric.rails[2].blocks"]
    assert "gpu-node-8" in problems["fabric.rails[2].blocks"]


def test_blocks_need_a_switch_level_to_name_the_leaf(routed: dict[str, Any]) -> None:
    scheduling = routed["gpufabric:scheduling"]
    scheduling["topologyLevels"] = []
    del scheduling["nodeTopology"]
    msg = problems_of(routed)["fabric.rails[0].blocks"]
    assert "scheduling.topologyLevels names no switch level" in msg


def test_block_must_hold_its_nodes_addresses(routed: dict[str, Any]) -> None:
    # 8 nodes under leaf-01 x 8 addresses = 64 > a /26's 61 usable (gateway taken)
    block(routed)["subnet"] = "172.30.0.0/26"
    msg = problems_of(routed)["fabric.rails[0].blocks[0].subnet"]
    assert "172.30.0.0/26 has 61 usable addresses but its 8 nodes x perNodeBlockSize 8" in msg


def test_without_a_node_table_a_block_holds_at_least_one_node(routed: dict[str, Any]) -> None:
    del routed["gpufabric:scheduling"]["nodeTopology"]
    block(routed)["subnet"] = "172.30.0.0/29"
    block(routed)["gateway"] = "172.30.0.1"
    msg = problems_of(routed)["fabric.rails[0].blocks[0].subnet"]
    assert "5 usable addresses, fewer than one node's perNodeBlockSize 8" in msg


def test_blocks_need_ippool(routed: dict[str, Any]) -> None:
    routed["gpufabric:fabric"]["ipam"] = {"poolType": "cidrpool", "perNodePrefix": 28}
    assert "need fabric.ipam.poolType: ippool" in problems_of(routed)["fabric.rails[0].blocks"]


def test_rail_gateway_and_blocks_exclude_each_other(routed: dict[str, Any]) -> None:
    rail(routed)["gateway"] = "172.30.0.1"
    assert "set together with blocks" in problems_of(routed)["fabric.rails[0].gateway"]


@pytest.mark.parametrize("leaf", ["Leaf_01", "x" * 60])
def test_block_network_name_is_a_dns_label(routed: dict[str, Any], leaf: str) -> None:
    for cfg in routed["gpufabric:scheduling"]["nodeTopology"].values():
        if cfg[LEAF] == "leaf-01":
            cfg[LEAF] = leaf
    for r in routed["gpufabric:fabric"]["rails"]:
        r["blocks"][0]["leaf"] = leaf
    assert "must be a DNS label" in problems_of(routed)["fabric.rails[0].blocks[0].leaf"]


def test_a_leaf_is_listed_once_per_rail(routed: dict[str, Any]) -> None:
    block(routed, 0, 1)["leaf"] = "leaf-01"
    assert "already blocks[0]" in problems_of(routed)["fabric.rails[0].blocks[1].leaf"]


def test_exclusions_fall_inside_one_block(routed: dict[str, Any]) -> None:
    rail(routed)["exclude"] = ["172.30.0.250-172.30.1.5"]
    msg = problems_of(routed)["fabric.rails[0].exclude[0]"]
    assert "not inside one block's subnet" in msg


# ----------------------------------------------------------------------- rendering


def test_each_block_gets_its_own_pool_for_its_leafs_nodes(routed: dict[str, Any]) -> None:
    rail(routed)["exclude"] = ["172.30.1.250-172.30.1.254"]
    plan = plan_of(routed)
    pool = body(plan, ids.pool("rail0-leaf-02"))
    assert (pool["kind"], pool["metadata"]["name"]) == ("IPPool", "rail0-leaf-02-pool")
    assert pool["spec"] == {
        "subnet": "172.30.1.0/24",
        "perNodeBlockSize": 8,
        "gateway": "172.30.1.1",
        "routes": [{"dst": "172.30.0.0/22"}],
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": LEAF, "operator": "In", "values": ["leaf-02"]}]}
            ]
        },
        "exclusions": [{"startIP": "172.30.1.250", "endIP": "172.30.1.254"}],
    }
    first = body(plan, ids.pool("rail0-leaf-01"))["spec"]
    assert (first["subnet"], first["gateway"]) == ("172.30.0.0/24", "172.30.0.1")
    assert "exclusions" not in first
    # no rail-wide pool: it would hand the same addresses to every leaf
    assert ids.pool("rail0") not in {i.id for i in plan.items}


def test_each_block_gets_a_network_naming_its_pool(routed: dict[str, Any]) -> None:
    plan = plan_of(routed)
    nads = {i.id: body(plan, i.id) for i in plan.items if i.id.startswith("network/nad/")}
    names = sorted(n["metadata"]["name"] for n in nads.values())
    assert names == [f"rail{r}-leaf-0{leaf}" for r in range(4) for leaf in (1, 2)]
    nad = next(n for n in nads.values() if n["metadata"]["name"] == "rail3-leaf-02")
    cni = json.loads(nad["spec"]["config"])
    assert cni["name"] == "rail3-leaf-02"
    assert cni["ipam"] == {"type": "nv-ipam", "poolName": "rail3-leaf-02-pool"}
    assert cni["type"] == "host-device"
    # the NAD waits for its own block's pool
    item = next(i for i in plan.items if nads.get(i.id) is nad)
    assert ids.pool("rail3-leaf-02") in item.depends_on


def test_tenants_may_attach_every_block_network(routed: dict[str, Any]) -> None:
    contract = plan_of(routed).facts.tenants["ml-train"]
    assert "rail0-leaf-01" in contract.network_names
    assert "rail3-leaf-02" in contract.network_names
    assert "rail0" not in contract.network_names


def test_a_rail_without_blocks_keeps_its_own_pool_beside_routed_ones(
    routed: dict[str, Any],
) -> None:
    plain = rail(routed, 3)
    del plain["blocks"]
    plan = plan_of(routed)
    assert body(plan, ids.pool("rail3"))["spec"]["subnet"] == "172.30.12.0/22"
    assert body(plan, ids.nad("rail3"))["metadata"]["name"] == "rail3"


def test_rendering_is_byte_identical(routed: dict[str, Any]) -> None:
    def dump() -> str:
        plan = plan_of(routed)
        net = [i.id for i in plan.items if i.id.startswith(("network/pool/", "network/nad/"))]
        return json.dumps([body(plan, i) for i in net])

    assert dump() == dump()


# ----------------------------------------------------------------------- runbook


def runbook(config: dict[str, Any]) -> str:
    from gpufabric.plan.build import build_plan

    model = model_from_config(sections(config), "routed-b200", from_file=True)
    return render(build_plan("routed-b200", model), collect("routed-b200", model))


def test_runbook_gives_a_gateway_and_route_line_per_block(routed: dict[str, Any]) -> None:
    text = runbook(routed)
    assert "### Routed rails: a subnet and gateway per leaf" in text
    for r, (agg, first, second) in enumerate(
        [("0.0/22", "0", "1"), ("4.0/22", "4", "5"), ("8.0/22", "8", "9"), ("12.0/22", "12", "13")]
    ):
        for leaf, third in (("leaf-01", first), ("leaf-02", second)):
            row = (
                f"| `{leaf}` | `rail{r}` | `172.30.{third}.1/24` | `172.30.{third}.0/24` | "
                f"`172.30.{agg}` via `172.30.{third}.1` |"
            )
            assert row in text
    # the pod-side check on leaf-01 reaches leaf-02's gateway through its own
    assert "| `leaf-01` | `rail0` | `172.30.0.0/24` | `172.30.1.1` | `172.30.0.1` |" in text
    assert "ip route get 172.30.1.1" in text
    # the single-gateway table is not printed for rails that have blocks
    assert "the gateway index of each node's block" not in text
