"""Routed rails spanning leaves (fabric.ipam.routing: spanLeaves): what a stack is refused
with (by config path), the one CIDRPool and network per rail it renders (validated against
the pinned nv-ipam CRD), 16-node jobs across a four-leaf fabric, --leaf pinning, and the
runbook's route checks across the spine."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import (
    SPAN_LEAF_LABEL,
    body,
    model_of,
    plan_of,
    problems_of,
    routed_span_config,
    sections,
)

from gpufabric.cli import main
from gpufabric.model.stackfile import model_from_config
from gpufabric.outputs.runbook import render
from gpufabric.outputs.schema import validate_objects
from gpufabric.plan import ids
from gpufabric.plan.pulls import collect


@pytest.fixture
def span() -> dict[str, Any]:
    return routed_span_config()


def block(config: dict[str, Any], i: int = 0, j: int = 0) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = config["gpufabric:fabric"]["rails"][i]["blocks"]
    return blocks[j]


# ----------------------------------------------------------------------- validation


def test_the_example_variant_is_valid(span: dict[str, Any]) -> None:
    assert model_of(span).fabric.ipam.routing == "spanLeaves"


def test_spanning_needs_a_cidrpool(span: dict[str, Any]) -> None:
    span["gpufabric:fabric"]["ipam"] = {"routing": "spanLeaves"}
    msg = problems_of(span)["fabric.ipam.poolType"]
    assert "'ippool' with fabric.ipam.routing: spanLeaves; accepted: cidrpool" in msg


def test_spanning_needs_rails_with_blocks(span: dict[str, Any]) -> None:
    for rail in span["gpufabric:fabric"]["rails"]:
        del rail["blocks"]
    assert "no rail has blocks" in problems_of(span)["fabric.ipam.routing"]


def test_every_gpu_node_needs_a_leaf(span: dict[str, Any]) -> None:
    topology = span["gpufabric:scheduling"]["nodeTopology"]
    del topology["gpu-node-31"]
    msg = problems_of(span)["scheduling.nodeTopology"]
    assert "places 31 nodes under a leaf but gpuNodes.count is 32" in msg


def test_the_node_table_is_required(span: dict[str, Any]) -> None:
    span["gpufabric:scheduling"]["nodeTopology"] = {}
    msg = problems_of(span)["scheduling.nodeTopology"]
    assert "required with fabric.ipam.routing: spanLeaves" in msg


def test_a_node_without_its_leaf_label_is_named(span: dict[str, Any]) -> None:
    span["gpufabric:scheduling"]["nodeTopology"]["gpu-node-3"] = {"example.com/row": "r1"}
    msg = problems_of(span)["scheduling.nodeTopology.gpu-node-3"]
    assert f"missing {SPAN_LEAF_LABEL}" in msg


def test_a_block_must_hold_its_nodes_prefixes(span: dict[str, Any]) -> None:
    block(span, 1, 2)["subnet"] = "172.30.6.0/27"
    block(span, 1, 2)["gateway"] = "172.30.6.1"
    msg = problems_of(span)["fabric.rails[1].blocks[2].subnet"]
    assert "holds 4 /29 node prefixes but scheduling.nodeTopology puts 8 nodes under leaf-03" in msg


def test_a_block_narrower_than_a_node_prefix_is_refused(span: dict[str, Any]) -> None:
    block(span, 0, 0)["subnet"] = "172.30.0.0/30"
    block(span, 0, 0)["gateway"] = "172.30.0.1"
    msg = problems_of(span)["fabric.rails[0].blocks[0].subnet"]
    assert "does not split into fabric.ipam.perNodePrefix /29 node prefixes" in msg


@pytest.mark.parametrize(
    ("gateway", "expected"),
    [
        ("172.30.0.9", "not a host address of the block's first /29 node prefix 172.30.0.0/29"),
        ("172.30.0.7", "not a host address of the block's first /29 node prefix"),
        ("172.30.1.1", "172.30.1.1 is outside the block subnet 172.30.0.0/24"),
    ],
)
def test_gateway_is_a_host_of_the_first_node_prefix(
    span: dict[str, Any], gateway: str, expected: str
) -> None:
    block(span)["gateway"] = gateway
    assert expected in problems_of(span)["fabric.rails[0].blocks[0].gateway"]


def test_every_block_of_a_rail_puts_its_gateway_at_one_offset(span: dict[str, Any]) -> None:
    block(span, 2, 3)["gateway"] = "172.30.11.6"
    msg = problems_of(span)["fabric.rails[2].blocks[3].gateway"]
    assert "at offset 6 of its node prefix but blocks[0]'s gateway is at offset 1" in msg


def test_per_leaf_form_still_refuses_a_cidrpool(span: dict[str, Any]) -> None:
    span["gpufabric:fabric"]["ipam"]["routing"] = "perLeaf"
    assert "spanLeaves" in problems_of(span)["fabric.rails[0].blocks"]


# ----------------------------------------------------------------------- the objects


def test_one_cidrpool_per_rail_gives_each_node_a_prefix_of_its_leafs_block(
    span: dict[str, Any],
) -> None:
    plan = plan_of(span)
    pools = [i.id for i in plan.items if i.id.startswith("network/pool/")]
    assert pools == [ids.pool(f"rail{r}") for r in range(4)]
    pool = body(plan, ids.pool("rail1"))
    assert pool["kind"] == "CIDRPool"
    spec = pool["spec"]
    assert spec["cidr"] == "172.30.4.0/22"
    assert spec["perNodeNetworkPrefix"] == 29
    assert spec["gatewayIndex"] == 1
    assert spec["routes"] == [{"dst": "172.30.4.0/22"}]
    allocations = {a["nodeName"]: a for a in spec["staticAllocations"]}
    assert len(allocations) == 32
    # natural order under each leaf: gpu-node-8 is leaf-02's first, gpu-node-31 leaf-04's last
    assert allocations["gpu-node-8"] == {
        "nodeName": "gpu-node-8", "prefix": "172.30.5.0/29", "gateway": "172.30.5.1",
    }  # fmt: skip
    assert allocations["gpu-node-31"]["prefix"] == "172.30.7.56/29"
    leaf_blocks = {b["leaf"]: b["subnet"] for b in span["gpufabric:fabric"]["rails"][1]["blocks"]}
    topology = span["gpufabric:scheduling"]["nodeTopology"]
    for node, a in allocations.items():
        prefix = ipaddress.ip_network(a["prefix"])
        # the nv-ipam rules: the gateway inside the node's prefix, the prefix in its leaf's block
        assert ipaddress.ip_address(a["gateway"]) in prefix
        assert prefix.subnet_of(ipaddress.ip_network(leaf_blocks[topology[node][SPAN_LEAF_LABEL]]))
    assert len({a["prefix"] for a in allocations.values()}) == 32
    # served only to the listed nodes: an unlisted node gets no prefix of another leaf's block
    terms = spec["nodeSelector"]["nodeSelectorTerms"]
    assert [t["matchFields"][0]["values"] for t in terms] == [[n] for n in allocations]


def test_one_network_per_rail_names_its_pool(span: dict[str, Any]) -> None:
    plan = plan_of(span)
    nads = [i.id for i in plan.items if i.id.startswith("network/nad/")]
    assert nads == [ids.nad(f"rail{r}") for r in range(4)]
    cni = json.loads(body(plan, ids.nad("rail0"))["spec"]["config"])
    ipam = cni.get("ipam") or cni["plugins"][0]["ipam"]
    assert ipam["poolName"] == "rail0-pool"
    assert ipam["poolType"] == "cidrpool"


def test_rendered_pools_and_networks_validate_against_the_pinned_crds(
    span: dict[str, Any], crd_dir: Path
) -> None:
    plan = plan_of(span)
    objects = [
        body(plan, i.id) for i in plan.items if i.id.startswith(("network/pool/", "network/nad/"))
    ]
    report = validate_objects(objects, "1.33", crd_dir)
    assert report.ok, report.errors
    assert report.checked_custom >= 4


def test_tenants_get_one_networks_annotation_for_every_leaf(span: dict[str, Any]) -> None:
    contract = plan_of(span).facts.tenants["ml-train"]
    assert [n["name"] for n in json.loads(contract.networks)] == [f"rail{r}" for r in range(4)]
    assert dict(contract.leaf_networks) == {}
    assert contract.span_leaves == ("leaf-01", "leaf-02", "leaf-03", "leaf-04")


# ----------------------------------------------------------------------- jobs


def job(write_stack: Any, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, Any]:
    stack = write_stack(routed_span_config(), "span")
    argv = ["job", "--stack", str(stack), "--tenant", "ml-train", "--kind", "mpijob", *extra]
    code = main(argv)
    out, err = capsys.readouterr()
    return code, yaml.safe_load(out) if code == 0 else err


def test_a_16_node_job_runs_across_four_leaves(
    write_stack: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    code, manifest = job(write_stack, capsys, "--nodes", "16")
    assert code == 0
    worker = manifest["spec"]["mpiReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 16
    template = worker["template"]
    networks = json.loads(template["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"])
    assert [n["name"] for n in networks] == [f"rail{r}" for r in range(4)]
    assert SPAN_LEAF_LABEL not in template["spec"].get("nodeSelector", {})


def test_leaf_still_pins_a_job_under_one_leaf(
    write_stack: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    code, manifest = job(write_stack, capsys, "--nodes", "8", "--leaf", "leaf-03")
    assert code == 0
    template = manifest["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
    assert template["spec"]["nodeSelector"][SPAN_LEAF_LABEL] == "leaf-03"
    networks = json.loads(template["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"])
    assert [n["name"] for n in networks] == [f"rail{r}" for r in range(4)]
    code, err = job(write_stack, capsys, "--nodes", "16", "--leaf", "leaf-03")
    assert code == 2
    assert "16 GPU nodes do not fit under leaf-03: scheduling.nodeTopology puts 8 there" in err
    code, err = job(write_stack, capsys, "--nodes", "2", "--leaf", "leaf-09")
    assert code == 2
    assert "accepted: leaf-01, leaf-02, leaf-03, leaf-04" in err


# ----------------------------------------------------------------------- runbook


def test_runbook_lists_each_nodes_leaf_address_and_routes_across_the_spine(
    span: dict[str, Any],
) -> None:
    model = model_from_config(sections(span), "span", from_file=True)
    from gpufabric.plan.build import build_plan

    text = render(build_plan("span", model), collect("span", model))
    assert "### Routed rails spanning leaves: a prefix per node" in text
    row = "| `leaf-02` | `rail0` | `172.30.1.0/24` | `gpu-node-9` | `172.30.1.8/29` | `172.30.1.9/29` |"
    assert row in text
    # a pod on leaf-01's first node reaches leaf-02's through its own node's gateway
    assert "| `gpu-node-0` (`leaf-01`) | `rail0` | `172.30.0.0/29` | `172.30.1.1` (`leaf-02`) | `172.30.0.1` |" in text  # fmt: skip
    assert "ip route get 172.30.1.1" in text
    assert "### Routed rails: a subnet and gateway per leaf" not in text
    assert "--nodes 32 --junit nccl.xml" in text  # acceptance across every leaf
    assert "--leaf" not in text.split("## Acceptance", 1)[1].split("```sh", 1)[1].split("```")[0]
