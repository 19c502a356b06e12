"""Queueing authorities: one module each, found by name, complete, never a fallback."""

from __future__ import annotations

import importlib
import inspect

import pytest
from builders import REPO, example_config, problems_of

from gpufabric import authorities
from gpufabric.authorities.base import Authority
from gpufabric.model.versions import load_catalog
from gpufabric.plan import authority as registry


def test_the_authorities_are_the_modules_of_the_package() -> None:
    assert authorities.AUTHORITIES.names() == ("kueue", "volcano")


@pytest.mark.parametrize("name", authorities.AUTHORITIES.names())
def test_each_authority_is_complete_pinned_and_has_its_runbook_fragment(name: str) -> None:
    authority = registry.get(name)
    assert isinstance(authority, Authority)
    assert authority.name == name
    assert not inspect.isabstract(type(authority))
    assert authority.component in load_catalog().components
    fragment = REPO / "manifests" / "runbooks" / authority.runbook_fragment
    text = fragment.read_text()
    for macro in ("ready()", "tenant_objects()", "tenant_queue(t)", "triage()"):
        assert f"macro {macro}" in text


def test_an_unknown_authority_is_never_served_by_another() -> None:
    with pytest.raises(KeyError, match="unknown queueing authority 'slurm'"):
        registry.get("slurm")
    with pytest.raises(KeyError):
        registry.get("base")  # the protocol module is not an authority


def test_the_stack_model_accepts_exactly_the_authority_modules() -> None:
    config = example_config("lab-roce")
    config["gpufabric:scheduling"]["gang"] = "slurm"
    message = problems_of(config)["scheduling.gang"]
    assert "'slurm' is not a queueing authority" in message
    assert "'kueue' or 'volcano'" in message


@pytest.mark.parametrize("name", authorities.AUTHORITIES.names())
def test_each_authority_names_queues_and_flags_for_its_jobs(name: str) -> None:
    authority = registry.get(name)
    assert authority.queue_name("team-a")
    levels = authority.topology_levels(["topology.gpufabric.io/leaf", "kubernetes.io/hostname"])
    assert levels == ("topology.gpufabric.io/leaf", "kubernetes.io/hostname")


@pytest.mark.parametrize("name", authorities.AUTHORITIES.names())
def test_each_authority_has_a_settings_module_the_stack_model_mixes_in(name: str) -> None:
    from gpufabric.authorities.settings import AuthoritySettings

    module = importlib.import_module(f"gpufabric.authorities.settings.{name}")
    mixins = [
        v for v in vars(module).values() if isinstance(v, type) and v.__module__ == module.__name__
    ]
    assert any(issubclass(AuthoritySettings, m) for m in mixins)


def test_the_settings_package_is_not_an_authority() -> None:
    with pytest.raises(KeyError):
        registry.get("settings")
