"""Storage backends: where a stack's shared storage for checkpoints and datasets comes from.

Each backend kind is one module here (``nfs``: NFS through the pinned csi-driver-nfs chart;
``existingclass``: a StorageClass the cluster already has) exposing ``KIND``, an object that
implements :class:`gpufabric.storage.base.BackendKind`: the stack key that selects it, the
checks of its settings, and the facts every output reads (StorageClass, transport, driver
chart and its values, GPUDirect Storage support, runbook fragment). Nothing outside this
package asks which kind a backend is; adding a kind is adding a module (and its templates).
"""

from __future__ import annotations

from gpufabric.storage.base import BackendKind
from gpufabric.storage.existingclass import KIND as EXISTING_CLASS
from gpufabric.storage.nfs import KIND as NFS

KINDS: tuple[BackendKind, ...] = (NFS, EXISTING_CLASS)
"""Every backend kind, by the stack key that selects it."""


def keys() -> tuple[str, ...]:
    """The keys of ``storage.backends[]`` that each select a kind."""
    return tuple(k.key for k in KINDS)


__all__ = ["KINDS", "BackendKind", "keys"]
