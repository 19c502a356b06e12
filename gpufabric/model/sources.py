"""Where a stack pulls from: upstream chart repositories, manifest URLs and image registries,
and the stack's mirrors of them (the ``sources`` section).

A mirror is given per upstream, never per component, so one line covers everything a
registry serves:

- an image registry (``nvcr.io``) maps to a mirror prefix (``registry.example.com/nvcr``):
  ``nvcr.io/nvidia/driver:595.91.07`` is pulled as ``registry.example.com/nvcr/nvidia/driver:595.91.07``;
  Docker Hub short names are expanded first (``alpine`` is ``docker.io/library/alpine``);
- a chart repository URL (HTTP or ``oci://``) maps to another chart repository URL;
- upstream manifests (``https://HOST/PATH``) are fetched from ``BASE/HOST/PATH``; a
  kustomize remote base (``https://HOST/OWNER/REPO//DIR?ref=TAG``), which a plain file server
  cannot serve, is fetched as one file rendered from it, ``BASE/HOST/OWNER/REPO/TAG/DIR.yaml``
  (:attr:`RemoteBase.build_command` prints how to make that file on a connected machine).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import Any

from msgspec import Struct, field

DOCKER_HUB = "docker.io"
_DOCKER_HUB_ALIASES = {"index.docker.io", "registry-1.docker.io"}


def split_registry(name: str) -> tuple[str, str]:
    """(registry host, rest) of an image name or reference, as container runtimes read it:
    the first path component is a registry when it has a dot or a port or is localhost;
    otherwise the image is on Docker Hub (single names under ``library/``)."""
    first, sep, rest = name.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        registry = DOCKER_HUB if first in _DOCKER_HUB_ALIASES else first
    elif not sep and ("." in first.split(":")[0] or first.split(":")[0] == "localhost"):
        return first, ""  # a registry alone ("ghcr.io", as some charts' values hold)
    else:
        registry, rest = DOCKER_HUB, name
    if registry == DOCKER_HUB and rest and "/" not in rest:
        rest = f"library/{rest}"  # Docker Hub official images
    return registry, rest


def full_name(name: str) -> str:
    """An image name or reference with its registry spelled out."""
    registry, rest = split_registry(name)
    return f"{registry}/{rest}" if rest else registry


def split_tag(ref: str) -> tuple[str, str]:
    """(name, tag) of an image reference; the tag is '' when absent."""
    name, sep, tag = ref.rpartition(":")
    if not sep or "/" in tag:  # "host:5000/image" has no tag
        return ref, ""
    return name, tag


_HOST = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*|\[[0-9a-fA-F:]+\])"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REFERENCE = re.compile(
    rf"(?P<name>(?:{_HOST}(?::[0-9]+)?/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    r"(?::[\w][\w.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?",
    re.ASCII,
)
"""An image reference in the distribution grammar (github.com/distribution/reference):
``[HOST[:PORT]/]PATH[:TAG][@ALGORITHM:HEX]``, path components lowercase."""
REFERENCE_FORM = (
    "an image reference [HOST[:PORT]/]PATH[:TAG][@sha256:DIGEST] (path in lowercase letters, "
    "digits and . _ -; tag up to 128 of letters, digits, _ . -), e.g. nvcr.io/nvidia/pytorch:24.12-py3"
)


def reference_problem(ref: str) -> str | None:
    """Why ``ref`` is not an image reference a container runtime pulls (None: it is one)."""
    if not ref:
        return "is empty"
    m = REFERENCE.fullmatch(ref)
    if m is None:
        return "is not an image reference"
    if len(m["name"]) > 255:
        return "has a name longer than 255 characters"
    return None


class Mirrors(Struct, frozen=True):
    """The ``sources`` section as lookups; empty mappings mean "pull from upstream"."""

    registries: Mapping[str, str] = field(default_factory=dict)
    charts: Mapping[str, str] = field(default_factory=dict)
    manifests: str | None = None
    pull_secrets: tuple[str, ...] = ()
    """Names of the image pull Secrets the system namespaces hold (``sources.pullSecrets``)."""
    air_gapped: bool = False
    """``sources.airGapped``: nothing may be pulled from an upstream without a mirror."""

    @property
    def active(self) -> bool:
        return bool(self.registries or self.charts or self.manifests)

    def image(self, name: str) -> str:
        """An image name, reference or repository prefix (``nvcr.io/nvidia``) as pulled
        through the mirror of its registry; unchanged when that registry is not mirrored."""
        registry, rest = split_registry(name)
        mirror = self.registries.get(registry)
        if mirror is None:
            return name
        mirror = mirror.rstrip("/")
        return f"{mirror}/{rest}" if rest else mirror

    def serves(self, name: str) -> bool:
        """Whether an image name or reference is pulled from one of the mirrors' hosts (a
        reference already written through a mirror)."""
        hosts = {prefix.split("/", 1)[0] for prefix in self.registries.values()}
        return split_registry(name)[0] in hosts

    def chart_repository(self, url: str) -> str:
        return self.charts.get(url.rstrip("/"), url)

    def manifest(self, url: str) -> str:
        """``https://HOST/PATH`` as ``BASE/HOST/PATH`` when a manifest mirror is set; a
        kustomize remote base as the file rendered from it (:attr:`RemoteBase.served_path`)."""
        if not self.manifests:
            return url
        base = remote_base(url)
        if base is not None:
            return f"{self.manifests.rstrip('/')}/{base.served_path}"
        _, sep, rest = url.partition("://")
        return f"{self.manifests.rstrip('/')}/{rest if sep else url}"


class RemoteBase(Struct, frozen=True):
    """A kustomize remote base, ``https://HOST/OWNER/REPO//DIR?ref=TAG``: a directory of a git
    repository at a tag, which only a git server can serve. A plain file mirror serves instead
    the one file ``kubectl kustomize`` renders from it."""

    url: str
    repository: str
    """``HOST/OWNER/REPO`` (more path parts where the host nests groups)."""
    directory: str
    ref: str

    @property
    def served_path(self) -> str:
        """Where a file mirror serves the rendered file, below its base:
        ``HOST/OWNER/REPO/TAG/DIR.yaml`` (the layout of raw file hosts)."""
        return f"{self.repository}/{self.ref}/{self.directory}.yaml"

    @property
    def local_file(self) -> str:
        """The file :attr:`build_command` writes: ``REPO-TAG-LASTDIR.yaml``."""
        name = "-".join(
            (self.repository.rsplit("/", 1)[-1], self.ref, self.directory.rsplit("/", 1)[-1])
        )
        return name.replace("/", "-") + ".yaml"

    @property
    def build_command(self) -> str:
        """The command that renders the base into :attr:`local_file`, run on a machine that
        reaches the repository (kubectl's built-in kustomize clones it with git)."""
        return f"{shlex.join(['kubectl', 'kustomize', self.url])} > {shlex.quote(self.local_file)}"


def remote_base(url: str) -> RemoteBase | None:
    """``url`` as a kustomize remote base (:class:`RemoteBase`); None for a plain file URL."""
    scheme, sep, rest = url.partition("://")
    location, _, query = rest.partition("?")
    repository, double, directory = location.partition("//")
    refs = [v for k, _, v in (p.partition("=") for p in query.split("&")) if k == "ref"]
    ref = refs[-1] if refs else ""
    repository, directory = repository.strip("/"), directory.strip("/")
    if not (sep and scheme == "https" and double and repository and directory and ref):
        return None
    return RemoteBase(url, repository, directory, ref)


NO_MIRRORS = Mirrors()


def set_path(values: dict[str, Any], path: str, value: Any) -> None:
    """Set a dotted values path, creating the mappings on the way (in place)."""
    node = values
    *parents, leaf = path.split(".")
    for key in parents:
        child = node.get(key)
        if not isinstance(child, dict):
            child = {}
            node[key] = child
        node = child
    node[leaf] = value


def get_path(values: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted path, or None when any part is missing."""
    node: Any = values
    for key in path.split("."):
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node


__all__ = [
    "DOCKER_HUB",
    "NO_MIRRORS",
    "REFERENCE",
    "REFERENCE_FORM",
    "Mirrors",
    "RemoteBase",
    "full_name",
    "get_path",
    "reference_problem",
    "remote_base",
    "set_path",
    "split_registry",
    "split_tag",
]
