"""Cluster readiness: is what the stack's Plan installs actually running?

Read-only, through the Kubernetes API. For every chart and overlay of the Plan its
workloads (Deployments, DaemonSets, StatefulSets) are ready; the GPU Operator's
ClusterPolicy and the NicClusterPolicy report ``ready``; every object gpufabric wrote exists
(and queues are active); every GPU node is Ready and advertises ``nvidia.com/gpu`` and the
RDMA resources the stack's pods request. A miss names the object, node or resource.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import Any

from gpufabric.authorities.base import GPU_RESOURCE
from gpufabric.plan import ids
from gpufabric.plan.build import Plan
from gpufabric.plan.facts import Facts
from gpufabric.plan.items import HelmChart, Item, K8sObject, KustomizeOverlay, Layer
from gpufabric.verify.kube import (
    Kube,
    Malformed,
    collection_path,
    mapping,
    name_of,
    number,
    path_of,
    records,
    text,
)
from gpufabric.verify.results import Check, error, failed, passed

WORKLOAD_KINDS = ("Deployment", "DaemonSet", "StatefulSet")
SHARED_NAMESPACE_FILTERS = {"kube-system": ("kube-multus",)}
"""In namespaces gpufabric shares with the cluster, only these workload names are ours."""
CLUSTER_POLICY = ("nvidia.com/v1", "ClusterPolicy")


def _workload_ready(kind: str, obj: dict[str, Any]) -> tuple[bool, str]:
    """Malformed when its spec or status cannot be read; scaled to zero is not ready."""
    if kind == "DaemonSet":
        if mapping(obj, "status").get("desiredNumberScheduled") is None:
            return False, "no status yet"
        desired = number(obj, "status", "desiredNumberScheduled")
        ready = number(obj, "status", "numberReady")
        return ready >= desired, f"{ready}/{desired} ready"
    want = number(obj, "spec", "replicas", default=1)
    ready = number(obj, "status", "readyReplicas")
    if want == 0:
        return False, "scaled to 0 replicas"
    return ready >= want, f"{ready}/{want} ready"


def check_workloads(kube: Kube, item: Item, namespace: str) -> Check:
    prefixes = SHARED_NAMESPACE_FILTERS.get(namespace)
    found, not_ready, unreadable = 0, [], []
    for kind in WORKLOAD_KINDS:
        for obj in kube.list(collection_path("apps/v1", kind, namespace)):
            try:
                name = name_of(obj)
                if prefixes and not name.startswith(prefixes):
                    continue
                found += 1
                ok, why = _workload_ready(kind, obj)
            except Malformed as exc:
                unreadable.append(f"{kind} {exc}")
                continue
            if not ok:
                not_ready.append(f"{kind} {name} {why}")
    cid = f"workloads.{item.id}"
    if unreadable and not not_ready:
        return error(cid, namespace, "unreadable: " + "; ".join(sorted(unreadable)))
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


def _state_is(obj: dict[str, Any], want: str) -> tuple[bool, str]:
    state = text(obj, "status", "state")
    return state == want, f"state {state or 'unset'}"


def _state_ready(obj: dict[str, Any]) -> tuple[bool, str]:
    return _state_is(obj, "ready")


def _condition(obj: dict[str, Any], ctype: str) -> tuple[bool, str]:
    """Malformed when the conditions cannot be read; two answers for one type are none."""
    found = [c for c in records(obj, "status", "conditions") if text(c, "type") == ctype]
    if len({text(c, "status") for c in found}) > 1:
        return False, f"contradictory {ctype} conditions"
    for cond in found:
        ok = text(cond, "status") == "True"
        why = text(cond, "message") or text(cond, "reason")
        return ok, f"{ctype}={text(cond, 'status')}" + (f" ({why})" if why and not ok else "")
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
    ok, why = True, "present"
    if obj.kind == "NicClusterPolicy":
        ok, why = _state_ready(live)
    elif obj.kind in readiness:
        how, want = readiness[obj.kind]
        ok, why = _condition(live, want) if how == "condition" else _state_is(live, want)
    if not ok:
        return failed(
            cid,
            where,
            f"{obj.kind} {where}: {why}",
            f"kubectl describe {obj.kind.lower()} {obj.name}"
            + (f" -n {obj.namespace}" if obj.namespace else ""),
        )
    return passed(cid, where, f"{obj.kind} {why}")


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
        name = name_of(p)
        ok, why = _state_ready(p)
        if not ok:
            bad.append(f"{name} {why}")
    if bad:
        return failed(
            "policy.cluster-policy",
            "cluster",
            "ClusterPolicy not ready: " + "; ".join(bad),
            "kubectl -n gpu-operator get pods (driver, toolkit, device plugin, validators)",
        )
    return passed("policy.cluster-policy", "cluster", "ClusterPolicy ready")


def node_ready(node: dict[str, Any]) -> bool:
    """Malformed when the node's conditions cannot be read."""
    return _condition(node, "Ready")[0]


def _quantity(value: Any) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def gpu_nodes(kube: Kube, facts: Facts) -> list[dict[str, Any]]:
    """The GPU nodes, in one paginated list (never a request per node)."""
    nodes = kube.list("/api/v1/nodes", facts.nodes.selector_text)
    return sorted(nodes, key=lambda n: str(n["metadata"].get("name", "")))


def readable_nodes(nodes: Iterable[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[Check]]:
    """The nodes whose name, conditions, allocatable and labels can be read, and an ERROR
    naming each other one (it is neither counted nor paired)."""
    good: list[dict[str, Any]] = []
    bad: list[Check] = []
    for node in nodes:
        try:
            name_of(node)
            node_ready(node)
            mapping(node, "status", "allocatable")
            mapping(node, "metadata", "labels")
            mapping(node, "spec")
        except Malformed as exc:
            bad.append(error("node.readable", str(exc).split(":", 1)[0], str(exc)))
            continue
        good.append(node)
    return good, bad


def check_nodes(
    nodes: list[dict[str, Any]], facts: Facts, rdma_resources: bool = True
) -> Iterator[Check]:
    selector = facts.nodes.selector_text
    want = facts.nodes.count
    ready = [n for n in nodes if node_ready(n)]
    where, who = ("cluster", "the stack")
    if facts.fleet:  # each pool's nodes are counted against its own count
        where, who = f"pool {facts.pool}", f"pool {facts.pool} (gpuNodes[].count)"
    if len(ready) < want:
        not_ready = sorted(name_of(n) for n in nodes if not node_ready(n))
        yield failed(
            "nodes.count",
            where,
            f"{len(ready)} Ready GPU nodes match {selector}, {who} expects {want}"
            + (f" (not Ready: {', '.join(not_ready)})" if not_ready else ""),
            "kubectl get nodes -l "
            + selector
            + "; NFD labels the nodes once the GPU Operator runs",
        )
    else:
        yield passed("nodes.count", where, f"{len(ready)} Ready GPU nodes ({selector})")
    gpus = facts.nodes.gpus_per_node
    rdma = facts.fabric.rdma_resources if rdma_resources else {}
    for node in nodes:
        name = name_of(node)
        alloc = mapping(node, "status", "allocatable")
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
        name = name_of(node)
        labels = mapping(node, "metadata", "labels")
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


CLIQUE_CHECK = "nodes.nvlink-domains"


def check_cliques(nodes: list[dict[str, Any]], facts: Facts, where: str) -> Iterator[Check]:
    """An NVL72 pool's trays by GPU Feature Discovery's clique label: every tray carries one,
    and no clique holds more trays than one rack's NVLink domain (one clique per rack: a
    clique over more trays is racks' fabrics joined, or labels that are not GFD's)."""
    domains = facts.nodes.nvlink
    if domains is None or not nodes:
        return
    label, most = domains.clique_label, domains.trays_per_domain
    members: dict[str, list[str]] = {}
    missing: list[str] = []
    for node in nodes:
        value = mapping(node, "metadata", "labels").get(label)
        if isinstance(value, str) and value:
            members.setdefault(value, []).append(name_of(node))
        else:
            missing.append(name_of(node))
    over = {k: v for k, v in members.items() if len(v) > most}
    if missing:
        yield failed(
            CLIQUE_CHECK,
            where,
            f"{len(missing)} trays without {label}: {', '.join(missing[:6])}"
            f"{' ...' if len(missing) > 6 else ''}",
            f"kubectl get nodes -l {facts.nodes.selector_text} -L {label}; GPU Feature "
            "Discovery sets it once the tray's GPU fabric is Completed (nvidia-smi -q on the "
            "tray, then its gpu-feature-discovery pod): never set it by hand",
        )
    if over:
        yield failed(
            CLIQUE_CHECK,
            where,
            f"cliques with more than {most} trays, one rack's NVLink domain: "
            + "; ".join(f"{k}: {len(v)} trays" for k, v in sorted(over.items())),
            "nvidia-smi -q | grep -A 4 Fabric on the trays (ClusterUUID and CliqueId per "
            f"rack); the racks' NVLink fabric manager; kubectl get nodes -L {label}",
        )
    if not missing and not over:
        yield passed(
            CLIQUE_CHECK,
            where,
            f"{len(nodes)} trays in {len(members)} NVLink domains ({label}), the largest "
            f"{max(len(v) for v in members.values())} of at most {most} trays",
            cliques={k: len(v) for k, v in sorted(members.items())},
        )


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
    checks what it applied so far), in the Plan's apply order, then the nodes. An answer
    that cannot be read is an ERROR naming the object, never a pass."""
    queues = plan.authority.readiness
    out: list[Check] = []
    for item in plan.items:
        if layers is not None and item.layer not in layers:
            continue
        payload = item.payload
        if isinstance(payload, HelmChart | KustomizeOverlay):
            ns = payload.namespace
            out += _guarded(f"workloads.{item.id}", ns, check_workloads, kube, item, ns)
            if item.id == ids.GPU_OPERATOR:
                out += _guarded("policy.cluster-policy", "cluster", check_cluster_policy, kube)
        elif isinstance(payload, K8sObject):
            where = f"{payload.namespace}/{payload.name}" if payload.namespace else payload.name
            out += _guarded(f"object.{item.id}", where, check_object, kube, item, payload, queues)
    gpu = layers is None or Layer.GPU in layers
    sched = layers is None or Layer.SCHEDULING in layers
    if not (gpu or sched):
        return out
    rdma = layers is None or Layer.NETWORK in layers
    if not plan.facts.fleet:
        pools = [plan.facts]
    else:  # each pool's nodes by its selector, judged by its count, GPUs and rails
        pools = [plan.facts.for_pool(name) for name in plan.facts.pool_names]
        if gpu:
            out += _guarded("node.pool", "cluster", _membership, kube, plan.facts)
    every: dict[str, dict[str, Any]] = {}  # by name: a node two pools select counts once
    for facts in pools:
        try:
            listed = gpu_nodes(kube, facts)
        except Malformed as exc:  # the node list itself cannot be read
            return [*out, error("nodes", "cluster", f"the API's answer cannot be read: {exc}")]
        nodes, unreadable = readable_nodes(listed)
        out += unreadable
        if gpu:
            where = f"pool {facts.pool}" if facts.fleet else "cluster"
            out += _guarded("nodes", where, check_nodes, nodes, facts, rdma)
            out += _guarded(CLIQUE_CHECK, where, check_cliques, nodes, facts, where)
        every.update((name_of(n), n) for n in nodes)
    if sched:
        known = [every[name] for name in sorted(every)]
        out += _guarded("nodes.topology", "cluster", check_topology, known, plan.facts)
        out += _guarded(
            "topology.discovered", "cluster", check_discovered_topology, kube, known, plan.facts
        )
    return out


def _membership(kube: Kube, facts: Facts) -> list[Check]:
    """A fleet's GPU nodes that no pool, or several pools, select (FAIL each; the nodes of
    one pool are counted and checked under it)."""
    from gpufabric.verify.nodes.pools import membership

    return [c for c in membership(kube.list("/api/v1/nodes"), facts) if c.status != "PASS"]


def _guarded(
    cid: str, where: str, run: Callable[..., Check | Iterable[Check]], *args: Any
) -> list[Check]:
    """The checks ``run(*args)`` makes, or one ERROR naming what the API answered
    malformed (the whole check, as a generator may have yielded part of it)."""
    try:
        out = run(*args)
        return [out] if isinstance(out, Check) else list(out)
    except Malformed as exc:
        return [error(cid, where, f"the API's answer cannot be read: {exc}")]
