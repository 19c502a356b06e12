"""``verify nodes --via-cluster``: a privileged probe pod on every GPU node.

The DaemonSet runs on the stack's GPU nodes (their node selector and tolerations), in the
host's network and PID namespaces, with the node's root file system mounted read-only at
``/host``; the suite then reaches each pod through testinfra's ``kubectl://`` backend and
reads the node under ``/host``. The namespace and DaemonSet are deleted afterwards unless
``--keep-probe``.

``gpufabric health`` runs the same probe under its own name and namespace (:class:`Placement`),
pinned to the quarantined nodes it re-certifies (a required node affinity on their
``kubernetes.io/hostname``) and tolerating the quarantine taint they carry.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from gpufabric.plan.facts import NodeFacts
from gpufabric.verify.kube import (
    Conflict,
    Kube,
    KubeError,
    collection_path,
    object_path,
    path_of,
)

NAMESPACE = "gpufabric-probe"
NAME = "gpufabric-probe"
CONTAINER = "probe"
HOST_ROOT = "/host"
LABELS = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/managed-by": "gpufabric-verify"}
HOSTNAME_LABEL = "kubernetes.io/hostname"


@dataclass(frozen=True)
class Placement:
    """Where the probe runs: its name and namespace, the hostnames it is pinned to (empty:
    every node of the stack's selector) and the taint keys it tolerates besides the
    stack's tolerations. The default is ``verify nodes --via-cluster``'s."""

    name: str = NAME
    namespace: str = NAMESPACE
    pin: tuple[str, ...] = ()
    tolerate: tuple[str, ...] = ()

    @property
    def labels(self) -> dict[str, str]:
        return {**LABELS, "app.kubernetes.io/name": self.name}


VERIFY = Placement()


def _pinning(pin: Sequence[str]) -> dict[str, Any]:
    """A required node affinity on the nodes' hostname labels: the DaemonSet controller
    creates pods on those nodes only (it honours matchExpressions; it rewrites matchFields)."""
    term = {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": sorted(pin)}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}  # fmt: skip


def manifests(nodes: NodeFacts, image: str, where: Placement = VERIFY) -> list[dict[str, Any]]:
    labels = where.labels
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": where.namespace,
            "labels": {**labels, "pod-security.kubernetes.io/enforce": "privileged"},
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
    tolerations = [dict(t) for t in nodes.tolerations]
    tolerations += [{"key": key, "operator": "Exists"} for key in where.tolerate]
    if tolerations:
        pod_spec["tolerations"] = tolerations
    if where.pin:
        pod_spec["affinity"] = _pinning(where.pin)
    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": where.name, "namespace": where.namespace, "labels": dict(labels)},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": where.name}},
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
        },
    }
    return [namespace, daemonset]


def host_spec(
    pod: str, kubeconfig: str | None, context: str | None, namespace: str = NAMESPACE
) -> str:
    query = {"namespace": namespace, "container": CONTAINER}
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
    where: Placement = VERIFY,
    partial: bool = False,
    owned: list[str] | None = None,
) -> dict[str, str]:
    """Create the probe and wait for a Running pod on every scheduled node: pod -> node.
    ``partial``: after ``timeout`` the pods Running by then, instead of an error (the
    caller names the nodes without one). ``owned`` collects the paths this run creates
    (before each create is sent, so one that lands after Ctrl-C is still this run's): what
    :func:`stop` may delete; a probe in place (another run's, or one kept) is used only when
    it runs the same pods, and left in place."""
    found_ds = False
    for body in manifests(nodes, image, where):
        found = kube.get(path_of(body))
        if found is None:
            _create(kube, body, owned)
        elif body["kind"] == "DaemonSet":
            found_ds = True
            if (where.pin or owned is not None) and not _same_pods(found, body):
                raise KubeError(
                    f"a probe DaemonSet {where.namespace}/{where.name} of another run is in "
                    f"place (other nodes or image); kubectl delete namespace {where.namespace}"
                )
    how = "of another run in place, used and left" if found_ds else "created"
    progress(f"probe DaemonSet {where.namespace}/{where.name} {how}; waiting for its pods")
    ds_path = object_path("apps/v1", "DaemonSet", where.name, where.namespace)
    start_t = clock()
    while True:
        ds = kube.get(ds_path) or {}
        status = ds.get("status", {})
        desired = int(status.get("desiredNumberScheduled", 0))
        ready = int(status.get("numberReady", 0))
        if desired and ready >= desired:
            break
        if clock() - start_t >= timeout:
            if partial:
                break
            raise KubeError(
                f"probe pods not ready after {timeout:g}s ({ready}/{desired}); "
                f"kubectl -n {where.namespace} describe pods (image pull? GPU nodes tainted?)"
            )
        sleep(poll)
    pods = kube.list(
        collection_path("v1", "Pod", where.namespace), f"app.kubernetes.io/name={where.name}"
    )
    out = {
        p["metadata"]["name"]: p["spec"].get("nodeName", "?")
        for p in pods
        if p.get("status", {}).get("phase") == "Running"
    }
    return dict(sorted(out.items(), key=lambda kv: kv[1]))


def _create(kube: Kube, body: dict[str, Any], owned: list[str] | None) -> None:
    """Create one part of the probe, recorded in ``owned`` first; one another run created
    between our read and our create (409) is not ours."""
    path = path_of(body)
    if owned is not None:
        owned.append(path)
    try:
        kube.create(body)
    except Conflict:
        if owned is not None:
            owned.remove(path)
        raise KubeError(
            f"{path}: another run created the probe at the same moment; run again"
        ) from None


def _same_pods(live: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Whether a DaemonSet found in place runs the pods this run wants (its placement and
    image): a pinned run never judges pods another run pinned elsewhere."""
    spec = (((live.get("spec") or {}).get("template") or {}).get("spec")) or {}
    want = wanted["spec"]["template"]["spec"]
    keys = ("affinity", "tolerations", "nodeSelector")
    image = [c.get("image") for c in spec.get("containers") or [] if isinstance(c, dict)]
    return all(spec.get(k) == want.get(k) for k in keys) and image == [
        c["image"] for c in want["containers"]
    ]


def stop(
    kube: Kube,
    progress: Callable[[str], None] = lambda _m: None,
    where: Placement = VERIFY,
    owned: list[str] | None = None,
) -> list[str]:
    """Delete the probe (each part even when another could not be deleted), only the parts
    in ``owned`` when given (those this run created); the commands that delete what could
    not be deleted."""
    left: list[str] = []
    parts = (
        object_path("apps/v1", "DaemonSet", where.name, where.namespace),
        object_path("v1", "Namespace", where.namespace),
    )
    for path in parts:
        if owned is not None and path not in owned:
            continue
        try:
            kube.delete(path)
        except KubeError as exc:
            command = f"kubectl delete namespace {where.namespace} --ignore-not-found"
            progress(f"could not delete {path}: {exc}; {command}")
            if command not in left:
                left.append(command)
    return left


def require_kubectl() -> None:
    if shutil.which("kubectl") is None:
        raise KubeError(
            "--via-cluster reaches the probe pods with `kubectl exec` (testinfra's kubectl "
            "backend); install kubectl or use --hosts ssh://..."
        )
