"""The NIC room: what differs between fabric links and between the ways pods get RDMA
devices lives here, one module each.

- Links (``fabric.type``): ``infiniband``, ``roce``, registered in :data:`LINKS`; each
  module exposes ``LINK``, an object implementing :class:`gpufabric.nics.base.Link`.
- NIC modes (``fabric.rdma``): ``shared``, ``sriov``, ``hostdevice``, ``none``, registered in
  :data:`MODES`; each module exposes ``MODE``, implementing
  :class:`gpufabric.nics.base.NicMode`.
- :mod:`~gpufabric.nics.cni`: the CNI configuration of a rail's network, per CNI plugin.

A mode or link owns its settings' validation, its rails' CNI and device-plugin resources,
its NicClusterPolicy parts and SR-IOV objects, its NCCL variables, its runbook fragment
(``manifests/runbooks/nic-<mode>.md.j2``, ``link-<type>.md.j2``) and which node checks its
ports get. Nothing outside this package compares mode or link names: it asks the stack's
mode and link (:func:`mode`, :func:`link`; the registry rule is
:mod:`gpufabric.support.rooms`). Adding a mode is adding a module here, its line in
:data:`MODES`, its fragment, and its name to ``gpufabric.model.config.RdmaMode`` (a test
keeps the two equal).
"""

from __future__ import annotations

from gpufabric.nics.base import Link, NicMode
from gpufabric.support.rooms import Room

MODES = Room(
    "NIC mode",
    "MODE",
    {
        "hostdevice": "gpufabric.nics.hostdevice",
        "none": "gpufabric.nics.none",
        "shared": "gpufabric.nics.shared",
        "sriov": "gpufabric.nics.sriov",
    },
)
"""Every NIC mode a stack may choose (``fabric.rdma``) -> its module, whose ``MODE`` it is."""

LINKS = Room(
    "fabric link",
    "LINK",
    {
        "infiniband": "gpufabric.nics.infiniband",
        "roce": "gpufabric.nics.roce",
    },
)
"""Every link a stack may choose (``fabric.type``) -> its module, whose ``LINK`` it is."""


def mode(name: str) -> NicMode:
    """The NIC mode of that name; UnknownChoice for any other name (never a fallback)."""
    found: NicMode = MODES.member(name)
    return found


def link(name: str) -> Link:
    """The link of that name; UnknownChoice for any other name (never a fallback)."""
    found: Link = LINKS.member(name)
    return found


def links() -> tuple[Link, ...]:
    """Every link, in name order."""
    found: tuple[Link, ...] = LINKS.members()
    return found


__all__ = ["LINKS", "MODES", "Link", "NicMode", "link", "links", "mode"]
