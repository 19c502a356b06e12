"""Discovery's reading of the GPU Operator's ClusterPolicy, proven with the real chart: the
pinned gpu-operator chart rendered by the real `helm` with each shipped stack's values makes
a ClusterPolicy holding every value at the path
:func:`gpufabric.discover.clusterpolicy.policy_fields` names, and the driver version the
catalog takes for the chart's default. Skipped cleanly without helm and the pinned chart."""

from __future__ import annotations

from typing import Any

import pytest
from builders import SHIPPED_STACKS
from upstream import helm_template

from gpufabric.discover import clusterpolicy
from gpufabric.model.stackfile import load_stack
from gpufabric.plan.items import HelmChart

pytestmark = pytest.mark.conformance


def _policy(stack: str) -> tuple[dict[str, Any], dict[str, Any]]:
    plan = load_stack(stack).plan
    for item in plan.items:
        if isinstance(item.payload, HelmChart) and item.payload.chart == clusterpolicy.CHART:
            docs = helm_template(item.payload, plan.facts.kubernetes_minor)
            found = [d for d in docs if d and d.get("kind") == clusterpolicy.KIND]
            assert len(found) == 1
            return dict(item.payload.values), found[0]
    pytest.fail(f"{stack} renders no GPU Operator chart")


def _at(data: Any, path: str) -> Any:
    for key in path.split("."):
        assert isinstance(data, dict), path
        assert key in data, path
        data = data[key]
    return data


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_the_chart_puts_each_value_where_discovery_reads_it(stack: str) -> None:
    values, policy = _policy(stack)
    fields = clusterpolicy.policy_fields(values)
    assert fields  # the stack sets some: the test would pass vacuously otherwise
    for path, value in fields.items():
        assert _at(policy["spec"], path) == value, path
    # the gate compares exactly these: a chart-made policy leaves nothing to differ
    assert list(clusterpolicy.compared(values, policy)) == []


def test_the_catalog_knows_the_charts_default_driver() -> None:
    values, policy = _policy("prod-ib")  # names no driver version
    assert "version" not in values.get("driver", {})
    assert policy["spec"]["driver"]["version"] == clusterpolicy.default_driver()
