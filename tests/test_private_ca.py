"""Air gap behind a private CA: the runbook tells every node's containerd to trust the site
CA for each mirror host the stack pulls images through (certs.d/<host>/hosts.toml).

Protects the first pull of an air-gapped install: without it every image pull fails with
x509 errors on nodes that do not trust the site's CA.
"""

from __future__ import annotations

import re
import tomllib
from typing import Any

from builders import example_config, model_of, plan_of

from gpufabric.outputs.runbook import render
from gpufabric.plan.pulls import collect


def runbook(config: dict[str, Any]) -> str:
    return render(plan_of(config), collect("t", model_of(config)))


def hosts_files(text: str) -> dict[str, dict[str, Any]]:
    """Mirror host -> the parsed hosts.toml the runbook gives for it."""
    found = re.findall(
        r"`/etc/containerd/certs.d/([^/`]+)/hosts.toml`:\n\n```toml\n(.*?)```", text, re.S
    )
    return {host: tomllib.loads(body) for host, body in found}


def test_each_mirror_host_gets_a_hosts_toml_trusting_the_site_ca() -> None:
    config = example_config("prod-ib")
    config["gpufabric:sources"]["privateCA"] = True
    # A second mirror host: one of the registries the pinned releases pull from, moved.
    config["gpufabric:sources"]["registries"]["quay.io"] = "registry.example.internal:5443/quay"
    files = hosts_files(runbook(config))
    assert set(files) == {"harbor.prod-ib.example.internal", "registry.example.internal:5443"}
    for host, conf in files.items():
        assert conf["server"] == f"https://{host}"
        entry = conf["host"][f"https://{host}"]
        assert entry["ca"] == f"/etc/containerd/certs.d/{host}/ca.crt"
        assert entry["capabilities"] == ["pull", "resolve"]


def test_without_a_private_ca_there_is_no_trust_step() -> None:
    config = example_config("prod-ib")
    config["gpufabric:sources"]["privateCA"] = False
    text = runbook(config)
    assert "hosts.toml" not in text
    assert hosts_files(text) == {}


def test_a_stack_without_mirrors_has_no_trust_step() -> None:
    config = example_config("lab-roce")
    config.setdefault("gpufabric:sources", {})["privateCA"] = True
    assert "hosts.toml" not in runbook(config)
