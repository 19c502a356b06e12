"""Volcano's own keys of ``scheduling``: none (it reads only the shared ones)."""

from __future__ import annotations

from gpufabric.model.fields import Model


class VolcanoSettings(Model):
    """No keys of its own."""


__all__ = ["VolcanoSettings"]
