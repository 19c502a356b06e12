"""Everything a stack pulls: charts, upstream manifests and images, upstream and mirrored.

``gpufabric images --stack S`` prints it (:mod:`gpufabric.outputs.images`) so that a mirror can be filled before an
air-gapped install, and ``sources.airGapped`` uses it to refuse a stack that would still
pull from an upstream. The list comes from the stack's Plan rendered without mirrors (so
every entry names its upstream), each entry then mapped through the stack's mirrors the
same way the render maps it:

- images of the objects gpufabric writes (container images, NVIDIA ImageSpecs);
- images the pinned charts pull by their default values, as far as the stack's values
  switch them on (the per-chart list in manifests/versions.yaml);
- images the kustomize overlays pin, the upstream manifests and the chart repositories;
- the images of gpufabric's own jobs and probes (``gpufabric job``, ``verify nccl``,
  ``verify nodes --via-cluster``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from msgspec import Struct, field

from gpufabric.model.config import Sources, StackModel
from gpufabric.model.problems import Problem
from gpufabric.model.sources import Mirrors, full_name, remote_base, split_registry
from gpufabric.model.versions import load_catalog
from gpufabric.plan.build import Plan, build_plan
from gpufabric.plan.items import HelmChart, Item, K8sObject, KustomizeOverlay

TOOL_IMAGES = {
    "training-image": "gpufabric job, gpufabric verify nccl",
    "probe-image": "gpufabric verify nodes --via-cluster",
}


class Image(Struct):
    upstream: str
    pulled: str
    used_by: list[str] = field(default_factory=list)
    note: str | None = None
    on_mirror: bool = False
    """The stack names it on a mirror host already (the site's own image, e.g.
    ``monitoring.health.inCluster.image``): it needs no mirror of its registry."""

    @property
    def on_mirror_host(self) -> bool:
        """Pulled from a mirror host: through a mirror, or named there already."""
        return self.pulled != self.upstream or self.on_mirror

    @property
    def registry(self) -> str:
        return split_registry(self.upstream)[0]


class PulledChart(Struct, frozen=True, kw_only=True):
    """A Helm chart the stack installs: its upstream repository and the repository it is
    pulled from through the stack's mirrors."""

    component: str
    repository: str
    chart: str
    version: str
    pulled_repository: str


class Manifest(Struct, frozen=True, kw_only=True):
    component: str
    url: str
    pulled_url: str
    build: str | None = None
    """For a kustomize remote base served by a file mirror: the command that renders it
    into ``build_file``, the file to serve at ``pulled_url`` (run where upstream is reachable)."""
    build_file: str | None = None


class StackSources(Struct, frozen=True):
    """What one stack pulls, in plan order."""

    stack: str
    charts: tuple[PulledChart, ...]
    manifests: tuple[Manifest, ...]
    images: tuple[Image, ...]
    mirrored: bool
    air_gapped: bool
    """The stack says nothing may come from upstream (checked when it loads)."""
    version_overrides: tuple[str, ...]
    """Chart components whose version the stack overrides: their chart-default image list
    is the pinned release's."""
    mirror_hosts: tuple[str, ...] = ()
    """The registry hosts (host[:port]) images are pulled from through the mirrors, sorted."""
    private_ca: bool = False
    """The mirrors' certificates come from the site's CA (containerd must trust it)."""
    pull_secrets: tuple[str, ...] = ()
    """Names of the image pull Secrets (``sources.pullSecrets``) the charts and overlays use."""
    system_namespaces: tuple[str, ...] = ()
    """Namespaces of the charts and overlays, sorted."""
    first_secret_only: tuple[str, ...] = ()
    """Charts whose values take one pull Secret (the first of ``pull_secrets``), sorted."""
    pull_namespaces: tuple[str, ...] = ()
    """Every namespace whose pods pull from the mirrors, sorted: where each pull Secret must
    exist. The system namespaces, those of gpufabric's own pods (the health runner's), and
    every tenant's (its jobs, the acceptance test, the sweep, re-certification and the
    storage check run there)."""


def _object_images(body: Any) -> Iterator[str]:
    """Container images and NVIDIA ImageSpecs (repository/image/version) in an object."""
    if isinstance(body, Mapping):
        image = body.get("image")
        if isinstance(image, str) and image:
            repository, version = body.get("repository"), body.get("version")
            if isinstance(repository, str) and isinstance(version, str):
                yield f"{repository}/{image}:{version}"
            else:
                yield image
        for value in body.values():
            yield from _object_images(value)
    elif isinstance(body, list):
        for value in body:
            yield from _object_images(value)


def collect(stack: str, model: StackModel) -> StackSources:
    """Everything ``stack`` pulls, each with what it is pulled as through the mirrors."""
    mirrors: Mirrors = model.sources.mirrors()
    plan = build_plan(stack, model.model_copy(update={"sources": Sources()}))
    charts: list[PulledChart] = []
    manifests: list[Manifest] = []
    images: dict[str, Image] = {}

    def add(ref: str, used_by: str, note: str | None = None) -> None:
        ref = full_name(ref)
        entry = images.setdefault(
            ref, Image(ref, mirrors.image(ref), note=note, on_mirror=mirrors.serves(ref))
        )
        if used_by not in entry.used_by:
            entry.used_by.append(used_by)

    overridden = []
    for item in plan.items:
        payload = item.payload
        if isinstance(payload, HelmChart):
            component = plan.components[payload.release]
            charts.append(
                PulledChart(
                    component=component.name,
                    repository=payload.repository,
                    chart=payload.chart,
                    version=payload.version,
                    pulled_repository=mirrors.chart_repository(payload.repository),
                )
            )
            if component.version != load_catalog().components[component.name].version:
                overridden.append(component.name)
            for entry, ref in component.chart_default_images(payload.values):
                add(ref, f"{item.id} ({entry.key})", entry.note)
        elif isinstance(payload, KustomizeOverlay):
            component = plan.components[payload.component]
            manifests.append(_manifest(component.name, component.upstream_manifest_url, mirrors))
            if component.upstream_image_ref:
                add(component.upstream_image_ref, item.id)
        elif isinstance(payload, K8sObject):
            for ref in _object_images(payload.body):
                add(ref, item.id)
    for name, used_by in TOOL_IMAGES.items():
        add(plan.components[name].upstream_image_ref or "", used_by)
    return StackSources(
        stack=stack,
        charts=tuple(charts),
        manifests=tuple(manifests),
        images=tuple(images.values()),
        mirrored=mirrors.active,
        air_gapped=model.sources.airGapped,
        version_overrides=tuple(overridden),
        mirror_hosts=_mirror_hosts(images.values()),
        private_ca=model.sources.privateCA,
        pull_secrets=mirrors.pull_secrets,
        system_namespaces=_system_namespaces(plan.items),
        first_secret_only=_first_secret_only(plan),
        pull_namespaces=_pull_namespaces(plan),
    )


def _mirror_hosts(images: Iterable[Image]) -> tuple[str, ...]:
    """The registry hosts images are pulled from as mirrors, sorted."""
    return tuple(sorted({split_registry(i.pulled)[0] for i in images if i.on_mirror_host}))


def _first_secret_only(plan: Plan) -> tuple[str, ...]:
    """The charts whose values take one pull Secret only, sorted."""
    names = {
        c.chart or c.name
        for it in plan.items
        if isinstance(it.payload, HelmChart)
        for c in [plan.components[it.payload.release]]
        if any(k.form == "name" for k in c.pull_secret_keys)
    }
    return tuple(sorted(names))


def _pull_namespaces(plan: Plan) -> tuple[str, ...]:
    """Every namespace whose pods pull images: the charts' and overlays', those of the
    stack's own objects that carry images, and every tenant's (the jobs and checks that run
    there), sorted."""
    namespaces = set(_system_namespaces(plan.items)) | set(plan.facts.tenants)
    for item in plan.items:
        payload = item.payload
        if (
            isinstance(payload, K8sObject)
            and payload.namespace
            and next(_object_images(payload.body), None) is not None
        ):
            namespaces.add(payload.namespace)
    return tuple(sorted(namespaces))


def _manifest(component: str, url: str | None, mirrors: Mirrors) -> Manifest:
    """An upstream manifest as a mirrored stack pulls it; a kustomize git base that a file
    mirror serves comes with the command that renders it into that file."""
    url = url or ""
    pulled_url = mirrors.manifest(url)
    base = remote_base(url) if pulled_url != url else None
    if base is None:
        return Manifest(component=component, url=url, pulled_url=pulled_url)
    return Manifest(
        component=component,
        url=url,
        pulled_url=pulled_url,
        build=base.build_command,
        build_file=base.local_file,
    )


def _system_namespaces(items: Iterable[Item]) -> tuple[str, ...]:
    """Namespaces the charts and overlays install into, sorted."""
    kinds = HelmChart | KustomizeOverlay
    return tuple(sorted({it.payload.namespace for it in items if isinstance(it.payload, kinds)}))


def air_gap_problems(pulled: StackSources) -> list[Problem]:
    """With ``sources.airGapped``, every upstream the stack pulls from needs a mirror."""
    if not pulled.air_gapped:
        return []
    problems = []
    by_registry: dict[str, list[str]] = {}
    for image in pulled.images:
        if image.pulled == image.upstream and not image.on_mirror:
            by_registry.setdefault(image.registry, []).append(image.upstream)
    for registry, refs in sorted(by_registry.items()):
        problems.append(
            Problem(
                "sources.registries",
                f"no mirror for registry {registry}, which the stack pulls {len(refs)} "
                f"image(s) from (e.g. {refs[0]}); add '{registry}: <mirror prefix>' "
                "(sources.airGapped is on)",
            )
        )
    for repository in sorted(
        {c.repository for c in pulled.charts if c.pulled_repository == c.repository}
    ):
        charts = sorted({c.chart for c in pulled.charts if c.repository == repository})
        problems.append(
            Problem(
                "sources.charts",
                f"no mirror for chart repository {repository} (charts: {', '.join(charts)}); "
                f"add '{repository}: <mirror URL>' (sources.airGapped is on)",
            )
        )
    unmirrored = [m.url for m in pulled.manifests if m.pulled_url == m.url]
    if unmirrored:
        problems.append(
            Problem(
                "sources.manifests",
                f"not set, but the stack fetches {len(unmirrored)} upstream manifest(s) "
                f"(e.g. {unmirrored[0]}); set the base URL of their mirror "
                "(sources.airGapped is on)",
            )
        )
    return problems


__all__ = [
    "Image",
    "Manifest",
    "PulledChart",
    "StackSources",
    "air_gap_problems",
    "collect",
]
