"""The in-cluster form of ``gpufabric health`` (monitoring.health.inCluster): what it
renders, that it validates strictly, that its RBAC is least privilege yet enough for every
request the command makes, and that the command the pod runs parses."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest

from gpufabric.cli import parser
from gpufabric.model.problems import StackError
from gpufabric.model.stackfile import load_stack
from gpufabric.outputs.schema import validate_objects
from gpufabric.plan.build import Plan

REPO = Path(__file__).resolve().parents[2]
IMAGE = "nvcr.io/example/gpufabric:1.4.0"


def stack_with(tmp_path: Path, in_cluster: str, name: str = "hc") -> Path:
    text = (REPO / "stacks" / "Pulumi.prod-ib.yaml").read_text()
    marker = "  gpufabric:monitoring:\n    enabled: true\n"
    assert marker in text
    text = text.replace(marker, f"{marker}    health:\n      inCluster: {in_cluster}\n")
    path = tmp_path / f"Pulumi.{name}.yaml"
    path.write_text(text)
    return path


def plan_with(tmp_path: Path, in_cluster: str) -> Plan:
    return load_stack(str(stack_with(tmp_path, in_cluster)), None).plan


def health_objects(plan: Plan) -> dict[str, dict[str, Any]]:
    return {it.id: dict(it.payload.body) for it in plan.items if it.id.startswith("monitoring/health/")}  # fmt: skip


ENABLED = f"{{enabled: true, image: {IMAGE}, tenant: llm-pretrain, prometheusUrl: 'http://prometheus.monitoring:9090'}}"  # fmt: skip


def test_not_rendered_unless_enabled() -> None:
    assert health_objects(load_stack("prod-ib", None).plan) == {}


def test_cronjob_runs_one_pass_as_its_own_account_never_two_at_once(tmp_path: Path) -> None:
    objs = health_objects(plan_with(tmp_path, ENABLED))
    runner = objs["monitoring/health/runner"]
    assert runner["kind"] == "CronJob"
    assert runner["metadata"]["namespace"] == "monitoring"
    assert runner["spec"]["concurrencyPolicy"] == "Forbid"
    pod = runner["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "gpufabric-health"
    container = pod["containers"][0]
    # prod-ib is air-gapped: the image is pulled through its mirror, like every other one
    assert container["image"] == "harbor.prod-ib.example.internal/nvcr/example/gpufabric:1.4.0"
    args = parser().parse_args(container["command"][1:])  # the command parses
    assert args.command == "health"
    assert args.stack == "hc"
    assert args.in_cluster
    assert args.tenant == "llm-pretrain"
    assert args.prometheus == "http://prometheus.monitoring:9090"
    assert not args.watch
    assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_watch_renders_one_deployment_pod_running_watch(tmp_path: Path) -> None:
    ic = f"{{enabled: true, image: {IMAGE}, tenant: llm-pretrain, watch: true, intervalSeconds: 120}}"
    runner = health_objects(plan_with(tmp_path, ic))["monitoring/health/runner"]
    assert runner["kind"] == "Deployment"
    assert runner["spec"]["replicas"] == 1
    assert runner["spec"]["strategy"] == {"type": "Recreate"}
    command = runner["spec"]["template"]["spec"]["containers"][0]["command"]
    args = parser().parse_args(command[1:])
    assert args.watch
    assert args.interval == 120
    assert args.prometheus is None


def test_rbac_is_least_privilege(tmp_path: Path) -> None:
    objs = health_objects(plan_with(tmp_path, ENABLED))
    cluster_rules = objs["monitoring/health/cluster-role"]["rules"]
    assert cluster_rules == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "update"]},
        # get/update: a held node's one QuarantineHeld Event has its count raised
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "get", "update"]},
        # re-certification records its candidates' results (gpufabric.plan.node_acceptance)
        {
            "apiGroups": ["gpufabric.io"],
            "resources": ["nodeacceptances"],
            "verbs": ["get", "create", "update"],
        },
        {
            "apiGroups": ["gpufabric.io"],
            "resources": ["nodeacceptances/status"],
            "verbs": ["get", "update"],
        },
    ]
    # no probe: the rendered loop runs --node-checks api (no DaemonSets, pods/exec, namespaces)
    assert not any(r["resources"][0] in ("daemonsets", "pods/exec", "namespaces") for r in cluster_rules)  # fmt: skip
    role = objs["monitoring/health/role"]
    assert role["kind"] == "Role"
    assert role["metadata"]["namespace"] == "llm-pretrain"
    assert {"apiGroups": ["kubeflow.org"], "resources": ["mpijobs"], "verbs": ["get", "create", "delete"]} in role["rules"]  # fmt: skip
    assert not any("*" in r["verbs"] or "*" in r["resources"] for r in [*cluster_rules, *role["rules"]])  # fmt: skip
    binding = objs["monitoring/health/role-binding"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gpufabric-health", "namespace": "monitoring"}]  # fmt: skip
    assert binding["roleRef"]["kind"] == "Role"


@pytest.mark.parametrize("watch", [False, True])
def test_objects_validate_strictly(tmp_path: Path, watch: bool) -> None:
    ic = f"{{enabled: true, image: {IMAGE}, tenant: llm-pretrain, watch: {str(watch).lower()}}}"
    plan = plan_with(tmp_path, ic)
    report = validate_objects(list(health_objects(plan).values()), plan.facts.kubernetes_minor)
    assert report.ok, report.errors


@pytest.mark.parametrize(
    ("in_cluster", "path", "words"),
    [
        ("{enabled: true, tenant: llm-pretrain}", "monitoring.health.inCluster.image", "required"),
        (
            f"{{enabled: true, image: {IMAGE}}}",
            "monitoring.health.inCluster.tenant",
            "llm-pretrain",
        ),
        (
            f"{{enabled: true, image: {IMAGE}, tenant: nobody}}",
            "monitoring.health.inCluster.tenant",
            "nobody",
        ),
        (
            "{enabled: true, image: 'x; rm -rf /', tenant: llm-pretrain}",
            "monitoring.health.inCluster.image",
            "",
        ),
        (
            f"{{enabled: true, image: {IMAGE}, tenant: llm-pretrain, schedule: '* * *'}}",
            "monitoring.health.inCluster.schedule",
            "",
        ),
    ],
)
def test_bad_settings_name_their_path(tmp_path: Path, in_cluster: str, path: str, words: str) -> None:  # fmt: skip
    with pytest.raises(StackError) as err:
        plan_with(tmp_path, in_cluster)
    report = err.value.report()
    assert path in report
    assert words in report


def test_the_command_the_pod_runs_is_quoted_safely(tmp_path: Path) -> None:
    runner = health_objects(plan_with(tmp_path, ENABLED))["monitoring/health/runner"]
    command = runner["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert shlex.split(shlex.join(command)) == command
