"""Problems found in a stack file, each tied to the config path a user edits.

Every check in gpufabric reports through :class:`Problem`, so the CLI and the Pulumi
program print the same lines (``fabric.rails[2].subnet: ...``) and a stack with several
mistakes shows all of them at once.
"""

from __future__ import annotations

import difflib
import functools
import itertools
import re
import reprlib
import types
import typing
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from msgspec import Struct
from msgspec.structs import force_setattr
from pydantic import BaseModel, ValidationError

from gpufabric.errors import GpufabricError
from gpufabric.exitcodes import ExitCode
from gpufabric.model.redaction import CONTROL, redact

_INDEX = re.compile(r"(\[\d+\])+$")


def _redact_path(path: str) -> str:
    """A config path redacted after its leading keys of the stack model (``sources.charts.``
    stays readable, the user's key after it is redacted)."""
    if not any(c in path for c in "@?#") and not CONTROL.search(path):
        return path
    known = _field_names()
    parts = path.split(".")
    keep = 0
    while keep < len(parts) - 1 and _INDEX.sub("", parts[keep]).split(":")[-1] in known:
        keep += 1
    return ".".join([*parts[:keep], redact(".".join(parts[keep:]))])


@functools.cache
def _field_names() -> frozenset[str]:
    """Every key of the stack model (and the sections' names)."""
    from gpufabric.model.config import StackModel

    names: set[str] = set()
    todo: list[Any] = [StackModel]
    while todo:
        model = todo.pop()
        for name, field in model.model_fields.items():
            if name not in names:
                names.add(name)
                todo += _models_in(field.annotation)
    return frozenset(names)


def _models_in(tp: Any) -> list[type[BaseModel]]:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [tp]
    return [m for arg in typing.get_args(tp) for m in _models_in(arg)]


class Problem(Struct, frozen=True, order=True):
    """One thing wrong with a stack: where (config path) and what (message). Both are
    redacted (:func:`redact`) when the problem is made, whatever check made it: a value
    echoed in a message never shows a credential or breaks the line."""

    path: str
    message: str
    warning: bool = False
    """A likely mistake that does not stop the stack (printed, exit code unchanged)."""

    def __post_init__(self) -> None:
        force_setattr(self, "path", _redact_path(self.path))
        force_setattr(self, "message", redact(self.message))

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class StackError(GpufabricError):
    """A stack file that cannot be used; carries every problem found (exit 2)."""

    exit_code = ExitCode.BAD_INPUT

    def __init__(self, source: str, problems: Sequence[Problem]) -> None:
        self.source = source
        self.problems = tuple(problems)
        super().__init__(self.report())

    def report(self) -> str:
        count = len(self.problems)
        noun = "problem" if count == 1 else "problems"
        lines = [f"{self.source}: {count} {noun}"]
        lines += [f"  - {p}" for p in self.problems]
        return "\n".join(lines)

    def message(self, command: str) -> str:
        """The problems under their source: the stack file, or for a problem with the
        command line (a source ``gpufabric <command>`` set by whichever module found it, such
        as the job builder ``verify nccl`` shares with ``job``), the command the user ran."""
        if self.source.startswith("gpufabric ") and not Path(self.source).exists():
            return StackError(f"gpufabric {command}", self.problems).report()
        return self.report()


def join_path(parts: Iterable[str | int]) -> str:
    """Render a location as users write it: ``fabric.rails[2].subnet`` (credentials in a URL
    used as a key are masked: a report never prints them)."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif out:
            out += f".{redact(str(part))}"
        else:
            out = redact(str(part))
    return out


def _model_at(root: Any, loc: Sequence[str | int]) -> type[BaseModel] | None:
    """Walk a pydantic model class along an error location to the model it points into."""
    current: Any = root
    for part in loc:
        current = _unwrap(current, list_next=isinstance(part, int))
        if isinstance(part, int):
            args = typing.get_args(current)
            if not args:
                return None
            current = args[0]
            continue
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(part)
            if field is None:
                return None
            current = field.annotation
        elif typing.get_origin(current) is dict:
            current = typing.get_args(current)[1]
        else:
            return None
    current = _unwrap(current)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return current
    return None


def _unwrap(tp: Any, list_next: bool = False) -> Any:
    """Strip Optional/Annotated so the walk reaches the model or container type (of a
    union of a model and a list, the list when the location goes on with an index)."""
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (typing.Union, types.UnionType):
            non_none = [a for a in typing.get_args(tp) if a is not type(None)]
            models = [a for a in non_none if _is_container_or_model(a)]
            lists = [a for a in models if typing.get_origin(_unwrap(a)) is list]
            if list_next and lists:
                models = lists
            tp = models[0] if models else non_none[0]
        else:
            return tp


def _is_container_or_model(tp: Any) -> bool:
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return True
    return typing.get_origin(tp) in (list, dict, tuple)


def allowed_keys(model: type[BaseModel]) -> list[str]:
    return sorted(f.alias or name for name, f in model.model_fields.items())


def suggest(word: str, choices: Iterable[str]) -> str:
    """A 'did you mean' clause, or an empty string when nothing is close."""
    matches = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean '{matches[0]}'?" if matches else ""


SHOW_MAX = 80


def _show(value: Any) -> str:
    """A value as a message shows it: one line, at most SHOW_MAX characters, built without
    stringifying more than that (an aliased value can be huge), its strings redacted before
    they are cut (a cut URL no longer shows the ``@`` that marks its credentials)."""
    return reprlib_short.repr(_redacted(value, 0))


def _redacted(value: Any, depth: int) -> Any:
    """``value`` with its strings redacted, as deep and as wide as a message shows it."""
    if isinstance(value, str):
        return redact(value)
    if depth >= reprlib_short.maxlevel:
        return value if isinstance(value, int | float | bool | None) else "..."
    if isinstance(value, list | tuple):
        return [_redacted(v, depth + 1) for v in value[: reprlib_short.maxlist + 1]]
    if isinstance(value, dict):
        items = list(itertools.islice(value.items(), reprlib_short.maxdict + 1))
        return {redact(k) if isinstance(k, str) else k: _redacted(v, depth + 1) for k, v in items}
    return value


class _ShortRepr(reprlib.Repr):
    def __init__(self) -> None:
        super().__init__()
        self.maxstring = SHOW_MAX
        self.maxother = SHOW_MAX
        self.maxlist = self.maxdict = self.maxtuple = self.maxset = 6
        self.maxlevel = 3

    def repr(self, x: Any) -> str:
        text = super().repr(x)
        return text if len(text) <= SHOW_MAX else text[: SHOW_MAX - 3] + "..."


reprlib_short = _ShortRepr()


def _holds_secret(model: Any, depth: int = 0) -> bool:
    """Whether a config model (or any model inside it) has a secret field: a value refused
    there is never echoed."""
    from gpufabric.model.config import SecretValue

    model = _unwrap(model)
    if depth > 6 or not (isinstance(model, type) and issubclass(model, BaseModel)):
        return False
    for field in model.model_fields.values():
        annotation = _unwrap(field.annotation)
        if annotation is SecretValue or _holds_secret(annotation, depth + 1):
            return True
    return False


def from_validation_error(
    err: ValidationError, model: Any, prefix: Sequence[str | int] = ()
) -> list[Problem]:
    """Translate pydantic errors into problems that name the path, the value and what fits."""
    problems: list[Problem] = []
    for e in err.errors(include_url=False):
        loc = tuple(p for p in e["loc"] if not is_tag(p))
        path = join_path([*prefix, *loc])
        kind = e["type"]
        value = e.get("input")
        if kind == "extra_forbidden":
            owner = _model_at(model, loc[:-1])
            keys = allowed_keys(owner) if owner else []
            key = str(loc[-1])
            hint = suggest(key, keys)
            accepted = f" (accepted keys: {', '.join(keys)})" if keys else ""
            msg = f"unknown key '{key}'{hint}{accepted}"
        elif kind == "missing":
            msg = "required key is missing"
        elif kind == "literal_error":
            expected = e.get("ctx", {}).get("expected", "")
            msg = f"{_show(value)} is not accepted; expected one of {expected}"
        elif kind in ("model_type", "dict_type", "model_attributes_type"):
            owner = _model_at(model, loc)
            shown = "a value holding a secret" if owner and _holds_secret(owner) else _show(value)
            msg = f"expected a mapping of keys, got {shown}"
        elif kind == "list_type":
            msg = f"expected a list, got {_show(value)}"
        elif kind.startswith(("int_", "float_", "bool_", "string_", "greater", "less")):
            msg = f"{_show(value)}: {e['msg'][0].lower() + e['msg'][1:]}"
        else:
            msg = e["msg"].removeprefix("Value error, ")
        problems.append(Problem(path, msg))
    return problems


UNION_TAGS = frozenset({"one pool", "pools"})
"""Tags of the model's discriminated unions (gpuNodes: a mapping or a list of pools)."""


def is_tag(part: str | int) -> bool:
    # pydantic inserts validator names (e.g. 'function-after[...]') and union tags into
    # locations.
    return isinstance(part, str) and (
        ("[" in part and "]" in part and "(" not in part) or part in UNION_TAGS
    )
