"""Finding and reading stack files (``stacks/Pulumi.<env>.yaml``) into a validated model.

The CLI reads the file directly, so no Pulumi CLI is needed; the Pulumi program hands over
the values of the ``gpufabric:`` namespace it got from the engine. Both go through
:func:`model_from_config`, so they accept and reject exactly the same stacks.
Encrypted (``secure:``) values are kept as ciphertext and never decrypted here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import TypeAdapter, ValidationError

from gpufabric.model import stackyaml
from gpufabric.model.config import SECTIONS, StackModel
from gpufabric.model.problems import (
    Problem,
    StackError,
    from_validation_error,
    is_tag,
    join_path,
    suggest,
)
from gpufabric.model.validation import Parts, run_checks
from gpufabric.plan.build import Plan, build_plan
from gpufabric.plan.pulls import StackSources, air_gap_problems, collect

NAMESPACE = "gpufabric"
_STACK_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_STACK_FILE_KEYS = {"config", "secretsprovider", "encryptedkey", "encryptionsalt", "environment"}


@dataclass(frozen=True)
class Stack:
    """A stack's name, where it came from, and its validated model; its Plan and what it
    pulls are computed at most once, on first use, and shared by everything the command
    does with the stack (an air-gapped stack's load computes what it pulls, and the runbook
    and ``images`` reuse it)."""

    name: str
    source: str
    model: StackModel

    @cached_property
    def plan(self) -> Plan:
        return build_plan(self.name, self.model)

    @cached_property
    def pulled(self) -> StackSources:
        return collect(self.name, self.model)


def project_root(start: Path | None = None) -> Path | None:
    """The nearest directory at or above ``start`` holding this project's Pulumi.yaml."""
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        candidate = d / "Pulumi.yaml"
        if candidate.is_file():
            try:
                data = yaml.safe_load(candidate.read_text()) or {}
            except yaml.YAMLError:
                continue
            if isinstance(data, dict) and data.get("name") == NAMESPACE:
                return d
    repo = Path(__file__).resolve().parents[2]
    return repo if (repo / "Pulumi.yaml").is_file() else None


def stacks_dir(root: Path | None = None) -> Path:
    root = root or project_root()
    if root is None:
        return Path.cwd() / "stacks"
    data = yaml.safe_load((root / "Pulumi.yaml").read_text()) or {}
    return root / str(data.get("stackConfigDir", "."))


def list_stacks(directory: Path | None = None) -> list[str]:
    d = directory or stacks_dir()
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in d.glob("Pulumi.*.yaml"))


def is_path(stack: str) -> bool:
    """Whether ``--stack`` names a stack file by its path (else a stack by its name)."""
    return Path(stack).suffix in (".yaml", ".yml") or "/" in stack


def resolve(stack: str, directory: Path | None = None) -> tuple[str, Path]:
    """Map ``--stack`` (a name, or a path to a stack file) to (name, path)."""
    as_path = Path(stack)
    if is_path(stack):
        name = as_path.name
        for prefix, suffix in (("Pulumi.", ".yaml"), ("Pulumi.", ".yml")):
            if name.startswith(prefix) and name.endswith(suffix):
                name = name[len(prefix) : -len(suffix)]
                break
        else:
            name = as_path.stem
        return name, as_path
    d = directory or stacks_dir()
    return stack, d / f"Pulumi.{stack}.yaml"


def load_stack(stack: str, directory: Path | None = None) -> Stack:
    """Read and validate a stack by name or path; raise StackError listing every problem."""
    name, path = resolve(stack, directory)
    source = _display(path)
    if not _STACK_NAME.match(name):
        raise StackError(
            source,
            [
                Problem(
                    "--stack",
                    f"stack name {name[:80]!r} is not usable: it labels every object "
                    "(gpufabric.io/stack), so it must be a Kubernetes label value - at most 63 "
                    "letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
                )
            ],
        )
    if path.exists() and not path.is_file():
        what = "a directory" if path.is_dir() else "a FIFO, socket or device"
        raise StackError(
            source, [Problem("--stack", f"is {what}, not a stack file; name a regular file")]
        )
    if not path.is_file():
        known = list_stacks(directory) if directory or "/" not in stack else []
        hint = f" (known stacks: {', '.join(known)})" if known else ""
        where = (
            "; a stack kept elsewhere: give its path (--stack DIR/Pulumi.<name>.yaml) or the "
            "directory before the command (gpufabric --stacks-dir DIR ...)"
            if "/" not in stack
            else ""
        )
        raise StackError(
            source, [Problem("", f"no such stack file{suggest(name, known)}{hint}{where}")]
        )
    try:
        text = stackyaml.decode(stackyaml.read_bytes(path))
    except stackyaml.StackFileError as err:
        raise StackError(source, _file_problems(err)) from None
    model, pulled = _parse(text, source, name)
    loaded = Stack(name=name, source=source, model=model)
    if pulled is not None:
        loaded.__dict__["pulled"] = pulled  # computed while validating: not again
    return loaded


def _file_problems(err: stackyaml.StackFileError) -> list[Problem]:
    return [Problem(f"line {line}" if line else "", message) for line, message in err.problems]


def _display(path: Path) -> str:
    """The path as the user would type it: relative to the working directory if inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def parse_stack_text(text: str, source: str) -> StackModel:
    """The validated model of a stack file's text; raise StackError listing every problem."""
    return _parse(text, source, None)[0]


def _parse(text: str, source: str, name: str | None) -> tuple[StackModel, StackSources | None]:
    try:
        doc = stackyaml.load(text)
    except stackyaml.StackFileError as err:
        raise StackError(source, _file_problems(err)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        what = getattr(exc, "problem", None) or str(exc)
        raise StackError(source, [Problem("", f"YAML syntax error at {where}{what}")]) from None
    if doc is None:
        raise StackError(
            source,
            [
                Problem(
                    "",
                    "the stack file is empty; expected a `config:` mapping with gpufabric:* keys",
                )
            ],
        )
    if not isinstance(doc, dict):
        raise StackError(
            source, [Problem("", "expected a mapping with a `config:` key at the top")]
        )
    problems = [
        Problem(str(k), f"unknown top-level key{suggest(str(k), _STACK_FILE_KEYS)}")
        for k in doc
        if k not in _STACK_FILE_KEYS
    ]
    config = doc.get("config")
    if not isinstance(config, dict):
        problems.append(Problem("config", "missing or not a mapping of gpufabric:* keys"))
        raise StackError(source, problems)
    problems += [p for key in config if (p := _namespace_typo(str(key))) is not None]
    values: dict[str, Any] = {}
    for key, value in config.items():
        namespace, _, section = str(key).partition(":")
        if namespace == NAMESPACE:
            values[section] = value
    try:
        checked = checked_config(values, source, from_file=True, name=name)
    except StackError as err:
        raise StackError(source, problems + list(err.problems)) from None
    if problems:  # the gpufabric sections are fine, but something the user wrote is ignored
        raise StackError(source, problems)
    return checked


KNOWN_NAMESPACES = frozenset(
    {
        "kubernetes",
        "pulumi",
        "aws",
        "azure",
        "azure-native",
        "gcp",
        "google-native",
        "docker",
        "helm",
        "random",
        "tls",
        "command",
        "github",
        "cloudflare",
        "vault",
        "oci",
        "openstack",
    }
)
"""Pulumi providers whose config keys a stack file may also hold; never taken for a typo."""
TYPO_DISTANCE = 2
"""Namespaces this many edits or fewer from ``gpufabric`` (a letter missing, doubled,
swapped, changed; any case) are taken for a mistyped ``gpufabric``."""


def _namespace_typo(key: str) -> Problem | None:
    """A problem for ``gpufabrc:scheduling`` (a mistyped namespace would silently leave the
    section at its defaults); None for gpufabric's own keys and other providers' keys."""
    namespace, colon, section = key.partition(":")
    if not colon or namespace == NAMESPACE or namespace.lower() in KNOWN_NAMESPACES:
        return None
    if edit_distance(namespace.lower(), NAMESPACE) > TYPO_DISTANCE:
        return None
    return Problem(
        key,
        f"unknown config namespace '{namespace}'; did you mean '{NAMESPACE}:{section}'? "
        f"(gpufabric reads only {NAMESPACE}:* keys; other namespaces belong to other "
        "providers, e.g. kubernetes:context)",
    )


def edit_distance(a: str, b: str) -> int:
    """Edits (insert, delete, replace, swap two neighbours) that turn ``a`` into ``b``."""
    rows = [list(range(len(b) + 1))]
    for i, ca in enumerate(a, 1):
        row = [i]
        for j, cb in enumerate(b, 1):
            best = min(rows[-1][j] + 1, row[j - 1] + 1, rows[-1][j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                best = min(best, rows[-2][j - 2] + 1)
            row.append(best)
        rows.append(row)
    return rows[-1][-1]


def _section_type(field: Any) -> Any:
    """A section's type with its field metadata (e.g. gpuNodes' discriminator)."""
    return Annotated[field.annotation, *field.metadata] if field.metadata else field.annotation


_ADAPTERS: dict[str, TypeAdapter[Any]] = {
    name: TypeAdapter(_section_type(field)) for name, field in StackModel.model_fields.items()
}


def model_from_config(values: Mapping[str, Any], source: str, *, from_file: bool) -> StackModel:
    """Validate the ``gpufabric:`` sections; raise StackError listing every problem.

    ``values`` maps section names (``fabric``) to their decoded values. ``from_file``
    rejects plaintext where a secret belongs: in a stack file secrets must be encrypted.
    """
    return checked_config(values, source, from_file=from_file)[0]


def checked_config(
    values: Mapping[str, Any], source: str, *, from_file: bool, name: str | None = None
) -> tuple[StackModel, StackSources | None]:
    """:func:`model_from_config`, and for an air-gapped stack what it pulls (computed to
    check that every upstream has a mirror; ``name`` is the stack's, else the cluster's)."""
    model = _validated(values, source, from_file=from_file)
    if not model.sources.airGapped:
        return model, None
    # What an air-gapped stack pulls is known only once its Plan is built.
    pulled = collect(name or model.cluster.name, model)
    gaps = air_gap_problems(pulled)
    if gaps:
        raise StackError(source, gaps)
    return model, pulled


def _validated(values: Mapping[str, Any], source: str, *, from_file: bool) -> StackModel:
    problems: list[Problem] = []
    for key in values:
        if key not in SECTIONS:
            problems.append(
                Problem(
                    f"{NAMESPACE}:{key}",
                    f"unknown config key{suggest(key, SECTIONS)} (accepted: "
                    + ", ".join(f"{NAMESPACE}:{s}" for s in SECTIONS)
                    + ")",
                )
            )
    context = {"source": "file" if from_file else "pulumi"}
    parsed: dict[str, Any] = {}
    partial: dict[str, Any] = {}
    reported: list[str] = []
    for name, field in StackModel.model_fields.items():
        if name not in values or values[name] is None:
            if field.is_required():
                problems.append(Problem(f"{NAMESPACE}:{name}", "required section is missing"))
            else:
                parsed[name] = field.get_default(call_default_factory=True)
            continue
        try:
            parsed[name] = _ADAPTERS[name].validate_python(values[name], context=context)
        except ValidationError as err:
            problems += from_validation_error(err, field.annotation, prefix=(name,))
            rest = _partial(name, values[name], err, context)
            if rest is not None:
                partial[name], gone = rest
                reported += [f"{name}.{key}" for key in gone]
    # Cross-section checks run on every section that parsed, and on what remains of a section
    # once its broken keys are left out, so one broken key does not hide the other problems.
    parts = Parts(**{name: parsed.get(name, partial.get(name)) for name in SECTIONS})
    found = run_checks(parts)
    problems += [
        p
        for p in found
        if not p.warning and not any(p.path.startswith(prefix) for prefix in reported)
    ]
    if problems:
        raise StackError(source, sorted(dict.fromkeys(problems), key=_order))
    return StackModel(**parsed)


def _partial(
    name: str, value: Any, err: ValidationError, context: dict[str, str]
) -> tuple[Any, set[str]] | None:
    """The section without what its errors are under, validated, and the keys (dotted, under
    the section) left out; None when nothing usable remains. An unknown key (a typo) is
    left out alone, so the block around it keeps its other values; a key with a bad value
    is left out with everything under its top-level key."""
    if not isinstance(value, dict):
        return None
    broken: set[str] = set()
    for e in err.errors(include_url=False):
        loc = tuple(p for p in e["loc"] if not is_tag(p))
        if not loc or not isinstance(loc[0], str):
            return None
        pruned = _without(value, loc) if e["type"] == "extra_forbidden" else None
        if pruned is None:
            broken.add(loc[0])
        else:
            value = pruned
            broken.add(join_path(loc))
    try:
        rest = _ADAPTERS[name].validate_python(
            {k: v for k, v in value.items() if k not in broken}, context=context
        )
    except ValidationError:
        return None
    return rest, broken


def _without(value: Any, loc: tuple[str | int, ...]) -> Any:
    """``value`` with the mapping key at ``loc`` removed (copies along the way), or None
    when ``loc`` does not lead to a mapping key."""
    head, rest = loc[0], loc[1:]
    out: Any
    if isinstance(value, dict) and head in value:
        out = dict(value)
        if not rest:
            del out[head]
            return out
        child = _without(value[head], rest)
    elif isinstance(value, list) and isinstance(head, int) and rest and 0 <= head < len(value):
        out = list(value)
        child = _without(value[head], rest)
    else:
        return None
    if child is None:
        return None
    out[head] = child
    return out


def stack_warnings(model: StackModel) -> list[Problem]:
    """Likely mistakes in a valid stack: worth a look, never a stop."""
    return [p for p in run_checks(Parts.of(model)) if p.warning]


def _order(p: Problem) -> int:
    """Group problems by section in file order; within a section keep detection order."""
    section = p.path.split(".")[0].split("[")[0]
    return SECTIONS.index(section) if section in SECTIONS else -1
