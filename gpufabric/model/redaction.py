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
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""What a terminal or an XML reader must never get from a log, a host or an API object:
control characters (ESC starts escape sequences that retitle, clear or rewrite the terminal;
XML 1.0 forbids most C0 characters) and the bidirectional overrides that reorder a line."""

EXAMPLES = (
    "admin@prod",
    "kubectl://POD?namespace=NS&container=C",
    "USER:PASSWORD@HOST",
    "ssh://USER@HOST?ssh_identity_file=PATH",
)
"""gpufabric's own examples in its hints that look like a URL with credentials and are not:
shown as written. Each stands alone (after a space or ``(``, before a space, ``,``, ``;``
or ``)``), so a value that merely contains one is masked as a whole, never let through."""
_EXAMPLE = re.compile(
    r"(?<![^\s(])(" + "|".join(re.escape(e) for e in EXAMPLES) + r")(?=[\s,;)]|$)"
)


def _mask(text: str) -> str:
    return _QUERY.sub("?***", _USERINFO.sub("***@", text))


def redact(text: str) -> str:
    """``text`` with whatever may be a credential in a URL masked (userinfo, query, fragment)
    and control characters escaped, so a message is one line that never carries a secret;
    gpufabric's own :data:`EXAMPLES` stay readable."""
    pieces = _EXAMPLE.split(text)
    text = "".join(p if i % 2 else _mask(p) for i, p in enumerate(pieces))
    return CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def printable(text: str) -> str:
    """``text`` with every :data:`_UNPRINTABLE` character written as its escape (``\\x1b``),
    lines and tabs kept: for text output built from what others wrote."""
    return _UNPRINTABLE.sub(lambda m: repr(m.group())[1:-1], text)


__all__ = ["CONTROL", "EXAMPLES", "printable", "redact"]
