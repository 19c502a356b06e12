"""A local fake of the Kubernetes API server for verify tests.

It speaks the REST paths the real one does (``/api/v1/...``, ``/apis/<group>/<version>/...``,
namespaced and cluster-scoped, label selectors on lists, pod logs, ``Status`` bodies on
errors, bearer-token auth), keeps objects in memory, and lets a test react to creations
(``on_create``) the way a controller would. A test can also make it hostile: rewrite its
answers (``mutators``: nulls, wrong types, duplicates, another object) or send a body a few
bytes at a time (``slow``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

TOKEN = "fake-token-for-tests"
PLURALS = {"NetworkAttachmentDefinition": "network-attachment-definitions"}


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
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
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
        self, path: str, selector: str | None, limit: int = 0, token: str = ""
    ) -> dict[str, Any]:
        want = dict(kv.split("=", 1) for kv in selector.split(",")) if selector else {}
        items = []
        for p, obj in sorted(self.objects.items()):
            parent, _, _name = p.rpartition("/")
            if parent != path:
                continue
            labels = obj.get("metadata", {}).get("labels", {}) or {}
            if all(labels.get(k) == v for k, v in want.items()):
                items.append(obj)
        start = int(token or 0)
        if limit:
            page = items[start : start + limit]
            more = start + limit < len(items)
            meta = {"continue": str(start + limit)} if more else {}
            return {"kind": "List", "apiVersion": "v1", "metadata": meta, "items": page}
        return {"kind": "List", "apiVersion": "v1", "items": items}

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
        if auth != f"Bearer {TOKEN}":
            return 401, _status(401, "Unauthorized", "Unauthorized")
        with self.lock:
            if method == "GET" and path.endswith("/log"):
                pod = path[: -len("/log")]
                if pod not in self.objects:
                    return 404, _status(404, "NotFound", f"pod {pod} not found")
                return 200, self.logs.get(pod, "")
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
                self.objects[target] = obj
                for hook in self.on_create:
                    hook(self, obj)
                return 201, obj
            if method == "DELETE":
                if path not in self.objects:
                    return 404, _status(404, "NotFound", f"{path} not found")
                del self.objects[path]
                return 200, _status(200, "Success", "deleted") | {"status": "Success"}
        return 405, _status(405, "MethodNotAllowed", method)

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

            do_GET = do_POST = do_DELETE = _serve

            def log_message(self, *args: object) -> None:
                pass

        return Handler
