"""Each rule of `check_versions`, alone, over a small catalog: it fires on its condition and
is silent otherwise; then how `check_versions` walks them."""

from __future__ import annotations

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from gpufabric.model import versions
from gpufabric.model.problems import Problem
from gpufabric.model.versions import (
    OVERRIDE_RULES,
    VERSION_RULES,
    Catalog,
    Component,
    Rule,
    VersionCheck,
    bad_image_tag,
    bad_version,
    check_versions,
    effective_versions,
    kubernetes_outside_range,
    override_problems,
    rule_violations,
    unknown_component,
)

CATALOG = Catalog(
    kubernetes=SpecifierSet(">=1.31,<1.35"),
    components={
        "gpu-operator": Component(
            name="gpu-operator", version="v26.7.0", source="helm", namespace="gpu-operator"
        ),
        "network-operator": Component(
            name="network-operator", version="26.4.1", source="helm", namespace="nvidia-network"
        ),
        "nccl-tests": Component(
            name="nccl-tests", version="cuda12-v2", source="image", namespace="default"
        ),
    },
    rules=(
        Rule(
            id="dmabuf-needs-new-gpu-operator",
            when=frozenset({"dmabuf"}),
            when_versions={},
            require={"gpu-operator": SpecifierSet(">=25.3")},
            reason="DMA-BUF needs GPU Operator 25.3 or later.",
        ),
        Rule(
            id="old-nic-pair",
            when=frozenset(),
            when_versions={"network-operator": SpecifierSet("<25")},
            require={"gpu-operator": SpecifierSet("<26")},
            reason="Old Network Operators pair with old GPU Operators.",
        ),
    ),
)


def check(
    overrides: dict[str, str] | None = None,
    features: frozenset[str] = frozenset(),
    minor: str | None = None,
) -> VersionCheck:
    return VersionCheck.of(CATALOG, overrides or {}, features, minor)


# ---------------------------------------------------------------------- effective versions


def test_effective_versions_apply_overrides_that_parse_and_skip_image_tags() -> None:
    assert effective_versions(CATALOG, {}) == {
        "gpu-operator": Version("26.7.0"),
        "network-operator": Version("26.4.1"),
    }
    versions = effective_versions(
        CATALOG,
        {"gpu-operator": "v25.3.1", "network-operator": "bad", "nope": "1", "nccl-tests": "x"},
    )
    assert versions == {"gpu-operator": Version("25.3.1"), "network-operator": Version("26.4.1")}


# --------------------------------------------------------------------------- override rules


def test_unknown_component_fires_on_a_name_that_is_not_pinned() -> None:
    problem = unknown_component(CATALOG, "gpu-operatr", "v1")
    assert problem == Problem(
        "versions.gpu-operatr",
        "unknown component 'gpu-operatr'; did you mean 'gpu-operator'? "
        "(pinned components: gpu-operator, nccl-tests, network-operator)",
    )
    assert unknown_component(CATALOG, "gpu-operator", "garbage") is None
    assert unknown_component(CATALOG, "nccl-tests", "garbage tag") is None


def test_bad_image_tag_fires_on_an_image_components_bad_tag() -> None:
    assert bad_image_tag(CATALOG, "nccl-tests", "not a tag") == Problem(
        "versions.nccl-tests", "'not a tag' is not an image tag"
    )
    assert bad_image_tag(CATALOG, "nccl-tests", "cuda13-v1") is None
    assert bad_image_tag(CATALOG, "gpu-operator", "not a tag") is None
    assert bad_image_tag(CATALOG, "nope", "not a tag") is None


def test_bad_version_fires_on_a_released_components_bad_version() -> None:
    assert bad_version(CATALOG, "gpu-operator", "latest") == Problem(
        "versions.gpu-operator", "'latest' is not a version; expected e.g. v26.7.0"
    )
    assert bad_version(CATALOG, "gpu-operator", "v25.3.0") is None
    assert bad_version(CATALOG, "nccl-tests", "latest") is None
    assert bad_version(CATALOG, "nope", "latest") is None


def test_override_problems_walk_the_overrides_in_name_order() -> None:
    assert (unknown_component, bad_image_tag, bad_version) == OVERRIDE_RULES
    problems = override_problems(
        check({"zz": "1", "nccl-tests": "a b", "gpu-operator": "latest", "aa": "1"})
    )
    assert [p.path for p in problems] == [
        "versions.aa",
        "versions.gpu-operator",
        "versions.nccl-tests",
        "versions.zz",
    ]
    assert override_problems(check({"gpu-operator": "v25.3.0"})) == []


# ---------------------------------------------------------------------------- stack rules


def test_rule_violations_fire_when_a_rule_applies_and_fails() -> None:
    old = check({"gpu-operator": "v24.9.0"}, frozenset({"dmabuf"}))
    assert rule_violations(old) == [
        Problem(
            "versions.gpu-operator",
            "'v24.9.0' is not allowed by rule dmabuf-needs-new-gpu-operator: DMA-BUF needs GPU "
            "Operator 25.3 or later. Accepted: gpu-operator >=25.3.",
        )
    ]


def test_rule_violations_show_the_pin_when_not_overridden() -> None:
    problems = rule_violations(check({"network-operator": "24.10.0"}))
    assert problems == [
        Problem(
            "versions.gpu-operator",
            "'v26.7.0' is not allowed by rule old-nic-pair: Old Network Operators pair with old "
            "GPU Operators. Accepted: gpu-operator <26.",
        )
    ]


def test_rule_violations_are_silent_when_no_rule_applies_or_all_hold() -> None:
    assert rule_violations(check({"gpu-operator": "v24.9.0"})) == []  # no dmabuf
    assert rule_violations(check({}, frozenset({"dmabuf"}))) == []  # holds
    assert rule_violations(check({"network-operator": "25.1.0"})) == []  # when_versions


def test_kubernetes_outside_range_fires_on_a_minor_the_pins_do_not_support() -> None:
    assert kubernetes_outside_range(check(minor="1.30")) == [
        Problem(
            "cluster.kubernetesVersion",
            "Kubernetes 1.30 is outside what the pinned releases support together; accepted: "
            "<1.35,>=1.31",
        )
    ]


def test_kubernetes_outside_range_is_silent_inside_unset_or_unparsable() -> None:
    assert kubernetes_outside_range(check(minor="1.33")) == []
    assert kubernetes_outside_range(check(minor=None)) == []
    assert kubernetes_outside_range(check(minor="one")) == []


# ------------------------------------------------------------------------- check_versions


def test_check_versions_walks_every_rule_in_order() -> None:
    assert (override_problems, rule_violations, kubernetes_outside_range) == VERSION_RULES


def test_check_versions_lists_override_then_rule_then_kubernetes_problems(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(versions, "load_catalog", lambda: CATALOG)
    problems = check_versions({"gpu-operator": "v24.9.0", "zz": "1"}, {"dmabuf"}, "1.20")
    assert [p.path for p in problems] == [
        "versions.zz",
        "versions.gpu-operator",
        "cluster.kubernetesVersion",
    ]
