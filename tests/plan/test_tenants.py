"""The tenant pod admission policy, evaluated as the API server would: its CEL expressions run
against pods (cel-python), so a pod with IPC_LOCK is allowed and anything else baseline
forbids is denied, including the pods of the jobs gpufabric generates."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from admission import Policy
from conftest import example_config, sections

from gpufabric.model.stackfile import model_from_config
from gpufabric.outputs.jobs import JobRequest, job_manifest
from gpufabric.plan import ids as plan_ids
from gpufabric.plan.build import build_plan
from gpufabric.plan.items import K8sObject

PLAN = build_plan(
    "lab", model_from_config(sections(example_config("lab-roce")), "lab", from_file=True)
)


def _policy() -> dict[str, Any]:
    payload = PLAN.item(plan_ids.TENANT_POLICY).payload
    assert isinstance(payload, K8sObject)
    return dict(payload.body)


POLICY = Policy(_policy())
NETWORKS = "k8s.v1.cni.cncf.io/networks"


def rdma_pod(**container_extra: Any) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "worker",
        "image": "trainer:1",
        "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
        "resources": {"limits": {"nvidia.com/gpu": 8, "rdma/rail0": 1}},
    }
    container.update(container_extra)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team-vision"},
        "spec": {
            "containers": [container],
            "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
        },
    }


def test_rdma_pod_with_ipc_lock_is_allowed() -> None:
    assert POLICY.denials(rdma_pod()) == []


def test_baseline_capabilities_are_allowed() -> None:
    pod = rdma_pod(
        securityContext={
            "capabilities": {"add": ["IPC_LOCK", "NET_BIND_SERVICE", "CHOWN"], "drop": ["ALL"]}
        }
    )
    assert POLICY.denials(pod) == []


@pytest.mark.parametrize(
    ("change", "denied"),
    [
        (
            lambda p: p["spec"]["containers"][0]["securityContext"]["capabilities"]["add"].append(
                "SYS_ADMIN"
            ),
            "capabilities",
        ),
        (
            lambda p: p["spec"]["containers"][0]["securityContext"].update(privileged=True),
            "privileged",
        ),
        (lambda p: p["spec"].update(hostNetwork=True), "host namespaces"),
        (lambda p: p["spec"].update(hostIPC=True), "host namespaces"),
        (
            lambda p: p["spec"]["volumes"].append(
                {"name": "ib", "hostPath": {"path": "/dev/infiniband"}}
            ),
            "hostPath",
        ),
        (
            lambda p: p["spec"]["containers"][0].update(
                ports=[{"containerPort": 22, "hostPort": 2222}]
            ),
            "host ports",
        ),
        (
            lambda p: p["spec"].update(securityContext={"seccompProfile": {"type": "Unconfined"}}),
            "seccomp",
        ),
        (
            lambda p: p["spec"]["containers"][0]["securityContext"].update(procMount="Unmasked"),
            "procMount",
        ),
        (
            lambda p: p["spec"].update(
                securityContext={"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}
            ),
            "sysctls",
        ),
        (
            lambda p: p["spec"]["containers"][0]["securityContext"].update(
                seLinuxOptions={"type": "spc_t"}
            ),
            "SELinux",
        ),
        (
            lambda p: p["metadata"].update(
                annotations={"container.apparmor.security.beta.kubernetes.io/worker": "unconfined"}
            ),
            "AppArmor",
        ),
        (
            lambda p: p["spec"].update(
                initContainers=[
                    {
                        "name": "i",
                        "image": "x",
                        "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}},
                    }
                ]
            ),
            "capabilities",
        ),
    ],
)
def test_what_baseline_forbids_is_denied(change: Any, denied: str) -> None:
    pod = rdma_pod()
    change(pod)
    messages = POLICY.denials(pod)
    assert len(messages) == 1, messages
    assert denied in messages[0]


OTHER_NETWORKS = '[{"name":"rail0","namespace":"team-speech","interface":"net1"}]'


@pytest.mark.parametrize(
    ("change", "denied"),
    [
        # Pod Security baseline forbids hostProcess at pod level too.
        (
            lambda p: p["spec"].update(securityContext={"windowsOptions": {"hostProcess": True}}),
            "host processes",
        ),
        (
            lambda p: p["spec"].update(
                ephemeralContainers=[
                    {
                        "name": "d",
                        "image": "x",
                        "securityContext": {"windowsOptions": {"hostProcess": True}},
                    }
                ]
            ),
            "host processes",
        ),
        (
            lambda p: p["spec"]["containers"][0].update(
                readinessProbe={"tcpSocket": {"host": "10.0.0.1", "port": 22}}
            ),
            "probes",
        ),
        # Another tenant's networks, in either form, and a forged JSON shape.
        (
            lambda p: p["metadata"].update(annotations={NETWORKS: "team-speech/rail0@net1"}),
            "networks annotation",
        ),
        (lambda p: p["metadata"].update(annotations={NETWORKS: OTHER_NETWORKS}), "networks"),
        (
            lambda p: p["metadata"].update(
                annotations={
                    NETWORKS: '[{"name":"rail0","namespace":"gpufabric-networks",'
                    '"Namespace":"team-speech"}]'
                }
            ),
            "networks annotation",
        ),
        (
            lambda p: p["metadata"].update(
                annotations={"v1.multus-cni.io/default-network": "team-speech/rail0"}
            ),
            "default network",
        ),
        (lambda p: p["spec"].update(priorityClassName="system-node-critical"), "priority class"),
        (lambda p: p["spec"].update(priorityClassName="tenant-team-speech"), "priority class"),
    ],
)
def test_what_isolation_forbids_is_denied(change: Any, denied: str) -> None:
    pod = rdma_pod()
    change(pod)
    messages = POLICY.denials(pod)
    assert len(messages) == 1, messages
    assert denied in messages[0]


def test_own_networks_and_priority_class_pass() -> None:
    pod = rdma_pod()
    contract = PLAN.wiring["team-vision"]
    pod["metadata"]["annotations"] = {NETWORKS: contract.networks}
    pod["spec"]["priorityClassName"] = contract.priority_class
    assert POLICY.denials(pod) == []


def test_safe_sysctls_and_runtime_default_profiles_pass() -> None:
    pod = rdma_pod()
    pod["spec"]["securityContext"] = {
        "sysctls": [{"name": "net.ipv4.tcp_keepalive_time", "value": "60"}],
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    pod["metadata"]["annotations"] = {
        "container.apparmor.security.beta.kubernetes.io/worker": "runtime/default"
    }
    assert POLICY.denials(pod) == []


def test_binding_selects_exactly_tenant_namespaces() -> None:
    payload = PLAN.item(plan_ids.TENANT_BINDING).payload
    assert isinstance(payload, K8sObject)
    spec = payload.body["spec"]
    assert spec["policyName"] == _policy()["metadata"]["name"]
    assert spec["validationActions"] == ["Deny"]
    # Bound on the name label the API server sets (immutable), not on a label a tenant
    # could remove to switch the policy off.
    assert spec["matchResources"]["namespaceSelector"] == {
        "matchExpressions": [
            {
                "key": "kubernetes.io/metadata.name",
                "operator": "In",
                "values": sorted(PLAN.wiring),
            }
        ]
    }
    for t in PLAN.wiring:
        ns = PLAN.item(plan_ids.tenant_namespace(t)).payload
        assert isinstance(ns, K8sObject)
        assert ns.body["metadata"]["labels"]["gpufabric.io/tenant"] == "true"
        # Namespaces come after the policy guarding them.
        assert plan_ids.TENANT_BINDING in PLAN.item(plan_ids.tenant_namespace(t)).depends_on


def _pod_templates(job: dict[str, Any]) -> list[dict[str, Any]]:
    if job["kind"] == "MPIJob":
        specs = job["spec"]["mpiReplicaSpecs"]
    else:
        specs = job["spec"]["pytorchReplicaSpecs"]
    return [s["template"] for s in specs.values()]


@pytest.mark.parametrize("kind", ["mpijob", "pytorchjob"])
def test_generated_job_pods_pass_the_policy(kind: str) -> None:
    job = job_manifest(PLAN, JobRequest(tenant="team-vision", kind=kind))  # type: ignore[arg-type]
    for template in _pod_templates(job):
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {**copy.deepcopy(template.get("metadata", {})), "namespace": "team-vision"},
            "spec": template["spec"],
        }
        assert POLICY.denials(pod) == []


def test_policy_covers_ephemeral_debug_containers() -> None:
    """Tenant namespaces enforce PSA privileged, so the policy is the only guard: a
    privileged debug container added through pods/ephemeralcontainers must be denied too."""
    rules = _policy()["spec"]["matchConstraints"]["resourceRules"]
    assert {"pods", "pods/ephemeralcontainers"} <= {r for rule in rules for r in rule["resources"]}
    pod = rdma_pod()
    pod["spec"]["ephemeralContainers"] = [
        {"name": "debug", "image": "busybox", "securityContext": {"privileged": True}}
    ]
    assert POLICY.denials(pod)
