"""Cluster readiness against a local fake API server serving what a healthy cluster built
from the stack would hold (operator workloads, ClusterPolicy, the Plan's objects with their
status, labelled GPU nodes with allocatable resources), then broken one thing at a time."""

from __future__ import annotations

import json
import socket
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_kube import FakeKube, path_of

from gpufabric.cli import main
from gpufabric.model.stackfile import load_stack
from gpufabric.plan.build import build_plan
from gpufabric.plan.items import HelmChart, K8sObject, KustomizeOverlay, Layer
from gpufabric.verify import cluster
from gpufabric.verify.kube import Kube

WORKLOADS = {
    "gpu-operator": [
        ("Deployment", "gpu-operator"),
        ("Deployment", "gpu-operator-node-feature-discovery-master"),
        ("DaemonSet", "nvidia-driver-daemonset"),
        ("DaemonSet", "nvidia-container-toolkit-daemonset"),
        ("DaemonSet", "nvidia-device-plugin-daemonset"),
        ("DaemonSet", "nvidia-dcgm-exporter"),
        ("DaemonSet", "gpu-feature-discovery"),
        ("DaemonSet", "nvidia-operator-validator"),
    ],
    "nvidia-network-operator": [
        ("Deployment", "nvidia-network-operator"),
        ("Deployment", "nv-ipam-controller"),
        ("DaemonSet", "rdma-shared-dp-ds"),
        ("DaemonSet", "cni-plugins-ds"),
        ("DaemonSet", "nv-ipam-node"),
    ],
    "kube-system": [("DaemonSet", "kube-multus-ds"), ("Deployment", "coredns")],
    "csi-nfs": [("Deployment", "csi-nfs-controller"), ("DaemonSet", "csi-nfs-node")],
    # kube-prometheus-stack 88.5.3 as release kube-prometheus-stack (the operator's own
    # StatefulSets for Prometheus and Alertmanager come later)
    "monitoring": [
        ("Deployment", "kube-prometheus-stack-operator"),
        ("Deployment", "kube-prometheus-stack-kube-state-metrics"),
        ("Deployment", "kube-prometheus-stack-grafana"),
        ("DaemonSet", "kube-prometheus-stack-prometheus-node-exporter"),
    ],
    "mpi-operator": [("Deployment", "mpi-operator")],
    "kubeflow": [("Deployment", "training-operator")],
    "kubeflow-system": [
        ("Deployment", "kubeflow-trainer-controller-manager"),
        ("Deployment", "jobset-controller-manager"),
    ],
    "kueue-system": [("Deployment", "kueue-controller-manager")],
    "volcano-system": [
        ("Deployment", "volcano-scheduler"),
        ("Deployment", "volcano-controllers"),
        ("Deployment", "volcano-admission"),
    ],
}


def workload(kind: str, name: str, namespace: str, nodes: int) -> dict[str, Any]:
    meta = {"name": name, "namespace": namespace}
    if kind == "DaemonSet":
        status = {"desiredNumberScheduled": nodes, "numberReady": nodes}
        return {"apiVersion": "apps/v1", "kind": kind, "metadata": meta, "status": status}
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": meta,
        "spec": {"replicas": 1},
        "status": {"replicas": 1, "readyReplicas": 1, "availableReplicas": 1},
    }


def with_status(obj: K8sObject) -> dict[str, Any]:
    body = json.loads(json.dumps(obj.body))
    if obj.kind == "NicClusterPolicy":
        body["status"] = {"state": "ready"}
    elif obj.kind in ("ClusterQueue", "LocalQueue"):
        body["status"] = {
            "conditions": [
                {
                    "type": "Active",
                    "status": "True",
                    "reason": "Ready",
                    "message": "Can admit new workloads",
                }
            ]
        }
    elif obj.kind == "Queue":
        body["status"] = {"state": "Open"}
    return body


def healthy(fake: FakeKube, stack: str) -> None:
    model = load_stack(stack, None).model
    plan = build_plan(stack, model)
    count = model.gpuNodes.count
    for item in plan.items:
        p = item.payload
        if isinstance(p, HelmChart | KustomizeOverlay):
            for kind, name in WORKLOADS[p.namespace]:
                fake.add(workload(kind, name, p.namespace, count))
        elif isinstance(p, K8sObject):
            fake.add(with_status(p))
    fake.add(
        {
            "apiVersion": "nvidia.com/v1",
            "kind": "ClusterPolicy",
            "metadata": {"name": "cluster-policy"},
            "status": {"state": "ready", "namespace": "gpu-operator"},
        }
    )
    rdma = dict.fromkeys(build_plan("t", model).facts.fabric.rdma_resources, "63")
    for i in range(count):
        fake.add(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": f"gpu-node-{i}",
                    "labels": {
                        **model.gpuNodes.nodeSelector,
                        "kubernetes.io/hostname": f"gpu-node-{i}",
                        # two nodes per leaf, four leaves per block
                        **{
                            level: f"{level.rsplit('/', 1)[-1]}-{i // (2 * 4**n)}"
                            for n, level in enumerate(reversed(plan.facts.gang.switch_levels))
                        },
                    },
                },
                "status": {
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                    "allocatable": {"cpu": "190", "memory": "2Ti", "nvidia.com/gpu": "8", **rdma},
                },
            }
        )
    add_hypernodes(fake, plan.facts.gang, [n for p, n in fake.objects.items() if "/nodes/" in p])
    fake.add(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "cpu-node-0", "labels": {"kubernetes.io/hostname": "cpu-node-0"}},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "allocatable": {"cpu": "32"},
            },
        }
    )


def add_hypernodes(fake: FakeKube, gang: Any, nodes: list[dict[str, Any]]) -> None:
    """What Volcano's label discovery writes: a HyperNode per switch (tier 1 the narrowest
    level, members the nodes by name; wider tiers the narrower HyperNodes)."""
    found = gang.discovered_topology
    if found is None:
        return
    levels = list(reversed(gang.switch_levels))
    members: dict[tuple[int, str], set[str]] = {}
    for node in nodes:
        labels, member = node["metadata"]["labels"], node["metadata"]["name"]
        for tier, level in enumerate(levels, start=1):
            members.setdefault((tier, labels[level]), set()).add(member)
            member = f"hypernode-gpufabric-tier{tier}-{labels[level]}"
    for (tier, value), names in members.items():
        level = levels[tier - 1]
        fake.add(
            {
                "apiVersion": found.api_version,
                "kind": found.kind,
                "metadata": {
                    "name": f"hypernode-gpufabric-tier{tier}-{value}",
                    "labels": {level: value, "volcano.sh/network-topology-source": "label"},
                },
                "spec": {
                    "tier": tier,
                    "tierName": level,
                    "members": [
                        {
                            "type": "Node" if tier == 1 else "HyperNode",
                            "selector": {"exactMatch": {"name": n}},
                        }
                        for n in sorted(names)
                    ],
                },
            }
        )


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    with FakeKube() as f:
        yield f


def readiness(
    fake: FakeKube, tmp_path: Path, stack: str = "lab-roce"
) -> dict[tuple[str, str], Any]:
    kube = Kube(str(fake.kubeconfig(tmp_path)), "fake")
    model = load_stack(stack, None).model
    checks = cluster.readiness(kube, build_plan(stack, model))
    return {(c.check, c.target): c for c in checks}


@pytest.mark.parametrize("stack", ["lab-roce", "prod-ib", "roce-sriov-volcano"])
def test_healthy_cluster_passes(fake: FakeKube, tmp_path: Path, stack: str) -> None:
    healthy(fake, stack)
    results = readiness(fake, tmp_path, stack)
    assert {k: c.message for k, c in results.items() if c.status != "PASS"} == {}
    model = load_stack(stack, None).model
    assert ("nodes.count", "cluster") in results
    assert sum(k[0] == "node.resources" for k in results) == model.gpuNodes.count
    assert ("policy.cluster-policy", "cluster") in results


def test_missing_nad_is_named(fake: FakeKube, tmp_path: Path) -> None:
    healthy(fake, "lab-roce")
    del fake.objects[
        "/apis/k8s.cni.cncf.io/v1/namespaces/gpufabric-networks/network-attachment-definitions/rail1"
    ]
    c = readiness(fake, tmp_path)[("object.network/nad/rail1", "gpufabric-networks/rail1")]
    assert c.status == "FAIL"
    assert c.message == "NetworkAttachmentDefinition gpufabric-networks/rail1 is missing"


def test_node_without_rdma_resource_is_named(fake: FakeKube, tmp_path: Path) -> None:
    healthy(fake, "lab-roce")
    fake.objects["/api/v1/nodes/gpu-node-2"]["status"]["allocatable"]["rdma/rail1"] = "0"
    fake.objects["/api/v1/nodes/gpu-node-3"]["status"]["allocatable"]["nvidia.com/gpu"] = "0"
    results = readiness(fake, tmp_path)
    assert results[("node.resources", "gpu-node-2")].message == "rdma/rail1 0"
    assert results[("node.resources", "gpu-node-3")].message == "nvidia.com/gpu 0 (expected 8)"
    assert results[("node.resources", "gpu-node-0")].status == "PASS"


def test_unready_daemonset_and_policies(fake: FakeKube, tmp_path: Path) -> None:
    healthy(fake, "lab-roce")
    ds = fake.objects[
        "/apis/apps/v1/namespaces/nvidia-network-operator/daemonsets/rdma-shared-dp-ds"
    ]
    ds["status"]["numberReady"] = 3
    fake.objects["/apis/nvidia.com/v1/clusterpolicies/cluster-policy"]["status"]["state"] = (
        "notReady"
    )
    fake.objects["/apis/mellanox.com/v1alpha1/nicclusterpolicies/nic-cluster-policy"]["status"] = {}
    results = readiness(fake, tmp_path)
    w = results[("workloads.network/network-operator", "nvidia-network-operator")]
    assert w.message == "not ready: DaemonSet rdma-shared-dp-ds 3/4 ready"
    assert results[("policy.cluster-policy", "cluster")].message == (
        "ClusterPolicy not ready: cluster-policy state notReady"
    )
    nic = results[("object.network/nic-cluster-policy", "nic-cluster-policy")]
    assert nic.message == "NicClusterPolicy nic-cluster-policy: state unset"


def test_shared_namespace_only_counts_our_workloads(fake: FakeKube, tmp_path: Path) -> None:
    healthy(fake, "lab-roce")
    fake.objects["/apis/apps/v1/namespaces/kube-system/deployments/coredns"]["status"][
        "readyReplicas"
    ] = 0
    assert readiness(fake, tmp_path)[("workloads.network/multus", "kube-system")].status == "PASS"
    del fake.objects["/apis/apps/v1/namespaces/kube-system/daemonsets/kube-multus-ds"]
    c = readiness(fake, tmp_path)[("workloads.network/multus", "kube-system")]
    assert c.message == "no workloads of network/multus in namespace kube-system"


def test_inactive_queue_and_missing_nodes(fake: FakeKube, tmp_path: Path) -> None:
    healthy(fake, "lab-roce")
    cq = fake.objects["/apis/kueue.x-k8s.io/v1beta2/clusterqueues/team-vision"]
    cq["status"]["conditions"][0].update(
        status="False",
        reason="FlavorNotFound",
        message="Can't admit new workloads: references missing ResourceFlavor(s): gpu-nodes",
    )
    fake.objects["/api/v1/nodes/gpu-node-1"]["status"]["conditions"][0]["status"] = "False"
    results = readiness(fake, tmp_path)
    q = results[("object.scheduling/team-vision/queue", "team-vision")]
    assert (
        "Active=False (Can't admit new workloads: references missing ResourceFlavor(s): gpu-nodes)"
        in q.message
    )
    nodes = results[("nodes.count", "cluster")]
    assert nodes.message == (
        "3 Ready GPU nodes match feature.node.kubernetes.io/pci-10de.present=true, "
        "the stack expects 4 (not Ready: gpu-node-1)"
    )
    assert results[("node.resources", "gpu-node-1")].message.startswith("node not Ready")


def test_operator_not_installed(fake: FakeKube, tmp_path: Path) -> None:
    healthy(fake, "lab-roce")
    del fake.objects["/apis/apps/v1/namespaces/mpi-operator/deployments/mpi-operator"]
    c = readiness(fake, tmp_path)[("workloads.training/mpi-operator", "mpi-operator")]
    assert c.message == "no workloads of training/mpi-operator in namespace mpi-operator"


def test_cli_reports_and_exit_codes(
    fake: FakeKube, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    healthy(fake, "lab-roce")
    cfg = str(fake.kubeconfig(tmp_path))
    argv = ["verify", "cluster", "--stack", "lab-roce", "--kubeconfig", cfg, "--context", "fake"]
    junit = tmp_path / "cluster.xml"
    assert main([*argv, "--json", "--junit", str(junit)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"] == "PASS"
    assert ET.parse(junit).getroot().find("testsuite").get("tests") == str(len(doc["checks"]))  # type: ignore[union-attr]
    del fake.objects[
        path_of(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": "training", "namespace": "team-speech"},
            }
        )
    ]
    assert main(argv) == 4
    out = capsys.readouterr().out
    assert "LocalQueue team-speech/training is missing" in out
    assert "cluster (lab-roce): FAIL" in out


def test_cli_unauthorized_and_unreachable(
    fake: FakeKube, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = fake.kubeconfig(tmp_path, token="wrong")
    argv = ["verify", "cluster", "--stack", "lab-roce", "--context", "fake"]
    assert main([*argv, "--kubeconfig", str(bad)]) == 3
    assert "401 Unauthorized" in capsys.readouterr().err
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = json.loads(bad.read_text())
    cfg["clusters"][0]["cluster"]["server"] = f"http://127.0.0.1:{port}"
    bad.write_text(json.dumps(cfg))
    assert main([*argv, "--kubeconfig", str(bad)]) == 3
    assert "cannot reach the API server" in capsys.readouterr().err


def test_cli_default_context_comes_from_the_stack(
    fake: FakeKube, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = str(fake.kubeconfig(tmp_path))
    # the stack's context is not in this kubeconfig: bad input (exit 2), naming both
    assert main(["verify", "cluster", "--stack", "lab-roce", "--kubeconfig", cfg]) == 2
    err = capsys.readouterr().err
    assert "'lab-roce-admin' (--context, else the stack's cluster.kubeContext)" in err
    assert cfg in err


def test_layers_check_only_what_a_phase_applied(
    fake: FakeKube, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """After the GPU phase of a bring-up nothing of the network layer exists yet: with
    --layers gpu the cluster passes; the full check fails on the missing network items."""
    healthy(fake, "lab-roce")
    model = load_stack("lab-roce", None).model
    plan = build_plan("lab-roce", model)
    for path in [p for p in fake.objects if "network-attachment-definitions" in p]:
        del fake.objects[path]
    for node in [p for p in fake.objects if p.startswith("/api/v1/nodes/gpu-node")]:
        alloc = fake.objects[node]["status"]["allocatable"]
        for resource in build_plan("t", model).facts.fabric.rdma_resources:
            alloc.pop(resource)
    kube = Kube(str(fake.kubeconfig(tmp_path)), "fake")
    gpu_only = cluster.readiness(kube, plan, {Layer.GPU})
    assert {c.status for c in gpu_only} == {"PASS"}
    assert all(
        c.check.startswith(("workloads.gpu/", "object.gpu/", "policy.", "node")) for c in gpu_only
    )
    everything = cluster.readiness(kube, plan)
    assert any(
        c.status == "FAIL" and "NetworkAttachmentDefinition" in c.message for c in everything
    )
    cfg = str(fake.kubeconfig(tmp_path))
    argv = ["verify", "cluster", "--stack", "lab-roce", "--kubeconfig", cfg, "--context", "fake"]
    assert main([*argv, "--layers", "gpu"]) == 0
    assert "cluster (lab-roce, layers gpu): PASS" in capsys.readouterr().out
    with pytest.raises(SystemExit) as bad:
        main([*argv, "--layers", "gpu,netwrk"])
    assert bad.value.code == 2
    assert "unknown layer netwrk; accepted: gpu, network, training, scheduling, tenants" in (
        capsys.readouterr().err
    )


def _relabel(fake: FakeKube, node: str, **labels: str | None) -> None:
    path = f"/api/v1/nodes/{node}"
    for key, value in labels.items():
        label = key.replace("__", "/").replace("_", ".")
        if value is None:
            fake.objects[path]["metadata"]["labels"].pop(label, None)
        else:
            fake.objects[path]["metadata"]["labels"][label] = value


def test_a_node_without_a_topology_label_fails(fake: FakeKube, tmp_path: Path) -> None:
    healthy(fake, "prod-ib")
    level = build_plan("prod-ib", load_stack("prod-ib", None).model).facts.gang.switch_levels[-1]
    fake.objects["/api/v1/nodes/gpu-node-3"]["metadata"]["labels"].pop(level)
    results = readiness(fake, tmp_path, "prod-ib")
    bad = results[("node.topology", "gpu-node-3")]
    assert bad.status == "FAIL"
    assert f"no {level} label" in bad.message
    assert "kubectl label node gpu-node-3" in bad.hint
    assert results[("node.topology", "gpu-node-2")].status == "PASS"


def test_inconsistent_topology_labels_fail(fake: FakeKube, tmp_path: Path) -> None:
    healthy(fake, "prod-ib")
    levels = build_plan("prod-ib", load_stack("prod-ib", None).model).facts.gang.switch_levels
    if len(levels) < 2:
        pytest.skip("prod-ib has one switch level")
    labels = fake.objects["/api/v1/nodes/gpu-node-1"]["metadata"]["labels"]
    labels[levels[0]] = "some-other-block"  # same leaf as gpu-node-0, another block
    results = readiness(fake, tmp_path, "prod-ib")
    assert results[("nodes.topology", "cluster")].status == "FAIL"
    assert "do not form a tree" in results[("nodes.topology", "cluster")].message


def _hypernodes(fake: FakeKube) -> dict[str, dict[str, Any]]:
    return {p: o for p, o in fake.objects.items() if o.get("kind") == "HyperNode"}


def test_volcano_hypernodes_are_checked(fake: FakeKube, tmp_path: Path) -> None:
    """Volcano places gangs by HyperNodes, not by the labels: a healthy cluster has one per
    switch with every GPU node in its leaf's."""
    healthy(fake, "roce-sriov-volcano")
    assert _hypernodes(fake)
    results = readiness(fake, tmp_path, "roce-sriov-volcano")
    assert results[("topology.hypernodes", "cluster")].status == "PASS"


def test_missing_hypernodes_fail_naming_the_switch(fake: FakeKube, tmp_path: Path) -> None:
    healthy(fake, "roce-sriov-volcano")
    for path in _hypernodes(fake):
        del fake.objects[path]
    results = readiness(fake, tmp_path, "roce-sriov-volcano")
    bad = results[("topology.hypernodes", "cluster")]
    assert bad.status == "FAIL"
    assert "no HyperNode for topology.gpufabric.io/leaf=leaf-0 (gpu-node-0)" in bad.message
    assert "volcano.sh/network-topology-source=label" in bad.hint


def test_a_node_missing_from_its_leaf_hypernode_fails(fake: FakeKube, tmp_path: Path) -> None:
    healthy(fake, "roce-sriov-volcano")
    leaf = next(o for o in _hypernodes(fake).values() if o["spec"]["tier"] == 1)
    dropped = leaf["spec"]["members"].pop()["selector"]["exactMatch"]["name"]
    results = readiness(fake, tmp_path, "roce-sriov-volcano")
    bad = results[("topology.hypernodes", "cluster")]
    assert bad.status == "FAIL"
    assert f"{dropped} is not a member of HyperNode {leaf['metadata']['name']}" in bad.message


def test_kueue_stacks_have_no_hypernode_check(fake: FakeKube, tmp_path: Path) -> None:
    healthy(fake, "prod-ib")
    assert not [k for k in readiness(fake, tmp_path, "prod-ib") if k[0] == "topology.hypernodes"]


def _gpu_node(i: int, selector: dict[str, str], rdma: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": f"gpu-node-{i:05d}",
            "labels": {**selector, "kubernetes.io/hostname": f"gpu-node-{i:05d}"},
        },
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "allocatable": {"nvidia.com/gpu": "8", **rdma},
        },
    }


@pytest.mark.parametrize("count", [100, 10_000])
def test_requests_do_not_grow_with_the_node_count(
    fake: FakeKube, tmp_path: Path, count: int
) -> None:
    """10,000 nodes: one paginated node list (500 per page), no request per node; every
    node is still checked."""
    from gpufabric.verify.kube import PAGE_SIZE

    model = load_stack("lab-roce", None).model
    plan = build_plan("lab-roce", model)
    healthy(fake, "lab-roce")
    fake.objects = {p: o for p, o in fake.objects.items() if not p.startswith("/api/v1/nodes/")}
    rdma = dict.fromkeys(plan.facts.fabric.rdma_resources, "63")
    for i in range(count):
        fake.add(_gpu_node(i, dict(model.gpuNodes.nodeSelector), rdma))
    fake.requests.clear()
    results = readiness(fake, tmp_path)
    node_checks = [k for k in results if k[0] == "node.resources"]
    assert len(node_checks) == count
    node_requests = [r for r in fake.requests if r[1].startswith("/api/v1/nodes")]
    assert len(node_requests) == -(-count // PAGE_SIZE)  # pages, never per node
    others = [r for r in fake.requests if not r[1].startswith("/api/v1/nodes")]
    assert len(others) < 60  # charts, objects and policies of the stack: independent of nodes


def test_junit_never_replaces_a_file_it_did_not_write(
    fake: FakeKube, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--junit` pointed at the stack file (a slip of the shell's completion) overwrote it
    after the run; now the command refuses before asking the cluster, and replaces only a
    report an earlier run wrote."""
    healthy(fake, "lab-roce")
    cfg = str(fake.kubeconfig(tmp_path))
    argv = ["verify", "cluster", "--stack", "lab-roce", "--kubeconfig", cfg, "--context", "fake"]
    stack = tmp_path / "Pulumi.lab-roce.yaml"
    stack.write_text("config:\n  gpufabric:cluster: {name: lab}\n")
    asked = len(fake.requests)
    assert main([*argv, "--junit", str(stack)]) == 2
    err = capsys.readouterr().err
    assert f"--junit: {stack} exists and was not written by gpufabric verify" in err
    assert stack.read_text() == "config:\n  gpufabric:cluster: {name: lab}\n"
    assert len(fake.requests) == asked
    junit = tmp_path / "ci" / "cluster.xml"
    assert main([*argv, "--junit", str(junit)]) == 0
    assert main([*argv, "--junit", str(junit)]) == 0  # its own report: replaced
    assert ET.parse(junit).getroot().get("name") == "gpufabric verify"
    assert sorted(p.name for p in junit.parent.iterdir()) == ["cluster.xml"]
