"""Talking to the cluster: the official Kubernetes client, reduced to what verify needs.

Paths are built from an object's apiVersion, kind, namespace and name (no discovery round
trip), so every verify command needs read access to exactly the objects it names. Errors
the user can act on (no kubeconfig, API unreachable, forbidden) become :class:`KubeError`
with one line of explanation; the CLI prints it and exits 3.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

IRREGULAR_PLURALS = {
    "NetworkAttachmentDefinition": "network-attachment-definitions",
}


class KubeError(Exception):
    """The cluster could not be asked (config, connection, permission, time)."""


RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
"""Answers worth asking again: throttled, or the API server (or its proxy) in trouble."""
MAX_ATTEMPTS = 5
PAGE_SIZE = 500
MAX_PAGES = 1000
REQUEST_TIMEOUT = 30.0
CLEANUP_GRACE = 30.0
"""Time cleanup (deleting what a command created) may take beyond the command's deadline."""


def plural(kind: str) -> str:
    if kind in IRREGULAR_PLURALS:
        return IRREGULAR_PLURALS[kind]
    low = kind.lower()
    if low.endswith("y"):
        return low[:-1] + "ies"
    if low.endswith(("s", "x")):
        return low + "es"
    return low + "s"


def collection_path(api_version: str, kind: str, namespace: str | None = None) -> str:
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    ns = f"/namespaces/{namespace}" if namespace else ""
    return f"{base}{ns}/{plural(kind)}"


def object_path(api_version: str, kind: str, name: str, namespace: str | None = None) -> str:
    return f"{collection_path(api_version, kind, namespace)}/{name}"


def path_of(body: Mapping[str, Any]) -> str:
    meta = body["metadata"]
    return object_path(body["apiVersion"], body["kind"], meta["name"], meta.get("namespace"))


class Kube:
    """A connected API client (from a kubeconfig or the in-cluster service account)."""

    def __init__(self, kubeconfig: str | None = None, context: str | None = None) -> None:
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException

        try:
            if kubeconfig is None and context is None:
                try:
                    config.load_incluster_config()  # type: ignore[no-untyped-call]
                    self.api = client.ApiClient()
                    self.context = "in-cluster"
                    return
                except ConfigException:
                    pass
            cfg = client.Configuration()
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig, context=context, client_configuration=cfg
            )
        except (ConfigException, OSError) as exc:
            raise KubeError(f"no usable kubeconfig: {exc}") from exc
        self.api = client.ApiClient(cfg)
        self.context = context or "current context"
        self.kubeconfig = kubeconfig

    deadline: float | None = None
    """time.monotonic() by which every request of this command must have ended."""
    clock: Callable[[], float] = staticmethod(time.monotonic)
    sleep: Callable[[float], None] = staticmethod(time.sleep)

    def set_timeout(self, seconds: float | None) -> None:
        """Bound everything this client does from now on by ``seconds`` in all."""
        self.deadline = None if seconds is None else self.clock() + seconds

    @contextlib.contextmanager
    def grace(self, seconds: float = CLEANUP_GRACE) -> Iterator[None]:
        """Extra time for cleanup after the deadline (deleting what the command created)."""
        saved = self.deadline
        if saved is not None:
            self.deadline = max(saved, self.clock()) + seconds
        try:
            yield
        finally:
            self.deadline = saved

    def _budget(self, wanted: float, what: str) -> float:
        if self.deadline is None:
            return wanted
        left = self.deadline - self.clock()
        if left <= 0:
            raise KubeError(f"{what}: the command's time limit was reached (--timeout)")
        return min(wanted, left)

    def _request(
        self,
        method: str,
        path: str,
        body: Any = None,
        timeout: int = 30,
        query: Mapping[str, str] | None = None,
    ) -> tuple[int, bytes]:
        """One HTTP exchange through the client's REST layer (TLS and auth from the
        kubeconfig); the generated API methods are not used, their signatures change
        between client releases."""
        from urllib.parse import urlencode

        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        cfg = self.api.configuration
        headers = {"Accept": "application/json", "Content-Type": "application/json"}
        for auth in cfg.auth_settings().values():
            if auth.get("in") == "header" and auth.get("value"):
                headers[auth["key"]] = auth["value"]
        url = cfg.host.rstrip("/") + path + (f"?{urlencode(query)}" if query else "")
        try:
            resp = self.api.rest_client.request(  # type: ignore[no-untyped-call]
                method, url, headers=headers, body=body, _request_timeout=timeout
            )
        except ApiException as exc:
            return int(exc.status or 0), str(exc.body or exc.reason or "").encode()
        except (HTTPError, OSError) as exc:
            raise KubeError(f"cannot reach the API server at {cfg.host}: {exc}") from exc
        read = getattr(resp, "read", None)
        data = read() if callable(read) else resp.data
        return int(resp.status), bytes(data or b"")

    def _exchange(
        self,
        method: str,
        path: str,
        body: Any = None,
        timeout: float = REQUEST_TIMEOUT,
        query: Mapping[str, str] | None = None,
    ) -> tuple[int, bytes]:
        """One request within the deadline, asked again with backoff while the server says
        it is throttled or in trouble (429, 5xx) or the connection fails."""
        delay = 0.5
        for attempt in range(1, MAX_ATTEMPTS + 1):
            budget = self._budget(timeout, f"{method} {path}")
            try:
                status, data = self._request(
                    method, path, body, timeout=max(1, int(budget)), query=query
                )
            except KubeError:
                if attempt == MAX_ATTEMPTS:
                    raise
                status, data = 0, b""
            if status not in RETRY_STATUSES and status != 0:
                return status, data
            if attempt == MAX_ATTEMPTS:
                break
            left = None if self.deadline is None else self.deadline - self.clock()
            if left is not None and left <= delay:
                break
            self.sleep(delay)
            delay = min(delay * 2, 8.0)
        if status == 0:
            raise KubeError(f"{method} {path}: the API server could not be reached")
        return status, data

    def _call(self, method: str, path: str, body: Any = None, **query: str) -> Any:
        status, data = self._exchange(method, path, body, query=query)
        if status == 404:
            return None
        if status in (401, 403):
            raise KubeError(
                f"{method} {path}: {status} {'Unauthorized' if status == 401 else 'Forbidden'}: the kubeconfig's user may not do this"
            )
        if not 200 <= status < 300:
            raise KubeError(
                f"{method} {path}: HTTP {status} {data[:200].decode('utf-8', 'replace')}"
            )
        try:
            return json.loads(data) if data else None
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
            raise KubeError(f"{method} {path}: the API returned no JSON") from exc

    def get(self, path: str) -> dict[str, Any] | None:
        """The object, or None when it does not exist."""
        out = self._call("GET", path)
        if out is None:
            return None
        if not isinstance(out, dict) or not isinstance(out.get("metadata", {}), dict):
            raise KubeError(f"GET {path}: malformed answer (not a Kubernetes object)")
        return out

    def list(self, path: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        """Every item, page by page (``limit``/``continue``): one request per
        :data:`PAGE_SIZE` items, never one per item."""
        query = {"labelSelector": label_selector} if label_selector else {}
        items: list[dict[str, Any]] = []
        token = ""
        for _ in range(MAX_PAGES):
            page = dict(query, limit=str(PAGE_SIZE), **({"continue": token} if token else {}))
            out = self._call("GET", path, **page)
            if out is None:
                return items
            batch = out.get("items") if isinstance(out, dict) else None
            if not isinstance(batch, list):
                raise KubeError(f"GET {path}: malformed answer (no items list)")
            bad = [
                i
                for i in batch
                if not isinstance(i, dict) or not isinstance(i.get("metadata"), dict)
            ]
            if bad:
                raise KubeError(f"GET {path}: malformed answer ({len(bad)} items are not objects)")
            items += batch
            meta = out.get("metadata")
            token = str(meta.get("continue") or "") if isinstance(meta, dict) else ""
            if not token:
                return items
        raise KubeError(f"GET {path}: more than {MAX_PAGES} pages of {PAGE_SIZE}")

    def create(self, body: Mapping[str, Any]) -> dict[str, Any]:
        meta = body["metadata"]
        path = collection_path(body["apiVersion"], body["kind"], meta.get("namespace"))
        out = self._call("POST", path, body=dict(body))
        if not isinstance(out, dict):
            raise KubeError(f"POST {path}: the API returned no object")
        return out

    def delete(self, path: str) -> None:
        self._call("DELETE", path, body={"propagationPolicy": "Foreground"})

    def log(self, namespace: str, pod: str, container: str | None = None) -> str:
        query = {"container": container} if container else {}
        path = f"/api/v1/namespaces/{namespace}/pods/{pod}/log"
        status, data = self._exchange("GET", path, timeout=120, query=query)
        if status != 200:
            raise KubeError(f"log of {namespace}/{pod}: HTTP {status}")
        return data.decode("utf-8", "replace")
