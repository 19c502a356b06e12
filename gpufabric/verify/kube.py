"""Talking to the cluster: the official Kubernetes client, reduced to what verify needs.

Paths are built from an object's apiVersion, kind, namespace and name (no discovery round
trip), so every verify command needs read access to exactly the objects it names. Errors
the user can act on (API unreachable, forbidden) become :class:`KubeError` with one line of
explanation; the CLI prints it and exits 3. A kubeconfig that cannot be used (missing,
unreadable, not YAML, without the context asked for) is bad input: a StackError naming the
file and the flag or variable that chose it (exit 2).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from gpufabric.errors import GpufabricError
from gpufabric.exitcodes import ExitCode
from gpufabric.model.problems import Problem, StackError
from gpufabric.model.redaction import redact

IRREGULAR_PLURALS = {
    "NetworkAttachmentDefinition": "network-attachment-definitions",
}


class KubeError(GpufabricError):
    """The cluster could not be asked (config, connection, permission, time): exit 3, while
    a check runs. Its message is redacted: a kubeconfig's server URL (and the client's errors
    quoting it) may carry a user, password or token."""

    exit_code = ExitCode.UNREACHABLE
    check_only = True

    def __init__(self, *args: object) -> None:
        super().__init__(*(redact(a) if isinstance(a, str) else a for a in args))


class NotFound(KubeError):
    """The API has no such collection (a CRD not installed, a namespace missing)."""


class Forbidden(KubeError):
    """The kubeconfig's user may not do this (401, 403)."""


class Conflict(KubeError):
    """The object exists already, or changed since it was read (409)."""


class Unreached(KubeError):
    """No connection to the API server (refused, reset, no route, a TLS failure)."""


def _reason(exc: BaseException) -> str:
    """What went wrong under urllib3's wrappers, without their object addresses (``<...
    object at 0x...>``): ``Failed to establish a new connection: [Errno 111] ...``."""
    inner = getattr(exc, "reason", None)
    while isinstance(inner, BaseException):
        exc, inner = inner, getattr(inner, "reason", None)
    return re.sub(r"<[^<>]* at 0x[0-9a-f]+>: ", "", str(exc))


class Malformed(KubeError):
    """The API answered something that is not the object asked for: null or mistyped
    fields, another object's name, namespace or kind. Checks report it as an ERROR naming
    the object; elsewhere it ends the command like any :class:`KubeError`."""


RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
"""Answers worth asking again: throttled, or the API server (or its proxy) in trouble."""
MAX_ATTEMPTS = 5
PAGE_SIZE = 500
MAX_PAGES = 1000
REQUEST_TIMEOUT = 30.0
_UNSET = object()
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


# ---------------------------------------------------------------- reading answers defensively


def describe(obj: Any) -> str:
    """``Kind ns/name`` of an answer, as far as it can be read (for error messages)."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    name, ns = meta.get("name"), meta.get("namespace")
    kind = obj.get("kind") if isinstance(obj, dict) else None
    where = "/".join(str(x)[:80] for x in (ns, name) if isinstance(x, str) and x)
    return " ".join(x for x in (kind if isinstance(kind, str) else "", where or "?") if x)


def _walk(obj: Any, keys: tuple[str, ...]) -> Any:
    cur = obj
    for i, key in enumerate(keys):
        if cur is None:
            return None
        if not isinstance(cur, dict):
            dotted = ".".join(keys[:i]) or "the answer"
            raise Malformed(f"{describe(obj)}: {dotted} is not an object")
        cur = cur.get(key)
    return cur


def mapping(obj: Any, *keys: str) -> dict[str, Any]:
    """The object at ``keys`` ({} when absent or null); Malformed when it is something else."""
    out = _walk(obj, keys)
    if out is None:
        return {}
    if not isinstance(out, dict):
        raise Malformed(f"{describe(obj)}: {'.'.join(keys)} is not an object")
    return out


def records(obj: Any, *keys: str) -> list[dict[str, Any]]:
    """The list of objects at ``keys`` ([] when absent or null); Malformed otherwise."""
    out = _walk(obj, keys)
    if out is None:
        return []
    if not isinstance(out, list) or not all(isinstance(x, dict) for x in out):
        raise Malformed(f"{describe(obj)}: {'.'.join(keys)} is not a list of objects")
    return out


def number(obj: Any, *keys: str, default: int = 0) -> int:
    """The integer at ``keys`` (``default`` when absent or null); Malformed otherwise."""
    out = _walk(obj, keys)
    if out is None:
        return default
    if isinstance(out, bool) or not isinstance(out, int) or out < 0:
        raise Malformed(f"{describe(obj)}: {'.'.join(keys)} is {str(out)[:40]!r}, not a count")
    return out


def text(obj: Any, *keys: str) -> str:
    """The string at ``keys`` ("" when absent or null); Malformed otherwise."""
    out = _walk(obj, keys)
    if out is None:
        return ""
    if not isinstance(out, str):
        raise Malformed(f"{describe(obj)}: {'.'.join(keys)} is not a string")
    return out


def name_of(obj: Any) -> str:
    """``metadata.name``; Malformed when missing or not a string."""
    name = text(obj, "metadata", "name")
    if not name:
        raise Malformed(f"{describe(obj)}: no metadata.name")
    return name


def _identity(path: str) -> tuple[str, str | None, str]:
    """(plural, namespace, name) of an object path."""
    parts = path.strip("/").split("/")
    rest = parts[2:] if parts[0] == "api" else parts[3:]
    if len(rest) == 4 and rest[0] == "namespaces":
        return rest[2], rest[1], rest[3]
    return rest[-2] if len(rest) >= 2 else "", None, rest[-1]


def check_identity(path: str, obj: dict[str, Any]) -> None:
    """Malformed unless ``obj`` is the object ``path`` names (name, namespace, kind)."""
    want_plural, want_ns, want_name = _identity(path)
    kind = obj.get("kind")
    meta = mapping(obj, "metadata")
    got_ns = meta.get("namespace") or None
    if (
        meta.get("name") != want_name
        or got_ns != want_ns
        or not isinstance(kind, str)
        or plural(kind) != want_plural
    ):
        raise Malformed(f"GET {path}: the API answered with another object ({describe(obj)})")


def unique(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Items once each, by uid and by namespace/name (an API repeating a page or an entry)."""
    seen: set[Any] = set()
    out = []
    for item in items:
        meta = item["metadata"]
        keys = {f"name {meta.get('namespace')}/{meta.get('name')}"}
        if meta.get("uid"):
            keys.add(f"uid {meta.get('uid')}")
        if keys & seen:
            continue
        seen |= keys
        out.append(item)
    return out


def _kubeconfig_files(kubeconfig: str | None) -> tuple[str, list[Path]]:
    """Where the kubeconfig comes from (the flag or variable, in words) and its files that
    exist; StackError (exit 2) when none does."""
    if kubeconfig is not None:
        origin, paths = "--kubeconfig", [kubeconfig]
    elif os.environ.get("KUBECONFIG"):
        origin = "KUBECONFIG"
        paths = [p for p in os.environ["KUBECONFIG"].split(os.pathsep) if p]
    else:
        origin, paths = "--kubeconfig", ["~/.kube/config"]
    found = [Path(p).expanduser() for p in paths if Path(p).expanduser().exists()]
    if not found:
        shown = os.pathsep.join(paths)
        why = (
            "no kubeconfig: not given, KUBECONFIG unset and ~/.kube/config does not exist; "
            "pass --kubeconfig FILE"
            if paths == ["~/.kube/config"] and kubeconfig is None
            else f"{shown}: no such file"
        )
        raise StackError("gpufabric verify", [Problem(origin, why)])
    return origin, found


def _read_kubeconfig(origin: str, path: Path) -> dict[str, Any]:
    """One kubeconfig file as a mapping; StackError naming it when it is not one."""
    why = None
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except IsADirectoryError:
        why = "a directory, not a kubeconfig file"
    except OSError as exc:
        why = f"cannot be read ({exc.strerror or exc})"
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        why = f"not YAML ({str(exc).splitlines()[0][:120]})"
    else:
        if isinstance(doc, dict) and any(k in doc for k in KUBECONFIG_KEYS):
            return doc
        why = "not a kubeconfig (expected a YAML mapping with clusters, contexts and users)"
    raise StackError("gpufabric verify", [Problem(origin, f"{path}: {why}")])


KUBECONFIG_KEYS = ("clusters", "contexts", "users", "current-context")
"""A YAML mapping with none of these is some other file, not a kubeconfig."""
FILE_FIELDS = {
    "users": (
        ("client-certificate", "client-certificate-data"),
        ("client-key", "client-key-data"),
        ("tokenFile", "token"),
    ),
    "clusters": (("certificate-authority", "certificate-authority-data"),),
}
"""Fields of a kubeconfig's user and cluster that name a file, each with the field that
holds the same inline (which wins when both are set)."""


def _entry(
    docs: list[tuple[Path, dict[str, Any]]], section: str, name: Any
) -> tuple[Path, dict[str, Any]] | None:
    """The first ``section`` entry called ``name`` (as kubectl merges the files) and its file."""
    for path, doc in docs:
        for entry in doc.get(section) or []:
            if isinstance(entry, dict) and entry.get("name") == name:
                body = entry.get(section[:-1])
                return path, body if isinstance(body, dict) else {}
    return None


def _check_files(origin: str, docs: list[tuple[Path, dict[str, Any]]], context: str) -> None:
    """The files the chosen context's user and cluster name exist and can be read (kubectl
    refuses to run without them; the client would send no certificate and get a 401), and
    its token, trimmed as kubectl trims a token file, holds no line break: StackError
    naming the kubeconfig, the entry, the field and the file otherwise."""
    found = _entry(docs, "contexts", context)
    ctx = found[1] if found else {}
    for section, key in (("users", "user"), ("clusters", "cluster")):
        named = _entry(docs, section, ctx.get(key))
        if named is None:
            continue
        where, body = named
        for file_key, data_key in FILE_FIELDS[section]:
            name = body.get(file_key)
            if body.get(data_key) or not isinstance(name, str) or not name:
                continue
            target = (where.parent / Path(name).expanduser()).absolute()
            try:
                content = target.read_bytes()
            except OSError as exc:
                why = (
                    f"{where}: {key} {ctx.get(key)!r} {file_key} {target}: cannot be read "
                    f"({exc.strerror or exc})"
                )
                raise StackError("gpufabric verify", [Problem(origin, why)]) from exc
            if file_key == "tokenFile" and len(content.strip().splitlines()) > 1:
                why = f"{where}: {key} {ctx.get(key)!r} tokenFile {target}: more than one line"
                raise StackError("gpufabric verify", [Problem(origin, why)])
        token = body.get("token") if section == "users" else None
        if isinstance(token, str) and len(token.strip().splitlines()) > 1:
            why = f"{where}: user {ctx.get(key)!r} token: more than one line"
            raise StackError("gpufabric verify", [Problem(origin, why)])


def check_kubeconfig(
    kubeconfig: str | None, context: str | None
) -> tuple[str, list[tuple[Path, dict[str, Any]]]]:
    """The kubeconfig the client would load exists, reads as YAML, holds ``context`` (or
    sets a current context) and the files its user and cluster name can be read:
    StackError (exit 2) naming the file otherwise, before the client's own less telling
    error. Where it came from (the flag or variable) and its files, read."""
    origin, files = _kubeconfig_files(kubeconfig)
    read = [(path, _read_kubeconfig(origin, path)) for path in files]
    docs = [doc for _, doc in read]
    names = [
        str(entry.get("name"))
        for doc in docs
        for entry in (doc.get("contexts") or [])
        if isinstance(entry, dict)
    ]
    shown = ", ".join(str(f) for f in files)
    if context is not None and context not in names:
        known = ", ".join(names) or "none"
        why = (
            f"{context!r} (--context, else the stack's cluster.kubeContext) is no context "
            f"of {origin} {shown}; its contexts: {known}"
        )
        raise StackError("gpufabric verify", [Problem("--context", why)])
    if context is None and not any(doc.get("current-context") for doc in docs):
        why = f"{origin} {shown} sets no current-context: pass --context"
        raise StackError("gpufabric verify", [Problem("--context", why)])
    current = next((doc.get("current-context") for doc in docs if doc.get("current-context")), None)
    _check_files(origin, read, context if context is not None else str(current))
    return origin, read


class _Captured(logging.Handler):
    """The log records the client writes while a kubeconfig is loaded: its exec plugin's
    failure goes to ``logging.error``, which would configure the root logger (printing
    ``ERROR:root:`` and, from then on, urllib3's retries) and carry on without credentials."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def _client_logs() -> Iterator[list[logging.LogRecord]]:
    root, handler = logging.getLogger(), _Captured()
    root.addHandler(handler)
    try:
        yield handler.records
    finally:
        root.removeHandler(handler)


def _plugin_failed(
    origin: str,
    read: list[tuple[Path, dict[str, Any]]],
    context: str | None,
    records: list[logging.LogRecord],
) -> KubeError | None:
    """The error that says the chosen user's exec credential plugin failed (its command and
    what the client logged: its exit status and first line of output), when it did."""
    if not records:
        return None
    current = next((d.get("current-context") for _, d in read if d.get("current-context")), None)
    ctx = _entry(read, "contexts", context or current)
    user = (ctx[1] if ctx else {}).get("user")
    found = _entry(read, "users", user)
    plugin = (found[1] if found else {}).get("exec")
    if not isinstance(plugin, dict):
        return None
    command = " ".join(str(a) for a in [plugin.get("command"), *(plugin.get("args") or [])])
    said = records[0].getMessage().removeprefix("exec: ")
    status = re.match(r"process returned (-?\d+)\.? ?(.*)", said, re.DOTALL)
    if status is not None:
        output = status.group(2).strip().splitlines()
        said = f"exited with status {status.group(1)}" + (f": {output[0][:200]}" if output else "")
    else:
        said = f"failed ({said.strip().splitlines()[0][:200]})"
    where = found[0] if found else origin
    return KubeError(
        f"{where}: user {user!r}: the credential plugin `{command}` {said}; "
        "nothing was sent to the cluster"
    )


class Kube:
    """A connected API client (from a kubeconfig or the in-cluster service account)."""

    def __init__(
        self, kubeconfig: str | None = None, context: str | None = None, in_cluster: bool = False
    ) -> None:
        """``in_cluster``: the pod's service account or nothing (never a kubeconfig's
        current context, which may be another cluster)."""
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException

        if in_cluster:
            try:
                config.load_incluster_config()  # type: ignore[no-untyped-call]
            except ConfigException as exc:
                raise KubeError(
                    f"--in-cluster: no service account to use ({exc}); run it in a pod (the "
                    "rendered CronJob/Deployment), or without --in-cluster with a kubeconfig"
                ) from exc
            self.api = client.ApiClient()
            self.context = "in-cluster"
            return
        try:
            if kubeconfig is None and context is None:
                try:
                    config.load_incluster_config()  # type: ignore[no-untyped-call]
                    self.api = client.ApiClient()
                    self.context = "in-cluster"
                    return
                except ConfigException:
                    pass
            origin, read = check_kubeconfig(kubeconfig, context)
            cfg = client.Configuration()
            with _client_logs() as records:
                config.load_kube_config(  # type: ignore[no-untyped-call]
                    config_file=kubeconfig, context=context, client_configuration=cfg
                )
        except (ConfigException, OSError) as exc:
            raise KubeError(f"no usable kubeconfig: {exc}") from exc
        failed = _plugin_failed(origin, read, context, records)
        if failed is not None:
            raise failed
        self.api = client.ApiClient(cfg)
        self.context = context or "current context"
        # the current context by name, for messages (the first file that sets it wins)
        self.current = next(
            (str(doc["current-context"]) for _, doc in read if doc.get("current-context")), ""
        )
        self.kubeconfig = kubeconfig

    @property
    def server(self) -> str:
        """The API server asked, in words: its URL and the kubeconfig context (for errors)."""
        host = self.api.configuration.host
        current = getattr(self, "current", "")
        named = f", {current}" if current else ""
        where = {
            "in-cluster": "in-cluster",
            "current context": f"the kubeconfig's current context{named}",
        }
        return f"the API server at {host} ({where.get(self.context, f'context {self.context}')})"

    _shared_deadline: float | None = None
    _limit_seconds: dict[str, float] = {}
    """The seconds each deadline flag was given (for the message when it is reached)."""
    _shared_flag: str = "--timeout"
    clock: Callable[[], float] = staticmethod(time.monotonic)
    sleep: Callable[[float], None] = staticmethod(time.sleep)

    def _tls(self) -> threading.local:
        state: threading.local = self.__dict__.setdefault("_state", threading.local())
        return state

    def _flights(self) -> dict[int, tuple[str, str, str, threading.Event]]:
        """Requests still in flight (their wait was abandoned: a deadline or Ctrl-C):
        (method, path, name of the object sent, end)."""
        flights: dict[int, tuple[str, str, str, threading.Event]]
        flights = self.__dict__.setdefault("_in_flight", {})
        return flights

    def _unanswered(self) -> set[tuple[str, str]]:
        """(collection, name) of creates that ended without an HTTP answer: the server may
        have made the object, or may still make it."""
        out: set[tuple[str, str]] = self.__dict__.setdefault("_lost_creates", set())
        return out

    @property
    def deadline(self) -> float | None:
        """time.monotonic() by which every request of this thread must have ended."""
        out: float | None = getattr(self._tls(), "deadline", self._shared_deadline)
        return out

    def set_timeout(self, seconds: float | None, flag: str = "--timeout") -> None:
        """Bound everything this client does from now on by ``seconds`` in all, the limit
        the user set with ``flag``."""
        self._shared_deadline = None if seconds is None else self.clock() + seconds
        self._shared_flag = flag
        if seconds is not None:
            self._limit_seconds = {**self._limit_seconds, flag: seconds}
        self._tls().__dict__.pop("deadline", None)
        self._tls().__dict__.pop("flag", None)

    @property
    def deadline_flag(self) -> str:
        """The option that set :attr:`deadline` (what a user raises when it is reached)."""
        out: str = getattr(self._tls(), "flag", self._shared_flag)
        return out

    @contextlib.contextmanager
    def _deadline_as(self, value: float | None, flag: str) -> Iterator[None]:
        state = self._tls()
        saved = state.__dict__.get("deadline", _UNSET), state.__dict__.get("flag", _UNSET)
        state.deadline, state.flag = value, flag
        try:
            yield
        finally:
            for key, was in zip(("deadline", "flag"), saved, strict=True):
                if was is _UNSET:
                    state.__dict__.pop(key, None)
                else:
                    setattr(state, key, was)

    def limit(self, seconds: float, flag: str = "--timeout") -> contextlib.AbstractContextManager[None]:  # fmt: skip
        """Within the block, this thread's requests end within ``seconds`` (set by ``flag``)
        and within the client's own limit: one job of a sweep."""
        mine, outer = self.clock() + seconds, self.deadline
        self._limit_seconds = {**self._limit_seconds, flag: seconds}
        if outer is not None and outer < mine:
            return self._deadline_as(outer, self.deadline_flag)
        return self._deadline_as(mine, flag)

    def grace(self, seconds: float | None = None) -> contextlib.AbstractContextManager[None]:
        """Extra time for cleanup after the deadline (deleting what the command created),
        :data:`CLEANUP_GRACE` unless given; from now when there is no deadline."""
        seconds = CLEANUP_GRACE if seconds is None else seconds
        saved = self.deadline
        return self._deadline_as(max(saved or 0.0, self.clock()) + seconds, self.deadline_flag)

    def _budget(self, wanted: float, what: str) -> float:
        deadline = self.deadline
        if deadline is None:
            return wanted
        left = deadline - self.clock()
        if left <= 0:
            raise KubeError(f"{what}: {self._timed_out()}")
        return min(wanted, left)

    def _timed_out(self) -> str:
        """The deadline reached, in words: the flag, its seconds and the server asked."""
        flag = self.deadline_flag
        seconds = self._limit_seconds.get(flag)
        limit = f"{flag} {seconds:g}s" if seconds is not None else flag
        return f"timed out after {limit}, the command's time limit, asking {self.server}"

    def _request(
        self,
        method: str,
        path: str,
        body: Any = None,
        timeout: float = REQUEST_TIMEOUT,
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
                # a token file's final line break, trimmed as kubectl trims it
                headers[auth["key"]] = str(auth["value"]).strip()
        url = cfg.host.rstrip("/") + path + (f"?{urlencode(query)}" if query else "")
        try:
            resp = self.api.rest_client.request(  # type: ignore[no-untyped-call]
                method, url, headers=headers, body=body, _request_timeout=timeout
            )
        except ApiException as exc:
            return int(exc.status or 0), str(exc.body or exc.reason or "").encode()
        except (HTTPError, OSError) as exc:
            raise Unreached(f"{method} {path}: cannot reach {self.server}: {_reason(exc)}") from exc
        read = getattr(resp, "read", None)
        data = read() if callable(read) else resp.data
        return int(resp.status), bytes(data or b"")

    def _bounded(
        self,
        method: str,
        path: str,
        body: Any,
        budget: float,
        query: Mapping[str, str] | None,
    ) -> tuple[int, bytes]:
        """:meth:`_request` within ``budget`` seconds of wall-clock time, whole body
        included (a socket timeout alone never fires while bytes trickle in). The exchange
        runs in a daemon thread; when the wait ends first (time, Ctrl-C) it is left in
        flight and recorded, so cleanup can wait for a create that may still land."""
        done = threading.Event()
        box: dict[str, Any] = {}
        flights, lost = self._flights(), self._unanswered()
        meta = body.get("metadata") if isinstance(body, dict) else None
        name = str(meta.get("name")) if isinstance(meta, dict) else ""
        # a create may outlive the wait: it keeps listening through the cleanup grace
        socket_timeout = budget + (CLEANUP_GRACE if method == "POST" else 0.0)

        def work() -> None:
            try:
                box["answer"] = self._request(method, path, body, socket_timeout, query)
            except BaseException as exc:  # handed to the waiting thread
                box["error"] = exc
                if method == "POST":
                    lost.add((path, name))
            finally:
                flights.pop(id(done), None)
                done.set()

        flights[id(done)] = (method, path, name, done)
        threading.Thread(target=work, name=f"kube {method} {path}", daemon=True).start()
        if not done.wait(budget):
            deadline = self.deadline
            if deadline is not None and deadline - self.clock() <= 0:
                raise KubeError(f"{method} {path}: {self._timed_out()}")
            raise KubeError(
                f"{method} {path}: no complete answer from {self.server} within {budget:.3g}s"
            )
        if "error" in box:
            raise box["error"]
        answer: tuple[int, bytes] = box["answer"]
        return answer

    def in_flight(self, method: str, path: str, name: str) -> list[threading.Event]:
        """The ends of the ``method`` requests for ``name`` to ``path`` still in flight."""
        flights = list(self._flights().values())
        return [done for m, p, n, done in flights if (m, p, n) == (method, path, name)]

    def _exchange(
        self,
        method: str,
        path: str,
        body: Any = None,
        timeout: float = REQUEST_TIMEOUT,
        query: Mapping[str, str] | None = None,
    ) -> tuple[int, bytes]:
        """One request within the deadline, asked again with backoff while the server says
        it is throttled or in trouble (429, 5xx) or the connection fails (a create only when
        it was refused, never after it may have reached the server)."""
        delay = 0.5
        last: KubeError | None = None
        for attempt in range(1, MAX_ATTEMPTS + 1):
            budget = self._budget(timeout, f"{method} {path}")
            try:
                status, data = self._bounded(method, path, body, budget, query)
            except KubeError as exc:
                if attempt == MAX_ATTEMPTS or method == "POST":
                    raise
                status, data, last = 0, b"", exc
            if status not in RETRY_STATUSES and status != 0:
                return status, data
            if attempt == MAX_ATTEMPTS:
                break
            deadline = self.deadline
            left = None if deadline is None else deadline - self.clock()
            if left is not None and left <= delay:
                if status == 0 and not isinstance(last, Unreached):
                    raise KubeError(f"{method} {path}: {self._timed_out()}")
                break
            self.sleep(delay)
            delay = min(delay * 2, 8.0)
        if status == 0:
            raise last or KubeError(f"{method} {path}: {self.server} could not be reached")
        return status, data

    def _call(self, method: str, path: str, body: Any = None, **query: str) -> Any:
        status, data = self._exchange(method, path, body, query=query)
        if status == 404:
            return None
        return self._call_result(method, path, status, data)

    def _call_result(self, method: str, path: str, status: int, data: bytes) -> Any:
        if status in (401, 403):
            raise Forbidden(
                f"{method} {path}: {status} {'Unauthorized' if status == 401 else 'Forbidden'}: the kubeconfig's user may not do this"
            )
        if not 200 <= status < 300:
            error = Conflict if status == 409 else KubeError
            raise error(f"{method} {path}: HTTP {status} {data[:200].decode('utf-8', 'replace')}")
        try:
            return json.loads(data) if data else None
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
            raise Malformed(f"{method} {path}: the API returned no JSON") from exc

    def get(self, path: str) -> dict[str, Any] | None:
        """The object, or None when it does not exist; Malformed unless the answer is the
        object asked for."""
        out = self._call("GET", path)
        if out is None:
            return None
        if not isinstance(out, dict) or not isinstance(out.get("metadata"), dict):
            raise Malformed(f"GET {path}: malformed answer (not a Kubernetes object)")
        check_identity(path, out)
        return out

    def served(self, api_version: str) -> set[str] | None:
        """The resources (plurals) the API serves in a group version (``v1`` or
        ``group/version``), from its discovery document; None when it serves none of them."""
        path = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        out = self._call("GET", path)
        if out is None:
            return None
        if not isinstance(out, dict) or not isinstance(out.get("resources"), list):
            raise Malformed(f"GET {path}: malformed answer (no resources list)")
        return {str(r.get("name")) for r in out["resources"] if isinstance(r, dict)}

    def list(self, path: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        """Every item once, page by page (``limit``/``continue``): one request per
        :data:`PAGE_SIZE` items, never one per item; a repeated page or entry counts once."""
        query = {"labelSelector": label_selector} if label_selector else {}
        items: list[dict[str, Any]] = []
        token, seen = "", set[str]()
        for _ in range(MAX_PAGES):
            page = dict(query, limit=str(PAGE_SIZE), **({"continue": token} if token else {}))
            out = self._call("GET", path, **page)
            if out is None:
                return unique(items)
            batch = out.get("items") if isinstance(out, dict) else None
            if not isinstance(batch, list):
                raise Malformed(f"GET {path}: malformed answer (no items list)")
            bad = [
                i
                for i in batch
                if not isinstance(i, dict) or not isinstance(i.get("metadata"), dict)
            ]
            if bad:
                raise Malformed(f"GET {path}: malformed answer ({len(bad)} items are not objects)")
            items += batch
            meta = out.get("metadata")
            more = (meta.get("continue") if isinstance(meta, dict) else "") or ""
            if not more:
                return unique(items)
            if not isinstance(more, str) or more in seen:
                raise Malformed(f"GET {path}: malformed answer (a bad or repeated continue token)")
            seen.add(more)
            token = more
        raise KubeError(f"GET {path}: more than {MAX_PAGES} pages of {PAGE_SIZE}")

    def create(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create the object; NotFound when the API has no such collection."""
        path = collection_path(body["apiVersion"], body["kind"], body["metadata"].get("namespace"))
        status, data = self._exchange("POST", path, dict(body))
        if status == 404:
            raise NotFound(f"POST {path}: 404 Not Found: the API has no such collection")
        out = self._call_result("POST", path, status, data)
        if not isinstance(out, dict):
            raise Malformed(f"POST {path}: the API returned no object")
        return out

    def replace(self, body: Mapping[str, Any], subresource: str = "") -> dict[str, Any] | None:
        """Write ``body`` back (PUT) under its ``metadata.resourceVersion``: None when the
        object changed since it was read (409 Conflict), so the caller reads it again
        instead of overwriting someone else's change. ``subresource="status"`` writes its
        status subresource."""
        path = path_of(body) + (f"/{subresource}" if subresource else "")
        status, data = self._exchange("PUT", path, dict(body))
        if status == 409:
            return None
        out = self._call_result("PUT", path, status, data)
        if not isinstance(out, dict):
            raise Malformed(f"PUT {path}: the API returned no object")
        return out

    def delete(self, path: str) -> bool:
        """Delete the object; False when there was none."""
        status, _data = self._exchange("DELETE", path, {"propagationPolicy": "Foreground"})
        if status == 404:
            return False
        self._call_result("DELETE", path, status, b"")
        return True

    def remove(self, body: Mapping[str, Any], poll: float = 0.5) -> bool:
        """Delete the object ``body`` describes and confirm it: True once it is gone or
        being deleted and no create of it can still land. A create still in flight (Ctrl-C
        or a deadline ended its wait) is waited for and its object deleted; a create that
        ended without an answer is confirmed only once its object was seen and deleted.
        False when that could not be confirmed by the deadline (see :meth:`grace`)."""
        meta = body["metadata"]
        path, name = path_of(body), str(meta["name"])
        creates = collection_path(body["apiVersion"], body["kind"], meta.get("namespace"))
        deadline = self.deadline
        bound = self.clock() + CLEANUP_GRACE if deadline is None else deadline
        with self._deadline_as(bound, self.deadline_flag):
            return self._confirm_removed(path, creates, name, poll)

    def _confirm_removed(self, path: str, creates: str, name: str, poll: float) -> bool:
        found = False
        while True:
            for done in self.in_flight("POST", creates, name):
                done.wait(max(0.0, min(poll, self._left())))
            try:
                found = self.delete(path) or found
                live = self.get(path)
            except KubeError:
                live = {"metadata": {}}  # unknown: ask again
            going = live is None or bool(mapping(live, "metadata").get("deletionTimestamp"))
            lost = (creates, name) in self._unanswered()
            if going and not self.in_flight("POST", creates, name) and (found or not lost):
                self._unanswered().discard((creates, name))
                return True
            if self._left() <= poll:
                return False
            self.sleep(poll)

    def _left(self) -> float:
        deadline = self.deadline
        return REQUEST_TIMEOUT if deadline is None else deadline - self.clock()

    def log(self, namespace: str, pod: str, container: str | None = None) -> str:
        query = {"container": container} if container else {}
        path = f"/api/v1/namespaces/{namespace}/pods/{pod}/log"
        status, data = self._exchange("GET", path, timeout=120, query=query)
        if status != 200:
            raise KubeError(f"log of {namespace}/{pod}: HTTP {status}")
        return data.decode("utf-8", "replace")
