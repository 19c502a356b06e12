"""What every storage backend kind provides (see :mod:`gpufabric.storage`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol, runtime_checkable

from gpufabric.model.problems import Problem
from gpufabric.model.storage import StorageBackend
from gpufabric.plan.facts import BackendFacts


@runtime_checkable
class BackendKind(Protocol):
    """One kind of storage backend."""

    key: str
    """The key of ``storage.backends[]`` that selects this kind (``nfs``)."""

    def selected(self, backend: StorageBackend) -> bool:
        """The backend is of this kind (its key is set)."""
        ...

    def problems(
        self, backend: StorageBackend, path: str, serves_checkpoints: bool
    ) -> Iterator[Problem]:
        """Errors and warnings of the backend's own settings, by config path."""
        ...

    def facts(self, backend: StorageBackend, stack: str) -> BackendFacts:
        """The backend as every output sees it."""
        ...


__all__ = ["BackendKind"]
