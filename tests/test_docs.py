"""The documentation holds: every key the stack schema accepts is documented, in
docs/user/stacks.md (its dotted path, e.g. `scheduling.nodeTopology` or
`tenants[].gpuBorrowingLimit`) or as a key, commented or set, in an example stack file (the
keys are read from the pydantic models, so a key added to the model is held to this too); and
every relative link in README.md and docs/ leads to a file that exists, and to a heading that
exists there when it names one."""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from conftest import REPO
from pydantic import BaseModel

from gpufabric.model.config import StackModel

STACKS_PAGE = REPO / "docs" / "user" / "stacks.md"
OPTIONS = STACKS_PAGE.read_text()
STACK_TEXTS = [p.read_text() for p in sorted((REPO / "stacks").glob("Pulumi.*.yaml"))]


def _models(annotation: Any, suffix: str = "") -> Iterator[tuple[type[BaseModel], str]]:
    """The models an annotation holds, with what a path adds to reach them ([] for lists)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation, suffix
        return
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (list, tuple, set, frozenset):
        for arg in args:
            yield from _models(arg, suffix + "[]")
    elif origin is dict:
        yield from _models(args[-1], suffix + ".<name>")
    elif origin in (typing.Union, types.UnionType, typing.Annotated):
        for arg in args:
            yield from _models(arg, suffix)


def schema_keys(model: type[BaseModel] = StackModel, prefix: str = "") -> Iterator[str]:
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        yield path
        for sub, suffix in _models(field.annotation):
            yield from schema_keys(sub, f"{path}{suffix}.")


POOL_FORMS = (("gpuNodes[].fabric.", "fabric."), ("gpuNodes[].", "gpuNodes."))
"""A pool's keys are the one-pool keys: documented where those are (docs/user/stacks.md,
"Fleets: several node pools", says so)."""


def documented(path: str) -> bool:
    for pool_form, one_pool in POOL_FORMS:
        if path.startswith(pool_form) and documented(one_pool + path.removeprefix(pool_form)):
            return True
    key = path.rsplit(".", 1)[-1]
    forms = {path, path.replace("[]", ""), path.replace(".<name>", "")}
    if any(f"`{form}" in OPTIONS for form in forms):
        return True
    pattern = re.compile(rf"(^|[\s{{,#:]){re.escape(key)}:", re.M)
    return any(pattern.search(text) for text in STACK_TEXTS)


def test_the_schema_walk_reaches_nested_list_and_optional_keys() -> None:
    keys = set(schema_keys())
    assert {"tenants[].gpuQuota", "fabric.rails[].exclude", "fabric.roce.trafficClass"} <= keys
    assert "gpuOperator.driver.enabled" in keys
    assert "fabric.infiniband.ufm.password" in keys


def test_every_stack_key_is_documented() -> None:
    missing = [path for path in schema_keys() if not documented(path)]
    assert not missing, (
        "stack keys documented neither in docs/user/stacks.md (as `path`) nor in an example "
        "stack: " + ", ".join(missing)
    )


MARKDOWN = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
LINK = re.compile(r"!?\[(?:[^\]]|\][^(])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
CODE = re.compile(r"(`+).+?\1", re.S)


def _prose(text: str) -> str:
    """The text outside fenced code blocks and code spans, where links are links."""
    return CODE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text lowercased, links reduced to their text,
    punctuation other than `-` and `_` dropped, spaces turned into `-`."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found: set[str] = set()
    for line in FENCE.sub("", path.read_text()).splitlines():
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        base = slug(heading.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path) -> Iterator[str]:
    for target in LINK.findall(_prose(path.read_text())):
        if not re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: leave the repo
            yield target


def broken_links(path: Path) -> Iterator[str]:
    for target in links(path):
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            yield f"{target} (no such file)"
        elif REPO.resolve() not in (dest, *dest.parents):
            yield f"{target} (outside the repository)"
        elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
            yield f"{target} (no heading #{anchor} in {dest.name})"


def test_the_link_check_sees_what_github_sees() -> None:
    assert (
        slug("Which stack: `--stack` and `--stacks-dir`") == "which-stack---stack-and---stacks-dir"
    )
    assert slug("The acceptance job's kind") == "the-acceptance-jobs-kind"
    assert slug("A fleet of 10,000 hosts") == "a-fleet-of-10000-hosts"
    text = (
        '[a](x.md#y) `[b](code.md)` ![c](d.png "title") [e](https://e.org)\n```\n[f](g.md)\n```\n'
    )
    assert LINK.findall(_prose(text)) == ["x.md#y", "d.png", "https://e.org"]


def test_every_relative_link_in_the_docs_resolves() -> None:
    assert {p.relative_to(REPO).as_posix() for p in MARKDOWN} >= {
        "README.md",
        "docs/README.md",
        "docs/architecture.md",
        "docs/decisions/README.md",
        "docs/user/stacks.md",
    }
    broken = [
        f"{path.relative_to(REPO)}: {problem}"
        for path in MARKDOWN
        for problem in broken_links(path)
    ]
    assert not broken, "links that lead nowhere:\n" + "\n".join(broken)
