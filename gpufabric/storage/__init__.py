"""Storage backends: where a stack's shared storage for checkpoints and datasets comes from.

Each backend kind is one module here (``nfs``: NFS through the pinned csi-driver-nfs chart;
``existingclass``: a StorageClass the cluster already has), registered in :data:`KINDS` by
the stack key that selects it, and exposing ``KIND``, an object that implements
:class:`gpufabric.storage.base.BackendKind`: the stack key that selects it, the checks of
its settings, and the facts every output reads (StorageClass, transport, driver chart and
its values, GPUDirect Storage support, runbook fragment). Nothing outside this package asks
which kind a backend is; adding a kind is adding a module, its line in :data:`KINDS` (the
registry rule of every room is :mod:`gpufabric.support.rooms`) and its templates.
"""

from __future__ import annotations

from gpufabric.storage.base import BackendKind
from gpufabric.support.rooms import Room

KINDS = Room(
    "storage backend kind",
    "KIND",
    {
        "nfs": "gpufabric.storage.nfs",
        "existingClass": "gpufabric.storage.existingclass",
    },
)
"""Every backend kind, by the key of ``storage.backends[]`` that selects it -> its module,
whose ``KIND`` it is."""


def kind(key: str) -> BackendKind:
    """The backend kind that key selects; UnknownChoice for any other key (never a
    fallback)."""
    found: BackendKind = KINDS.member(key)
    return found


def kinds() -> tuple[BackendKind, ...]:
    """Every backend kind, in the registry's order."""
    found: tuple[BackendKind, ...] = KINDS.members()
    return found


__all__ = ["KINDS", "BackendKind", "kind", "kinds"]
