"""Masking what may be a credential in text a person reads: every problem's path and message
goes through :func:`redact` (no imports of the stack model, so the value types and the
problems both use it)."""

from __future__ import annotations

import re

_USERINFO = re.compile(r"[^\s/@'\"\\,;\[\]{}()<>*]+@")
"""``user:password@`` or ``token@`` in front of a host, with or without a scheme."""
_QUERY = re.compile(r"(?<=[A-Za-z0-9/._~-])[?#][^\s'\"\\,\[\]{}()<>]+")
"""A URL's query or fragment (``?token=...``, ``#...``): where tokens travel."""
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def redact(text: str) -> str:
    """``text`` with whatever may be a credential in a URL masked (userinfo, query, fragment)
    and control characters escaped, so a message is one line that never carries a secret."""
    text = _QUERY.sub("?***", _USERINFO.sub("***@", text))
    return CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


__all__ = ["CONTROL", "redact"]
