"""A local fake of the Kubernetes API server for verify tests.

It speaks the REST paths the real one does (``/api/v1/...``, ``/apis/<group>/<version>/...``,
namespaced and cluster-scoped, label selectors on lists, pod logs, ``Status`` bodies on
errors, bearer-token auth), keeps objects in memory, and lets a test react to creations
(``on_create``) the way a controller would. A test can also make it hostile: rewrite its
answers (``mutators``: nulls, wrong types, duplicates, another object) or send a body a few
bytes at a time (``slow``).
"""

from __future__ import annotations

import functools
import json
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

TOKEN = "fake-token-for-tests"
BUILTIN = (
    # (group, version, kind, plural, namespaced, short names): what the real kubectl needs in
    # discovery to resolve the built-in kinds the runbooks and verify name.
    ("", "v1", "Namespace", "namespaces", False, ("ns",)),
    ("", "v1", "Node", "nodes", False, ("no",)),
    ("", "v1", "Pod", "pods", True, ("po",)),
    ("", "v1", "ConfigMap", "configmaps", True, ("cm",)),
    ("", "v1", "Secret", "secrets", True, ()),
    ("", "v1", "Service", "services", True, ("svc",)),
    ("", "v1", "ServiceAccount", "serviceaccounts", True, ("sa",)),
    ("", "v1", "ResourceQuota", "resourcequotas", True, ("quota",)),
    ("", "v1", "Event", "events", True, ("ev",)),
    ("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", True, ("pvc",)),
    ("storage.k8s.io", "v1", "StorageClass", "storageclasses", False, ("sc",)),
    ("apps", "v1", "Deployment", "deployments", True, ("deploy",)),
    ("apps", "v1", "DaemonSet", "daemonsets", True, ("ds",)),
    ("apps", "v1", "ReplicaSet", "replicasets", True, ("rs",)),
    ("batch", "v1", "Job", "jobs", True, ()),
    # Dynamic resource allocation (Kubernetes 1.34): NVL72 runbooks read these.
    ("resource.k8s.io", "v1", "ResourceSlice", "resourceslices", False, ()),
    ("resource.k8s.io", "v1", "ResourceClaim", "resourceclaims", True, ()),
    ("resource.k8s.io", "v1", "ResourceClaimTemplate", "resourceclaimtemplates", True, ()),
    ("resource.k8s.io", "v1", "DeviceClass", "deviceclasses", False, ()),
    ("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", False, ("pc",)),
    ("rbac.authorization.k8s.io", "v1", "Role", "roles", True, ()),
    ("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", True, ()),
    ("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", False, ()),
    ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", False, ()),
    (
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicy",
        "validatingadmissionpolicies",
        False,
        (),
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
        False,
        (),
    ),
    (
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        False,
        ("crd", "crds"),
    ),
)
PLURALS = {"NetworkAttachmentDefinition": "network-attachment-definitions"}


class _Server(ThreadingHTTPServer):
    """The fake's HTTP server. A client that gives up mid-answer (verify's wall-clock
    deadlines abandon slow requests) is not an error of the fake: a reset or broken pipe
    from a departed client is dropped instead of printed as a traceback on stderr, where
    tests look for tracebacks of the tool itself. Any other error still prints."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError):
            return
        super().handle_error(request, client_address)


def plural(kind: str) -> str:
    if kind in PLURALS:
        return PLURALS[kind]
    low = kind.lower()
    if low.endswith("y"):
        return low[:-1] + "ies"
    return low + ("es" if low.endswith("s") else "s")


def path_of(obj: dict[str, Any]) -> str:
    api = obj["apiVersion"]
    base = f"/api/{api}" if "/" not in api else f"/apis/{api}"
    ns = obj["metadata"].get("namespace")
    where = f"/namespaces/{ns}" if ns else ""
    return f"{base}{where}/{plural(obj['kind'])}/{obj['metadata']['name']}"


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _all_namespaces(parent: str) -> str:
    """The all-namespaces collection a namespaced collection belongs to (``kubectl -A``)."""
    head, sep, rest = parent.partition("/namespaces/")
    if not sep or "/" not in rest:
        return ""
    return f"{head}/{rest.split('/', 1)[1]}"


def _merge(target: Any, patch: Any) -> Any:
    """A JSON merge patch (RFC 7386; what ``kubectl label`` and ``annotate`` send)."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value)
    return out


def _field(obj: dict[str, Any], dotted: str) -> Any:
    value: Any = obj
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _matches(selector: str | None, value_of: Callable[[str], Any]) -> bool:
    """A label or field selector of equality terms (``k=v``, ``k==v``, ``k!=v``, ``k``)."""
    for term in (selector or "").split(","):
        if not term:
            continue
        if "!=" in term:
            key, want = term.split("!=", 1)
            if str(value_of(key) or "") == want:
                return False
        elif "=" in term:
            key, want = term.replace("==", "=").split("=", 1)
            if str(value_of(key) if value_of(key) is not None else "") != want:
                return False
        elif value_of(term) is None:
            return False
    return True


class FakeKube:
    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.logs: dict[str, str] = {}
        self.requests: list[tuple[str, str]] = []
        self.on_create: list[Callable[[FakeKube, dict[str, Any]], None]] = []
        self.on_get: list[Callable[[FakeKube, str], None]] = []
        self.on_request: list[Callable[[str, str], None]] = []
        self.faults: list[tuple[str, str, int | str | float]] = []
        """(method, path suffix, what): an HTTP status to answer once, "malformed" to
        answer garbage once, or seconds to hang (every time) - the API server misbehaving."""
        self.mutators: list[Callable[[str, str, int, Any], tuple[int, Any] | None]] = []
        """Each rewrites an answer: (method, raw path with query, status, body) -> (status,
        body), or None to leave it; applied in order."""
        self.slow: list[tuple[str, str, float]] = []
        """(method, path suffix, seconds): matching answers send their body one byte per
        ``seconds`` (a server that trickles, so no read ever times out)."""
        self.lock = threading.Lock()
        self.anonymous = False
        """Serve requests without the bearer token: kubectl sends none over plain HTTP."""
        self.status_subresources: set[str] = set()
        """Plurals whose status is a subresource (as a CRD declares it): a create drops the
        status, a PUT to the object keeps the stored one, ``PUT .../status`` writes it alone."""
        self.known_only = False
        """Answer 404 under ``/apis/<group>/<version>`` for a group-version discovery does
        not serve: the API server without the CRD."""
        self.resources: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
        """(group, version) -> plural -> APIResource: what discovery answers."""
        for group, version, kind, name, namespaced, short in BUILTIN:
            self.register(group, version, kind, name, namespaced, short)
        self.server = _Server(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FakeKube:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def add(self, *objs: dict[str, Any]) -> None:
        for obj in objs:
            self.objects[path_of(obj)] = obj

    def register(
        self,
        group: str,
        version: str,
        kind: str,
        name: str,
        namespaced: bool,
        short_names: tuple[str, ...] = (),
    ) -> None:
        """Serve a resource type in discovery (a CRD's kind, for the real kubectl)."""
        self.resources.setdefault((group, version), {})[name] = {
            "name": name,
            "singularName": kind.lower(),
            "kind": kind,
            "namespaced": namespaced,
            "shortNames": list(short_names),
            "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
        }

    def register_crd(self, crd: dict[str, Any]) -> None:
        """Serve the kind of an upstream CustomResourceDefinition in discovery."""
        spec = crd["spec"]
        names = spec["names"]
        for v in spec["versions"]:
            if v.get("served", True):
                self.register(
                    spec["group"],
                    v["name"],
                    names["kind"],
                    names["plural"],
                    spec["scope"] == "Namespaced",
                    tuple(names.get("shortNames", ())),
                )

    def kubeconfig(self, directory: Path, token: str = TOKEN) -> Path:
        path = directory / "kubeconfig"
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": {"token": token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "tester"}}],
            "current-context": "fake",
        }
        path.write_text(json.dumps(cfg), encoding="utf-8")
        return path

    # ------------------------------------------------------------------ request handling

    def _list(
        self,
        path: str,
        selector: str | None,
        limit: int = 0,
        token: str = "",
        fields: str | None = None,
    ) -> dict[str, Any]:
        items = []
        for p, obj in sorted(self.objects.items()):
            parent, _, _name = p.rpartition("/")
            if parent != path and _all_namespaces(parent) != path:
                continue
            labels = obj.get("metadata", {}).get("labels", {}) or {}
            if _matches(selector, labels.get) and _matches(fields, functools.partial(_field, obj)):
                items.append(obj)
        start = int(token or 0)
        if limit:
            page = items[start : start + limit]
            more = start + limit < len(items)
            meta = {"continue": str(start + limit)} if more else {}
            return {
                "kind": self._list_kind(path),
                "apiVersion": "v1",
                "metadata": meta,
                "items": page,
            }
        return {"kind": self._list_kind(path), "apiVersion": "v1", "items": items}

    def _list_kind(self, path: str) -> str:
        """``PodList`` for a pod collection (kubectl logs -l needs it), else ``List``."""
        name = path.rsplit("/", 1)[-1]
        core = self.resources.get(("", "v1"), {})
        return f"{core[name]['kind']}List" if name in core and "/api/v1" in path else "List"

    def _fault(self, method: str, path: str) -> tuple[int, Any] | None:
        for i, (m, suffix, what) in enumerate(self.faults):
            if m == method and path.endswith(suffix):
                if isinstance(what, float):
                    time.sleep(what)
                    return None
                del self.faults[i]
                if what == "malformed":
                    return 200, {"items": "not a list", "metadata": "nope"}
                return int(what), _status(int(what), "Fault", "injected")
        return None

    def handle(self, method: str, raw: str, body: bytes, auth: str | None) -> tuple[int, Any]:
        url = urlparse(raw)
        path, query = url.path.rstrip("/"), parse_qs(url.query)
        self.requests.append((method, path))
        for hook in self.on_request:
            hook(method, path)
        fault = self._fault(method, path)
        if fault is not None:
            return fault
        if auth != f"Bearer {TOKEN}" and not self.anonymous:
            return 401, _status(401, "Unauthorized", "Unauthorized")
        with self.lock:
            if self._unserved(path):
                return 404, _status(404, "NotFound", f"the server could not find {path}")
            if method == "PUT" and self._status_path(path):
                return self._put_status(path[: -len("/status")], body)
            if method == "GET" and path.endswith("/log"):
                pod = path[: -len("/log")]
                if pod not in self.objects:
                    return 404, _status(404, "NotFound", f"pod {pod} not found")
                return 200, self.logs.get(pod, "")
            if method == "GET" and query.get("watch", [""])[0] in ("true", "1"):
                return 200, b""  # a watch that ends at once: clients list again
            discovery = self._discovery(path) if method == "GET" else None
            if discovery is not None:
                return 200, discovery
            if method == "GET":
                for hook in self.on_get:
                    hook(self, path)
                if path in self.objects:
                    return 200, self.objects[path]
                listing = self._list(
                    path,
                    query.get("labelSelector", [None])[0],
                    int(query.get("limit", ["0"])[0]),
                    query.get("continue", [""])[0],
                    query.get("fieldSelector", [None])[0],
                )
                if listing["items"] or self._is_collection(path):
                    return 200, listing
                return 404, _status(404, "NotFound", f"{path} not found")
            if method == "POST":
                obj = json.loads(body)
                target = path_of(obj)
                if target.rpartition("/")[0] != path:
                    return 400, _status(400, "BadRequest", "object does not belong here")
                if target in self.objects:
                    return 409, _status(409, "AlreadyExists", f"{target} already exists")
                obj.setdefault("metadata", {}).setdefault("uid", f"uid-{len(self.objects)}")
                if self._status_path(f"{target}/status"):
                    obj.pop("status", None)
                self.objects[target] = obj
                for hook in self.on_create:
                    hook(self, obj)
                return 201, obj
            if method == "PUT":  # update: optimistic concurrency on resourceVersion
                if path not in self.objects:
                    return 404, _status(404, "NotFound", f"{path} not found")
                obj = json.loads(body)
                have = self.objects[path].get("metadata", {}).get("resourceVersion")
                sent = obj.get("metadata", {}).get("resourceVersion")
                if have is not None and sent != have:
                    return 409, _status(409, "Conflict", f"{path}: the object has been modified")
                obj.setdefault("metadata", {})["resourceVersion"] = str(int(have or 0) + 1)
                if self._status_path(f"{path}/status"):
                    obj["status"] = self.objects[path].get("status")
                    obj = {k: v for k, v in obj.items() if v is not None}
                self.objects[path] = obj
                return 200, obj
            if method == "PATCH":
                if path not in self.objects:
                    return 404, _status(404, "NotFound", f"{path} not found")
                self.objects[path] = _merge(self.objects[path], json.loads(body))
                return 200, self.objects[path]
            if method == "DELETE":
                if path not in self.objects:
                    return 404, _status(404, "NotFound", f"{path} not found")
                del self.objects[path]
                return 200, _status(200, "Success", "deleted") | {"status": "Success"}
        return 405, _status(405, "MethodNotAllowed", method)

    def _unserved(self, path: str) -> bool:
        parts = path.strip("/").split("/")
        if not self.known_only or len(parts) < 4 or parts[0] != "apis":
            return False
        return (parts[1], parts[2]) not in self.resources

    def _status_path(self, path: str) -> bool:
        """``path`` is the status subresource of an object of a kind that has one."""
        parts = path.strip("/").split("/")
        return len(parts) >= 3 and parts[-1] == "status" and parts[-3] in self.status_subresources

    def _put_status(self, path: str, body: bytes) -> tuple[int, Any]:
        if path not in self.objects:
            return 404, _status(404, "NotFound", f"{path} not found")
        sent = json.loads(body)
        stored = self.objects[path]
        have = stored.get("metadata", {}).get("resourceVersion")
        if have is not None and sent.get("metadata", {}).get("resourceVersion") != have:
            return 409, _status(409, "Conflict", f"{path}: the object has been modified")
        stored = dict(stored, status=sent.get("status"))
        stored["metadata"] = dict(
            stored.get("metadata", {}), resourceVersion=str(int(have or 0) + 1)
        )
        self.objects[path] = stored
        return 200, stored

    def answer(self, method: str, raw: str, body: bytes, auth: str | None) -> tuple[int, Any]:
        """:meth:`handle`, then the mutators."""
        code, out = self.handle(method, raw, body, auth)
        for mutate in list(self.mutators):
            changed = mutate(method, raw, code, out)
            if changed is not None:
                code, out = changed
        return code, out

    def delay_of(self, method: str, raw: str) -> float:
        path = urlparse(raw).path.rstrip("/")
        return max(
            (secs for m, suffix, secs in self.slow if m == method and path.endswith(suffix)),
            default=0.0,
        )

    def _discovery(self, path: str) -> dict[str, Any] | None:
        """/api, /apis and the resource list of each group version (kubectl's discovery)."""
        if path == "/openapi/v3":  # one document per group version, without schemas
            return {
                "paths": {
                    (f"apis/{g}/{v}" if g else f"api/{v}"): {
                        "serverRelativeURL": f"/openapi/v3/{'apis/' + g if g else 'api'}/{v}"
                    }
                    for g, v in sorted(self.resources)
                }
            }
        if path.startswith("/openapi/v3/"):
            return self._openapi(path.removeprefix("/openapi/v3/"))
        if path == "/api":
            return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
        if path == "/apis":
            groups: dict[str, list[str]] = {}
            for group, version in sorted(self.resources):
                if group:
                    groups.setdefault(group, []).append(version)
            return {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [
                    {
                        "name": g,
                        "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
                        "preferredVersion": {"groupVersion": f"{g}/{vs[-1]}", "version": vs[-1]},
                    }
                    for g, vs in groups.items()
                ],
            }
        parts = path.strip("/").split("/")
        key = ("", parts[1]) if parts[0] == "api" and len(parts) == 2 else None
        if parts[0] == "apis" and len(parts) == 3:
            key = (parts[1], parts[2])
        if key is None or key not in self.resources:
            return None
        group_version = f"{key[0]}/{key[1]}" if key[0] else key[1]
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": group_version,
            "resources": [self.resources[key][n] for n in sorted(self.resources[key])],
        }

    def _openapi(self, where: str) -> dict[str, Any] | None:
        """A group version's OpenAPI v3 document: each kind open to any field (what kubectl
        needs to validate an object client-side; a CRD without a schema reads the same)."""
        parts = where.split("/")
        key = ("", parts[1]) if parts[0] == "api" else (parts[1], parts[-1])
        schemas = {
            f"{key[0] or 'core'}.{key[1]}.{r['kind']}": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": True,
                "x-kubernetes-group-version-kind": [
                    {"group": key[0], "version": key[1], "kind": r["kind"]}
                ],
            }
            for r in self.resources.get(key, {}).values()
        }
        info = {"title": "fake", "version": "v1"}
        return {"openapi": "3.0.0", "info": info, "paths": {}, "components": {"schemas": schemas}}

    @staticmethod
    def _is_collection(path: str) -> bool:
        parts = path.strip("/").split("/")
        # /api/v1/<plural>, /api/v1/namespaces/<ns>/<plural>, /apis/<g>/<v>/..., odd lengths
        if parts[0] == "api":
            return len(parts) in (3, 5)
        return len(parts) in (4, 6)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                code, out = fake.answer(
                    self.command, self.path, body, self.headers.get("Authorization")
                )
                if isinstance(out, bytes):
                    data = out
                else:
                    data = out.encode() if isinstance(out, str) else json.dumps(out).encode()
                self.send_response(code)
                ctype = "text/plain" if isinstance(out, str) else "application/json"
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                delay = fake.delay_of(self.command, self.path)
                if not delay:
                    self.wfile.write(data)
                    return
                try:
                    for i in range(len(data)):
                        self.wfile.write(data[i : i + 1])
                        self.wfile.flush()
                        time.sleep(delay)
                except OSError:
                    pass  # the client gave up

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve

            def log_message(self, *args: object) -> None:
                pass

        return Handler


class PyTorchJobOperator:
    """Plays the Kubeflow Training Operator v1.9 for PyTorchJobs in a :class:`FakeKube`, as
    its controller does (pkg/controller.v1/pytorch, common/pod.go and service.go): per
    replica type and index a pod and a headless Service named ``<job>-<type>-<index>``,
    labelled with the job name, the lower-case replica type and index (and ``job-role:
    master`` on the Master). Pods that mount a Secret stay Pending (ContainerCreating) while
    it is missing, as the kubelet keeps them. Once they run, after ``after_polls`` GETs of
    the job it ends as the controller's UpdateJobStatus decides: ``Succeeded`` when the
    Master succeeds, ``Failed`` when a restartPolicy Never replica (``failing``) fails;
    ``never`` leaves it running. The Master's log is ``master_log``, a Worker's sshd's."""

    def __init__(
        self,
        master_log: str,
        outcome: str = "Succeeded",
        after_polls: int = 2,
        failing: str = "Worker",
    ) -> None:
        self.master_log = master_log
        self.outcome = outcome
        self.after_polls = after_polls
        self.failing = failing
        self.jobs: dict[str, dict[str, Any]] = {}
        """Path of each PyTorchJob created -> its state (polls, pods, secrets it mounts)."""
        self.secrets_seen: list[dict[str, Any]] = []
        """Each Secret its pods mounted, as it was when they started."""

    def install(self, fake: FakeKube) -> PyTorchJobOperator:
        fake.on_create.append(self.on_create)
        fake.on_get.append(self.on_get)
        return self

    def on_create(self, fake: FakeKube, obj: dict[str, Any]) -> None:
        if obj.get("kind") != "PyTorchJob":
            return
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        obj["status"] = {"conditions": [_condition("Created", f"PyTorchJob {name} is created.")]}
        pods, secrets = [], set()
        for rtype, spec in obj["spec"]["pytorchReplicaSpecs"].items():
            for index in range(int(spec.get("replicas", 1))):
                pod, service = self._replica(ns, name, rtype, index, spec["template"])
                fake.add(pod, service)
                pods.append(path_of(pod))
                for volume in pod["spec"].get("volumes", []):
                    if "secret" in volume:
                        secrets.add(
                            f"/api/v1/namespaces/{ns}/secrets/{volume['secret']['secretName']}"
                        )
                log = (
                    self.master_log
                    if rtype == "Master"
                    else "Server listening on 0.0.0.0 port 22.\n"
                )
                fake.logs[path_of(pod)] = log
        self.jobs[path_of(obj)] = {"polls": 0, "pods": pods, "secrets": sorted(secrets)}

    @staticmethod
    def _replica(
        ns: str, name: str, rtype: str, index: int, template: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        labels = {
            "training.kubeflow.org/operator-name": "pytorchjob-controller",
            "training.kubeflow.org/job-name": name,
            "training.kubeflow.org/replica-type": rtype.lower(),
            "training.kubeflow.org/replica-index": str(index),
        }
        if rtype == "Master":
            labels["training.kubeflow.org/job-role"] = "master"
        pod_name = f"{name}-{rtype.lower()}-{index}"
        meta = template.get("metadata", {})
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pod_name,
                "namespace": ns,
                "creationTimestamp": "2026-11-24T10:00:00Z",
                "labels": {**meta.get("labels", {}), **labels},
                "annotations": dict(meta.get("annotations", {})),
            },
            "spec": template["spec"],
            "status": {"phase": "Pending"},
        }
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": pod_name, "namespace": ns, "labels": dict(labels)},
            "spec": {"clusterIP": "None", "selector": dict(labels)},
        }
        return pod, service

    def on_get(self, fake: FakeKube, path: str) -> None:
        state = self.jobs.get(path)
        job = fake.objects.get(path)
        if state is None or job is None or _finished(job):
            return
        missing = [s for s in state["secrets"] if s not in fake.objects]
        if missing:
            return  # the kubelet cannot mount the Secret: pods stay ContainerCreating
        if state["polls"] == 0:
            self.secrets_seen += [json.loads(json.dumps(fake.objects[s])) for s in state["secrets"]]
            for pod in state["pods"]:
                if pod in fake.objects:
                    fake.objects[pod]["status"] = {"phase": "Running"}
            name = job["metadata"]["name"]
            job["status"]["conditions"].append(
                _condition("Running", f"PyTorchJob {name} is running.")
            )
        state["polls"] += 1
        if state["polls"] >= self.after_polls and self.outcome != "never":
            self._finish(fake, job, state)

    def _finish(self, fake: FakeKube, job: dict[str, Any], state: dict[str, Any]) -> None:
        name = job["metadata"]["name"]
        if self.outcome == "Succeeded":
            phase, rtype = "Succeeded", "master"
            message = f"PyTorchJob {name} is successfully completed."
        else:
            phase, rtype = "Failed", self.failing.lower()
            message = f"PyTorchJob {name} is failed because 1 {self.failing} replica(s) failed."
        for pod in state["pods"]:
            if pod.endswith(f"-{rtype}-0") and pod in fake.objects:
                fake.objects[pod]["status"] = {"phase": phase}
        job["status"]["conditions"].append(_condition(self.outcome, message))


def _condition(kind: str, message: str) -> dict[str, str]:
    reason = f"PyTorchJob{kind}"
    return {"type": kind, "status": "True", "reason": reason, "message": message}


def _finished(job: dict[str, Any]) -> bool:
    conditions = job.get("status", {}).get("conditions", [])
    return any(c["type"] in ("Succeeded", "Failed") and c["status"] == "True" for c in conditions)
