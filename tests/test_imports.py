"""The module graph: every module imports, nothing imports in a cycle, the plan's layer
builders never import each other, and stack validation never reaches the output layer."""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Collection, Mapping
from pathlib import Path

import pytest
from builders import REPO

PACKAGES = ("gpufabric", "components")
LAYER_BUILDERS = {
    f"gpufabric.plan.{n}" for n in ("gpu", "network", "training", "scheduling", "tenants")
}
OUTPUT_LAYER = {
    "gpufabric.outputs.images",
    "gpufabric.outputs.render",
    "gpufabric.outputs.runbook",
    "gpufabric.outputs.diff",
    "gpufabric.cli",
    "gpufabric.outputs.jobs",
    "gpufabric.verify.nccl.parsed",
    "gpufabric.verify.nccl.parse",
    "gpufabric.verify.nccl.parse_json",
    "gpufabric.verify.nccl.rules",
    "gpufabric.verify.nccl.report",
}
VALIDATION = {"gpufabric.model.config", "gpufabric.model.validation", "gpufabric.model.stackfile"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {
    module_name(p): p
    for package in PACKAGES
    for p in sorted((REPO / package).rglob("*.py"))
    # the shipped testinfra suite is run by pytest, not imported by the project
    if "suite" not in p.relative_to(REPO).parts[:-1] or p.name != "test_node.py"
}


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_in(
    source: str, name: str, package: str, modules: Collection[str], *, type_checking: bool
) -> set[str]:
    """Project modules (of ``modules``) that module ``name``'s ``source`` imports; with
    ``type_checking``, those imported under ``if TYPE_CHECKING:`` too (mypy follows them,
    and a cycle through one only works while the import stays behind the guard)."""
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking(node) and not type_checking:
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            # `from pkg import submodule` depends on the submodule; `from mod import name`
            # on the module (as import-linter and pydeps count them)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.add(sub if sub in modules else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    # Importing a.b.c first runs a/__init__ and a/b/__init__: the parents are edges too.
    out |= {m for m in list(out) for m in _parents(m)}
    return {m for m in out if m in modules and m != name and not name.startswith(m + ".")}


def imports_of(name: str, *, type_checking: bool = False) -> set[str]:
    """Project modules ``name`` imports at run time (and with ``type_checking``, under
    TYPE_CHECKING too)."""
    package = name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]
    return imports_in(
        MODULES[name].read_text(), name, package, MODULES, type_checking=type_checking
    )


def _parents(name: str) -> set[str]:
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


GRAPH = {name: imports_of(name) for name in MODULES}
TYPING_GRAPH = {name: imports_of(name, type_checking=True) for name in MODULES}
"""Every import, TYPE_CHECKING ones included."""


def test_every_module_imports_on_its_own() -> None:
    """Each module imported first, as a user's program or a lazy import in the CLI does:
    an import order that only works after some other module is caught here."""
    ours = ("gpufabric", "components")
    saved = {k: v for k, v in sys.modules.items() if k.split(".")[0] in ours}
    failures = []
    try:
        for name in sorted(MODULES):
            for key in [k for k in sys.modules if k.split(".")[0] in ours]:
                del sys.modules[key]
            try:
                importlib.import_module(name)
            except Exception as exc:
                failures.append(f"{name}: {type(exc).__name__}: {exc}")
    finally:
        for key in [k for k in sys.modules if k.split(".")[0] in ours]:
            del sys.modules[key]
        sys.modules.update(saved)
    assert not failures, "\n".join(failures)


def find_cycle(graph: Mapping[str, Collection[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (its modules, the first repeated), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state:
                found = dfs(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for name in sorted(graph):
        if name not in state:
            found = dfs(name)
            if found:
                return found
    return None


@pytest.mark.parametrize("graph", [GRAPH, TYPING_GRAPH], ids=["run-time", "type-checking"])
def test_no_import_cycles(graph: Mapping[str, Collection[str]]) -> None:
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_a_cycle_through_a_type_checking_import_is_found() -> None:
    sources = {
        "pkg.a": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n",
        "pkg.b": "from pkg.a import A\n",
    }
    modules = {"pkg", *sources}

    def graph(type_checking: bool) -> dict[str, set[str]]:
        return {
            name: imports_in(src, name, "pkg", modules, type_checking=type_checking)
            for name, src in sources.items()
        }

    assert find_cycle(graph(type_checking=False)) is None
    assert find_cycle(graph(type_checking=True)) == ["pkg.a", "pkg.b", "pkg.a"]


def test_the_stack_model_reaches_no_authority_code() -> None:
    """The stack model asks the authorities package for names and settings only: neither
    reaches the plan (which would import the stack model back)."""
    for name in ("gpufabric.authorities", "gpufabric.authorities.settings"):
        reached = reachable(name, TYPING_GRAPH)
        assert not {m for m in reached if m.startswith("gpufabric.plan")}, name
        assert "gpufabric.model.config" not in reached, name


def test_the_graph_sees_real_edges() -> None:
    """Guard against a walker that finds nothing (and so no cycle)."""
    assert "gpufabric.plan.items" in GRAPH["gpufabric.plan.network"]
    assert "gpufabric.plan.resolve" in GRAPH["gpufabric.plan.build"]
    assert "gpufabric.authorities.base" in GRAPH["gpufabric.authorities.kueue"]


@pytest.mark.parametrize("name", sorted(LAYER_BUILDERS))
def test_layer_builders_do_not_import_each_other(name: str) -> None:
    assert not GRAPH[name] & LAYER_BUILDERS, f"{name} imports {GRAPH[name] & LAYER_BUILDERS}"


def reachable(name: str, graph: Mapping[str, Collection[str]] = GRAPH) -> set[str]:
    seen: set[str] = set()
    todo = [name]
    while todo:
        for nxt in graph[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


@pytest.mark.parametrize("name", sorted(VALIDATION))
def test_stack_validation_does_not_reach_the_output_layer(name: str) -> None:
    assert not reachable(name) & OUTPUT_LAYER, sorted(reachable(name) & OUTPUT_LAYER)


def test_plan_layer_does_not_reach_outputs_or_pulumi() -> None:
    for name in MODULES:
        if name.startswith(("gpufabric.plan", "gpufabric.authorities")):
            bad = reachable(name) & (
                OUTPUT_LAYER | {m for m in MODULES if m.startswith("components")}
            )
            assert not bad, f"{name} reaches {sorted(bad)}"


RENDER_DRIVER = r"""
import json, sys
from gpufabric import cli
code = cli.main(["render", "--stack", sys.argv[1], "--out", sys.argv[2]])
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""

RENDER_NEVER_IMPORTS = (
    "pulumi",  # the Pulumi program's, not render's
    "pulumi_kubernetes",
    "kubernetes",  # the cluster client: verify's
    "jsonschema",  # only for an object that fails its compiled schema check
    "referencing",
    "kubernetes_validate.utils",  # imports jsonschema; render reads the schemas itself
    "pytest",  # the node checks' runner
    "testinfra",
    "gpufabric.verify.kube",
    "gpufabric.verify.results",
    "gpufabric.cli.verify_run",  # the verify checks' handlers: loaded when a check runs
    "gpufabric.verify.sweep.session",
    "gpufabric.health.passes",
    "gpufabric.outputs.runbook",
    "gpufabric.outputs.diff",
    "gpufabric.outputs.report",
)
"""What `gpufabric render` does not load: every import is paid by every render (the
benchmark against `helm template` counts them), so a module render does not use stays out."""


def test_render_imports_only_what_it_uses(tmp_path: Path) -> None:
    import json
    import subprocess

    out = tmp_path / "out"
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            RENDER_DRIVER,
            str(REPO / "stacks" / "Pulumi.prod-ib.yaml"),
            str(out),
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["code"] == 0
    loaded = set(result["modules"])
    assert "gpufabric.outputs.schema" in loaded  # render did validate
    bad = sorted(
        m for m in loaded for top in RENDER_NEVER_IMPORTS if m == top or m.startswith(top + ".")
    )
    assert not bad, f"render imported {bad}"
