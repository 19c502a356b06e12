"""Volcano: how MPIJob and PyTorchJob gangs are placed by topology, and the shared
scheduling keys Volcano does not read (warned about, never silently ignored).

Protects: a Volcano stack with topology levels packs every job kind's gang under the fewest
HyperNodes, and a user who sets Kueue-only timing keys is told they have no effect.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from builders import SHIPPED_STACKS, chart, example_config, model_of, plan_of

from gpufabric.authorities import volcano
from gpufabric.model.stackfile import stack_warnings
from gpufabric.plan import ids


def volcano_scheduler_conf(config: dict[str, Any]) -> dict[str, Any]:
    values = chart(plan_of(config), ids.authority_chart("volcano")).values
    conf = yaml.safe_load(values["custom"]["scheduler_config_override"])
    assert isinstance(conf, dict)
    return conf


def test_pods_without_a_podgroup_topology_are_packed_under_hypernodes() -> None:
    """The MPI and Training Operators write PodGroups without networkTopology (only
    TrainJob runtimes carry one): network-topology-aware must pack those pods by HyperNode."""
    conf = volcano_scheduler_conf(example_config("roce-sriov-volcano"))
    plugins = {p["name"]: p for tier in conf["tiers"] for p in tier["plugins"]}
    nta = plugins["network-topology-aware"]
    assert nta["arguments"] == {"hypernode.binpack.normal-pod.enable": True}


def test_the_hypernodes_verify_checks_are_volcanos_label_discovery() -> None:
    gang = plan_of(example_config("roce-sriov-volcano")).facts.gang
    assert gang.discovered_topology is not None
    assert gang.discovered_topology.kind == "HyperNode"
    assert gang.discovered_topology.selector == volcano.HYPERNODE_SOURCE
    assert plan_of(example_config("prod-ib")).facts.gang.discovered_topology is None


@pytest.mark.parametrize(
    ("key", "value"),
    [("allOrNothingTimeout", "10m"), ("requeuing", {"backoffLimitCount": 3}), ("cohort", "x")],
)
def test_kueue_only_keys_under_volcano_are_warned_about(key: str, value: Any) -> None:
    config = example_config("roce-sriov-volcano")
    config["gpufabric:scheduling"][key] = value
    warnings = {w.path: w.message for w in stack_warnings(model_of(config))}
    assert f"scheduling.{key}" in warnings
    assert warnings[f"scheduling.{key}"].startswith("has no effect under Volcano")


def test_the_same_keys_under_kueue_are_not_warned_about() -> None:
    config = example_config("prod-ib")
    config["gpufabric:scheduling"]["cohort"] = "x"
    paths = {w.path for w in stack_warnings(model_of(config))}
    assert not {p for p in paths if p.startswith("scheduling.")}


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_example_stacks_set_nothing_their_scheduler_ignores(stack: str) -> None:
    paths = {w.path for w in stack_warnings(model_of(example_config(stack)))}
    assert not {p for p in paths if p.startswith("scheduling.")}


@pytest.mark.parametrize("gang", ["volcano", "kueue"])
def test_a_tenant_never_takes_the_name_of_volcanos_own_queue(gang: str) -> None:
    """Volcano creates `root` (every queue sits under it) and `default` at start: a tenant
    namespace `root` rendered a Queue `root` whose 48-GPU capability capped every other
    tenant's queue. Under Kueue the name is free."""
    from builders import problems_of

    config = example_config("roce-sriov-volcano")
    config["gpufabric:tenants"][1]["namespace"] = "root"
    if gang == "kueue":
        config["gpufabric:scheduling"] = {"gang": "kueue"}
        model_of(config)
        return
    found = problems_of(config)
    assert found["tenants[1].namespace"] == (
        "'root' would name the tenant's queue 'root', a queue Volcano creates itself "
        "(default, root); give the tenant another namespace"
    )
