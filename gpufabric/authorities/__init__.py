"""Queueing authorities: the one gang-scheduling and queueing system a cluster runs.

Each authority is one module in this package (``kueue``, ``volcano``) exposing ``AUTHORITY``,
an object that implements :class:`gpufabric.authorities.base.Authority`: its chart values and
cluster objects, the queue and priority objects per tenant, how a tenant namespace is wired
to its queue, the flags job operators run with, how each job kind names its queue and
gang, how readiness is read, the checks of its settings, and its runbook fragment. Its own
keys of ``scheduling`` are a settings model in :mod:`gpufabric.authorities.settings`.
Adding an authority means adding one module here, its settings module, its pins in
manifests/versions.yaml and its templates; the stack model accepts exactly the names of
the modules found here, so an unknown value can never fall into another authority's branch.

This module imports nothing of the package, so the stack model can ask it for the names;
:func:`gpufabric.plan.authority.get` gives the authority of a name.
"""

from __future__ import annotations

import pkgutil
from functools import cache

_NOT_AUTHORITIES = frozenset({"base", "settings"})


@cache
def names() -> tuple[str, ...]:
    """Every authority a stack may choose (the modules of this package), sorted."""
    return tuple(
        sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name not in _NOT_AUTHORITIES)
    )


__all__ = ["names"]
