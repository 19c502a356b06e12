"""The keys of ``scheduling`` each queueing authority owns, one module per authority.

An authority's settings are a mixin of the stack model's ``Scheduling`` section (so the
YAML keys sit directly under ``scheduling``), written with the stack model's value types
and nothing of the plan: the stack model imports them, the authorities read them resolved
into the Plan's facts.
"""

from __future__ import annotations

from gpufabric.authorities.settings.kueue import KueueSettings
from gpufabric.authorities.settings.volcano import VolcanoSettings


class AuthoritySettings(KueueSettings, VolcanoSettings):
    """Every authority's own keys of ``scheduling`` (each read only by its authority)."""


__all__ = ["AuthoritySettings", "KueueSettings", "VolcanoSettings"]
