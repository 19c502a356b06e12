"""gpufabric discover against the fake API server: a cluster seeded from a stack (the objects
its Plan renders, the nodes it implies) is read back into a stack file that validates and
renders back with no difference; a hand-made change shows as a per-field difference."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
import yaml
from builders import (
    SHIPPED_STACKS,
    SPAN_LEAF_LABEL,
    example_config,
    fleet_config,
    model_of,
    plan_of,
    routed_span_config,
)
from discoverseed import discovered, nodes, objects, seeded
from fake_kube import FakeKube
from stackfuzz import mutate

from gpufabric.cli import main
from gpufabric.discover.compose import infer
from gpufabric.discover.infer_sources import mirror_of
from gpufabric.discover.roundtrip import compare
from gpufabric.model.problems import StackError
from gpufabric.model.stackfile import load_stack, parse_stack_text
from gpufabric.plan.build import Plan, build_plan


def round_trip(plan: Plan) -> tuple[str, list[str]]:
    """(discovered stack text, differences) of a cluster seeded from the plan."""
    config, diffs, _ = discovered(seeded(plan), plan.stack)
    return yaml.safe_dump({"config": config}), diffs


@pytest.mark.parametrize("stack", SHIPPED_STACKS)  # every one round-trips
def test_shipped_stack_round_trips_with_no_difference(stack: str) -> None:
    _, diffs = round_trip(load_stack(stack).plan)
    assert diffs == []


def test_routed_rails_fold_back_into_leaf_blocks() -> None:
    # routed-b200: a network and an IPPool per rail per leaf (<rail>-<leaf>, served to the
    # nodes under that leaf), host-device rails whose PF only the device plugin names
    # (before: no valid stack, fabric.type missing and eight rails without netdev)
    _, config, notes = infer(seeded(load_stack("routed-b200").plan), "x")
    fabric = config["gpufabric:fabric"]
    assert (fabric["type"], fabric["rdma"]) == ("roce", "hostdevice")
    rail = fabric["rails"][0]
    assert rail == {
        "name": "rail0",
        "netdev": "ens1f0np0",
        "hca": "mlx5_0",
        "subnet": "172.30.0.0/22",
        "blocks": [
            {"leaf": "leaf-01", "subnet": "172.30.0.0/24", "gateway": "172.30.0.1"},
            {"leaf": "leaf-02", "subnet": "172.30.1.0/24", "gateway": "172.30.1.1"},
        ],
    }
    topology = config["gpufabric:scheduling"]["nodeTopology"]
    assert len(topology) == 16
    assert topology["gpu-node-9"] == {"topology.gpufabric.io/leaf": "leaf-02"}
    assert not [n for n in notes.unmapped if n.startswith(("NetworkAttachment", "IPPool"))]


@pytest.mark.parametrize(("nodes", "leaves"), [(32, 4), (30, 4), (8, 3), (5, 1)])
def test_rails_spanning_leaves_round_trip(nodes: int, leaves: int) -> None:
    # spanLeaves: one CIDRPool per rail whose static allocations give each node a prefix of
    # its leaf's block; the blocks come back from the allocations and the nodes' leaf labels
    plan = plan_of(routed_span_config(nodes, leaves))
    text, diffs = round_trip(plan)
    assert diffs == []
    fabric = yaml.safe_load(text)["config"]["gpufabric:fabric"]
    assert fabric["ipam"]["routing"] == "spanLeaves"
    assert len(fabric["rails"][0]["blocks"]) == leaves


def test_span_block_lengths_are_said_to_be_chosen() -> None:
    # a block's own length is on no live object: the widest that fits is written, and said
    _, _, notes = infer(seeded(plan_of(routed_span_config(8, 2))), "x")
    assert any("widest aligned prefix" in line for line in notes.unmapped)


def test_span_allocations_of_unlabelled_nodes_are_not_mapped() -> None:
    snap = seeded(plan_of(routed_span_config(8, 2)))
    for host in snap.nodes:
        host["metadata"]["labels"].pop(SPAN_LEAF_LABEL, None)
    _, config, notes = infer(snap, "x")
    assert "routing" not in config["gpufabric:fabric"].get("ipam", {})
    assert any("has no topology.gpufabric.io/leaf label" in line for line in notes.unmapped)


def test_fleet_pools_do_not_overwrite_each_other() -> None:
    plan = load_stack("fleet-mixed").plan
    _, config, _ = infer(seeded(plan), "x")
    pools = config["gpufabric:gpuNodes"]
    assert [p["name"] for p in pools] == ["h100", "l40s"]
    assert pools[1]["fabric"]["type"] == "roce"
    assert len(pools[1]["fabric"]["rails"]) == 2
    assert len(config["gpufabric:fabric"]["rails"]) == 8


def test_fleet_without_tenants_gives_each_pool_its_own_rails() -> None:
    # no tenant, so no nccl-env names a pool's networks: the rails a pool has are the ones
    # whose device resource its nodes offer (before: every rail, and the ipoib rails came
    # back as macvlan in the RoCE pool's fabric)
    text = Path("stacks/Pulumi.fleet-mixed.yaml").read_text(encoding="utf-8")
    config = yaml.safe_load(text)
    del config["config"]["gpufabric:tenants"]
    plan = build_plan("fleet-mixed", parse_stack_text(yaml.safe_dump(config), "no-tenants"))
    discovered, diffs = round_trip(plan)
    assert diffs == []
    pools = yaml.safe_load(discovered)["config"]["gpufabric:gpuNodes"]
    assert [r["name"] for r in pools[1]["fabric"]["rails"]] == ["roce0", "roce1"]


def test_storage_is_read_back_from_the_claims_and_the_nfs_class() -> None:
    _, config, notes = infer(seeded(load_stack("prod-ib").plan), "x")
    storage = config["gpufabric:storage"]
    assert storage["backends"] == [
        {
            "name": "nfsordma",
            "nfs": {
                "server": "10.40.0.10",
                "share": "/export/training",
                "nfsVersion": "4.2",
                "mountOptions": ["hard", "timeo=600"],
            },
        }
    ]
    assert storage["claims"] == [
        {"name": "checkpoints", "size": "50Ti"},
        {"name": "datasets", "size": "200Ti"},
    ]
    research = next(t for t in config["gpufabric:tenants"] if t["namespace"] == "research")
    assert research["claims"][2] == {"name": "scratch", "size": "10Ti", "mountPath": "/scratch"}
    # the mount path is on no live object: written, and said so
    assert any("mountPath" in line for line in notes.unmapped)
    assert "claims" not in config["gpufabric:tenants"][0]


def test_roce_qps_per_connection_is_read_from_nccl_env() -> None:
    _, config, _ = infer(seeded(load_stack("lab-roce").plan), "x")
    assert config["gpufabric:fabric"]["roce"] == {"qpsPerConnection": 4}


def test_cidrpool_gateway_driver_container_and_volcano_priority_are_read_back() -> None:
    _, config, _ = infer(seeded(load_stack("roce-sriov-volcano").plan), "x")
    fabric = config["gpufabric:fabric"]
    assert [r["gateway"] for r in fabric["rails"]] == [
        "172.20.0.1",
        "172.20.8.1",
        "172.20.16.1",
        "172.20.24.1",
    ]
    assert fabric["nicDriver"] == {"source": "operator"}
    tenants = {t["namespace"]: t for t in config["gpufabric:tenants"]}
    assert tenants["ml-platform"]["priority"] == 100


def test_trainer_runtimes_and_monitoring_are_read_back() -> None:
    _, config, notes = infer(seeded(load_stack("roce-sriov-volcano").plan), "x")
    assert config["gpufabric:training"]["trainer"] == {
        "enabled": True,
        "runtimes": ["deepspeed-distributed", "torch-distributed"],
    }
    assert config["gpufabric:monitoring"]["enabled"] is True
    assert config["gpufabric:monitoring"]["health"]["inCluster"]["tenant"] == "ml-batch"
    assert any(line.startswith("monitoring: nodeProblemDetector") for line in notes.unmapped)


def _valid_mutations(count: int) -> list[str]:
    rng = random.Random(39)
    out: list[str] = []
    tries = 0
    while len(out) < count and tries < count * 40:
        tries += 1
        _, text = mutate(rng, SHIPPED_STACKS[tries % len(SHIPPED_STACKS)])
        try:
            parse_stack_text(text, "fuzz")
        except (StackError, yaml.YAMLError, UnicodeError, ValueError):
            continue
        out.append(text)
    return out


PROPERTY_COUNT = 200


def test_random_valid_stacks_round_trip() -> None:
    """Valid mutations of the round-tripping examples: each discovered stack validates and
    renders back with no difference (the count and the failures are in the message)."""
    texts = _valid_mutations(PROPERTY_COUNT)
    failed = []
    for i, text in enumerate(texts):
        model = parse_stack_text(text, f"fuzz{i}")
        plan = build_plan("fuzz", model)
        try:
            _, diffs = round_trip(plan)
        except StackError as err:
            failed.append(f"{i}: invalid: {err.message('discover')[:200]}")
            continue
        if diffs:
            failed.append(f"{i}: {diffs[0]}")
    assert len(texts) == PROPERTY_COUNT
    assert not failed, f"{len(failed)} of {len(texts)}:\n" + "\n".join(failed[:20])


def _serve(fake: FakeKube, plan: Plan) -> None:
    for obj in nodes(plan) + objects(plan):
        fake.add(obj)


def test_command_writes_a_stack_and_passes_the_gate(tmp_path: Path, capsys) -> None:
    plan = load_stack("fleet-mixed").plan
    with FakeKube() as fake:
        _serve(fake, plan)
        out = tmp_path / "stacks" / "Pulumi.fleet-mixed.yaml"
        code = main(["discover", "--kubeconfig", str(fake.kubeconfig(tmp_path)), "--out", str(out)])
        assert {m for m, _ in fake.requests} == {"GET"}
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "0 field difference(s)" in captured.out
    assert load_stack(str(out)).model.cluster.name == "fleet-mixed"


def test_another_stack_name_relabels_every_object_and_says_so(tmp_path: Path, capsys) -> None:
    # the Pulumi stack is the file's: its name labels every object, so a cluster made by
    # stack fleet-mixed discovered as stack found differs on each object's label (before: the
    # gate rendered as fleet-mixed and passed, while `pulumi up --stack found` relabels all)
    plan = load_stack("fleet-mixed").plan
    with FakeKube() as fake:
        _serve(fake, plan)
        out = tmp_path / "stacks" / "Pulumi.found.yaml"
        code = main(["discover", "--kubeconfig", str(fake.kubeconfig(tmp_path)), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 4
    assert "hint: the cluster's objects carry gpufabric.io/stack=fleet-mixed" in err
    assert f"--out {tmp_path / 'stacks' / 'Pulumi.fleet-mixed.yaml'} keeps them" in err
    assert 'metadata.labels.gpufabric.io/stack: live "fleet-mixed", rendered "found"' in err
    assert "# hint: the cluster's objects carry" in out.read_text(encoding="utf-8")


def test_a_hand_made_change_is_a_difference_and_exits_4(tmp_path: Path, capsys) -> None:
    plan = load_stack("dgx-h100").plan
    with FakeKube() as fake:
        _serve(fake, plan)
        for path, obj in fake.objects.items():
            if path.endswith("/clusterqueues/" + obj["metadata"]["name"]):
                obj["spec"]["queueingStrategy"] = "StrictFIFO"
        cfg = str(fake.kubeconfig(tmp_path))
        out = tmp_path / "Pulumi.dgx-h100.yaml"
        code = main(["discover", "--kubeconfig", cfg, "--out", str(out)])
        err = capsys.readouterr().err
        assert code == 4
        assert 'spec.queueingStrategy: live "StrictFIFO", rendered "BestEffortFIFO"' in err
        assert main(["discover", "--kubeconfig", cfg, "--out", str(out), "--allow-diff"]) == 0


def test_print_rbac_asks_get_and_list_only(capsys) -> None:
    assert main(["discover", "--print-rbac"]) == 0
    role = yaml.safe_load(capsys.readouterr().out)
    assert role["kind"] == "ClusterRole"
    assert {v for rule in role["rules"] for v in rule["verbs"]} == {"get", "list"}
    assert not any("secrets" in rule.get("resources", []) for rule in role["rules"])
    urls = [rule for rule in role["rules"] if "nonResourceURLs" in rule]
    assert urls == [{"nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*"], "verbs": ["get"]}]


def test_out_must_name_a_stack_file(capsys) -> None:
    assert main(["discover", "--out", "stacks/foo.yaml"]) == 2
    assert "--out" in capsys.readouterr().err


LARGE = 2_500
"""Nodes of the large-cluster test: five pages of 500 and more; the 10,000-node figure (and
its 30 s target) is benchmarks/discover_fleet.py's."""


def test_a_large_cluster_is_read_in_full_and_round_trips(tmp_path: Path, capsys) -> None:
    # every page of nodes is read, the pool's count is the nodes' and the render of the
    # discovered stack is the cluster (before: a timed assertion on kind-dev, whose /24
    # rail cannot address the nodes, that only checked "read 1000" as a substring)
    plan = build_plan("big", model_of(fleet_config("dgx-h100", LARGE)))
    with FakeKube() as fake:
        seeded_nodes = nodes(plan, per_pool=LARGE)
        for obj in seeded_nodes + objects(plan):
            fake.add(obj)
        out = tmp_path / "Pulumi.big.yaml"
        code = main(["discover", "--kubeconfig", str(fake.kubeconfig(tmp_path)), "--out", str(out)])
        node_lists = [p for m, p in fake.requests if m == "GET" and p.startswith("/api/v1/nodes")]
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert len(seeded_nodes) == LARGE
    assert len(node_lists) == LARGE // 500  # 500 a page
    first = captured.out.splitlines()[0]
    assert re.fullmatch(
        rf"read {LARGE} nodes and {len(objects(plan))} objects in [0-9.]+ s; "
        rf"wrote {re.escape(str(out))} \(stack big\)",
        first,
    ), first
    assert captured.out.splitlines()[-1] == (
        f"round trip: {len(objects(plan))} objects identical, 0 field difference(s), 0 foreign"
    )
    assert load_stack(str(out)).plan.facts.nodes.count == LARGE


def test_rail_hcas_are_read_from_the_fabric_dashboard() -> None:
    # SR-IOV rails set no NCCL_IB_HCA: the fabric dashboard's per-rail panels name the device
    # (before: the rails came back without hca and the board showed "all RDMA ports")
    _, config, _ = infer(seeded(load_stack("roce-sriov-volcano").plan), "x")
    rails = config["gpufabric:fabric"]["rails"]
    assert [r.get("hca") for r in rails] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]


def test_an_existing_prometheus_and_its_selector_labels_are_read_back() -> None:
    # the kube-state-metrics ConfigMap gpufabric writes only for an existing Prometheus, and
    # the labels on its ServiceMonitors (before: install true, no labels, 3 differences)
    _, config, _ = infer(seeded(load_stack("prod-ib").plan), "x")
    assert config["gpufabric:monitoring"]["prometheus"] == {
        "install": False,
        "selectorLabels": {"prometheus": "site"},
    }
    # an installed Prometheus: its chart's release label is not the stack's
    _, config, _ = infer(seeded(load_stack("roce-sriov-volcano").plan), "x")
    assert "prometheus" not in config["gpufabric:monitoring"]


def test_mirrors_are_read_from_image_references() -> None:
    # the NicClusterPolicy's repositories and the runtime's image read through the mirror
    # (before: no sources, 4 differences); a mirror no image shows is not invented
    _, config, _ = infer(seeded(load_stack("prod-ib").plan), "x")
    assert config["gpufabric:sources"] == {
        "registries": {
            "docker.io": "harbor.prod-ib.example.internal/dockerhub",
            "nvcr.io": "harbor.prod-ib.example.internal/nvcr",
        }
    }
    _, config, _ = infer(seeded(load_stack("dgx-h100").plan), "x")
    assert "gpufabric:sources" not in config


@pytest.mark.parametrize(
    ("live", "rendered", "pair"),
    [
        ("m.example/nv/nvidia/x:1", "nvcr.io/nvidia/x:1", ("nvcr.io", "m.example/nv")),
        ("m.example/hub/busybox:1", "busybox:1", ("docker.io", "m.example/hub")),
        ("nvcr.io/nvidia/x:2", "nvcr.io/nvidia/x:1", None),  # a changed tag is no mirror
        ("nvcr.io/other/nvidia/x:1", "nvcr.io/nvidia/x:1", None),
    ],
)
def test_mirror_of_an_image_reference(live: str, rendered: str, pair: object) -> None:
    assert mirror_of(live, rendered) == pair


def test_volcano_topology_levels_are_read_from_its_hypernodes() -> None:
    # Volcano's label discoverer names each tier's node label (tierName); a hand-made
    # HyperNode (no discovery-source label) is not read (before: no topologyLevels, and the
    # runtimes' networkTopology was missing from the render)
    snap = seeded(load_stack("roce-sriov-volcano").plan)
    _, config, _ = infer(snap, "x")
    assert config["gpufabric:scheduling"]["topologyLevels"] == ["topology.gpufabric.io/leaf"]
    for hyper in snap.objects["HyperNode"]:
        hyper["metadata"]["labels"] = {}
    _, config, _ = infer(snap, "x")
    assert "topologyLevels" not in config["gpufabric:scheduling"]


def test_gpu_operator_settings_are_read_from_the_cluster_policy() -> None:
    # DGX OS hosts bring the driver and load nvidia-peermem: the chart's ClusterPolicy says so
    # (before: not read, and the discovered stack would have installed a driver container)
    _, config, _ = infer(seeded(load_stack("dgx-h100").plan), "x")
    assert config["gpufabric:gpuOperator"] == {"driver": {"enabled": False}}
    assert config["gpufabric:fabric"]["gpuDirect"] == "peermem"
    _, config, _ = infer(seeded(load_stack("gb200-nvl72").plan), "x")
    assert config["gpufabric:gpuOperator"] == {"driver": {"version": "580.95.05"}}
    _, config, _ = infer(seeded(load_stack("prod-ib").plan), "x")
    assert config["gpufabric:gpuOperator"] == {"dcgmExporter": {"serviceMonitor": True}}
    assert "gpuDirect" not in config["gpufabric:fabric"]


def test_a_changed_cluster_policy_value_is_a_difference() -> None:
    plan = load_stack("prod-ib").plan
    snap = seeded(plan)
    policy = snap.objects["ClusterPolicy"][0]
    policy["spec"]["gdrcopy"]["enabled"] = True
    diffs = [str(d) for d in compare(plan, snap.all()).differences]
    assert diffs == [
        "ClusterPolicy cluster-policy: spec.gdrcopy.enabled: live true, rendered false"
    ]
    # read back, the stack asks for it, and the round trip is clean again
    name, config, _ = infer(snap, "x")
    assert config["gpufabric:gpuOperator"]["gdrcopy"] is True
    found = build_plan(name, parse_stack_text(yaml.safe_dump({"config": config}), name))
    assert compare(found, snap.all()).differences == []


def test_a_cluster_without_the_gpu_operator_shows_it_created() -> None:
    plan = load_stack("lab-roce").plan
    snap = seeded(plan)
    del snap.objects["ClusterPolicy"]
    diffs = [str(d) for d in compare(plan, snap.all()).differences]
    assert diffs == [
        'ClusterPolicy (the GPU Operator\'s): (object): live (absent), rendered "created"'
    ]


@pytest.mark.parametrize("stack", ["dgx-h100", "roce-sriov-volcano", "routed-b200", "fleet-mixed"])
def test_node_taints_are_read_back_as_tolerations(stack: str) -> None:
    # from the pool's flavor (Kueue), the Trainer runtimes' pods or the NIC policy's operands
    # (before: not read, and the flavor or runtimes lost their tolerations in the render)
    config = example_config(stack)
    taints = [
        {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
        {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoExecute"},
    ]
    nodes = config["gpufabric:gpuNodes"]
    (nodes[-1] if isinstance(nodes, list) else nodes)["tolerations"] = taints
    text, diffs = round_trip(plan_of(config))
    assert diffs == []
    found = yaml.safe_load(text)["config"]["gpufabric:gpuNodes"]
    read = (found[-1] if isinstance(found, list) else found)["tolerations"]
    assert read == taints
    if stack == "routed-b200":
        # Volcano and no Trainer, the nodes' taints unread: only the NIC policy's operands
        # show them, less the GPU taint the Network Operator adds itself; said so
        snap = seeded(plan_of(config))
        for host in snap.nodes:
            host.pop("spec", None)
        _, config, notes = infer(snap, "x")
        assert config["gpufabric:gpuNodes"]["tolerations"] == taints[1:]
        assert any("spec.tolerations" in line for line in notes.unmapped)


def test_gpu_model_is_read_from_the_gpu_product_label() -> None:
    _, config, _ = infer(seeded(load_stack("fleet-mixed").plan), "x")
    assert [p["gpuModel"] for p in config["gpufabric:gpuNodes"]] == ["H100-80GB-HBM3", "L40S"]


TOPOGRAPH = "fabric.topograph.run/tier-"


@pytest.mark.parametrize(
    ("keys", "levels"),
    [
        (
            [f"{TOPOGRAPH}{n}" for n in (1, 2, 3)],
            [f"{TOPOGRAPH}{n}" for n in (3, 2, 1)],
        ),
        (
            ["topology.k8s.aws/network-node-layer-1", "topology.k8s.aws/network-node-layer-2"],
            ["topology.k8s.aws/network-node-layer-1", "topology.k8s.aws/network-node-layer-2"],
        ),
        (
            ["cloud.google.com/gce-topology-subblock", "cloud.google.com/gce-topology-block"],
            ["cloud.google.com/gce-topology-block", "cloud.google.com/gce-topology-subblock"],
        ),
    ],
)
def test_switch_labels_on_every_gpu_node_give_a_topology_hint(
    keys: list[str], levels: list[str]
) -> None:
    # Topograph's tiers count up from the leaf, EKS's layers down from the top: widest first
    # either way; a hint only (a Topology would be a change), never a value in the stack
    snap = seeded(load_stack("lab-roce").plan)
    for i, host in enumerate(snap.nodes):
        host["metadata"]["labels"].update({k: f"sw-{i // 4}-{n}" for n, k in enumerate(keys)})
    _, config, notes = infer(snap, "x")
    assert "topologyLevels" not in config.get("gpufabric:scheduling", {})
    assert notes.hints == [
        f"every GPU node carries the switch labels {', '.join(levels)}: "
        f"scheduling.topologyLevels: [{', '.join(levels)}] lets the queueing authority place "
        "gangs by them (a change: it adds a Topology)"
    ]
    # a label only some nodes carry is no level
    snap.nodes[0]["metadata"]["labels"].pop(keys[0])
    snap.nodes[0]["metadata"]["labels"].pop(keys[-1])
    assert len(infer(snap, "x")[2].hints) == (1 if len(keys) > 2 else 0)


def test_alert_thresholds_are_read_from_the_prometheus_rule() -> None:
    # the fleet-health PrometheusRule is compared and its thresholds read back (before: not
    # read, written at their defaults; the rule's numbers would have changed silently)
    config = example_config("roce-sriov-volcano")
    set_to = {"symbolErrorsPerHour": 77, "pfcPausesPerSecond": 5000, "acceptanceMaxAgeHours": 48}
    config["gpufabric:monitoring"]["thresholds"] = set_to
    text, diffs = round_trip(plan_of(config))
    assert diffs == []
    assert yaml.safe_load(text)["config"]["gpufabric:monitoring"]["thresholds"] == set_to


def test_without_dashboards_the_alert_rule_gives_monitoring_and_the_rail_devices() -> None:
    config = example_config("prod-ib")
    config["gpufabric:monitoring"]["dashboards"] = False
    text, diffs = round_trip(plan_of(config))
    assert diffs == []
    found = yaml.safe_load(text)["config"]
    assert found["gpufabric:monitoring"]["dashboards"] is False
    assert [r["hca"] for r in found["gpufabric:fabric"]["rails"]] == [f"mlx5_{n}" for n in range(8)]
    _, _, notes = infer(seeded(plan_of(config)), "x")
    assert any("check each rail's hca" in line for line in notes.unmapped)


def test_the_context_read_through_is_the_stacks_and_unknowable_values_are_said(
    tmp_path: Path, capsys
) -> None:
    # --context prod: the stack's provider must apply to that context too (before: the file
    # named no kubeContext and `pulumi up` used whatever context was current); cluster.name
    # and the link rate are on no object the cluster serves: said, never silently invented
    plan = load_stack("lab-roce").plan
    with FakeKube() as fake:
        _serve(fake, plan)
        config = fake.kubeconfig(tmp_path)
        text = config.read_text(encoding="utf-8")
        context = yaml.safe_load(text)["current-context"]
        out = tmp_path / "stacks" / "Pulumi.lab-roce.yaml"
        argv = ["discover", "--kubeconfig", str(config), "--context", context, "--out", str(out)]
        assert main(argv) == 0
    err = capsys.readouterr().err
    assert load_stack(str(out)).model.cluster.kubeContext == context
    assert "not mapped: cluster.name: on no live object: written as lab-roce" in err
    assert "not mapped: fabric.linkRateGbps: no SR-IOV node state reports" in err


def test_the_link_rate_is_read_from_the_sriov_node_states() -> None:
    snap = seeded(load_stack("roce-sriov-volcano").plan)
    pfs = [r["netdev"] for r in example_config("roce-sriov-volcano")["gpufabric:fabric"]["rails"]]
    snap.objects["SriovNetworkNodeState"] = [
        {
            "apiVersion": "sriovnetwork.openshift.io/v1",
            "kind": "SriovNetworkNodeState",
            "metadata": {"name": "n0", "namespace": "nvidia-network-operator"},
            "status": {
                "interfaces": [
                    {"name": pf, "linkSpeed": "200000 Mb/s", "linkType": "ETH"} for pf in pfs
                ]
            },
        }
    ]
    _, config, _ = infer(snap, "x")
    assert config["gpufabric:fabric"]["linkRateGbps"] == 200


@pytest.mark.parametrize(
    ("breakage", "said"),
    [
        ("config-not-json", "spec.config: not a CNI configuration (a JSON object): rail"),
        ("config-array", "spec.config: not a CNI configuration (a JSON object): rail"),
        ("no-pool-name", "spec.config.ipam.poolName: names no nv-ipam pool: rail"),
        ("subnet-missing", "spec.subnet: missing: rail"),
        ("subnet-garbage", "spec.subnet: 'ten-dot' is not a CIDR: rail"),
        ("block-size-garbage", "spec.perNodeBlockSize: 'x' is not a number: 16 written"),
    ],
)
def test_a_broken_network_or_pool_is_said_by_object_and_field(breakage: str, said: str) -> None:
    # before: `subnet: null` was written and the stack failed with "'None' is not a CIDR",
    # naming neither the NAD nor its pool
    snap = seeded(load_stack("lab-roce").plan)
    nad = snap.objects["NetworkAttachmentDefinition"][0]
    pool = next(p for p in snap.objects["IPPool"] if p["metadata"]["name"] == "rail0-pool")
    if breakage == "config-not-json":
        nad["spec"]["config"] = "{not json"
    elif breakage == "config-array":
        nad["spec"]["config"] = "[1, 2]"
    elif breakage == "no-pool-name":
        nad["spec"]["config"] = nad["spec"]["config"].replace('"poolName"', '"poolNam"')
    elif breakage == "subnet-missing":
        del pool["spec"]["subnet"]
    elif breakage == "subnet-garbage":
        pool["spec"]["subnet"] = "ten-dot"
    else:
        pool["spec"]["perNodeBlockSize"] = "x"
    name, config, notes = infer(snap, "x")
    assert any(said in line for line in notes.unmapped), notes.unmapped
    parse_stack_text(yaml.safe_dump({"config": config}), name)  # still a valid stack


def test_a_queue_and_a_quota_that_disagree_are_said() -> None:
    snap = seeded(load_stack("dgx-h100").plan)
    cq = snap.objects["ClusterQueue"][0]
    ns = cq["metadata"]["name"]
    cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][-1]["nominalQuota"] = 4
    _, _, notes = infer(snap, "x")
    assert any(
        f"ResourceQuota {ns}/gpufabric-gpus: spec.hard: " in n
        and "the tenant's queue admits 4 (+0 borrowed): the two disagree" in n
        for n in notes.unmapped
    )


def test_an_object_its_own_schema_forbids_ends_discovery_without_a_traceback(
    tmp_path: Path, capsys
) -> None:
    # a real API server validates objects against their schema; a proxy that serves a
    # ClusterQueue whose resourceGroups is a string must not end in a traceback
    plan = load_stack("dgx-h100").plan
    with FakeKube() as fake:
        _serve(fake, plan)
        for path, obj in fake.objects.items():
            if "/clusterqueues/" in path:
                obj["spec"]["resourceGroups"] = "x"
        out = tmp_path / "stacks" / "Pulumi.dgx-h100.yaml"
        code = main(["discover", "--kubeconfig", str(fake.kubeconfig(tmp_path)), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 3
    assert "the cluster served an object whose fields discovery cannot read" in err
    assert "Traceback" not in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("stack", "borrow"),
    [("dgx-h100", 8), ("roce-sriov-volcano", 16), ("fleet-mixed", {"h100": 8}), ("fleet-mixed", 8)],
)
def test_quota_and_borrowing_come_apart(stack: str, borrow: object) -> None:
    # the namespace quota's hard limit is quota + borrowing: the quota comes from the queue
    # (Kueue's nominal, Volcano's deserved) or the per-pool annotations (before: the sum was
    # written as the quota, and the stack did not validate: oversubscribed)
    config = example_config(stack)
    tenant = config["gpufabric:tenants"][0]
    tenant["gpuBorrowingLimit"] = borrow
    text, diffs = round_trip(plan_of(config))
    assert diffs == []
    found = yaml.safe_load(text)["config"]["gpufabric:tenants"][0]
    quota = tenant["gpuQuota"]
    assert found["gpuQuota"] == quota or found["gpuQuota"] == {
        **dict.fromkeys(["l40s"], 0),
        **quota,
    }
    assert found["gpuBorrowingLimit"] in (borrow, {"h100": 8, "l40s": 8})


def test_cluster_name_given_names_the_stack_and_its_import_map(tmp_path: Path, capsys) -> None:
    # the name the cluster was deployed with is on no object; before, the only way to set it
    # was by hand, and the runbook then refused the import map written for the other name
    from gpufabric.outputs import importmap

    plan = load_stack("lab-roce").plan
    with FakeKube() as fake:
        _serve(fake, plan)
        out = tmp_path / "stacks" / "Pulumi.lab-roce.yaml"
        argv = ["discover", "--kubeconfig", str(fake.kubeconfig(tmp_path)), "--out", str(out)]
        assert main([*argv, "--cluster-name", "colleague-lab"]) == 0
    err = capsys.readouterr().err
    assert "cluster.name: on no live object" not in err
    found = load_stack(str(out))
    assert found.model.cluster.name == "colleague-lab"
    beside = importmap.path_beside(out)
    read = importmap.read(beside, str(beside), found.plan)  # not refused
    assert read is not None
    assert "colleague-lab" in beside.read_text(encoding="utf-8")


def test_collections_the_api_does_not_serve_are_named(tmp_path: Path, capsys) -> None:
    # a kind the API does not serve reads as none: said, so a Kueue serving another version
    # (or no Network Operator at all) is not mistaken for an empty one
    plan = load_stack("dgx-h100").plan
    with FakeKube() as fake:
        _serve(fake, plan)
        out = tmp_path / "stacks" / "Pulumi.dgx-h100.yaml"
        assert (
            main(["discover", "--kubeconfig", str(fake.kubeconfig(tmp_path)), "--out", str(out)])
            == 0
        )
    err = capsys.readouterr().err
    line = next(x for x in err.splitlines() if x.startswith("not served: "))
    assert "scheduling.volcano.sh/v1beta1 Queue" in line  # a Kueue stack: no Volcano
    assert "kueue.x-k8s.io/v1beta2 ClusterQueue" not in line


def test_rails_whose_device_no_object_names_are_said() -> None:
    # SR-IOV rails without monitoring: no nccl-env sets NCCL_IB_HCA, no dashboard shows them
    config = example_config("roce-sriov-volcano")
    del config["gpufabric:monitoring"]
    _, found, notes = infer(seeded(plan_of(config)), "x")
    assert "hca" not in found["gpufabric:fabric"]["rails"][0]
    assert any(n.startswith("fabric.rails[].hca: rail0, rail1") for n in notes.unmapped)
    _, _, notes = infer(seeded(load_stack("kind-dev").plan), "x")  # no RDMA: nothing to name
    assert not any(".hca:" in n for n in notes.unmapped)


@pytest.mark.parametrize("name", ["Bad_Name", "", "a;rm -rf /", "a" * 64])
def test_a_bad_cluster_name_is_refused_before_the_cluster_is_read(
    name: str, tmp_path: Path, capsys
) -> None:
    with FakeKube() as fake:
        out = tmp_path / "stacks" / "Pulumi.x.yaml"
        argv = ["discover", "--kubeconfig", str(fake.kubeconfig(tmp_path)), "--out", str(out)]
        assert main([*argv, "--cluster-name", name]) == 2
        assert fake.requests == []
    assert "--cluster-name" in capsys.readouterr().err
    assert not out.exists()


def test_forbidden_discovery_urls_leave_the_read_standing(tmp_path: Path, capsys) -> None:
    # which group versions are served is asked of /apis/<g>/<v>; a 403 there (the lists
    # allowed) is said, never the end of the read (before: exit 3, nothing written)
    plan = load_stack("dgx-h100").plan
    with FakeKube() as fake:
        _serve(fake, plan)

        def forbid(method: str, path: str, status: int, body: object) -> tuple[int, object] | None:
            parts = path.split("?")[0].strip("/").split("/")
            if parts[0] in ("api", "apis") and len(parts) == (2 if parts[0] == "api" else 3):
                return 403, {"kind": "Status", "code": 403, "reason": "Forbidden"}
            return None

        fake.mutators.append(forbid)
        out = tmp_path / "stacks" / "Pulumi.dgx-h100.yaml"
        code = main(["discover", "--kubeconfig", str(fake.kubeconfig(tmp_path)), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "not served: not known (" in err


def test_a_volcano_fleet_without_tenants_stays_volcano() -> None:
    # no tenant: no queue; no topology levels: no HyperNodes; gpufabric's ServiceMonitor on
    # the scheduler still says which one runs (before: rediscovered as Kueue, silently)
    config = example_config("roce-sriov-volcano")
    del config["gpufabric:tenants"]
    del config["gpufabric:monitoring"]["health"]
    del config["gpufabric:scheduling"]["topologyLevels"]
    snap = seeded(plan_of(config))
    assert not snap.of("Queue")
    assert not snap.of("HyperNode")
    _, found, _ = infer(snap, "x")
    assert found["gpufabric:scheduling"]["gang"] == "volcano"
