"""The NIC room: what differs between fabric links and between the ways pods get RDMA
devices lives here, one module each.

- Links (``fabric.type``): ``infiniband``, ``roce``; each module exposes ``LINK``, an object
  implementing :class:`gpufabric.nics.base.Link`.
- NIC modes (``fabric.rdma``): ``shared``, ``sriov``, ``hostdevice``, ``none``; each exposes
  ``MODE``, implementing :class:`gpufabric.nics.base.NicMode`.
- :mod:`~gpufabric.nics.cni`: the CNI configuration of a rail's network, per CNI plugin.

A mode or link owns its settings' validation, its rails' CNI and device-plugin resources,
its NicClusterPolicy parts and SR-IOV objects, its NCCL variables, its runbook fragment
(``manifests/runbooks/nic-<mode>.md.j2``, ``link-<type>.md.j2``) and which node checks its
ports get. Nothing outside this package compares mode or link names: it asks the stack's
mode and link. Adding a mode is adding a module here, its fragment, and its name to
``gpufabric.model.config.RdmaMode`` (a test keeps the two equal).
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from gpufabric.nics.base import Link, NicMode

_NOT_ROOMS = frozenset({"base", "cni"})


@cache
def _members() -> tuple[dict[str, NicMode], dict[str, Link]]:
    modes: dict[str, NicMode] = {}
    found: dict[str, Link] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name in _NOT_ROOMS:
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        if isinstance(getattr(module, "MODE", None), NicMode):
            modes[module.MODE.name] = module.MODE
        if isinstance(getattr(module, "LINK", None), Link):
            found[module.LINK.name] = module.LINK
    return modes, found


def mode_names() -> tuple[str, ...]:
    """Every NIC mode a stack may choose (``fabric.rdma``), sorted."""
    return tuple(sorted(_members()[0]))


def link_names() -> tuple[str, ...]:
    """Every link a stack may choose (``fabric.type``), sorted."""
    return tuple(sorted(_members()[1]))


def links() -> tuple[Link, ...]:
    """Every link, in name order."""
    found = _members()[1]
    return tuple(found[n] for n in sorted(found))


def mode(name: str) -> NicMode:
    """The NIC mode of that name; KeyError for any other name (never a fallback)."""
    modes = _members()[0]
    if name not in modes:
        raise KeyError(f"unknown NIC mode {name!r}; known: {', '.join(sorted(modes))}")
    return modes[name]


def link(name: str) -> Link:
    """The link of that name; KeyError for any other name (never a fallback)."""
    found = _members()[1]
    if name not in found:
        raise KeyError(f"unknown fabric link {name!r}; known: {', '.join(sorted(found))}")
    return found[name]


__all__ = ["Link", "NicMode", "link", "link_names", "links", "mode", "mode_names"]
