"""Pinned upstream releases (manifests/versions.yaml) and the rules between them."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Set
from dataclasses import dataclass
from typing import Any, Literal

import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from gpufabric.problems import Problem, suggest
from gpufabric.templates import MANIFESTS_DIR


@dataclass(frozen=True)
class Component:
    """One upstream release a stack may install."""

    name: str
    version: str
    source: Literal["helm", "manifest", "image"]
    namespace: str
    repository: str | None = None
    chart: str | None = None
    manifest: str | None = None
    image: str | None = None

    def with_version(self, version: str) -> Component:
        return Component(**{**self.__dict__, "version": version})

    def expand(self, template: str | None) -> str | None:
        """Fill {version} / {version_bare} placeholders of a manifest URL or image."""
        if template is None:
            return None
        return template.format(version=self.version, version_bare=self.version.lstrip("v"))

    @property
    def manifest_url(self) -> str | None:
        return self.expand(self.manifest)

    @property
    def image_ref(self) -> str | None:
        return self.expand(self.image)

    @property
    def image_name_tag(self) -> tuple[str, str]:
        """(repository, tag) of the pinned image, as kustomize and chart values take them."""
        name, _, tag = (self.image_ref or "").rpartition(":")
        return name, tag


@dataclass(frozen=True)
class Rule:
    """A compatibility rule: when features are in use, components must be in ranges."""

    id: str
    when: frozenset[str]
    when_versions: Mapping[str, SpecifierSet]
    require: Mapping[str, SpecifierSet]
    reason: str


@dataclass(frozen=True)
class Catalog:
    """The pins file, parsed."""

    kubernetes: SpecifierSet
    components: Mapping[str, Component]
    rules: tuple[Rule, ...]


_IMAGE_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


def parse_version(text: str) -> Version:
    return Version(text.strip().lstrip("vV"))


def _spec(text: str) -> SpecifierSet:
    return SpecifierSet(text)


@functools.cache
def load_catalog() -> Catalog:
    """Read manifests/versions.yaml once per process."""
    raw: dict[str, Any] = yaml.safe_load((MANIFESTS_DIR / "versions.yaml").read_text())
    components = {
        name: Component(name=name, **{str(k): str(v) for k, v in body.items()})  # type: ignore[arg-type]
        for name, body in raw["components"].items()
    }
    rules = tuple(
        Rule(
            id=r["id"],
            when=frozenset(r.get("when") or ()),
            when_versions={k: _spec(v) for k, v in (r.get("whenVersions") or {}).items()},
            require={k: _spec(v) for k, v in r["require"].items()},
            reason=r["reason"],
        )
        for r in raw["rules"]
    )
    return Catalog(kubernetes=_spec(raw["kubernetes"]), components=components, rules=rules)


def effective_components(overrides: Mapping[str, str]) -> dict[str, Component]:
    """The pins with a stack's overrides applied (unknown names are ignored here;
    :func:`check_versions` reports them)."""
    catalog = load_catalog()
    out = dict(catalog.components)
    for name, version in overrides.items():
        if name in out:
            out[name] = out[name].with_version(version)
    return out


def check_versions(
    overrides: Mapping[str, str], features: Set[str], kubernetes_minor: str | None
) -> list[Problem]:
    """Every override must name a pinned component and parse; every rule that applies
    must hold for the effective versions; the cluster's Kubernetes minor must fit."""
    catalog = load_catalog()
    problems: list[Problem] = []
    versions: dict[str, Version] = {}
    for name, pinned in catalog.components.items():
        if pinned.source != "image":  # image tags are not release versions
            versions[name] = parse_version(pinned.version)
    for name, text in sorted(overrides.items()):
        path = f"versions.{name}"
        if name not in catalog.components:
            known = sorted(catalog.components)
            problems.append(
                Problem(
                    path,
                    f"unknown component '{name}'{suggest(name, known)} "
                    f"(pinned components: {', '.join(known)})",
                )
            )
            continue
        if catalog.components[name].source == "image":
            if not _IMAGE_TAG.match(str(text)):
                problems.append(Problem(path, f"{text!r} is not an image tag"))
            continue
        try:
            versions[name] = parse_version(str(text))
        except InvalidVersion:
            problems.append(
                Problem(
                    path,
                    f"{text!r} is not a version; expected e.g. {catalog.components[name].version}",
                )
            )
    for rule in catalog.rules:
        if not rule.when <= features:
            continue
        if any(versions[c] not in spec for c, spec in rule.when_versions.items()):
            continue
        for component, spec in rule.require.items():
            if versions[component] in spec:
                continue
            shown = overrides.get(component, catalog.components[component].version)
            problems.append(
                Problem(
                    f"versions.{component}",
                    f"{shown!r} is not allowed by rule {rule.id}: {rule.reason} "
                    f"Accepted: {component} {spec}.",
                )
            )
    if kubernetes_minor is not None:
        try:
            minor = Version(kubernetes_minor)
        except InvalidVersion:  # the model's pattern already rejects these
            minor = None
        if minor is not None and minor not in catalog.kubernetes:
            problems.append(
                Problem(
                    "cluster.kubernetesVersion",
                    f"Kubernetes {kubernetes_minor} is outside what the pinned releases support "
                    f"together; accepted: {catalog.kubernetes}",
                )
            )
    return problems


__all__ = [
    "Catalog",
    "Component",
    "Rule",
    "check_versions",
    "effective_components",
    "load_catalog",
    "parse_version",
]
