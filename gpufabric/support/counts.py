"""Counts as people read them in listings: ``1 rail``, ``2 rails``."""

from __future__ import annotations


def counted(count: int, noun: str) -> str:
    """``count`` with ``noun`` in the right number (nouns that take an ``s``)."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


__all__ = ["counted"]
