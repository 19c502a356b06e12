"""Queueing authorities: the one gang-scheduling and queueing system a cluster runs.

Each authority is one module in this package (``kueue``, ``volcano``) exposing ``AUTHORITY``,
an object that implements :class:`gpufabric.authorities.base.Authority`: its chart values and
cluster objects, the queue and priority objects per tenant, how a tenant namespace is wired
to its queue, the flags job operators run with, how each job kind names its queue and
gang, how readiness is read, the checks of its settings, and its runbook fragment. Its own
keys of ``scheduling`` are a settings model in :mod:`gpufabric.authorities.settings`.
Adding an authority means adding one module here, its line in :data:`AUTHORITIES`, its
settings module, its pins in manifests/versions.yaml and its templates; the stack model
accepts exactly the names registered here, so an unknown value can never fall into another
authority's branch.

This module imports nothing of the package (the registry rule of every room,
:mod:`gpufabric.support.rooms`, imports a member's module on first use), so the stack model
can ask it for the names; :func:`gpufabric.plan.authority.get` gives the authority of a
name, typed by the protocol the plan owns.
"""

from __future__ import annotations

from gpufabric.support.rooms import Room

AUTHORITIES = Room(
    "queueing authority",
    "AUTHORITY",
    {
        "kueue": "gpufabric.authorities.kueue",
        "volcano": "gpufabric.authorities.volcano",
    },
)
"""Every authority a stack may choose (``scheduling.gang``) -> its module, whose
``AUTHORITY`` it is."""


__all__ = ["AUTHORITIES"]
