"""Talking to the cluster: the official Kubernetes client, reduced to what verify needs.

Paths are built from an object's apiVersion, kind, namespace and name (no discovery round
trip), so every verify command needs read access to exactly the objects it names. Errors
the user can act on (no kubeconfig, API unreachable, forbidden) become :class:`KubeError`
with one line of explanation; the CLI prints it and exits 3.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

IRREGULAR_PLURALS = {
    "NetworkAttachmentDefinition": "network-attachment-definitions",
}


class KubeError(Exception):
    """The cluster could not be asked (config, connection, permission)."""


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

    def _call(self, method: str, path: str, body: Any = None, **query: str) -> Any:
        status, data = self._request(method, path, body, query=query)
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
        except json.JSONDecodeError as exc:
            raise KubeError(f"{method} {path}: the API returned no JSON") from exc

    def get(self, path: str) -> dict[str, Any] | None:
        """The object, or None when it does not exist."""
        out = self._call("GET", path)
        return out if isinstance(out, dict) else None

    def list(self, path: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        query = {"labelSelector": label_selector} if label_selector else {}
        out = self._call("GET", path, **query)
        items = out.get("items", []) if isinstance(out, dict) else []
        return [i for i in items if isinstance(i, dict)]

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
        status, data = self._request("GET", path, timeout=120, query=query)
        if status != 200:
            raise KubeError(f"log of {namespace}/{pod}: HTTP {status}")
        return data.decode("utf-8", "replace")
