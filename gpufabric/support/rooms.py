"""The one registry rule of the plug-in rooms (:mod:`gpufabric.nics`,
:mod:`gpufabric.authorities`, :mod:`gpufabric.storage`).

Each thing a stack chooses among is one package with one module per choice behind one
protocol. The package's ``__init__`` lists its choices in a :class:`Room`: a plain dict from
the name a stack writes to the module that implements it, and the module attribute holding
the member (``MODE``, ``LINK``, ``AUTHORITY``, ``KIND``). A module is imported the first time
its member is asked for: the members import the plan and the stack model, which ask the
room for its names, so a room's ``__init__`` imports none of them.

The typed face of a room is one function per protocol, of one shape, e.g.::

    def mode(name: str) -> NicMode:
        found: NicMode = MODES.member(name)
        return found

An unknown name raises :class:`UnknownChoice` (a ``KeyError``) naming the known ones; it is
never served by another member. tests/test_architecture.py checks that every module of a
room is registered and every registered name resolves to a member of that name.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any


class UnknownChoice(KeyError):
    """A name no member of the room has."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class Room:
    """One room's registry: each choice's name -> the module that implements it."""

    __slots__ = ("_found", "attribute", "modules", "what")

    what: str
    """How an error names a member: "NIC mode", "queueing authority"."""
    attribute: str
    """The attribute of each module that holds its member (``MODE``)."""
    modules: dict[str, str]
    """Each choice's name -> the dotted name of its module, in the order names() lists."""

    def __init__(self, what: str, attribute: str, modules: Mapping[str, str]) -> None:
        self.what = what
        self.attribute = attribute
        self.modules = dict(modules)
        self._found: dict[str, Any] = {}

    def names(self) -> tuple[str, ...]:
        """Every name a stack may choose, in the registry's order."""
        return tuple(self.modules)

    def member(self, name: str) -> Any:
        """The member of that name (its module imported on first use); UnknownChoice for
        any other name. Typed by the room's lookup function, which declares its protocol."""
        found = self._found.get(name)
        if found is None:
            if name not in self.modules:
                known = ", ".join(self.modules)
                raise UnknownChoice(f"unknown {self.what} {name!r}; known: {known}")
            module = importlib.import_module(self.modules[name])
            found = self._found[name] = getattr(module, self.attribute)
        return found

    def members(self) -> tuple[Any, ...]:
        """Every member, in the registry's order."""
        return tuple(self.member(name) for name in self.modules)


__all__ = ["Room", "UnknownChoice"]
