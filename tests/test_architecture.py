"""The shape the code keeps: what varies lives in its room, builders read only the Plan, and
no function grows past what a reviewer can hold in their head.

- NIC modes (``fabric.rdma``) and links (``fabric.type``) are decided in ``gpufabric/nics/``
  and its runbook fragments (``manifests/runbooks/nic-*.md.j2``, ``link-*.md.j2``); queueing
  authorities in ``gpufabric/authorities/`` and theirs (``authority-*.md.j2``,
  ``manifests/templates/scheduling/``). Outside, no code or template branches on which one
  it is: no comparison, membership test, match or table lookup with one of their names, no
  comparison of a field that names one, and no truth test of a value that exists for one
  only (``if roce``). Capabilities a mode declares (``has_rdma``) may be tested: a new mode
  declares its own, and nothing outside changes. Adding a mode or a scheduler is adding a
  module, never editing the places that would otherwise branch.
- Each room lists its members in one registry of one rule (:mod:`gpufabric.support.rooms`):
  every module of the room is registered, and every registered name resolves to a member
  of the room's protocol that goes by that name.
- The layer builders take the Plan's facts, never the stack model.
- No function in gpufabric/ is longer than 60 lines.
"""

from __future__ import annotations

import ast
import pkgutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import jinja2.nodes as jn
import pytest
from builders import REPO

PACKAGE = REPO / "gpufabric"
MANIFESTS = REPO / "manifests"
MAX_FUNCTION_LINES = 60


@dataclass(frozen=True)
class Room:
    path: Path
    templates: tuple[str, ...]
    """Template globs (under manifests/) that belong to the room."""
    words: frozenset[str]
    """Names of its members and the words that stand for one."""
    fields: frozenset[str]
    """Fields that name a member: comparing them decides by member."""
    stand_ins: frozenset[str]
    """Values that exist for one member only: testing their truth decides by member."""


NICS = Room(
    PACKAGE / "nics",
    ("runbooks/nic-*.j2", "runbooks/link-*.j2"),
    frozenset({"shared", "sriov", "hostdevice", "none", "infiniband", "roce", "ib-sriov"})
    | frozenset({"macvlan", "ipoib", "host-device", "InfiniBand", "Ethernet", "IB", "RoCE"})
    | frozenset({"ether", "eth", "ib"}),
    frozenset({"rdma", "type", "cni", "roce", "infiniband", "ib"}),
    frozenset({"roce", "infiniband", "ib"}),
)
AUTHORITIES = Room(
    PACKAGE / "authorities",
    ("runbooks/authority-*.j2", "templates/scheduling/*.j2"),
    frozenset({"kueue", "volcano"}),
    frozenset({"gang", "authority"}),
    frozenset({"kueue", "volcano"}),
)

STORAGE = Room(
    PACKAGE / "storage",
    ("runbooks/storage-*.j2", "templates/storage/*.j2"),
    frozenset({"nfs", "existingClass", "existingclass"}),
    frozenset(),
    frozenset({"nfs", "existingClass"}),
)
ROOMS = [NICS, AUTHORITIES, STORAGE]
ROOM_IDS = ["nics", "authorities", "storage"]


ROOM_HELPERS = {
    "nics": frozenset({"base", "cni"}),
    "authorities": frozenset({"base", "settings"}),
    "storage": frozenset({"base"}),
}
"""Modules of a room that are no member of it: its protocol and what its members share."""


def _registries(room_id: str) -> list[tuple[Any, type, str]]:
    """Each registry of the room, with the protocol its members implement and the attribute
    a member names itself by."""
    from gpufabric import authorities, nics, storage
    from gpufabric.nics.base import Link, NicMode
    from gpufabric.plan.authority import Authority
    from gpufabric.storage.base import BackendKind

    return {
        "nics": [(nics.MODES, NicMode, "name"), (nics.LINKS, Link, "name")],
        "authorities": [(authorities.AUTHORITIES, Authority, "name")],
        "storage": [(storage.KINDS, BackendKind, "key")],
    }[room_id]


def _strings(node: ast.AST) -> Iterator[str]:
    """String constants a comparison or membership test compares against."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node.value
    elif isinstance(node, ast.Tuple | ast.List | ast.Set):
        for elt in node.elts:
            yield from _strings(elt)


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def _table_keys(node: ast.AST) -> Iterator[str]:
    if isinstance(node, ast.Dict):
        for key in node.keys:
            if key is not None:
                yield from _strings(key)


def _truth_tests(node: ast.AST) -> Iterator[ast.AST]:
    """The values whose truth a branch tests."""
    if isinstance(node, ast.If | ast.IfExp | ast.While):
        yield node.test
    elif isinstance(node, ast.BoolOp):
        yield from node.values
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield node.operand


def _branches(tree: ast.AST, room: Room) -> Iterator[int]:
    """Lines where code decides by a member of ``room``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(s in room.words for op in operands for s in _strings(op)) or any(
                _name(op) in room.fields for op in operands
            ):
                yield node.lineno
        elif isinstance(node, ast.Subscript) and any(
            s in room.words for s in _table_keys(node.value)
        ):
            yield node.lineno  # {"sriov": ..., "shared": ...}[mode]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and any(s in room.words for s in _table_keys(node.func.value))
        ):
            yield node.lineno  # {"sriov": ...}.get(mode)
        elif isinstance(node, ast.match_case) and any(
            isinstance(sub, ast.Constant) and sub.value in room.words
            for sub in ast.walk(node.pattern)
        ):
            yield node.pattern.lineno
        if any(_name(t) in room.stand_ins for t in _truth_tests(node)):
            yield getattr(node, "lineno", 0)


def _python_branches(room: Room) -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if room.path in path.parents:
            continue
        tree = ast.parse(path.read_text(), str(path))
        found += [f"{path.relative_to(REPO)}:{line}" for line in _branches(tree, room)]
    return found


def _jinja_name(node: jn.Node) -> str | None:
    if isinstance(node, jn.Getattr):
        return node.attr
    if isinstance(node, jn.Name):
        return node.name
    return None


def _jinja_truth_tests(node: jn.Node) -> Iterator[jn.Node]:
    if isinstance(node, jn.If | jn.CondExpr):
        yield node.test
    elif isinstance(node, jn.And | jn.Or):
        yield node.left
        yield node.right
    elif isinstance(node, jn.Not):
        yield node.node


def _jinja_branch(node: jn.Node, room: Room) -> bool:
    if isinstance(node, jn.Compare):
        operands = [node.expr, *(op.expr for op in node.ops)]
        consts = [o.value for o in operands if isinstance(o, jn.Const)]
        consts += [
            c.value
            for o in operands
            if isinstance(o, jn.Tuple | jn.List)
            for c in o.items
            if isinstance(c, jn.Const)
        ]
        return any(c in room.words for c in consts) or any(
            _jinja_name(o) in room.fields for o in operands
        )
    if isinstance(node, jn.Getitem) and isinstance(node.node, jn.Dict):
        return any(
            isinstance(p.key, jn.Const) and p.key.value in room.words for p in node.node.items
        )
    return any(_jinja_name(t) in room.stand_ins for t in _jinja_truth_tests(node))


def _template_branches(room: Room) -> list[str]:
    env = jinja2.Environment()
    found = []
    for path in sorted(MANIFESTS.rglob("*.j2")):
        rel = path.relative_to(MANIFESTS).as_posix()
        if any(Path(rel).match(pattern) for pattern in room.templates):
            continue
        for node in env.parse(path.read_text()).find_all(jn.Node):
            if _jinja_branch(node, room):
                found.append(f"manifests/{rel}:{node.lineno}")
    return sorted(set(found))


@pytest.mark.parametrize("room", ROOMS, ids=ROOM_IDS)
def test_no_code_outside_a_room_branches_on_its_members(room: Room) -> None:
    assert _python_branches(room) == []


@pytest.mark.parametrize("room", ROOMS, ids=ROOM_IDS)
def test_no_template_outside_a_room_branches_on_its_members(room: Room) -> None:
    assert _template_branches(room) == []


@pytest.mark.parametrize("room_id", ROOM_IDS)
def test_every_module_of_a_room_is_registered(room_id: str) -> None:
    room = ROOMS[ROOM_IDS.index(room_id)]
    package = f"gpufabric.{room.path.name}"
    modules = {m.name for m in pkgutil.iter_modules([str(room.path)])}
    registered = [
        path for registry, _, _ in _registries(room_id) for path in registry.modules.values()
    ]
    assert len(registered) == len(set(registered)), registered
    assert all(path.rpartition(".")[0] == package for path in registered), registered
    assert {path.rpartition(".")[2] for path in registered} == modules - ROOM_HELPERS[room_id]


@pytest.mark.parametrize("room_id", ROOM_IDS)
def test_every_registered_name_resolves_to_its_member(room_id: str) -> None:
    from gpufabric.support.rooms import UnknownChoice

    for registry, protocol, named_by in _registries(room_id):
        assert registry.names(), registry.what
        for name in registry.names():
            member = registry.member(name)
            assert isinstance(member, protocol), (registry.what, name)
            assert getattr(member, named_by) == name, (registry.what, name)
        assert registry.members() == tuple(map(registry.member, registry.names()))
        with pytest.raises(UnknownChoice, match=f"unknown {registry.what} 'bogus'; known: "):
            registry.member("bogus")


@pytest.mark.parametrize(
    "source",
    [
        "if f.rdma == 'sriov': pass",
        "x = 'ib-sriov' if fabric.type == 'infiniband' else 'sriov'",
        "if mode in ('shared', 'none'): pass",
        "if f.rdma != mode: pass",
        "y = {'shared': 1, 'sriov': 2}[mode]",
        "y = {'shared': 1}.get(mode)",
        "if facts.roce is not None: pass",
        "if not facts.infiniband: pass",
        "x = a and facts.roce",
        "match mode:\n    case 'sriov': pass",
        "match mode:\n    case 'shared' | 'none': pass",
    ],
)
def test_the_walker_sees_every_shape_of_branch(source: str) -> None:
    """The rule above is only as good as its walker: each way of writing a branch on a
    mode is found."""
    assert list(_branches(ast.parse(source), NICS))


@pytest.mark.parametrize(
    "source",
    [
        "if f.has_rdma: pass",  # a declared capability
        "x = nics.mode(f.rdma).cni(link)",  # asking the member
        "if layer != exp.link_layer: pass",  # an observation against its expectation
    ],
)
def test_the_walker_lets_rooms_be_asked(source: str) -> None:
    assert list(_branches(ast.parse(source), NICS)) == []


@pytest.mark.parametrize(
    "source",
    [
        "{% if f.rdma == 'sriov' %}x{% endif %}",
        "{{ 'InfiniBand' if f.type == 'infiniband' else 'RoCE' }}",
        "{% if f.rdma in ('sriov', 'hostdevice') %}x{% endif %}",
        "{% if roce %}x{% endif %}",
        "{% if ib and x %}x{% endif %}",
        "{% if not fabric.infiniband %}x{% endif %}",
        "{{ {'sriov': 'VFs'}[f.rdma] }}",
    ],
)
def test_the_template_walker_sees_every_shape_of_branch(source: str) -> None:
    tree = jinja2.Environment().parse(source)
    assert any(_jinja_branch(n, NICS) for n in tree.find_all(jn.Node))


def test_builders_read_the_plan_not_the_stack_model() -> None:
    from gpufabric.plan.facts import PlanContext

    assert "model" not in PlanContext.__struct_fields__
    assert "facts" in PlanContext.__struct_fields__
    uses = [
        f"{p.relative_to(REPO)}:{n.lineno}"
        for p in sorted(PACKAGE.rglob("*.py"))
        for n in ast.walk(ast.parse(p.read_text()))
        if isinstance(n, ast.Attribute)
        and n.attr == "model"
        and isinstance(n.value, ast.Name)
        and n.value.id == "ctx"
    ]
    assert uses == []


def test_no_function_is_longer_than_sixty_lines() -> None:
    long = [
        f"{p.relative_to(REPO)}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)"
        for p in sorted(PACKAGE.rglob("*.py"))
        for n in ast.walk(ast.parse(p.read_text()))
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        and n.end_lineno is not None
        and n.end_lineno - n.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert long == []
