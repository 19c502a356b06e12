"""Every key the stack schema accepts is documented: in README.md (its dotted path, e.g.
`scheduling.nodeTopology` or `tenants[].gpuBorrowingLimit`) or as a key, commented or set,
in an example stack file. The keys are read from the pydantic models, so a key added to
the model is held to this too."""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterator
from typing import Any

from conftest import REPO
from pydantic import BaseModel

from gpufabric.model.config import StackModel

README = (REPO / "README.md").read_text()
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


def documented(path: str) -> bool:
    key = path.rsplit(".", 1)[-1]
    forms = {path, path.replace("[]", ""), path.replace(".<name>", "")}
    if any(f"`{form}" in README for form in forms):
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
        "stack keys documented neither in README.md (as `path`) nor in an example stack: "
        + ", ".join(missing)
    )
