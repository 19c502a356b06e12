"""What every authority declares (runbook macros, pod hooks, its own settings and checks),
and that nothing outside the authorities branches on an authority's name."""

from __future__ import annotations

import re
from typing import Any, ClassVar

import pytest
from builders import REPO, example_config, plan_of, problems_of
from jinja2 import nodes
from msgspec.structs import replace

from gpufabric import authorities
from gpufabric.authorities.kueue import Kueue
from gpufabric.authorities.settings import AuthoritySettings
from gpufabric.authorities.settings.kueue import KueueSettings
from gpufabric.model.config import Scheduling
from gpufabric.outputs.jobs import JobRequest, Wiring, wiring_for
from gpufabric.outputs.runbook import RUNBOOK_DIR
from gpufabric.plan import authority as registry
from gpufabric.plan.authority import Authority
from gpufabric.plan.facts import TenantContract
from gpufabric.support.templates import environment

TOPOLOGY = "scheduling.topologyLevels"


def _macros(template: str) -> set[str]:
    env = environment(RUNBOOK_DIR)
    source = (RUNBOOK_DIR / template).read_text()
    return {m.name for m in env.parse(source).find_all(nodes.Macro)}


@pytest.mark.parametrize("name", authorities.AUTHORITIES.names())
def test_each_fragment_defines_exactly_the_declared_macros(name: str) -> None:
    authority = registry.get(name)
    assert _macros(authority.runbook_fragment) == set(authority.runbook_macros)


def test_the_runbook_calls_only_declared_macros_of_the_fragment() -> None:
    env = environment(RUNBOOK_DIR)
    called: set[str] = set()
    for path in RUNBOOK_DIR.glob("*.md.j2"):
        if path.name.startswith("authority-"):
            continue
        for node in env.parse(path.read_text()).find_all(nodes.Getattr):
            if isinstance(node.node, nodes.Name) and node.node.name == "queueing":
                called.add(node.attr)
    assert called
    assert called <= set(Authority.runbook_macros)


def test_a_fragment_missing_a_macro_is_caught() -> None:
    env = environment(RUNBOOK_DIR)
    source = "{% macro ready() %}x{% endmacro %}"
    found = {m.name for m in env.parse(source).find_all(nodes.Macro)}
    assert found != set(Authority.runbook_macros)


_NAME_COMPARISON = re.compile(
    r"""(==|!=)\s*["'](kueue|volcano)["']|["'](kueue|volcano)["']\s*(==|!=)"""
    r"""|\bgang\s*(==|!=)|\bin\s*[(\[{]\s*["'](kueue|volcano)["']"""
)


def test_nothing_outside_the_authorities_compares_an_authority_name() -> None:
    sources = [
        p
        for p in (REPO / "gpufabric").rglob("*.py")
        if "authorities" not in p.relative_to(REPO / "gpufabric").parts
    ]
    sources += [
        p for p in (REPO / "manifests").rglob("*.j2") if not p.name.startswith("authority-")
    ]
    sources += list((REPO / "components").rglob("*.py"))
    found = [
        f"{p.relative_to(REPO)}:{i}: {line.strip()}"
        for p in sources
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if _NAME_COMPARISON.search(line)
    ]
    assert not found, "\n".join(found)


def test_the_name_check_sees_a_comparison() -> None:
    assert _NAME_COMPARISON.search('if s.gang == "kueue":')
    assert _NAME_COMPARISON.search("{% if gang.authority == 'volcano' %}")


# ------------------------------------------------------------------- pod hooks


@pytest.mark.parametrize("name", authorities.AUTHORITIES.names())
def test_the_real_authorities_leave_pod_scheduler_and_labels_alone(name: str) -> None:
    authority = registry.get(name)
    contract = next(iter(plan_of(example_config("lab-roce")).facts.tenants.values()))
    assert authority.pod_scheduler_name is None
    assert authority.pod_labels(contract) == {}


class _Labelled(Kueue):
    pod_scheduler_name: ClassVar[str | None] = "gang-scheduler"

    def pod_labels(self, contract: TenantContract) -> dict[str, str]:
        return {"example.com/tenant": contract.namespace}


def test_pod_hooks_reach_every_gpu_pod() -> None:
    plan = plan_of(example_config("lab-roce"))
    tenant = next(iter(plan.facts.tenants))
    wiring = wiring_for(plan, JobRequest(tenant=tenant, kind="mpijob"))
    hooked = Wiring(facts=wiring.facts, contract=wiring.contract, authority=_Labelled())
    pod: dict[str, Any] = hooked.gpu_pod({"name": "c"})
    assert pod["spec"]["schedulerName"] == "gang-scheduler"
    assert pod["metadata"]["labels"] == {"example.com/tenant": tenant}
    plain = wiring.gpu_pod({"name": "c"})
    assert "schedulerName" not in plain["spec"]
    assert "labels" not in plain["metadata"]


# ------------------------------------------------------------ settings and checks


def test_kueue_settings_sit_under_scheduling_after_the_shared_keys() -> None:
    assert issubclass(Scheduling, AuthoritySettings)
    assert issubclass(AuthoritySettings, KueueSettings)
    assert list(Scheduling.model_fields)[-2:] == ["requeuing", "cohort"]
    assert list(Scheduling.model_fields)[:4] == [
        "gang",
        "topologyLevels",
        "nodeTopology",
        "allOrNothingTimeout",
    ]


def test_kueue_settings_keep_their_paths_and_messages() -> None:
    config = example_config("lab-roce")
    config["gpufabric:scheduling"]["cohort"] = "Not_A_Name"
    config["gpufabric:scheduling"]["requeuing"] = {"backoffBase": "soon"}
    problems = problems_of(config)
    assert "'Not_A_Name' is not a valid name" in problems["scheduling.cohort"]
    assert "'soon' is not a duration" in problems["scheduling.requeuing.backoffBase"]


def test_kueue_settings_reach_the_facts() -> None:
    config = example_config("lab-roce")
    config["gpufabric:scheduling"]["cohort"] = "shared"
    config["gpufabric:scheduling"]["requeuing"] = {"backoffLimitCount": 2, "backoffMax": "10m"}
    gang = plan_of(config).facts.gang
    assert gang.cohort == "shared"
    assert (gang.requeue.backoff_limit_count, gang.requeue.backoff_max_s) == (2, 600)


@pytest.mark.parametrize(
    ("levels", "message"),
    [
        ([], "[] leaves Kueue without a topology"),
        (["topology.gpufabric.io/leaf"], "Kueue topologies end with the node level"),
    ],
)
def test_kueue_checks_its_topology_levels(levels: list[str], message: str) -> None:
    config = example_config("lab-roce")
    config["gpufabric:scheduling"]["topologyLevels"] = levels
    assert message in problems_of(config)[TOPOLOGY]


@pytest.mark.parametrize("levels", [[], ["topology.gpufabric.io/leaf"]])
def test_volcano_takes_the_levels_kueue_refuses(levels: list[str]) -> None:
    config = example_config("lab-roce")
    config["gpufabric:scheduling"]["gang"] = "volcano"
    config["gpufabric:scheduling"]["topologyLevels"] = levels
    plan = plan_of(config)
    assert plan.authority.name == "volcano"
    assert list(registry.get("volcano").scheduling_problems(Scheduling(gang="volcano"))) == []


def test_only_the_chosen_authority_is_asked() -> None:
    s = Scheduling(gang="volcano", topologyLevels=[])
    assert list(registry.get("volcano").scheduling_problems(s)) == []
    assert [p.path for p in registry.get("kueue").scheduling_problems(s)] == [TOPOLOGY]


# ------------------------------------------------------------- the Plan's authority


@pytest.mark.parametrize("stack", ["lab-roce", "roce-sriov-volcano"])
def test_the_plan_carries_its_authority_object(stack: str) -> None:
    plan = plan_of(example_config(stack))
    assert plan.authority is registry.get(plan.facts.gang.authority)
    assert replace(plan, items=()).authority is plan.authority
