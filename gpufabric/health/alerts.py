"""The firing alerts ``gpufabric health`` acts on, read from Prometheus's HTTP API: the
``ALERTS`` series of gpufabric's rules, which carry ``quarantine="true"`` (fatal: quarantine
the node) or ``quarantine="false"`` (the job's fault: no action) and the node's name."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlencode, urlsplit

from gpufabric.health.decide import Alert
from gpufabric.model.config import credentials_in
from gpufabric.model.problems import Problem, StackError

MAX_ANSWER = 8 * 1024 * 1024
QUERY = 'ALERTS{alertstate="firing",quarantine=~"true|false"}'


class AlertsUnavailable(Exception):
    """Prometheus could not be asked or did not answer with alerts."""


CREDENTIALS_REFUSED = (
    "carries credentials ({where}), which the pass report would print; gpufabric health "
    "sends none: reach a Prometheus that asks for them with kubectl port-forward to its "
    "Service (your kubeconfig's credentials) and pass the local address, e.g. "
    "--prometheus http://127.0.0.1:9090"
)


def check_url(url: str) -> str:
    """The --prometheus URL; StackError naming it when it is not http(s)://HOST[:PORT][/path]
    or carries credentials (userinfo, a query or a fragment: never shown, never sent)."""
    where = credentials_in(url) if "://" in url else None
    if where is not None:
        problem = Problem("--prometheus", CREDENTIALS_REFUSED.format(where=where))
        raise StackError("gpufabric health", [problem])
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise StackError(
            "gpufabric health",
            [Problem("--prometheus", f"{url[:80]!r}: expected http(s)://HOST[:PORT][/PATH]")],
        )
    return url.rstrip("/")


def _fetch(query: str, timeout: float) -> bytes:
    """The answer's body within ``timeout`` seconds of wall-clock time, whole body included
    (a socket timeout alone never fires while bytes trickle in): the read runs in a daemon
    thread that is left behind when the time is up."""
    done = threading.Event()
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            with urllib.request.urlopen(query, timeout=timeout) as resp:
                box["body"] = resp.read(MAX_ANSWER)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=work, name="prometheus query", daemon=True).start()
    if not done.wait(timeout):
        raise AlertsUnavailable(f"no complete answer within {timeout:g}s")
    if "error" in box:
        raise AlertsUnavailable(str(box["error"]))
    body: bytes = box["body"]
    return body


def firing(url: str, node_label: str, timeout: float) -> list[Alert]:
    """The firing alerts with a quarantine label, one per node and alert name."""
    query = f"{url}/api/v1/query?{urlencode({'query': QUERY})}"
    try:
        data = json.loads(_fetch(query, timeout))
    except AlertsUnavailable as exc:
        raise AlertsUnavailable(f"{url}: {exc}") from exc
    except (ValueError, RecursionError) as exc:
        raise AlertsUnavailable(f"{url}: not JSON") from exc
    result = data.get("data", {}).get("result") if isinstance(data, dict) else None
    if not isinstance(result, list) or data.get("status") != "success":
        raise AlertsUnavailable(f"{url}: not a Prometheus query answer")
    alerts: set[Alert] = set()
    for series in result:
        metric = series.get("metric") if isinstance(series, dict) else None
        if not isinstance(metric, dict) or not isinstance(metric.get(node_label), str):
            continue  # an alert not about one node (e.g. acceptance stale) moves no node
        name = "".join(c for c in str(metric.get("alertname")) if c.isprintable())[:100]
        alerts.add(Alert(name, metric[node_label], metric.get("quarantine") == "true"))
    return sorted(alerts, key=lambda a: (a.node, a.name))


__all__ = ["QUERY", "AlertsUnavailable", "check_url", "firing"]
