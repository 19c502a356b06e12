"""Credentials never travel in what gpufabric prints: a URL a command or a stack takes that
carries them is refused (exit 2) with a message saying how to pass them instead and never
showing them, and masking them never hides gpufabric's own examples."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from builders import example_config, problem_lines

from gpufabric.cli import main
from gpufabric.model.redaction import EXAMPLES, redact

KUBECTL = Path(__file__).resolve().parents[1].parent / "shared" / "upstream" / "bin" / "kubectl"


def test_the_hints_show_gpufabrics_own_examples_as_written() -> None:
    config = example_config("lab-roce")
    config["gpufabric:cluster"]["kubeContext"] = "bad context"
    (line,) = problem_lines(config)
    assert "admin@prod" in line
    assert "***" not in line


def test_the_hosts_hint_shows_the_kubectl_example(capsys: Any) -> None:
    assert main(["verify", "pods", "--stack", "lab-roce", "--hosts", "foo"]) == 2
    err = capsys.readouterr().err
    assert "kubectl://POD?namespace=NS&container=C" in err
    assert "***" not in err


@pytest.mark.parametrize(
    "value",
    [
        "https://secretadmin@prod",
        "x:pw@h admin@prod",
        "tok@admin@prod",
        "https://h/?token=s3cret admin@prod",
        "admin@prod?token=s3cret",
        "kubectl://POD?namespace=NS&container=C&token=s3cret",
        "xkubectl://POD?namespace=NS&container=C",
    ],
)
def test_a_value_holding_an_example_is_still_masked(value: str) -> None:
    shown = redact(f"{value!r} is not a context")
    assert "secret" not in shown
    assert "s3cret" not in shown
    assert "pw@" not in shown
    assert "tok@" not in shown
    if value.startswith("xkubectl"):
        assert "namespace=NS" not in shown


def test_every_example_stands_alone() -> None:
    for example in EXAMPLES:
        assert redact(f"(e.g. {example}, or)") == f"(e.g. {example}, or)"


def test_a_context_that_is_a_url_with_credentials_says_what_to_name() -> None:
    config = example_config("lab-roce")
    config["gpufabric:cluster"]["kubeContext"] = "https://admin:hunter2@api.prod:6443"
    (line,) = problem_lines(config)
    assert "hunter2" not in line
    assert "admin:" not in line
    assert "kubectl config get-contexts -o name" in line
    assert "mirror" not in line


@pytest.mark.skipif(
    not os.access(KUBECTL, os.X_OK) and shutil.which("kubectl") is None,
    reason="kubectl is not available (../shared/upstream/bin or PATH)",
)
def test_the_context_listing_command_runs(tmp_path: Path) -> None:
    kubectl = str(KUBECTL) if os.access(KUBECTL, os.X_OK) else str(shutil.which("kubectl"))
    config = tmp_path / "config"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncontexts:\n- name: admin@prod\n"
        "  context: {cluster: c, user: u}\n"
    )
    done = subprocess.run(
        [kubectl, "config", "get-contexts", "-o", "name", "--kubeconfig", str(config)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split() == ["admin@prod"]


@pytest.mark.parametrize("command", ["nodes", "pods"])
def test_a_password_in_a_host_spec_is_refused_unshown(command: str, capsys: Any) -> None:
    hosts = "ssh://root@gpu-a,ssh://root:hunter2@gpu-b?ssh_config=/x"
    assert main(["verify", command, "--stack", "lab-roce", "--hosts", hosts]) == 2
    err = capsys.readouterr().err
    assert "hunter2" not in err
    assert "'ssh://root:***@gpu-b?***': carries a password (USER:PASSWORD@HOST)" in err
    assert "ssh://USER@HOST?ssh_identity_file=PATH" in err
    assert "gpu-a" not in err  # a user name alone is no secret: that host is fine


@pytest.mark.parametrize(
    ("url", "where"),
    [
        ("http://admin:hunter2@prom.example:9090/", "a user name or password before the host"),
        ("http://hunter2@prom.example/", "a user name or password before the host"),
        ("http://prom.example/?token=hunter2", "a query"),
        ("https://prom.example/#hunter2", "a fragment"),
    ],
)
def test_credentials_in_the_prometheus_url_are_refused_unshown(
    url: str, where: str, capsys: Any
) -> None:
    argv = ["health", "--stack", "prod-ib", "--tenant", "eval", "--prometheus", url]
    assert main([*argv, "--dry-run", "--kubeconfig", os.devnull]) == 2
    err = capsys.readouterr().err
    assert "hunter2" not in err
    assert f"--prometheus: carries credentials ({where}" in err
    assert "kubectl port-forward" in err


def test_a_kubeconfig_server_url_with_credentials_is_never_printed(
    tmp_path: Path, capsys: Any
) -> None:
    """The client's connection errors quote the server URL (and the request URL with its
    query): a kubeconfig whose server carries a user, password or token printed them."""
    from gpufabric.verify.kube import Kube, KubeError

    config = tmp_path / "config"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        "clusters: [{name: c, cluster: "
        "{server: 'http://admin:hunter2@127.0.0.1:1/k8s?token=s3cr3t'}}]\n"
        "users: [{name: u, user: {token: abc}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
    )
    kube = Kube(str(config), "x")
    kube.set_timeout(5)
    with pytest.raises(KubeError) as info, kube.grace():  # as cleanup asks
        kube.delete("/api/v1/namespaces/gpufabric-probe")
    assert "hunter2" not in str(info.value)
    assert "s3cr3t" not in str(info.value)
    assert "127.0.0.1" in str(info.value)
