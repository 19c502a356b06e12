"""The layer builders (network aside) read only the Plan's context: its facts, pins and
authority, never the raw stack model; the authority is looked up once per Plan."""

from __future__ import annotations

import pytest
from builders import example_config, model_of

from gpufabric.model.versions import effective_components
from gpufabric.plan import authority as registry
from gpufabric.plan.build import build_plan
from gpufabric.plan.context import LayerContext
from gpufabric.plan.resolve import resolve


def _context(stack: str) -> LayerContext:
    model = model_of(example_config(stack))
    authority = registry.get(model.scheduling.gang)
    return LayerContext(
        stack=stack,
        components=effective_components(model.versions, model.sources.mirrors()),
        facts=resolve(stack, model, authority),
        authority=authority,
    )


def test_the_authority_is_looked_up_once_per_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    model = model_of(example_config("roce-sriov-volcano"))
    calls: list[str] = []
    real = registry.get

    def counting(name: str) -> registry.Authority:
        calls.append(name)
        return real(name)

    monkeypatch.setattr(registry, "get", counting)
    plan = build_plan("t", model)
    assert calls == ["volcano"]
    assert plan.authority.name == plan.facts.gang.authority == "volcano"


def test_tenant_contracts_carry_quotas_and_priority() -> None:
    facts = _context("lab-roce").facts
    vision, speech = facts.tenants["team-vision"], facts.tenants["team-speech"]
    assert (vision.gpu_quota, vision.priority, vision.cpu_quota) == (16, 100, None)
    assert (speech.cpu_quota, speech.memory_quota, speech.gpu_borrowing_limit) == ("256", "2Ti", 0)
    assert speech.gpu_limit == speech.gpu_quota + speech.gpu_borrowing_limit
