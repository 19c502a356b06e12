"""A cluster seeded from a stack: the objects its Plan renders (of the kinds discovery reads)
and the nodes it implies, per pool (the pool's selector labels, GFD's product, count and
clique labels, a GPU and each rail's RDMA resource in allocatable, the kubelet's version;
the names and switch labels ``scheduling.nodeTopology`` gives, the taints the pool's
tolerations name),
as the fake API server holds them after ``pulumi up`` and the operators' labelling."""

from __future__ import annotations

from typing import Any

import yaml

from gpufabric.discover import clusterpolicy
from gpufabric.discover.compose import infer
from gpufabric.discover.infer import Notes
from gpufabric.discover.pools import CLIQUE, COUNT, GPU, PRODUCT
from gpufabric.discover.roundtrip import COMPARED, compare
from gpufabric.discover.snapshot import Snapshot
from gpufabric.model.railspan import natural_key
from gpufabric.model.stackfile import parse_stack_text
from gpufabric.outputs.render import plain
from gpufabric.plan.build import Plan, build_plan

NODES_PER_POOL = 2048
"""Nodes seeded per pool (a pool's count is what the stack says only when it is at most
this; otherwise the discovered count is the seeded one)."""


def nodes(plan: Plan, per_pool: int = NODES_PER_POOL) -> list[dict[str, Any]]:
    """Each pool's nodes, then the HyperNodes Volcano would discover from them."""
    out = []
    minor = plan.facts.kubernetes_minor
    for pool in plan.facts.pools:
        n = pool.nodes
        product = n.selector.get(PRODUCT, f"NVIDIA-{n.gpu_model or 'GPU'}")
        alloc = {GPU: str(n.gpus_per_node), "cpu": "128", "memory": "2Ti"}
        for rail in pool.fabric.rails:
            if rail.resource:
                alloc[rail.resource] = "63"
        placed = sorted(plan.facts.gang.node_topology.items(), key=lambda kv: natural_key(kv[0]))
        for i in range(min(n.count, per_pool)):
            labels = {**n.selector, PRODUCT: product, COUNT: str(n.gpus_per_node)}
            name = f"{pool.name}-{i:03d}"
            if len(plan.facts.pools) == 1 and i < len(placed):
                # the stack's nodeTopology names the nodes and their switches
                name = placed[i][0]
                labels.update(placed[i][1])
            labels["kubernetes.io/hostname"] = name
            taints = [
                {
                    "key": t["key"],
                    **({"value": t["value"]} if t.get("value") else {}),
                    "effect": t.get("effect") or "NoSchedule",
                }
                for t in map(dict, n.tolerations)
            ]
            if n.nvlink is not None:
                labels[CLIQUE] = f"clique-{i // 18}"
            out.append(node(name, labels, alloc, minor, taints))
    return out + hypernodes(plan, [n["metadata"]["name"] for n in out])


def hypernodes(plan: Plan, node_names: list[str]) -> list[dict[str, Any]]:
    """What Volcano's label discoverer makes of a stack's topology levels (the node labels
    ``topologyLevels`` names): a HyperNode per level, tier 1 the narrowest, ``tierName`` the
    label and a ``volcano.sh/network-topology-source: label`` label (one leaf holds all)."""
    gang = plan.facts.gang
    if gang.authority != "volcano":
        return []
    out: list[dict[str, Any]] = []
    members = [{"type": "Node", "selector": {"exactMatch": {"name": n}}} for n in node_names]
    for tier, level in enumerate(reversed(gang.switch_levels), start=1):
        name = f"hypernode-{tier}-0"
        out.append(
            {
                "apiVersion": "topology.volcano.sh/v1alpha1",
                "kind": "HyperNode",
                "metadata": {
                    "name": name,
                    "labels": {"volcano.sh/network-topology-source": "label"},
                    "uid": f"uid-{name}",
                    "resourceVersion": "1",
                },
                "spec": {"tier": tier, "tierName": level, "members": members},
            }
        )
        members = [{"type": "HyperNode", "selector": {"exactMatch": {"name": name}}}]
    return out


def node(
    name: str,
    labels: dict[str, str],
    alloc: dict[str, str],
    minor: str,
    taints: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    return {
        **({"spec": {"taints": taints}} if taints else {}),
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "status": {
            "allocatable": alloc,
            "capacity": alloc,
            "nodeInfo": {"kubeletVersion": f"v{minor}.2"},
        },
    }


def objects(plan: Plan) -> list[dict[str, Any]]:
    """The plan's objects discovery compares, as the API server returns them (server-set
    metadata and an empty status added)."""
    out = []
    for i, (_, obj) in enumerate(plan.objects()):
        if obj.kind not in COMPARED:
            continue
        body = plain(obj.body)
        body["metadata"] = {
            **body["metadata"],
            "uid": f"u{i}",
            "resourceVersion": str(i),
            "generation": 1,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "managedFields": [{"manager": "pulumi"}],
        }
        body["status"] = {"state": "ready"}
        out.append(body)
    policy = cluster_policy(plan)
    return out + ([policy] if policy else [])


def cluster_policy(plan: Plan) -> dict[str, Any] | None:
    """The ClusterPolicy the GPU Operator chart makes from the plan's values: each value at
    its policy path (:func:`~gpufabric.discover.clusterpolicy.policy_fields`, proven against
    the real chart by the conformance suite), the chart's own driver version where the stack
    names none, Helm's labels."""
    values = clusterpolicy.chart_values(plan.items)
    if values is None:
        return None
    spec: dict[str, Any] = {}
    fields = clusterpolicy.policy_fields(values)
    if "driver.useNvidiaDriverCRD" in fields and not fields["driver.useNvidiaDriverCRD"]:
        fields.setdefault("driver.version", clusterpolicy.default_driver())
    for path, value in fields.items():
        *parents, leaf = path.split(".")
        node = spec
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {
            "name": "cluster-policy",
            "labels": {"app.kubernetes.io/managed-by": "Helm", "helm.sh/chart": "gpu-operator"},
            "uid": "u-cluster-policy",
            "resourceVersion": "1",
        },
        "spec": spec,
        "status": {"state": "ready"},
    }


def seeded(plan: Plan) -> Snapshot:
    """The snapshot discovery reads of a cluster seeded from the plan."""
    snap = Snapshot()
    for obj in nodes(plan) + objects(plan):
        snap.objects.setdefault(obj["kind"], []).append(obj)
    return snap


def discovered(snap: Snapshot, stack: str) -> tuple[dict[str, Any], list[str], Notes]:
    """(the config discovery writes, the gate's differences, its notes) of a snapshot, the
    stack rendered as ``stack`` (the --out file's name)."""
    name, config, notes = infer(snap, stack)
    model = parse_stack_text(yaml.safe_dump({"config": config}), name)
    gate = compare(build_plan(stack, model), snap.all())
    return config, [str(d) for d in gate.differences], notes
