"""``verify nodes --via-cluster``: a privileged probe pod on every GPU node.

The DaemonSet runs on the stack's GPU nodes (their node selector and tolerations), in the
host's network and PID namespaces, with the node's root file system mounted read-only at
``/host``; the suite then reaches each pod through testinfra's ``kubectl://`` backend and
reads the node under ``/host``. The namespace and DaemonSet are deleted afterwards unless
``--keep-probe``.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from gpufabric.plan.facts import NodeFacts
from gpufabric.verify.kube import Kube, KubeError, collection_path, object_path, path_of

NAMESPACE = "gpufabric-probe"
NAME = "gpufabric-probe"
CONTAINER = "probe"
HOST_ROOT = "/host"
LABELS = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/managed-by": "gpufabric-verify"}


def manifests(nodes: NodeFacts, image: str) -> list[dict[str, Any]]:
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": NAMESPACE,
            "labels": {**LABELS, "pod-security.kubernetes.io/enforce": "privileged"},
        },
    }
    pod_spec: dict[str, Any] = {
        "nodeSelector": dict(nodes.selector),
        "hostNetwork": True,
        "hostPID": True,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 1,
        "containers": [
            {
                "name": CONTAINER,
                "image": image,
                "command": ["sleep", "infinity"],
                "securityContext": {"privileged": True},
                "resources": {
                    "requests": {"cpu": "10m", "memory": "32Mi"},
                    "limits": {"memory": "256Mi"},
                },
                "volumeMounts": [
                    {
                        "name": "host",
                        "mountPath": HOST_ROOT,
                        "readOnly": True,
                        "mountPropagation": "HostToContainer",
                    }
                ],
            }
        ],
        "volumes": [{"name": "host", "hostPath": {"path": "/", "type": "Directory"}}],
    }
    if nodes.tolerations:
        pod_spec["tolerations"] = [dict(t) for t in nodes.tolerations]
    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": dict(LABELS)},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": NAME}},
            "template": {"metadata": {"labels": dict(LABELS)}, "spec": pod_spec},
        },
    }
    return [namespace, daemonset]


def host_spec(pod: str, kubeconfig: str | None, context: str | None) -> str:
    query = {"namespace": NAMESPACE, "container": CONTAINER}
    if context:
        query["context"] = context
    if kubeconfig:
        query["kubeconfig"] = kubeconfig
    return f"kubectl://{pod}?{urlencode(query)}"


def start(
    kube: Kube,
    nodes: NodeFacts,
    image: str,
    timeout: float = 300,
    poll: float = 5,
    progress: Callable[[str], None] = lambda _m: None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, str]:
    """Create the probe and wait for a Running pod on every scheduled node: pod -> node."""
    for body in manifests(nodes, image):
        if kube.get(path_of(body)) is None:
            kube.create(body)
    progress(f"probe DaemonSet {NAMESPACE}/{NAME} created; waiting for its pods")
    ds_path = object_path("apps/v1", "DaemonSet", NAME, NAMESPACE)
    start_t = clock()
    while True:
        ds = kube.get(ds_path) or {}
        status = ds.get("status", {})
        desired = int(status.get("desiredNumberScheduled", 0))
        ready = int(status.get("numberReady", 0))
        if desired and ready >= desired:
            break
        if clock() - start_t >= timeout:
            raise KubeError(
                f"probe pods not ready after {timeout:g}s ({ready}/{desired}); "
                f"kubectl -n {NAMESPACE} describe pods (image pull? GPU nodes tainted?)"
            )
        sleep(poll)
    pods = kube.list(collection_path("v1", "Pod", NAMESPACE), f"app.kubernetes.io/name={NAME}")
    out = {
        p["metadata"]["name"]: p["spec"].get("nodeName", "?")
        for p in pods
        if p.get("status", {}).get("phase") == "Running"
    }
    return dict(sorted(out.items(), key=lambda kv: kv[1]))


def stop(kube: Kube, progress: Callable[[str], None] = lambda _m: None) -> None:
    """Delete the probe (each part even when another could not be deleted)."""
    for path in (
        object_path("apps/v1", "DaemonSet", NAME, NAMESPACE),
        object_path("v1", "Namespace", NAMESPACE),
    ):
        try:
            kube.delete(path)
        except KubeError as exc:
            progress(f"could not delete {path}: {exc}; kubectl delete namespace {NAMESPACE}")


def require_kubectl() -> None:
    if shutil.which("kubectl") is None:
        raise KubeError(
            "--via-cluster reaches the probe pods with `kubectl exec` (testinfra's kubectl "
            "backend); install kubectl or use --hosts ssh://..."
        )
