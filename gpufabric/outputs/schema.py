"""Offline schema validation of every rendered object, as strict as the API server.

Core kinds are checked against the target Kubernetes minor's OpenAPI schemas bundled in
the ``kubernetes-validate`` package (strict: unknown fields are errors). Custom resources
are checked against the CRDs among the objects themselves (gpufabric's own, such as
NodeAcceptance) and those found in a directory (``--crd-dir``): each served version's
``openAPIV3Schema`` is converted to JSON Schema the way server-side strict validation reads
it: unknown fields rejected unless ``x-kubernetes-preserve-unknown-fields``, int-or-string
and embedded resources honoured, ``nullable`` allowing null.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import importlib.util
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpufabric.outputs.render import plain
from gpufabric.support import jsoncheck, yamlcodec
from gpufabric.support.cache import read_json, write_json

if TYPE_CHECKING:
    import jsonschema

# Objects are checked by compiled checks (gpufabric.support.jsoncheck); jsonschema and
# referencing are imported only to write the errors of an object that fails them, or for a
# schema the compiler does not take.


@dataclass(frozen=True)
class ObjectError:
    """One schema violation in one rendered object."""

    where: str
    """Which object: kind/namespace/name, or its file."""
    path: str
    message: str

    def __str__(self) -> str:
        at = f" at {self.path}" if self.path else ""
        return f"{self.where}{at}: {self.message}"


@dataclass
class Report:
    """Outcome of validating a set of objects."""

    checked_core: int = 0
    checked_custom: int = 0
    unchecked: list[str] = field(default_factory=list)
    """Custom resources left unchecked: no CRD directory, or no CRD for their kind in it."""
    unchecked_reasons: set[str] = field(default_factory=set)
    """Why they were left unchecked, once per reason (for summaries)."""
    errors: list[ObjectError] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


# --------------------------------------------------------------------------- core kinds


@functools.cache
def _schema_dir(k8s_minor: str) -> Path:
    """The bundled strict schemas for ``k8s_minor``: those of the newest bundled version not
    newer than it, chosen as kubernetes-validate chooses them (without importing it: it
    imports jsonschema, which a render that finds no error never needs)."""
    from packaging.version import Version

    spec = importlib.util.find_spec("kubernetes_validate")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError("the kubernetes-validate package is not installed")
    root = Path(next(iter(spec.submodule_search_locations))) / "kubernetes-json-schema"
    names = [m[1] for p in root.iterdir() if (m := re.match(r"^v([^-]*)", p.name))]
    versions = [v for v in sorted(names, key=Version) if _major_minor(v) <= _major_minor(k8s_minor)]
    if not versions:
        raise ValueError(f"no bundled Kubernetes schemas for {k8s_minor}")
    return root / f"v{versions[-1]}-local-strict"


def _major_minor(version: str) -> str:
    return re.sub(r"^(\d+\.\d+).*", r"\1", version)


@functools.cache
def _core_schema(k8s_minor: str, api_version: str, kind: str) -> dict[str, Any] | None:
    """The strict schema of a built-in kind, or None if the kind is not built in."""
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    path = _schema_dir(k8s_minor) / f"{kind.lower()}-{group_version}.json"
    try:
        schema: dict[str, Any] = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    return schema


@functools.cache
def _definitions(schema_dir: Path) -> dict[str, Any]:
    """The shared definitions every kind's schema refers to (1.5 MB of JSON: read once)."""
    definitions: dict[str, Any] = json.loads((schema_dir / "_definitions.json").read_bytes())
    return definitions


@functools.cache
def _compiler(schema_dir: Path) -> jsoncheck.Compiler:
    """One compiler per schema set: the kinds share the checks of the definitions."""
    definitions = _definitions(schema_dir)
    return jsoncheck.Compiler({str(definitions.get("$id", "")): definitions})


@functools.cache
def _core_check(k8s_minor: str, api_version: str, kind: str) -> jsoncheck.Check | None:
    """The compiled validity check of a built-in kind; None when it is not built in or its
    schema is not one the compiler takes (jsonschema alone decides then)."""
    schema = _core_schema(k8s_minor, api_version, kind)
    if schema is None:
        return None
    try:
        return _compiler(_schema_dir(k8s_minor)).compile(schema)
    except jsoncheck.Unsupported:
        return None


@functools.cache
def _core_validator(k8s_minor: str, api_version: str, kind: str) -> jsonschema.Validator | None:
    """A strict validator for a built-in kind, or None if the kind is not built in."""
    schema = _core_schema(k8s_minor, api_version, kind)
    if schema is None:
        return None
    import jsonschema
    from referencing import Registry, Resource

    definitions = Resource.from_contents(_definitions(_schema_dir(k8s_minor)))
    registry: Registry[Any] = Resource.from_contents(schema) @ (definitions @ Registry())
    return jsonschema.Draft202012Validator(schema, registry=registry)


def is_builtin(k8s_minor: str, api_version: str, kind: str) -> bool:
    return _core_schema(k8s_minor, api_version, kind) is not None


# ------------------------------------------------------------------------ custom kinds


def crd_to_jsonschema(schema: Mapping[str, Any], *, in_place: bool = False) -> dict[str, Any]:
    """Convert a CRD openAPIV3Schema into JSON Schema with server-side strictness (a copy,
    unless ``in_place``: the caller owns ``schema`` and will not read it again)."""
    if in_place and isinstance(schema, dict):
        return _convert(schema, top=True)
    return _convert(copy.deepcopy(dict(schema)), top=True)


def _convert(node: dict[str, Any], top: bool = False) -> dict[str, Any]:
    if node.pop("x-kubernetes-int-or-string", False):
        node.pop("type", None)
        node["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.pop("nullable", False) and "type" in node:
        node["type"] = [node["type"], "null"]
    embedded = node.pop("x-kubernetes-embedded-resource", False)
    preserve = node.pop("x-kubernetes-preserve-unknown-fields", False)
    for key in list(node):
        if key.startswith("x-kubernetes-"):
            del node[key]
    props = node.get("properties")
    if isinstance(props, dict):
        node["properties"] = {k: _convert(v) for k, v in props.items()}
    if embedded:
        node.setdefault("properties", {})
        for key in ("apiVersion", "kind"):
            node["properties"].setdefault(key, {"type": "string"})
        node["properties"].setdefault("metadata", {"type": "object"})
    if top:
        node.setdefault("properties", {})
        node["properties"].setdefault("apiVersion", {"type": "string"})
        node["properties"].setdefault("kind", {"type": "string"})
        node["properties"]["metadata"] = {"type": "object"}  # checked by the API machinery
    if isinstance(node.get("items"), dict):
        node["items"] = _convert(node["items"])
    if isinstance(node.get("additionalProperties"), dict):
        node["additionalProperties"] = _convert(node["additionalProperties"])
    for key in ("allOf", "anyOf", "oneOf"):
        if isinstance(node.get(key), list):
            node[key] = [_convert(s) if isinstance(s, dict) else s for s in node[key]]
    if isinstance(node.get("not"), dict):
        node["not"] = _convert(node["not"])
    object_like = node.get("type") == "object" or "properties" in node
    if object_like and not preserve and "additionalProperties" not in node:
        # Server-side strict field validation: fields the schema does not name are errors.
        node["additionalProperties"] = False
    return node


@dataclass(frozen=True)
class CrdIndex:
    """CRD schemas found in a directory, by (apiVersion, kind)."""

    schemas: Mapping[tuple[str, str], dict[str, Any]]
    sources: Mapping[tuple[str, str], str]
    _validators: dict[tuple[str, str], jsonschema.Validator] = field(
        default_factory=dict, compare=False, repr=False
    )
    _checks: dict[tuple[str, str], jsoncheck.Check | None] = field(
        default_factory=dict, compare=False, repr=False
    )

    def validator(self, api_version: str, kind: str) -> jsonschema.Validator | None:
        """Built when first asked for: a render uses a handful of the hundreds of kinds."""
        key = (api_version, kind)
        schema = self.schemas.get(key)
        if schema is None:
            return None
        if key not in self._validators:
            import jsonschema

            self._validators[key] = jsonschema.Draft202012Validator(schema)
        return self._validators[key]

    def check(self, api_version: str, kind: str) -> jsoncheck.Check | None:
        """The compiled validity check of a kind, None where the compiler refuses its
        schema (or there is none)."""
        key = (api_version, kind)
        if key not in self._checks:
            schema = self.schemas.get(key)
            try:
                compiled = None if schema is None else jsoncheck.Compiler().compile(schema)
            except jsoncheck.Unsupported:
                compiled = None
            self._checks[key] = compiled
        return self._checks[key]


Crd = tuple[str, str, dict[str, Any]]
"""apiVersion, kind and converted JSON Schema of one served version of one CRD."""


def _file_key(data: bytes) -> str:
    """A CRD file's cache key: its bytes and this module's own (a change to the conversion
    is a new key)."""
    return hashlib.sha256(_CONVERSION_KEY + data).hexdigest()


def _crd_schemas(data: bytes, key: str) -> list[Crd]:
    """(apiVersion, kind, JSON Schema) of every served version of every CRD in a file's
    bytes. Parsing megabytes of CRDs is most of a render with --crd-dir, so the result is
    cached under ``key`` (:func:`_file_key`)."""
    cached = _cached(key)
    return cached if cached is not None else _converted(_served(data), key)


def _cached(key: str) -> list[Crd] | None:
    cached = read_json("crd-schemas", key)
    if isinstance(cached, list) and all(
        isinstance(e, list) and len(e) == 3 and isinstance(e[2], dict) for e in cached
    ):
        return [(str(a), str(k), s) for a, k, s in cached]
    return None


def _served(data: bytes) -> list[Crd]:
    """(apiVersion, kind, openAPIV3Schema as written) of every served version of every CRD
    in a file's bytes."""
    found: list[Crd] = []
    for doc in yamlcodec.load_all(data.decode("utf-8")):
        if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
            continue
        spec = doc.get("spec", {})
        group, kind = spec.get("group"), spec.get("names", {}).get("kind")
        for version in spec.get("versions", []):
            if not version.get("served", True):
                continue
            raw = (version.get("schema") or {}).get("openAPIV3Schema")
            if raw is not None:
                found.append((f"{group}/{version['name']}", kind, raw))
    return found


def _converted(served: list[Crd], key: str) -> list[Crd]:
    """:func:`_served`'s schemas converted to JSON Schema, and cached under ``key``."""
    found: list[Crd] = []
    converted: set[int] = set()
    for api_version, kind, raw in served:
        # Converted in place unless a YAML alias made versions share one schema.
        schema = crd_to_jsonschema(raw, in_place=id(raw) not in converted)
        converted.add(id(raw))
        found.append((api_version, kind, schema))
    write_json("crd-schemas", key, [list(e) for e in found])
    return found


_CONVERSION_KEY = hashlib.sha256(Path(__file__).read_bytes()).digest()


CrdFile = tuple[Path, bytes, str]
"""A YAML file under a CRD directory: its path, bytes and cache key."""


def _crd_files(directory: Path) -> list[CrdFile]:
    """Every YAML file under ``directory``, in the order in which later files win."""
    paths = sorted([*directory.rglob("*.yaml"), *directory.rglob("*.yml")])
    files = []
    for path in paths:
        data = path.read_bytes()
        files.append((path, data, _file_key(data)))
    return files


_KIND_LINE = re.compile(rb"kind[\"']?[ \t]*:[ \t]*[\"']?([A-Za-z0-9]+)")
"""A ``kind: Name`` entry (YAML or JSON): every CRD names the kind it defines in one."""


def _may_define(data: bytes, names: frozenset[bytes]) -> bool:
    """Whether a file's bytes can define a kind of these names: a file with no ``kind:``
    entry naming one of them defines none (its megabytes need not be parsed to know)."""
    return not names.isdisjoint(_KIND_LINE.findall(data))


@functools.cache
def load_crds(directory: Path, kinds: frozenset[tuple[str, str]] | None = None) -> CrdIndex:
    """Every CustomResourceDefinition in YAML files under ``directory``; with ``kinds``,
    those of these (apiVersion, kind) pairs only, parsing (or reading the cached schemas
    of) just the files that name one of their kinds (:func:`_may_define`)."""
    files = _crd_files(directory)
    if kinds is not None:
        names = frozenset(kind.encode() for _, kind in kinds)
        files = [f for f in files if _may_define(f[1], names)]
    schemas: dict[tuple[str, str], dict[str, Any]] = {}
    sources: dict[tuple[str, str], str] = {}
    for path, data, key in files:
        for api_version, kind, schema in _crd_schemas(data, key):
            if kinds is None or (api_version, kind) in kinds:
                schemas[(api_version, kind)] = schema
                sources[(api_version, kind)] = str(path)
    return CrdIndex(schemas=schemas, sources=sources)


# ------------------------------------------------------------------------------ driver


def _where(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    name = meta.get("name", "?")
    return f"{obj.get('kind', '?')}/{ns}/{name}" if ns else f"{obj.get('kind', '?')}/{name}"


def _errors(
    check: jsoncheck.Check | None,
    validator: Callable[[], jsonschema.Validator | None],
    obj: Any,
    where: str,
) -> list[ObjectError]:
    """The schema errors of ``obj``: none when its compiled check passes it, else those
    jsonschema finds (the messages are always jsonschema's)."""
    if check is not None and check(obj):
        return []
    full = validator()
    assert full is not None
    return [
        ObjectError(where, ".".join(str(p) for p in err.absolute_path), err.message)
        for err in sorted(full.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))
    ]


def own_crds(objects: Iterable[Mapping[str, Any]]) -> CrdIndex:
    """The schemas of the CustomResourceDefinitions among ``objects`` (gpufabric's own, such
    as NodeAcceptance): the objects of their kinds are checked against them, with or
    without a CRD directory."""
    schemas: dict[tuple[str, str], dict[str, Any]] = {}
    for obj in objects:
        if obj.get("kind") != "CustomResourceDefinition":
            continue
        spec = plain(obj.get("spec") or {})
        kind = (spec.get("names") or {}).get("kind")
        for version in spec.get("versions") or []:
            raw = (version.get("schema") or {}).get("openAPIV3Schema")
            if version.get("served", True) and isinstance(raw, dict):
                schemas[(f"{spec.get('group')}/{version.get('name')}", str(kind))] = (
                    crd_to_jsonschema(raw)
                )
    return CrdIndex(schemas=schemas, sources=dict.fromkeys(schemas, "the rendered CRD"))


def validate_objects(
    objects: Iterable[Mapping[str, Any]], k8s_minor: str, crd_dir: Path | None = None
) -> Report:
    """Validate objects: built-in kinds always; custom resources against the CRDs among the
    objects, else those in ``crd_dir`` when it is given."""
    report = Report()
    todo = [(raw, str(raw.get("apiVersion", "")), str(raw.get("kind", ""))) for raw in objects]
    own = own_crds(raw for raw, _, _ in todo)
    custom_kinds = frozenset(
        (a, k) for _, a, k in todo if not is_builtin(k8s_minor, a, k) and (a, k) not in own.schemas
    )
    crds = load_crds(crd_dir.resolve(), custom_kinds) if crd_dir is not None else None
    for raw, api_version, kind in todo:
        where = _where(raw)
        if is_builtin(k8s_minor, api_version, kind):
            report.checked_core += 1
            check = _core_check(k8s_minor, api_version, kind)
            full = functools.partial(_core_validator, k8s_minor, api_version, kind)
            report.errors.extend(_errors(check, full, plain(raw), where))
            continue
        if (api_version, kind) in own.schemas:
            report.checked_custom += 1
            check = own.check(api_version, kind)
            full = functools.partial(own.validator, api_version, kind)
            report.errors.extend(_errors(check, full, plain(raw), where))
            continue
        if crds is None:
            report.unchecked.append(where)
            report.unchecked_reasons.add("pass --crd-dir")
            continue
        if (api_version, kind) not in crds.schemas:
            # Not every upstream ships its CRDs where we can pin them; say so, loudly.
            reason = f"no CRD for {api_version} {kind}"
            report.unchecked.append(f"{where} ({reason})")
            report.unchecked_reasons.add(reason)
            continue
        report.checked_custom += 1
        check = crds.check(api_version, kind)
        full = functools.partial(crds.validator, api_version, kind)
        report.errors.extend(_errors(check, full, plain(raw), where))
    return report
