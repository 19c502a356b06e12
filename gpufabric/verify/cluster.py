"""Cluster readiness: is what the stack's Plan installs actually running?

Read-only, through the Kubernetes API. For every chart and overlay of the Plan its
workloads (Deployments, DaemonSets, StatefulSets) are ready; the GPU Operator's
ClusterPolicy and the NicClusterPolicy report ``ready``; every object gpufabric wrote exists
(and queues are active); every GPU node is Ready and advertises ``nvidia.com/gpu`` and the
RDMA resources the stack's pods request. A miss names the object, node or resource.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterator, Mapping
from typing import Any

from gpufabric.authorities.base import GPU_RESOURCE
from gpufabric.plan import ids
from gpufabric.plan.build import Plan
from gpufabric.plan.facts import Facts
from gpufabric.plan.items import HelmChart, Item, K8sObject, KustomizeOverlay, Layer
from gpufabric.verify.kube import Kube, collection_path, path_of
from gpufabric.verify.results import Check, failed, passed

WORKLOAD_KINDS = ("Deployment", "DaemonSet", "StatefulSet")
SHARED_NAMESPACE_FILTERS = {"kube-system": ("kube-multus",)}
"""In namespaces gpufabric shares with the cluster, only these workload names are ours."""
CLUSTER_POLICY = ("nvidia.com/v1", "ClusterPolicy")


def _workload_ready(kind: str, obj: dict[str, Any]) -> tuple[bool, str]:
    spec, status = obj.get("spec", {}), obj.get("status", {})
    if kind == "DaemonSet":
        desired = int(status.get("desiredNumberScheduled", 0))
        ready = int(status.get("numberReady", 0))
        return ready >= desired, f"{ready}/{desired} ready"
    want = int(spec.get("replicas", 1))
    ready = int(status.get("readyReplicas", 0))
    return ready >= want, f"{ready}/{want} ready"


def check_workloads(kube: Kube, item: Item, namespace: str) -> Check:
    prefixes = SHARED_NAMESPACE_FILTERS.get(namespace)
    found, not_ready = 0, []
    for kind in WORKLOAD_KINDS:
        for obj in kube.list(collection_path("apps/v1", kind, namespace)):
            name = obj.get("metadata", {}).get("name", "?")
            if prefixes and not name.startswith(prefixes):
                continue
            found += 1
            ok, text = _workload_ready(kind, obj)
            if not ok:
                not_ready.append(f"{kind} {name} {text}")
    cid = f"workloads.{item.id}"
    if not found:
        return failed(
            cid,
            namespace,
            f"no workloads of {item.id} in namespace {namespace}",
            f"pulumi up --target the {item.id} resources; kubectl get all -n {namespace}",
        )
    if not_ready:
        return failed(
            cid,
            namespace,
            "not ready: " + "; ".join(sorted(not_ready)),
            f"kubectl -n {namespace} get pods; kubectl -n {namespace} describe <pod> / logs",
        )
    return passed(cid, namespace, f"{found} workloads ready")


def _state_ready(obj: dict[str, Any]) -> tuple[bool, str]:
    state = obj.get("status", {}).get("state")
    return state == "ready", f"state {state or 'unset'}"


def _condition(obj: dict[str, Any], ctype: str) -> tuple[bool, str]:
    for cond in obj.get("status", {}).get("conditions", []) or []:
        if cond.get("type") == ctype:
            ok = cond.get("status") == "True"
            why = cond.get("message") or cond.get("reason") or ""
            return ok, f"{ctype}={cond.get('status')}" + (f" ({why})" if why and not ok else "")
    return False, f"no {ctype} condition yet"


def check_object(
    kube: Kube, item: Item, obj: K8sObject, readiness: Mapping[str, tuple[str, str]]
) -> Check:
    """``readiness``: the queueing authority's objects and how each reads ready."""
    where = f"{obj.namespace}/{obj.name}" if obj.namespace else obj.name
    cid = f"object.{item.id}"
    live = kube.get(path_of(obj.body))
    if live is None:
        return failed(
            cid,
            where,
            f"{obj.kind} {where} is missing",
            f"pulumi up (item {item.id}); kubectl get {obj.kind.lower()} -A",
        )
    ok, text = True, "present"
    if obj.kind == "NicClusterPolicy":
        ok, text = _state_ready(live)
    elif obj.kind in readiness:
        how, want = readiness[obj.kind]
        if how == "condition":
            ok, text = _condition(live, want)
        else:
            state = live.get("status", {}).get("state")
            ok, text = state == want, f"state {state or 'unset'}"
    if not ok:
        return failed(
            cid,
            where,
            f"{obj.kind} {where}: {text}",
            f"kubectl describe {obj.kind.lower()} {obj.name}"
            + (f" -n {obj.namespace}" if obj.namespace else ""),
        )
    return passed(cid, where, f"{obj.kind} {text}")


def check_cluster_policy(kube: Kube) -> Check:
    api_version, kind = CLUSTER_POLICY
    policies = kube.list(collection_path(api_version, kind))
    if not policies:
        return failed(
            "policy.cluster-policy",
            "cluster",
            "no ClusterPolicy: the GPU Operator has not created its policy",
            "kubectl -n gpu-operator logs deploy/gpu-operator",
        )
    bad = []
    for p in policies:
        ok, text = _state_ready(p)
        if not ok:
            bad.append(f"{p['metadata']['name']} {text}")
    if bad:
        return failed(
            "policy.cluster-policy",
            "cluster",
            "ClusterPolicy not ready: " + "; ".join(bad),
            "kubectl -n gpu-operator get pods (driver, toolkit, device plugin, validators)",
        )
    return passed("policy.cluster-policy", "cluster", "ClusterPolicy ready")


def node_ready(node: dict[str, Any]) -> bool:
    conds = node.get("status", {}).get("conditions", []) or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def _quantity(value: Any) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def gpu_nodes(kube: Kube, facts: Facts) -> list[dict[str, Any]]:
    """The GPU nodes, in one paginated list (never a request per node)."""
    nodes = kube.list("/api/v1/nodes", facts.nodes.selector_text)
    return sorted(nodes, key=lambda n: str(n["metadata"].get("name", "")))


def check_nodes(
    nodes: list[dict[str, Any]], facts: Facts, rdma_resources: bool = True
) -> Iterator[Check]:
    selector = facts.nodes.selector_text
    want = facts.nodes.count
    ready = [n for n in nodes if node_ready(n)]
    if len(ready) < want:
        not_ready = sorted(n["metadata"]["name"] for n in nodes if not node_ready(n))
        yield failed(
            "nodes.count",
            "cluster",
            f"{len(ready)} Ready GPU nodes match {selector}, the stack expects {want}"
            + (f" (not Ready: {', '.join(not_ready)})" if not_ready else ""),
            "kubectl get nodes -l "
            + selector
            + "; NFD labels the nodes once the GPU Operator runs",
        )
    else:
        yield passed("nodes.count", "cluster", f"{len(ready)} Ready GPU nodes ({selector})")
    gpus = facts.nodes.gpus_per_node
    rdma = facts.fabric.rdma_resources if rdma_resources else {}
    for node in nodes:
        name = node["metadata"]["name"]
        alloc = node.get("status", {}).get("allocatable", {}) or {}
        missing = []
        have = _quantity(alloc.get(GPU_RESOURCE, 0))
        if have != gpus:
            missing.append(f"{GPU_RESOURCE} {have} (expected {gpus})")
        for resource, per_pod in rdma.items():
            if _quantity(alloc.get(resource, 0)) < per_pod:
                missing.append(f"{resource} {alloc.get(resource, 0)}")
        if not node_ready(node):
            missing.insert(0, "node not Ready")
        if missing:
            yield failed(
                "node.resources",
                name,
                "; ".join(missing),
                "kubectl describe node " + name + " (allocatable); device plugin pods: "
                "kubectl -n gpu-operator / nvidia-network-operator get pods -o wide",
            )
        else:
            extra = ", ".join(f"{r} {alloc.get(r)}" for r in rdma)
            yield passed(
                "node.resources",
                name,
                f"{GPU_RESOURCE} {have}" + (f", {extra}" if extra else ""),
            )


def check_topology(nodes: list[dict[str, Any]], facts: Facts) -> Iterator[Check]:
    """Every GPU node carries every switch level (Kueue TAS and Volcano HyperNodes place by
    them), the levels form a tree, and they match the stack's node table when it has one."""
    levels = facts.gang.switch_levels
    if not levels:
        return
    table = facts.gang.node_topology
    parent: dict[tuple[str, str], tuple[str, str, str]] = {}
    conflicts: list[str] = []
    for node in nodes:
        name = node["metadata"]["name"]
        labels = node["metadata"].get("labels") or {}
        problems = [f"no {lv} label" for lv in levels if lv not in labels]
        want = table.get(name)
        if table and want is None:
            problems.append("not in scheduling.nodeTopology")
        elif want:
            problems += [
                f"{lv}={labels.get(lv)}, the stack says {value}"
                for lv, value in want.items()
                if lv in labels and labels[lv] != value
            ]
        for wide, narrow in itertools.pairwise(levels):
            if wide in labels and narrow in labels:
                key, up = (narrow, labels[narrow]), (wide, labels[wide], name)
                seen = parent.setdefault(key, up)
                if seen[:2] != up[:2]:
                    conflicts.append(
                        f"{narrow}={labels[narrow]} is under {wide}={seen[1]} on {seen[2]} "
                        f"but under {wide}={labels[wide]} on {name}"
                    )
        if problems:
            commands = " ".join(f"{lv}=<{lv.rsplit('/', 1)[-1]}>" for lv in levels)
            if want:
                commands = " ".join(f"{lv}={v}" for lv, v in want.items())
            yield failed(
                "node.topology",
                name,
                "; ".join(problems),
                f"kubectl label node {name} {commands} --overwrite (see the runbook's "
                "topology step)",
            )
        else:
            yield passed("node.topology", name, ", ".join(f"{lv}={labels[lv]}" for lv in levels))
    if conflicts:
        yield failed(
            "nodes.topology",
            "cluster",
            "the topology labels do not form a tree: " + "; ".join(sorted(set(conflicts))[:5]),
            "a switch has one parent: fix the labels (or the stack's nodeTopology)",
        )
    elif nodes:
        yield passed("nodes.topology", "cluster", f"{len(levels)} levels consistent across nodes")


def _members(obj: dict[str, Any]) -> set[str]:
    """Names a discovered topology object lists as members (exactMatch selectors)."""
    members = (obj.get("spec") or {}).get("members") or []
    names = set()
    for member in members if isinstance(members, list) else []:
        exact = ((member or {}).get("selector") or {}).get("exactMatch") or {}
        if isinstance(exact, dict) and isinstance(exact.get("name"), str):
            names.add(exact["name"])
    return names


def check_discovered_topology(
    kube: Kube, nodes: list[dict[str, Any]], facts: Facts
) -> Iterator[Check]:
    """The authority's topology objects (Volcano's HyperNodes) exist for every switch the
    GPU nodes' labels name, and each node is a member of its narrowest switch's object: the
    scheduler places gangs by these objects, not by the labels."""
    found = facts.gang.discovered_topology
    if found is None or not nodes:
        return
    objs = kube.list(collection_path(found.api_version, found.kind), found.selector)
    by_switch: dict[tuple[str, str], dict[str, Any]] = {}
    for obj in objs:
        tier = str((obj.get("spec") or {}).get("tierName", ""))
        value = ((obj.get("metadata") or {}).get("labels") or {}).get(tier)
        if value is not None:
            by_switch[(tier, str(value))] = obj
    narrowest = facts.gang.switch_levels[-1]
    problems: list[str] = []
    for node in nodes:
        name = node["metadata"]["name"]
        labels = node["metadata"].get("labels") or {}
        for level in facts.gang.switch_levels:
            if level not in labels:
                continue  # node.topology names the missing label
            switch = by_switch.get((level, labels[level]))
            if switch is None:
                problems.append(f"no {found.kind} for {level}={labels[level]} ({name})")
            elif level == narrowest and name not in _members(switch):
                hn = switch["metadata"].get("name", "?")
                problems.append(f"{name} is not a member of {found.kind} {hn}")
    cid = f"topology.{found.kind.lower()}s"
    if problems:
        shown = sorted(set(problems))
        yield failed(
            cid,
            "cluster",
            f"{len(shown)} problem(s): " + "; ".join(shown[:5]),
            f"kubectl get {found.kind.lower()}s -l {found.selector}; the scheduler's "
            "controller discovers them from the node labels (its controller configuration, "
            "logs of the controllers' pod)",
        )
    else:
        yield passed(
            cid, "cluster", f"{len(by_switch)} {found.kind}s cover every GPU node's switches"
        )


def readiness(kube: Kube, plan: Plan, layers: Collection[Layer] | None = None) -> list[Check]:
    """Every readiness check of the stack (or of the given layers: a bring-up in phases
    checks what it applied so far), in the Plan's apply order, then the nodes."""
    queues = plan.authority.readiness
    out: list[Check] = []
    for item in plan.items:
        if layers is not None and item.layer not in layers:
            continue
        payload = item.payload
        if isinstance(payload, HelmChart | KustomizeOverlay):
            out.append(check_workloads(kube, item, payload.namespace))
            if item.id == ids.GPU_OPERATOR:
                out.append(check_cluster_policy(kube))
        elif isinstance(payload, K8sObject):
            out.append(check_object(kube, item, payload, queues))
    nodes: list[dict[str, Any]] | None = None
    if layers is None or Layer.GPU in layers:
        nodes = gpu_nodes(kube, plan.facts)
        out.extend(check_nodes(nodes, plan.facts, layers is None or Layer.NETWORK in layers))
    if layers is None or Layer.SCHEDULING in layers:
        nodes = nodes if nodes is not None else gpu_nodes(kube, plan.facts)
        out.extend(check_topology(nodes, plan.facts))
        out.extend(check_discovered_topology(kube, nodes, plan.facts))
    return out
