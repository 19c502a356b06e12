"""A catalogue of what tenants submit, each with the verdict the tenant admission policies must
give, built for any stack: its own jobs and networks are admitted, another tenant's networks,
queues and priority classes, and every Pod Security baseline violation are denied.

    .venv/bin/python tests/tenant_admission.py     # the denied/allowed table per stack

``tests/plan/test_tenant_admission.py`` holds every stack of the golden matrix to it.
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from admission import Policy, Request  # noqa: E402
from builders import plan_of  # noqa: E402

from gpufabric.outputs.jobs import JobRequest, job_manifest, job_objects  # noqa: E402
from gpufabric.plan import ids  # noqa: E402
from gpufabric.plan.build import Plan  # noqa: E402
from gpufabric.plan.facts import TenantContract  # noqa: E402
from gpufabric.plan.items import K8sObject  # noqa: E402
from gpufabric.plan.resolve import on_one_leaf, on_one_rail  # noqa: E402

NETWORKS = "k8s.v1.cni.cncf.io/networks"
FOREIGN = "intruder-ns"
"""A namespace no stack has: what a tenant names when there is only one tenant."""


@dataclass
class Case:
    name: str
    policy: str
    """pods, objects or managed."""
    obj: dict[str, Any] | None
    """None: a DELETE (the API server's ``object`` is null, ``old`` is what is deleted)."""
    allowed: bool
    request: Request
    old: dict[str, Any] | None = None


def policies(plan: Plan) -> dict[str, Policy]:
    out = {}
    for key, item_id in (
        ("pods", ids.TENANT_POLICY),
        ("objects", ids.TENANT_OBJECTS_POLICY),
        ("managed", ids.TENANT_MANAGED_POLICY),
        ("health", ids.HEALTH_NODE_POLICY),
    ):
        if not any(it.id == item_id for it in plan.items):
            continue  # the health runner's policy: only with monitoring.health.inCluster
        payload = plan.item(item_id).payload
        assert isinstance(payload, K8sObject)
        out[key] = Policy(dict(payload.body))
    return out


def verdicts(plan: Plan, tenants: int | None = None) -> list[tuple[Case, list[str]]]:
    """Each case of the stack's catalogue (for its first ``tenants``, default all) with the
    denial messages it got."""
    checks = policies(plan)
    return [
        (case, checks[case.policy].denials(case.obj, case.request, case.old))
        for case in catalogue(plan, tenants)
    ]


def _pod(ns: str, annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "worker",
        "image": "trainer:1",
        "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": ns, "annotations": annotations or {}},
        "spec": {"containers": [container], **spec},
    }


def _pod_templates(job: Any) -> Iterator[dict[str, Any]]:
    """Every pod template inside a job object, wherever its kind keeps them."""
    if isinstance(job, dict):
        template = job.get("template")
        if isinstance(template, dict) and "containers" in template.get("spec", {}):
            yield template
        for value in job.values():
            yield from _pod_templates(value)
    elif isinstance(job, list):
        for value in job:
            yield from _pod_templates(value)


def _foreign(plan: Plan, ns: str) -> TenantContract | None:
    others = [c for n, c in plan.wiring.items() if n != ns]
    return others[0] if others else None


def _entries(contract: TenantContract) -> list[str]:
    return [f"{contract.network_namespace}/{n}" for n in contract.network_names]


def network_cases(plan: Plan, me: TenantContract) -> Iterator[Case]:
    ns = me.namespace
    req = Request(namespace=ns)
    other = _foreign(plan, ns)
    other_ns = other.network_namespace if other else FOREIGN

    def pod(name: str, value: str, allowed: bool) -> Case:
        return Case(name, "pods", _pod(ns, {NETWORKS: value}), allowed, req)

    if not me.network_names:
        yield pod("networks: a rail on a fabric without rails", f"{other_ns}/rail0", False)
        return
    own = _entries(me)
    first = me.network_names[0]
    # routed per leaf: the contract has a value per leaf (a job pins one), none overall
    pinned = [on_one_leaf(me, leaf) for leaf in me.leaf_networks] or [me]
    for c in pinned:
        yield pod(f"networks: the contract value {c.node_selector}", c.networks, True)
        for rail in plan.facts.fabric.rails:
            yield pod(
                f"networks: sweep one-rail {rail.name} {c.node_selector}",
                on_one_rail(plan.facts.fabric, c, rail.name).networks,
                True,
            )
    yield pod("networks: comma form, all rails", ",".join(own), True)
    yield pod("networks: comma form with @ifname", f" {own[0]}@net1 , {own[-1]}@net9 ", True)
    spaced = json.dumps([{"name": first, "namespace": me.network_namespace}], indent=1)
    yield pod("networks: JSON without interface, spaced", spaced.replace("\n", " "), True)
    yield pod("networks: empty", "", True)
    yield pod(
        "networks: bare name (pod's namespace)",
        first,
        me.network_namespace == ns,
    )
    yield pod(
        "networks: another tenant's namespace",
        f"{other_ns}/{first}",
        other_ns == me.network_namespace,
    )
    yield pod("networks: a NAD not in the contract", f"{me.network_namespace}/evil", False)
    yield pod("networks: kube-system", f"kube-system/{first}", False)
    yield pod("networks: second entry foreign", f"{own[0]},{FOREIGN}/{first}", False)
    yield pod("networks: newline smuggling", f"{own[0]}\n{FOREIGN}/{first}", False)
    yield pod("networks: tab instead of space", f"{own[0]},\t{own[0]}", False)
    for label, element in _json_tricks(me, other_ns, first):
        yield pod(f"networks: JSON {label}", json.dumps([element]) if element else label, False)
    yield Case(
        "default-network override",
        "pods",
        _pod(ns, {"v1.multus-cni.io/default-network": f"{other_ns}/{first}"}),
        False,
        req,
    )


def _json_tricks(
    me: TenantContract, other_ns: str, first: str
) -> Iterator[tuple[str, dict[str, Any] | None]]:
    mine = me.network_namespace
    yield "foreign namespace", {"name": first, "namespace": FOREIGN, "interface": "net1"}
    yield "without namespace", {"name": first, "interface": "net1"}
    yield "extra key ips", {"name": first, "namespace": mine, "ips": ["10.0.0.9"]}
    yield (
        "extra key infiniband-guid",
        {"name": first, "namespace": mine, "infiniband-guid": "00:00:00:00:00:00:00:01"},
    )
    # Go's decoder matches keys case-insensitively and keeps the last duplicate.
    yield '[{"name":"x","namespace":"ns","Namespace":"' + other_ns + '"}]', None
    yield (
        '[{"name":"' + first + '","namespace":"' + mine + '","namespace":"' + FOREIGN + '"}]',
        None,
    )
    yield '[{"name":"' + first + '","namespace":"\\u0069ntruder-ns"}]', None
    yield "[" + json.dumps({"name": first, "namespace": mine}) + "] garbage", None


def _security_changes() -> Iterator[tuple[str, Callable[[dict[str, Any]], None]]]:
    c0 = "containers"

    def sc(p: dict[str, Any]) -> dict[str, Any]:
        return p["spec"][c0][0]["securityContext"]  # type: ignore[no-any-return]

    yield (
        "hostProcess (pod)",
        lambda p: p["spec"].update(securityContext={"windowsOptions": {"hostProcess": True}}),
    )
    yield "hostProcess (container)", lambda p: sc(p).update(windowsOptions={"hostProcess": True})
    yield (
        "hostProcess (init)",
        lambda p: p["spec"].update(
            initContainers=[
                {
                    "name": "i",
                    "image": "x",
                    "securityContext": {"windowsOptions": {"hostProcess": True}},
                }
            ]
        ),
    )
    yield (
        "hostProcess (ephemeral)",
        lambda p: p["spec"].update(
            ephemeralContainers=[
                {
                    "name": "d",
                    "image": "x",
                    "securityContext": {"windowsOptions": {"hostProcess": True}},
                }
            ]
        ),
    )
    yield "hostNetwork", lambda p: p["spec"].update(hostNetwork=True)
    yield "hostPID", lambda p: p["spec"].update(hostPID=True)
    yield "hostIPC", lambda p: p["spec"].update(hostIPC=True)
    yield "privileged", lambda p: sc(p).update(privileged=True)
    yield (
        "privileged (ephemeral)",
        lambda p: p["spec"].update(
            ephemeralContainers=[
                {"name": "d", "image": "x", "securityContext": {"privileged": True}}
            ]
        ),
    )
    yield "capability SYS_ADMIN", lambda p: sc(p)["capabilities"]["add"].append("SYS_ADMIN")
    yield (
        "capability NET_ADMIN (init)",
        lambda p: p["spec"].update(
            initContainers=[
                {
                    "name": "i",
                    "image": "x",
                    "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}},
                }
            ]
        ),
    )
    yield (
        "hostPath",
        lambda p: p["spec"].update(
            volumes=[{"name": "h", "hostPath": {"path": "/dev/infiniband"}}]
        ),
    )
    for source, spec in (
        ("nfs", {"server": "10.40.0.10", "path": "/export/training"}),
        ("iscsi", {"targetPortal": "10.0.0.9:3260", "iqn": "iqn.2001-04.x:t", "lun": 0}),
        ("gitRepo", {"repository": "https://example.com/x.git"}),
    ):
        yield (
            f"{source} volume",
            lambda p, source=source, spec=spec: p["spec"].update(  # type: ignore[misc]
                volumes=[{"name": "own", "persistentVolumeClaim": {"claimName": "checkpoints"}},
                         {"name": "d", source: spec}]
            ),
        )  # fmt: skip
    yield "hostPort", lambda p: p["spec"][c0][0].update(ports=[{"containerPort": 1, "hostPort": 2}])
    yield (
        "AppArmor unconfined (field)",
        lambda p: sc(p).update(appArmorProfile={"type": "Unconfined"}),
    )
    yield (
        "AppArmor unconfined (annotation)",
        lambda p: p["metadata"]["annotations"].update(
            {"container.apparmor.security.beta.kubernetes.io/worker": "unconfined"}
        ),
    )
    yield "SELinux type spc_t", lambda p: sc(p).update(seLinuxOptions={"type": "spc_t"})
    yield (
        "SELinux user",
        lambda p: p["spec"].update(securityContext={"seLinuxOptions": {"user": "system_u"}}),
    )
    yield "procMount Unmasked", lambda p: sc(p).update(procMount="Unmasked")
    yield "seccomp Unconfined", lambda p: sc(p).update(seccompProfile={"type": "Unconfined"})
    yield (
        "unsafe sysctl",
        lambda p: p["spec"].update(
            securityContext={"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}
        ),
    )
    yield (
        "probe host",
        lambda p: p["spec"][c0][0].update(
            livenessProbe={"httpGet": {"host": "10.0.0.1", "port": 80}}
        ),
    )
    yield (
        "lifecycle host",
        lambda p: p["spec"][c0][0].update(
            lifecycle={"preStop": {"tcpSocket": {"host": "169.254.169.254", "port": 80}}}
        ),
    )


def pod_security_cases(plan: Plan, me: TenantContract) -> Iterator[Case]:
    ns = me.namespace
    req = Request(namespace=ns)
    for name, change in _security_changes():
        pod = _pod(ns)
        change(pod)
        yield Case(f"baseline: {name}", "pods", pod, False, req)
    yield Case("baseline: IPC_LOCK and runtime/default", "pods", _pod(ns), True, req)
    own = _pod(ns)
    own["spec"]["volumes"] = [
        {"name": "c", "persistentVolumeClaim": {"claimName": "checkpoints"}},
        {"name": "s", "emptyDir": {"medium": "Memory"}},
        {"name": "e", "configMap": {"name": "nccl-env"}},
        {"name": "k", "secret": {"secretName": "ssh"}},
        {"name": "p", "projected": {"sources": []}},
        {"name": "t", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
    ]
    yield Case("own claims and pod-local volumes", "pods", own, True, req)
    other = _foreign(plan, ns)
    for name, allowed in (
        (me.priority_class, True),
        (other.priority_class if other else "tenant-" + FOREIGN, False),
        ("system-node-critical", False),
    ):
        pod = _pod(ns, priorityClassName=name)
        yield Case(f"pod priorityClassName {name}", "pods", pod, allowed, req)


def job_cases(plan: Plan, me: TenantContract) -> Iterator[Case]:
    """The jobs `gpufabric job` writes for the tenant, and their pods, are admitted; the
    same job naming another tenant's queue or priority is not."""
    ns = me.namespace
    other = _foreign(plan, ns)
    nodes = job_nodes(plan, me)
    if nodes == 0:
        return  # not one node's GPUs are ever admitted (a fleet pool it has no GPUs in)
    for kind in plan.facts.operators.job_kinds:
        leaf = next(iter(me.leaf_networks), None)  # routed per leaf: a job names its leaf
        request = JobRequest(tenant=ns, kind=kind, leaf=leaf, nodes=nodes)  # type: ignore[arg-type]
        job = job_manifest(plan, request)
        req = Request(namespace=ns, kind=job["kind"], group=job["apiVersion"].split("/")[0])
        yield Case(f"{kind}: as gpufabric writes it", "objects", job, True, req)
        for template in _pod_templates(job):
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {**copy.deepcopy(template.get("metadata", {})), "namespace": ns},
                "spec": template["spec"],
            }
            yield Case(f"{kind}: its pod", "pods", pod, True, Request(namespace=ns))
        for label, stolen in _stolen_jobs(job, me, other, plan.facts.gang.authority):
            yield Case(f"{kind}: {label}", "objects", stolen, False, req)


def job_nodes(plan: Plan, me: TenantContract) -> int:
    """The nodes of the tenant's job case, sized to its quota: two where its queue admits
    two nodes' GPUs (a job across nodes, as training runs), else one (dgx-h100's research:
    8 GPUs of quota, one node), else none."""
    return min(2, me.gpu_admissible // plan.facts.nodes.gpus_per_node, plan.facts.nodes.count)


def _stolen_jobs(
    job: dict[str, Any], me: TenantContract, other: TenantContract | None, authority: str
) -> Iterator[tuple[str, dict[str, Any]]]:
    queue = other.queue if other and other.queue != me.queue else "someone-else"
    priority = other.priority_class if other else "tenant-" + FOREIGN
    meta = job["metadata"]
    keys = {
        "kueue": (
            ("kueue.x-k8s.io/priority-class", priority),
            ("kueue.x-k8s.io/priority-class", "system-cluster-critical"),
            ("kueue.x-k8s.io/queue-name", "someone-else"),
        ),
        "volcano": (("scheduling.volcano.sh/queue-name", queue),),
    }[authority]
    for where in ("labels", "annotations"):
        for key, value in keys:
            stolen = copy.deepcopy(job)
            stolen["metadata"] = {**meta, where: {**meta.get(where, {}), key: value}}
            yield f"{where} {key}={value}", stolen
    if authority == "volcano" and job["apiVersion"].startswith("kubeflow.org/"):
        for field, value in (("queue", queue), ("priorityClass", priority)):
            stolen = copy.deepcopy(job)
            policy = stolen["spec"].setdefault("runPolicy", {}).setdefault("schedulingPolicy", {})
            policy[field] = value
            yield f"runPolicy.schedulingPolicy.{field}={value}", stolen


def scheduler_object_cases(plan: Plan, me: TenantContract) -> Iterator[Case]:
    """What the authorities read a queue and a priority from, as their controllers create it
    in the tenant namespace."""
    ns = me.namespace
    other = _foreign(plan, ns)
    priority = other.priority_class if other else "tenant-" + FOREIGN
    queue = other.queue if other and other.queue != me.queue else "someone-else"
    wl = Request(namespace=ns, kind="Workload", group="kueue.x-k8s.io")
    pg = Request(namespace=ns, kind="PodGroup", group="scheduling.volcano.sh")

    def obj(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
        return {"kind": kind, "metadata": {"name": "w", "namespace": ns}, "spec": spec}

    if plan.facts.gang.authority == "kueue":
        yield from _workloads(me, obj, priority, wl)
    else:
        yield from _pod_groups(me, obj, priority, queue, pg)


def _workloads(me: TenantContract, obj: Any, priority: str, wl: Request) -> Iterator[Case]:
    yield Case(
        "Workload: own queue and priority",
        "objects",
        obj("Workload", {"queueName": me.queue, "priorityClassName": me.priority_class}),
        True,
        wl,
    )
    for name, spec in (
        ("foreign priorityClassName", {"queueName": me.queue, "priorityClassName": priority}),
        ("priorityClassRef system", {"priorityClassRef": {"name": "system-node-critical"}}),
        ("foreign queueName", {"queueName": "someone-else"}),
    ):
        yield Case(f"Workload: {name}", "objects", obj("Workload", spec), False, wl)


def _pod_groups(
    me: TenantContract, obj: Any, priority: str, queue: str, pg: Request
) -> Iterator[Case]:
    yield Case(
        "PodGroup: own queue and priority",
        "objects",
        obj("PodGroup", {"queue": me.queue, "priorityClassName": me.priority_class}),
        True,
        pg,
    )
    for name, spec in (
        ("foreign queue", {"queue": queue}),
        ("default queue", {"queue": "default"}),
        ("foreign priorityClassName", {"priorityClassName": priority}),
    ):
        yield Case(f"PodGroup: {name}", "objects", obj("PodGroup", spec), False, pg)


def platform_object_cases(plan: Plan, me: TenantContract) -> Iterator[Case]:
    """NADs and what gpufabric manages in the namespace are the platform's."""
    ns = me.namespace
    member = list(me.groups)
    nad = {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": "rail0", "namespace": ns},
        "spec": {"config": "{}"},
    }
    nad_req = Request(namespace=ns, kind="NetworkAttachmentDefinition", group="k8s.cni.cncf.io")
    # a fleet: the pool's own nccl-env-<pool> (plan narrowed to the pool by catalogue())
    nccl = plan.item(ids.tenant_nccl_env(ns, plan.facts.pool if plan.facts.fleet else None))
    nccl = nccl.payload
    assert isinstance(nccl, K8sObject)
    name = nccl.body["metadata"]["name"]
    old = dict(nccl.body)
    changed = copy.deepcopy(old)
    changed["data"] = {**changed.get("data", {}), "NCCL_IB_HCA": "=mlx5_0"}
    cm = Request(namespace=ns, kind="ConfigMap", operation="UPDATE", groups=member)
    own_cm = {"kind": "ConfigMap", "metadata": {"name": "mine", "namespace": ns}, "data": {}}
    if member:
        yield Case(
            "NAD created by the tenant's group",
            "objects",
            nad,
            False,
            Request(namespace=ns, kind=nad_req.kind, group=nad_req.group, groups=member),
        )
        yield Case(f"{name} changed by the tenant's group", "managed", changed, False, cm, old)
        yield Case("own ConfigMap changed by the tenant", "objects", own_cm, True, cm, own_cm)
        yield Case("own ConfigMap changed by the tenant", "managed", own_cm, True, cm, own_cm)
        yield from managed_object_cases(plan, me, old)
    yield Case("NAD created by the platform", "objects", nad, True, nad_req)
    platform = Request(namespace=ns, kind="ConfigMap", operation="UPDATE")
    yield Case(f"{name} changed by the platform", "managed", changed, True, platform, old)
    for op in ("CREATE", "DELETE"):
        request = Request(namespace=ns, kind="ConfigMap", operation=op)
        created = None if op == "DELETE" else old
        yield Case(f"{name} {op} by the platform", "managed", created, True, request, old)


def _request(obj: dict[str, Any], operation: str, groups: list[str]) -> Request:
    group, _, _version = obj["apiVersion"].rpartition("/")
    return Request(
        namespace=obj["metadata"]["namespace"],
        kind=obj["kind"],
        group=group,
        operation=operation,
        groups=groups,
    )


def managed_object_cases(plan: Plan, me: TenantContract, nccl: dict[str, Any]) -> Iterator[Case]:
    """What gpufabric manages in the tenant's namespace stays the platform's: the tenant's
    group deletes none of it (every managed object of the namespace), creates nothing with
    its label, and makes no ConfigMap under a name jobs read NCCL settings from, labelled or
    not (a later pool's nccl-env-<pool> included); its own objects stay its own."""
    ns = me.namespace
    member = list(me.groups)
    mine = [o for _, o in plan.objects() if o.namespace == ns and o.kind != "Namespace"]
    assert any(o.name == nccl["metadata"]["name"] for o in mine), "nccl-env is in the namespace"
    for obj in mine:
        body = dict(obj.body)
        req = _request(body, "DELETE", member)
        yield Case(f"managed {obj.kind} {obj.name} deleted by the tenant", "managed", None, False, req, body)  # fmt: skip
    label = {"app.kubernetes.io/managed-by": "gpufabric"}
    unlabelled = copy.deepcopy(nccl)
    unlabelled["metadata"]["labels"] = {}
    later_pool = {**unlabelled, "metadata": {"name": "nccl-env-later", "namespace": ns}}
    own = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "mine", "namespace": ns}}
    own_labelled = {**own, "metadata": {**own["metadata"], "labels": label}}
    create = _request(own, "CREATE", member)
    for case, obj, allowed in (
        (f"{nccl['metadata']['name']} made by the tenant, labelled", nccl, False),
        (f"{nccl['metadata']['name']} made by the tenant, unlabelled", unlabelled, False),
        ("nccl-env-later (a pool to come) made by the tenant", later_pool, False),
        ("own ConfigMap made with the managed label", own_labelled, False),
        ("own ConfigMap made by the tenant", own, True),
    ):
        yield Case(case, "managed", obj, allowed, create)
    update = _request(own, "UPDATE", member)
    yield Case("own ConfigMap given the managed label", "managed", own_labelled, False, update, own)
    delete = _request(own, "DELETE", member)
    yield Case("own ConfigMap deleted by the tenant", "managed", None, True, delete, own)
    if plan.facts.operators.job_kinds and me.gpu_admissible >= plan.facts.nodes.gpus_per_node:
        request = JobRequest(
            tenant=ns,
            kind=plan.facts.operators.job_kinds[0],  # type: ignore[arg-type]
            nodes=1,
            leaf=next(iter(me.leaf_networks), None),
            entrypoint=(("train.py", "print(1)\n"),),
        )
        entry = job_objects(plan, request)[0]
        yield Case(
            f"the --entrypoint ConfigMap {entry['metadata']['name']} gpufabric job writes",
            "managed",
            entry,
            True,
            _request(entry, "CREATE", member),
        )


def _node(name: str, labels: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, **labels},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
            "finalizers": [],
        },
        "spec": {
            "podCIDR": "10.244.1.0/24",
            "podCIDRs": ["10.244.1.0/24"],
            "providerID": f"kind://docker/{name}",
            "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
            **spec,
        },
    }


def health_node_cases(plan: Plan) -> Iterator[Case]:
    """What the health runner's service account may do to a node: quarantine (the taint,
    NoSchedule; its annotation; cordon), keep and release, on each pool's node; nothing
    else on them, and nothing on a control-plane node or a node of no pool. Another user's
    update is not this policy's to judge."""
    from gpufabric.plan.health import NAME, QUARANTINE_ANNOTATION

    facts = plan.facts
    account = f"system:serviceaccount:{facts.monitoring.namespace}:{NAME}"
    runner = Request(namespace="", kind="Node", operation="UPDATE", username=account)
    taint = {"key": facts.monitoring.quarantine_taint, "value": "xid", "effect": "NoSchedule"}
    record = '{"state": "quarantined"}'

    def quarantined(node: dict[str, Any]) -> dict[str, Any]:
        q = copy.deepcopy(node)
        q["spec"]["taints"] = [*q["spec"]["taints"], dict(taint)]
        q["spec"]["unschedulable"] = True
        q["metadata"]["annotations"][QUARANTINE_ANNOTATION] = record
        return q

    def changed(node: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        out = quarantined(node)
        change(out)
        return out

    pools = [(p.name, dict(p.nodes.selector)) for p in facts.pools] or [
        ("default", dict(facts.nodes.selector))
    ]
    for pool, selector in pools:
        node = _node(f"gpu-{pool}", selector)
        q = quarantined(node)
        kept = copy.deepcopy(q)
        kept["metadata"]["annotations"][QUARANTINE_ANNOTATION] = (
            '{"state": "quarantined", "check": "x"}'
        )
        released = copy.deepcopy(node)
        released["metadata"]["annotations"][QUARANTINE_ANNOTATION] = '{"state": "returned"}'
        for name, new, old, allowed in (
            ("quarantined (taint, annotation, cordon)", q, node, True),
            ("kept quarantined (annotation)", kept, q, True),
            ("released (untaint, uncordon, annotation)", released, q, True),
            (
                "given another taint",
                changed(
                    node, lambda n: n["spec"]["taints"].append({"key": "x", "effect": "NoSchedule"})
                ),
                node,
                False,
            ),
            (
                "relieved of the GPU taint",
                changed(node, lambda n: n["spec"]["taints"].pop(0)),
                node,
                False,
            ),
            (
                "given the quarantine taint as NoExecute",
                changed(node, lambda n: n["spec"]["taints"][-1].update(effect="NoExecute")),
                node,
                False,
            ),
            (
                "relabelled",
                changed(node, lambda n: n["metadata"]["labels"].update(extra="1")),
                node,
                False,
            ),
            (
                "given another annotation",
                changed(node, lambda n: n["metadata"]["annotations"].update(other="1")),
                node,
                False,
            ),
            (
                "with another providerID",
                changed(node, lambda n: n["spec"].update(providerID="x")),
                node,
                False,
            ),
            (
                "with another podCIDR",
                changed(node, lambda n: n["spec"].update(podCIDR="10.0.0.0/24")),
                node,
                False,
            ),
            (
                "with a finalizer",
                changed(node, lambda n: n["metadata"].update(finalizers=["x"])),
                node,
                False,
            ),
        ):
            yield Case(f"health: {pool} node {name}", "health", new, allowed, runner, old)
        person = Request(namespace="", kind="Node", operation="UPDATE", username="admin")
        relabelled = changed(node, lambda n: n["metadata"]["labels"].update(extra="1"))
        yield Case(
            f"health: {pool} node relabelled by a person (not judged)",
            "health",
            relabelled,
            True,
            person,
            node,
        )
    # a control plane that carries a pool's labels (a small cluster's GPU control plane)
    control = _node("control-plane", {**pools[0][1], "node-role.kubernetes.io/control-plane": ""})
    yield Case(
        "health: control-plane node quarantined",
        "health",
        quarantined(control),
        False,
        runner,
        control,
    )
    stray = _node("cpu-1", {"kubernetes.io/os": "linux", "node.kubernetes.io/instance-type": "cpu"})
    yield Case(
        "health: node of no pool quarantined", "health", quarantined(stray), False, runner, stray
    )


def pool_views(plan: Plan) -> list[Plan]:
    """The plan as each pool's jobs read it: a fleet's tenants run in every pool, with that
    pool's networks, selector and nccl-env-<pool> (one pool: the plan itself)."""
    if not plan.facts.fleet:
        return [plan]
    return [plan.for_pool(name) for name in plan.facts.pool_names]


def catalogue(plan: Plan, tenants: int | None = None) -> list[Case]:
    out: list[Case] = []
    for view in pool_views(plan):
        prefix = f"[{view.facts.pool}] " if view.facts.fleet else ""
        for me in list(view.wiring.values())[:tenants]:
            for build in (
                network_cases,
                pod_security_cases,
                job_cases,
                scheduler_object_cases,
                platform_object_cases,
            ):
                for case in build(view, me):
                    case.name = prefix + case.name
                    out.append(case)
    if any(it.id == ids.HEALTH_NODE_POLICY for it in plan.items):
        out += health_node_cases(plan)
    return out


def table(stacks: dict[str, dict[str, Any]]) -> list[str]:
    """One line per stack: tenants, cases, denied, allowed and wrong verdicts."""
    lines = [f"{'stack':24} {'tenants':>7} {'cases':>6} {'denied':>7} {'allowed':>8} {'wrong':>6}"]
    for name, config in stacks.items():
        plan = plan_of(config, name)
        results = verdicts(plan) if plan.wiring else []
        denied = sum(1 for _, messages in results if messages)
        wrong = sum(1 for case, messages in results if case.allowed == bool(messages))
        lines.append(
            f"{name:24} {len(plan.wiring):>7} {len(results):>6} {denied:>7} "
            f"{len(results) - denied:>8} {wrong:>6}"
        )
    return lines


if __name__ == "__main__":
    import golden

    stacks = {k: v for k, v in golden.variants().items() if k != "stress"}
    print("\n".join(table(stacks)))
