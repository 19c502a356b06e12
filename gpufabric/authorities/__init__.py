"""Queueing authorities: the one gang-scheduling and queueing system a cluster runs.

Each authority is one module in this package (``kueue``, ``volcano``) exposing ``AUTHORITY``,
an object that implements :class:`gpufabric.authorities.base.Authority`: its chart values and
cluster objects, the queue and priority objects per tenant, how a tenant namespace is wired
to its queue, the flags job operators run with, how each job kind names its queue and
gang, how readiness is read, and its runbook fragment. Adding an authority means adding one
module here, its pins in manifests/versions.yaml and its templates; the stack model accepts
exactly the names of the modules found here, so an unknown value can never fall into
another authority's branch.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpufabric.authorities.base import Authority

_NOT_AUTHORITIES = frozenset({"base"})


@cache
def names() -> tuple[str, ...]:
    """Every authority a stack may choose (the modules of this package), sorted."""
    return tuple(
        sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name not in _NOT_AUTHORITIES)
    )


@cache
def get(name: str) -> Authority:
    """The authority of that name; KeyError for any other name (never a fallback)."""
    if name not in names():
        raise KeyError(f"unknown queueing authority {name!r}; known: {', '.join(names())}")
    module = importlib.import_module(f"{__name__}.{name}")
    authority: Authority = module.AUTHORITY
    if authority.name != name:
        raise KeyError(f"module {name} declares authority {authority.name!r}")
    return authority


__all__ = ["get", "names"]
