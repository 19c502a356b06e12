"""Pinned upstream releases (manifests/versions.yaml) and the rules between them."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Set
from typing import Any, Literal

from msgspec import Struct, field
from msgspec.structs import replace
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from gpufabric.model.problems import Problem, suggest
from gpufabric.model.sources import (
    NO_MIRRORS,
    Mirrors,
    get_path,
    set_path,
    split_registry,
    split_tag,
)
from gpufabric.support import yamlcodec
from gpufabric.support.templates import MANIFESTS_DIR

ImageForm = Literal["registry", "parent", "name", "ref"]
PullSecretForm = Literal["names", "objects", "name"]


class PullSecretKey(Struct, frozen=True):
    """A chart values key that names image pull secrets, and what it holds: a list of
    names, a list of {name: ...} objects, or one name (the chart takes only one)."""

    key: str
    form: PullSecretForm

    def value(self, names: tuple[str, ...]) -> Any:
        if self.form == "names":
            return list(names)
        if self.form == "objects":
            return [{"name": n} for n in names]
        return names[0]


class ChartImage(Struct, frozen=True):
    """An image a pinned chart pulls by default, and the values key that says where from."""

    key: str
    """Dotted values path a mirror rewrites."""
    form: ImageForm
    """What the key holds: the registry host, the image name without its last path
    component, the image name, or the full reference."""
    image: str
    """Full reference at the pinned chart version (placeholders as in Component)."""
    when: Mapping[str, bool] = field(default_factory=dict)
    """Chart values that must be true for the image to be pulled (path -> chart default)."""
    tag_key: str | None = None
    """Values path whose value, when set, replaces the tag (e.g. driver.version)."""
    note: str | None = None
    subchart: bool = False
    """The key belongs to a subchart whose defaults the parent's values.yaml does not show."""
    releases: str | None = None
    """The chart releases that pull it (a version range, e.g. ">=26.4"); None: every one."""

    def at(self, version: str) -> bool:
        """The chart at ``version`` pulls it (an unparsable version: as pinned, every entry)."""
        if self.releases is None:
            return True
        try:
            return parse_version(version) in SpecifierSet(self.releases)
        except InvalidVersion:
            return True

    def enabled(self, values: Mapping[str, Any]) -> bool:
        for path, default in self.when.items():
            value = get_path(values, path)
            if not (default if value is None else value):
                return False
        return True

    def key_value(self, ref: str) -> str:
        """What the values key holds for an image reference, in this entry's form."""
        name, _ = split_tag(ref)
        if self.form == "registry":
            return split_registry(name)[0]
        if self.form == "parent":
            return name.rpartition("/")[0]
        if self.form == "name":
            return name
        return ref


class ShippedPair(Struct, frozen=True):
    """A GPU Operator / Network Operator pair NVIDIA tests and ships (``testedPairs``) that
    its GPUDirect RDMA matrix does not list: who ships it and why a stack would run it."""

    versions: Mapping[str, SpecifierSet]
    source: str
    why: str


class Component(Struct, frozen=True, kw_only=True):
    """One upstream release a stack may install."""

    name: str
    version: str
    source: Literal["helm", "manifest", "image"]
    namespace: str
    repository: str | None = None
    chart: str | None = None
    manifest: str | None = None
    image: str | None = None
    chart_images: tuple[ChartImage, ...] = ()
    pull_secret_keys: tuple[PullSecretKey, ...] = ()
    """Chart values keys that take the stack's image pull secrets."""
    mirrors: Mirrors = NO_MIRRORS
    """The stack's mirrors; URLs and images below are given as pulled through them."""
    follows: str | None = None
    """Another component whose release decides this one's version (``releases``), unless
    the stack pins this one itself (the DOCA driver belongs to a Network Operator release)."""
    releases: Mapping[str, str] = field(default_factory=dict)
    """Release of ``follows`` (without a leading v) -> this component's version."""

    def with_version(self, version: str) -> Component:
        return replace(self, version=version)

    def with_mirrors(self, mirrors: Mirrors) -> Component:
        return replace(self, mirrors=mirrors)

    def expand(self, template: str | None) -> str | None:
        """Fill {version} / {version_bare} placeholders of a manifest URL or image."""
        if template is None:
            return None
        return template.format(version=self.version, version_bare=self.version.lstrip("v"))

    @property
    def upstream_manifest_url(self) -> str | None:
        return self.expand(self.manifest)

    @property
    def manifest_url(self) -> str | None:
        url = self.upstream_manifest_url
        return None if url is None else self.mirrors.manifest(url)

    @property
    def upstream_image_ref(self) -> str | None:
        return self.expand(self.image)

    @property
    def image_ref(self) -> str | None:
        ref = self.upstream_image_ref
        return None if ref is None else self.mirrors.image(ref)

    @property
    def chart_repository(self) -> str | None:
        """The chart repository as pulled (the mirror's when one is set)."""
        return None if self.repository is None else self.mirrors.chart_repository(self.repository)

    def chart_default_images(self, values: Mapping[str, Any]) -> list[tuple[ChartImage, str]]:
        """(entry, upstream reference) of every chart-default image the given values
        switch on; a tag key set in the values replaces the pinned tag."""
        out = []
        for entry in self.chart_images:
            if not entry.at(self.version) or not entry.enabled(values):
                continue
            ref = self.expand(entry.image) or ""
            tag = get_path(values, entry.tag_key) if entry.tag_key else None
            if tag:
                ref = f"{split_tag(ref)[0]}:{tag}"
            out.append((entry, ref))
        return out

    def mirror_values(self) -> dict[str, Any]:
        """Chart values pointing every chart-default image at the stack's mirrors (empty
        when none of their registries is mirrored)."""
        values: dict[str, Any] = {}
        for entry in self.chart_images:
            if not entry.at(self.version):
                continue
            upstream = entry.key_value(self.expand(entry.image) or "")
            mirrored = self.mirrors.image(upstream)
            if mirrored != upstream:
                set_path(values, entry.key, mirrored)
        if self.mirrors.pull_secrets:
            for secret_key in self.pull_secret_keys:
                set_path(values, secret_key.key, secret_key.value(self.mirrors.pull_secrets))
        return values

    @property
    def image_name_tag(self) -> tuple[str, str]:
        """(repository, tag) of the pinned image, as kustomize and chart values take them."""
        return split_tag(self.image_ref or "")


class Rule(Struct, frozen=True):
    """A compatibility rule: when features are in use, components must be in ranges."""

    id: str
    when: frozenset[str]
    when_versions: Mapping[str, SpecifierSet]
    require: Mapping[str, SpecifierSet]
    reason: str


class Catalog(Struct, frozen=True):
    """The pins file, parsed."""

    kubernetes: SpecifierSet
    components: Mapping[str, Component]
    rules: tuple[Rule, ...]
    gpudirect_pairs: tuple[Mapping[str, SpecifierSet], ...] = ()
    tested_pairs: tuple[ShippedPair, ...] = ()
    """Pairs NVIDIA tests and ships that its GPUDirect RDMA matrix does not list."""
    """GPU Operator x Network Operator ranges NVIDIA documents for GPUDirect RDMA."""


_IMAGE_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


def parse_version(text: str) -> Version:
    return Version(text.strip().lstrip("vV"))


def _spec(text: str) -> SpecifierSet:
    return SpecifierSet(text)


def _chart_image(entry: Mapping[str, Any]) -> ChartImage:
    return ChartImage(
        key=str(entry["key"]),
        form=entry["form"],
        image=str(entry["image"]),
        when={str(k): bool(v) for k, v in (entry.get("when") or {}).items()},
        tag_key=entry.get("tagKey"),
        note=entry.get("note"),
        subchart=bool(entry.get("subchart", False)),
        releases=str(entry["releases"]) if entry.get("releases") else None,
    )


@functools.cache
def load_catalog() -> Catalog:
    """Read manifests/versions.yaml once per process."""
    # libyaml's parser (yamlcodec): the pure-Python one took a tenth of a large render.
    raw: dict[str, Any] = yamlcodec.load((MANIFESTS_DIR / "versions.yaml").read_text())
    components = {
        name: Component(
            name=name,
            chart_images=tuple(_chart_image(e) for e in body.get("images") or ()),
            pull_secret_keys=tuple(
                PullSecretKey(str(e["key"]), e["form"]) for e in body.get("pullSecrets") or ()
            ),
            releases={str(k): str(v) for k, v in (body.get("releases") or {}).items()},
            **{
                str(k): str(v)
                for k, v in body.items()
                if k not in ("images", "pullSecrets", "releases")
            },  # type: ignore[arg-type]
        )
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
    pairs = tuple(
        {str(k): _spec(str(v)) for k, v in pair.items()} for pair in raw.get("gpudirectPairs") or ()
    )
    tested = tuple(
        ShippedPair(
            versions={str(k): _spec(str(v)) for k, v in pair.items() if k not in ("source", "why")},
            source=str(pair["source"]),
            why=str(pair["why"]),
        )
        for pair in raw.get("testedPairs") or ()
    )
    return Catalog(
        kubernetes=_spec(raw["kubernetes"]),
        components=components,
        rules=rules,
        gpudirect_pairs=pairs,
        tested_pairs=tested,
    )


def undocumented_gpudirect_pair(overrides: Mapping[str, str]) -> Problem | None:
    """A warning when the effective GPU Operator / Network Operator pair is neither one NVIDIA
    documents for GPUDirect RDMA nor one it ships and tests (None when it is, or when a
    version does not parse); it says why the defaults are what they are."""
    catalog = load_catalog()
    try:
        versions = {
            name: parse_version(overrides.get(name, catalog.components[name].version))
            for name in ("gpu-operator", "network-operator")
        }
    except InvalidVersion:
        return None
    for pair in catalog.gpudirect_pairs:
        if all(versions[name] in spec for name, spec in pair.items()):
            return None
    go = overrides.get("gpu-operator", catalog.components["gpu-operator"].version)
    no = overrides.get("network-operator", catalog.components["network-operator"].version)
    for tested in catalog.tested_pairs:
        if all(versions[name] in spec for name, spec in tested.versions.items()):
            return None
    why = ""
    if catalog.tested_pairs:
        tested = catalog.tested_pairs[0]
        pins = catalog.components
        why = (
            f"; the defaults, GPU Operator {pins['gpu-operator'].version} with Network "
            f"Operator {pins['network-operator'].version}, are the pair {tested.source} "
            f"ships and tests, because {tested.why}"
        )
    return Problem(
        "versions",
        f"GPU Operator {go} with Network Operator {no} is not a pair NVIDIA documents for "
        "GPUDirect RDMA, nor one it ships and tests (gpudirectPairs, testedPairs in "
        f"manifests/versions.yaml){why}. Prove GPUDirect with `gpufabric verify nccl` before "
        "production, or pin a documented or tested pair under gpufabric:versions",
        warning=True,
    )


def effective_components(
    overrides: Mapping[str, str], mirrors: Mirrors = NO_MIRRORS
) -> dict[str, Component]:
    """The pins with a stack's overrides and mirrors applied (unknown names are ignored
    here; :func:`check_versions` reports them)."""
    catalog = load_catalog()
    out = {name: c.with_mirrors(mirrors) for name, c in catalog.components.items()}
    for name, version in overrides.items():
        if name in out:
            out[name] = out[name].with_version(version)
    for name, component in out.items():
        if component.follows is None or name in overrides or component.follows not in out:
            continue
        release = out[component.follows].version.lstrip("v")
        if release in component.releases:
            out[name] = component.with_version(component.releases[release])
    return out


class VersionCheck(Struct, frozen=True):
    """What the version rules read: the pins, the stack's overrides, the features it uses,
    its Kubernetes minor, and the effective release versions."""

    catalog: Catalog
    overrides: Mapping[str, str]
    features: Set[str]
    kubernetes_minor: str | None
    versions: Mapping[str, Version]
    """Pinned release versions with every override that parses applied (image tags are
    not release versions and are left out)."""

    @classmethod
    def of(
        cls,
        catalog: Catalog,
        overrides: Mapping[str, str],
        features: Set[str] = frozenset(),
        kubernetes_minor: str | None = None,
    ) -> VersionCheck:
        versions = effective_versions(catalog, overrides)
        return cls(catalog, overrides, features, kubernetes_minor, versions)


def effective_versions(catalog: Catalog, overrides: Mapping[str, str]) -> dict[str, Version]:
    """Release versions after the overrides; one that names no pinned release, or does not
    parse, leaves the pin (the override rules report it)."""
    versions: dict[str, Version] = {}
    for name, pinned in catalog.components.items():
        if pinned.source != "image":  # image tags are not release versions
            versions[name] = parse_version(pinned.version)
    for name, text in sorted(overrides.items()):
        if name not in versions:
            continue
        try:
            versions[name] = parse_version(str(text))
        except InvalidVersion:
            continue
    return versions


# Override rules: each looks at one override (name -> version or tag).


def unknown_component(catalog: Catalog, name: str, text: str) -> Problem | None:
    """The override names no pinned component."""
    if name in catalog.components:
        return None
    known = sorted(catalog.components)
    return Problem(
        f"versions.{name}",
        f"unknown component '{name}'{suggest(name, known)} (pinned components: {', '.join(known)})",
    )


def bad_image_tag(catalog: Catalog, name: str, text: str) -> Problem | None:
    """An image component's override is not an image tag."""
    pinned = catalog.components.get(name)
    if pinned is None or pinned.source != "image" or _IMAGE_TAG.match(str(text)):
        return None
    return Problem(f"versions.{name}", f"{text!r} is not an image tag")


def bad_version(catalog: Catalog, name: str, text: str) -> Problem | None:
    """A released component's override is not a version."""
    pinned = catalog.components.get(name)
    if pinned is None or pinned.source == "image":
        return None
    try:
        parse_version(str(text))
    except InvalidVersion:
        return Problem(
            f"versions.{name}",
            f"{text!r} is not a version; expected e.g. {pinned.version}",
        )
    return None


OverrideRule = Callable[[Catalog, str, str], Problem | None]
OVERRIDE_RULES: tuple[OverrideRule, ...] = (unknown_component, bad_image_tag, bad_version)
"""Rules over each override, walked per override in name order."""


# Version rules: each looks at the whole stack.


def override_problems(check: VersionCheck) -> list[Problem]:
    """Every override must name a pinned component and parse (OVERRIDE_RULES)."""
    return [
        problem
        for name, text in sorted(check.overrides.items())
        for rule in OVERRIDE_RULES
        if (problem := rule(check.catalog, name, text)) is not None
    ]


def rule_violations(check: VersionCheck) -> list[Problem]:
    """Every compatibility rule of the pins that applies must hold for the effective
    versions."""
    problems: list[Problem] = []
    for rule in check.catalog.rules:
        if not rule.when <= check.features:
            continue
        if any(check.versions[c] not in spec for c, spec in rule.when_versions.items()):
            continue
        for component, spec in rule.require.items():
            if check.versions[component] in spec:
                continue
            shown = check.overrides.get(component, check.catalog.components[component].version)
            problems.append(
                Problem(
                    f"versions.{component}",
                    f"{shown!r} is not allowed by rule {rule.id}: {rule.reason} "
                    f"Accepted: {component} {spec}.",
                )
            )
    return problems


def kubernetes_outside_range(check: VersionCheck) -> list[Problem]:
    """The cluster's Kubernetes minor must be one the pinned releases support together."""
    if check.kubernetes_minor is None:
        return []
    try:
        minor = Version(check.kubernetes_minor)
    except InvalidVersion:  # the model's pattern already rejects these
        return []
    if minor in check.catalog.kubernetes:
        return []
    return [
        Problem(
            "cluster.kubernetesVersion",
            f"Kubernetes {check.kubernetes_minor} is outside what the pinned releases support "
            f"together; accepted: {check.catalog.kubernetes}",
        )
    ]


VersionRule = Callable[[VersionCheck], list[Problem]]
VERSION_RULES: tuple[VersionRule, ...] = (
    override_problems,
    rule_violations,
    kubernetes_outside_range,
)
"""The rules :func:`check_versions` walks, in the order their problems are listed."""


def check_versions(
    overrides: Mapping[str, str], features: Set[str], kubernetes_minor: str | None
) -> list[Problem]:
    """Every override must name a pinned component and parse; every rule that applies
    must hold for the effective versions; the cluster's Kubernetes minor must fit."""
    check = VersionCheck.of(load_catalog(), overrides, features, kubernetes_minor)
    return [problem for rule in VERSION_RULES for problem in rule(check)]


NIC_POLICY_IMAGE_REPOSITORY = "nvcr.io/nvidia/mellanox"
"""Where the NicClusterPolicy's component images (nv-ipam, CNI plugins, device plugins) live,
tagged with the Network Operator's release."""


def known_upstreams() -> tuple[set[str], set[str]]:
    """(image registries, chart repositories) the pinned releases may pull from."""
    registries: set[str] = set()
    repositories: set[str] = set()
    for component in load_catalog().components.values():
        if component.repository:
            repositories.add(component.repository.rstrip("/"))
        if component.image:
            registries.add(split_registry(component.image)[0])
        for entry in component.chart_images:
            registries.add(split_registry(entry.image)[0])
    registries.add(split_registry(NIC_POLICY_IMAGE_REPOSITORY)[0])
    return registries, repositories


__all__ = [
    "NIC_POLICY_IMAGE_REPOSITORY",
    "Catalog",
    "ChartImage",
    "Component",
    "Rule",
    "VersionCheck",
    "check_versions",
    "effective_components",
    "known_upstreams",
    "load_catalog",
    "parse_version",
    "undocumented_gpudirect_pair",
]
