"""What a Plan is made of: layers, items and their payloads (charts, overlays, objects).

Layer builders (:mod:`gpufabric.plan.gpu` ...) create items with the helpers here; every
output reads them. Nothing in this module knows a particular layer.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import msgspec
from msgspec import Struct

from gpufabric.model.config import SecretValue
from gpufabric.model.sources import split_tag
from gpufabric.model.versions import Component
from gpufabric.support.templates import render_object, render_overlay


class Layer(StrEnum):
    """What part of the platform an item belongs to, in apply order."""

    GPU = "gpu"
    NETWORK = "network"
    TRAINING = "training"
    SCHEDULING = "scheduling"
    TENANTS = "tenants"
    MONITORING = "monitoring"
    STORAGE = "storage"


LAYER_ORDER: tuple[Layer, ...] = tuple(Layer)

STATE_READY = "jsonpath={.status.state}=ready"
"""pulumi.com/waitFor condition for NVIDIA operators' policies (ClusterPolicy, NicClusterPolicy)."""


@dataclass(frozen=True)
class SecretRef:
    """Stands in for a secret inside an object body: render writes a placeholder, the
    Pulumi components substitute the value as a Pulumi secret."""

    path: str
    value: SecretValue = field(compare=False, repr=False)

    @property
    def placeholder(self) -> str:
        return f"<secret:{self.path}>"


class HelmChart(Struct, frozen=True, kw_only=True):
    """A Helm chart release with values computed from the stack."""

    repository: str
    chart: str
    version: str
    namespace: str
    release: str
    values: Mapping[str, Any]
    awaits: Mapping[str, str] = msgspec.field(default_factory=dict)
    """Readiness of objects the chart creates: "group/version/Kind" -> pulumi.com/waitFor."""

    @property
    def chart_ref(self) -> str:
        """What helm.v4.Chart takes as `chart`: OCI charts by full reference."""
        if self.repository.startswith("oci://"):
            return f"{self.repository.rstrip('/')}/{self.chart}"
        return self.chart


class KustomizeOverlay(Struct, frozen=True):
    """A local kustomize overlay (a directory under manifests/) over a pinned upstream; its
    ``*.j2`` files are rendered with ``parameters`` (pinned URLs and images)."""

    directory: str
    namespace: str
    parameters: Mapping[str, Any] = msgspec.field(default_factory=dict)
    """Template values (strings, or lists of strings such as controller flags)."""
    component: str = ""
    """The pinned component (versions.yaml) whose upstream manifest the overlay builds on."""

    def files(self) -> dict[str, str]:
        """The overlay as applied: relative path -> content."""
        return render_overlay(self.directory, self.parameters)


class K8sObject(Struct, frozen=True):
    """One Kubernetes object gpufabric writes itself."""

    body: Mapping[str, Any]

    @property
    def api_version(self) -> str:
        return str(self.body["apiVersion"])

    @property
    def kind(self) -> str:
        return str(self.body["kind"])

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])

    @property
    def namespace(self) -> str | None:
        ns = self.body["metadata"].get("namespace")
        return str(ns) if ns else None


def helm_chart(
    component: Component, values: Mapping[str, Any], awaits: Mapping[str, str] | None = None
) -> HelmChart:
    """The chart of a pinned Helm component; the release is named after the component."""
    repository = component.chart_repository
    if component.source != "helm" or not repository or not component.chart:
        raise PlanError(f"{component.name} is not pinned as a Helm chart in versions.yaml")
    return HelmChart(
        repository=repository,
        chart=component.chart,
        version=component.version,
        namespace=component.namespace,
        release=component.name,
        # Mirrors first: the values the stack computes win where both set a key.
        values=deep_merge(component.mirror_values(), values),
        awaits=dict(awaits or {}),
    )


def upstream_overlay(component: Component, directory: str, **parameters: Any) -> KustomizeOverlay:
    """A local overlay over a pinned component's upstream manifest. Its templates get the
    manifest URL and the component's image: the name the upstream manifest uses
    (``upstream_name``) and the name and tag to pull (``image_name``/``image_tag``, through the
    stack's mirrors), the image pull secrets its service accounts reference
    (``pull_secrets``), besides ``parameters``."""
    image_name, image_tag = component.image_name_tag
    return KustomizeOverlay(
        directory=directory,
        namespace=component.namespace,
        component=component.name,
        parameters={
            "manifest": component.manifest_url or "",
            "upstream_name": split_tag(component.upstream_image_ref or "")[0],
            "image_name": image_name,
            "image_tag": image_tag,
            "pull_secrets": [{"name": n} for n in component.mirrors.pull_secrets],
            **parameters,
        },
    )


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` on top of ``base``, merging nested mappings (new dicts; inputs untouched)."""
    out = dict(base)
    for key, value in over.items():
        old = out.get(key)
        if isinstance(old, Mapping) and isinstance(value, Mapping):
            out[key] = deep_merge(old, value)
        else:
            out[key] = value
    return out


def system_namespace(stack: str, item_id: str, layer: Layer, name: str, level: str) -> Item:
    """A namespace for something gpufabric installs, with its Pod Security level; kept in
    the cluster when it leaves the stack (it holds an operator and its state)."""
    body = render_object("system/namespace.yaml.j2", name=name, stack=stack, level=level)
    return Item(
        id=item_id, layer=layer, payload=K8sObject(body), protect=True, retain_on_delete=True
    )


def object_item(
    item_id: str, layer: Layer, template: str, depends_on: tuple[str, ...] = (), **context: Any
) -> Item:
    """An item holding one object rendered from a template under manifests/templates/."""
    return Item(
        id=item_id,
        layer=layer,
        payload=K8sObject(render_object(template, **context)),
        depends_on=depends_on,
    )


def spec_object(
    stack: str,
    api_version: str,
    kind: str,
    name: str,
    spec: dict[str, Any],
    namespace: str | None = None,
    annotations: dict[str, str] | None = None,
) -> K8sObject:
    """An operator's custom resource: metadata from the stack and ``spec`` as given
    (manifests/templates/network/object.yaml.j2)."""
    return K8sObject(
        render_object(
            "network/object.yaml.j2",
            api_version=api_version,
            kind=kind,
            name=name,
            namespace=namespace,
            stack=stack,
            spec=spec,
            annotations=annotations or {},
        )
    )


Payload = HelmChart | KustomizeOverlay | K8sObject


class Item(Struct, frozen=True, kw_only=True):
    """One named thing to apply, its layer and the items it must follow."""

    id: str
    layer: Layer
    payload: Payload
    depends_on: tuple[str, ...] = ()
    protect: bool = False
    """Refuse to delete it (namespaces and CRDs hold users' work)."""
    retain_on_delete: bool = False
    """When it leaves the stack, stop managing it but leave it in the cluster."""
    rail: str | None = None
    """The rail this item exists for (its pool, SR-IOV policy or network), if any."""
    pool: str | None = None
    """The node pool of a fleet this item exists for (its NicNodePolicy, flavor, NCCL
    settings), if any (gpufabric/plan/poolitems.py finds it for the others)."""
    holds: str | None = None
    """Users' objects whose CRDs this item installs (removing it deletes them), if any."""

    @property
    def type(self) -> str:
        if isinstance(self.payload, HelmChart):
            return "helm-chart"
        if isinstance(self.payload, KustomizeOverlay):
            return "kustomize"
        return "object"


class PlanError(Exception):
    """The plan's own invariants broke (a bug, not bad input)."""


def order_items(items: Sequence[Item]) -> tuple[Item, ...]:
    """Topological order; ties broken by layer, then by the order builders produced."""
    by_id: dict[str, Item] = {}
    for it in items:
        if it.id in by_id:
            raise PlanError(f"duplicate plan item id {it.id!r}")
        by_id[it.id] = it
    position = {it.id: i for i, it in enumerate(items)}
    pending = {it.id: 0 for it in items}
    followers: dict[str, list[str]] = {it.id: [] for it in items}
    for it in items:
        for dep in it.depends_on:
            if dep not in by_id:
                raise PlanError(f"plan item {it.id!r} depends on unknown item {dep!r}")
            pending[it.id] += 1
            followers[dep].append(it.id)

    def key(item_id: str) -> tuple[int, int]:
        return (LAYER_ORDER.index(by_id[item_id].layer), position[item_id])

    ready = [(*key(i), i) for i, n in pending.items() if n == 0]
    heapq.heapify(ready)
    out: list[Item] = []
    while ready:
        *_, current = heapq.heappop(ready)
        out.append(by_id[current])
        for nxt in followers[current]:
            pending[nxt] -= 1
            if pending[nxt] == 0:
                heapq.heappush(ready, (*key(nxt), nxt))
    if len(out) != len(items):
        stuck = sorted(i for i, n in pending.items() if n)
        raise PlanError(f"dependency cycle among plan items: {', '.join(stuck)}")
    return tuple(out)
