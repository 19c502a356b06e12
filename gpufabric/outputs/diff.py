"""Semantic diff of two renders of a stack, with the disruption each change causes.

Both sides are render outputs (``plan.json`` + the files it lists): the working tree is
rendered in-process; a git ref is rendered by *that ref's* code (``git archive`` into a
temporary directory, run with the same interpreter), so a pin bump shows exactly what the
older code would have produced; a directory is taken as an earlier ``gpufabric render``.

Items are matched by Plan id and listed in apply order. Each change is classified:

* **disruptive**: applying it restarts or reboots nodes or kills running jobs — objects that
  carry gpufabric's ``gpufabric.io/disruptive`` annotation (SR-IOV VFs, RDMA exclusive mode),
  GPU or NIC driver changes, a rail's MTU or subnet, a rail removed, an operator removed
  whose CRDs hold users' jobs;
* **replacing**: Pulumi deletes and recreates instead of updating (identity or immutable
  fields changed);
* otherwise an **update** (or a plain add / remove).
"""

from __future__ import annotations

import difflib
import io
import json
import re
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

import yaml

from gpufabric.model.storage import size_bytes
from gpufabric.support.yamlcodec import Loader as YamlLoader

DISRUPTIVE_ANNOTATION = "gpufabric.io/disruptive"
Change = Literal["added", "removed", "changed"]
Klass = Literal["disruptive", "replacing", "update"]

GPU_OPERATOR = "gpu-operator"
"""The pinned component whose driver values restart GPU nodes."""
GPU_DRIVER_VALUES = re.compile(
    r"^values\.driver\.(version|kernelModuleType|rdma\..*|usePrecompiled)$"
)
MTU = re.compile(r"(^|\.)mtu$")
SUBNET = re.compile(r"^spec\.(subnet|cidr|perNodeNetworkPrefix|gatewayIndex|perNodeBlockSize)$")
PLAN_FIELDS = ("dependsOn", "protect", "retainOnDelete")
"""Plan metadata that changes what Pulumi does with an item (order, protection)."""
STORAGE_CLASS_FIELDS = re.compile(
    r"^(parameters|mountOptions|reclaimPolicy|provisioner|volumeBindingMode)(\.|$)"
)
"""StorageClass fields the API server refuses to update: a change replaces the class."""
CLAIM_SIZE = "spec.resources.requests.storage"
IMMUTABLE = {
    # x-kubernetes-validations "self == oldSelf" in the pinned CRDs
    "Topology": ("spec.levels",),
    "LocalQueue": ("spec.clusterQueue",),
}


@dataclass
class Side:
    """One render: items by id in apply order, with their parsed documents."""

    items: dict[str, dict[str, Any]]
    docs: dict[str, dict[str, Any]]
    pools: tuple[str, ...] = ()
    """A fleet's node pools (plan.json ``pools``); empty for one pool."""


@dataclass
class FieldChange:
    path: str
    old: Any
    new: Any


@dataclass(kw_only=True)
class ItemDiff:
    id: str
    what: str
    change: Change
    klass: Klass
    reasons: list[str] = field(default_factory=list)
    fields: list[FieldChange] = field(default_factory=list)
    pool: str | None = None
    """The node pool of a fleet the item belongs to (plan.json ``pool``); None: cluster-wide."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "what": self.what,
            **({"pool": self.pool} if self.pool is not None else {}),
            "change": self.change,
            "class": self.klass,
            "reasons": self.reasons,
            "fields": [{"path": f.path, "old": f.old, "new": f.new} for f in self.fields],
        }

    @property
    def where(self) -> str:
        """The item's description, with its pool where it has one."""
        return f"{self.what}, pool {self.pool}" if self.pool is not None else self.what


# ------------------------------------------------------------------------------ loading


_REQUIRED = {
    "helm-chart": ("chart", "version", "namespace"),
    "kustomize": (),
    "object": ("kind", "name"),
}


def _check_item(index: int, item: Any) -> dict[str, Any]:
    """One plan.json item, checked enough to be diffed (ValueError naming what is wrong)."""
    where = f"plan.json items[{index}]"
    if not isinstance(item, dict):
        raise ValueError(f"{where} is not a mapping")
    if not isinstance(item.get("id"), str) or not item["id"]:
        raise ValueError(f"{where} has no id")
    kind = item.get("type")
    if kind not in _REQUIRED:
        raise ValueError(f"{where} ({item['id']}): type {kind!r} is not one of {sorted(_REQUIRED)}")
    files = item.get("files", [])
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        raise ValueError(f"{where} ({item['id']}): files is not a list of paths")
    for key in _REQUIRED[kind]:
        if not isinstance(item.get(key), str):
            raise ValueError(f"{where} ({item['id']}): {key} is missing")
    return item


def side_from_files(files: Mapping[str, str]) -> Side:
    """A render given as relative path -> text (``plan.json`` included); ValueError when it
    is not one."""
    if "plan.json" not in files:
        return Side({}, {})
    try:
        plan = json.loads(files["plan.json"])
    except json.JSONDecodeError as exc:
        raise ValueError(f"plan.json is not JSON: {exc}") from None
    except RecursionError:
        raise ValueError(
            "plan.json: nested deeper than Python reads; the render is damaged"
        ) from None
    if not isinstance(plan, dict) or not isinstance(plan.get("items"), list):
        raise ValueError("plan.json has no items list")
    items: dict[str, dict[str, Any]] = {}
    for index, raw in enumerate(plan["items"]):
        item = _check_item(index, raw)
        items[item["id"]] = item
    docs = {item_id: _item_docs(files, item) for item_id, item in items.items()}
    pools = plan.get("pools")
    if not isinstance(pools, list) or not all(isinstance(p, str) for p in pools):
        pools = []
    return Side(items, docs, tuple(pools))


def _item_docs(files: Mapping[str, str], item: Mapping[str, Any]) -> dict[str, Any]:
    """The parsed files of one plan item; ValueError naming a file that is missing or holds
    no mapping (a damaged or incomplete render, never diffed as an empty object)."""
    doc: dict[str, Any] = {}
    for name in item.get("files", []):
        if name not in files:
            raise ValueError(
                f"{name}: listed in plan.json for {item['id']} but not in the render "
                "(missing or not a regular file); the render is incomplete"
            )
        try:
            data = yaml.load(files[name], Loader=YamlLoader)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = f" line {mark.line + 1}" if mark else ""
            raise ValueError(f"{name}{line}: not YAML ({getattr(exc, 'problem', exc)})") from None
        if not isinstance(data, dict):
            raise ValueError(
                f"{name}: holds {type(data).__name__ if data is not None else 'nothing'}, "
                "not a mapping (a render writes one mapping per file); the render is damaged"
            )
        key = Path(name).stem if item["type"] != "object" else "object"
        try:
            doc[key] = _expand_json(data)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
    return doc


def side_from_dir(directory: Path) -> Side:
    if not (directory / "plan.json").is_file():
        raise ValueError(f"{directory} is not a gpufabric render (no plan.json)")
    files: dict[str, str] = {}
    for p in sorted(directory.rglob("*")):
        if p.is_symlink():
            raise ValueError(
                f"{p.relative_to(directory)} is a symbolic link (a render writes regular files "
                "only); the render is damaged"
            )
        if p.is_file():
            try:
                files[str(p.relative_to(directory))] = p.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                raise ValueError(f"{p.relative_to(directory)} is not UTF-8 text") from None
    return side_from_files(files)


MAX_DEPTH = 64
"""Nesting a rendered object never reaches (the deepest, a pod template's affinity, is about
20 levels): a base deeper than this is damaged, and recursing through it would crash."""


def _expand_json(value: Any, depth: int = 0) -> Any:
    """JSON carried in strings (a NAD's CNI config) is compared field by field; ValueError
    beyond :data:`MAX_DEPTH` levels."""
    if depth > MAX_DEPTH:
        raise ValueError(f"nested more than {MAX_DEPTH} levels deep; the render is damaged")
    if isinstance(value, dict):
        return {k: _expand_json(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand_json(v, depth + 1) for v in value]
    if isinstance(value, str) and value.lstrip().startswith(("{", "[")):
        try:
            parsed = json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            return value
        return _expand_json(parsed, depth + 1)
    return value


def resolve_ref(repo: Path, ref: str) -> str:
    """The commit a user's ref names, as a full hash: a ref never reaches git as an option
    (``--output=FILE`` would write a file), nor as anything but one commit."""
    if not ref or ref.startswith("-") or any(c in ref for c in "\0\n\r"):
        raise ValueError(
            "not a directory, and not a git ref: a ref may not be empty, start with '-' or "
            "hold control characters (give a branch, tag or commit, e.g. origin/main)"
        )
    proc = subprocess.run(
        [
            "git",
            "-C",
            str(repo),
            "rev-parse",
            "--verify",
            "--quiet",
            "--end-of-options",
            f"{ref}^{{commit}}",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    commit = proc.stdout.strip()
    if proc.returncode != 0 or not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", commit):
        raise ValueError(
            f"not a directory, and git knows no commit {ref!r} in {repo} "
            "(give a branch, tag or commit, e.g. origin/main, or a render directory)"
        )
    return commit


def render_ref(repo: Path, ref: str, stack: str) -> Side:
    """The stack rendered by the code and stack file at a git ref."""
    commit = resolve_ref(repo, ref)
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", "--format=tar", commit, "--"],
        capture_output=True,
        check=False,
    )
    if archive.returncode != 0:
        raise ValueError(f"git cannot read {ref!r}: {archive.stderr.decode().strip()}")
    with tempfile.TemporaryDirectory(prefix="gpufabric-diff-") as tmp:
        root = Path(tmp) / "src"
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(root, filter="data")
        stack_file = Path(stack)
        rel = (
            stack_file.resolve().relative_to(repo.resolve())
            if stack_file.suffix in (".yaml", ".yml") and stack_file.exists()
            else Path("stacks") / f"Pulumi.{stack}.yaml"
        )
        if not (root / rel).is_file():
            return Side({}, {})  # the stack is new in this change
        out = Path(tmp) / "out"
        code = (
            "import sys; sys.path.insert(0, sys.argv[1]); "
            "from gpufabric.cli import main; sys.exit(main(sys.argv[2:]))"
        )
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                code,
                str(root),
                "render",
                "--stack",
                str(root / rel),
                "--out",
                str(out),
            ],
            cwd=root,
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise ValueError(f"rendering {stack} at {ref} failed:\n{proc.stderr.strip()}")
        return side_from_dir(out)


# ------------------------------------------------------------------------------ diffing


_MISSING = object()


def _flatten(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if not prefix and value in ({}, None):
        return  # an item that does not exist on one side has no fields there
    if isinstance(value, dict) and value:
        for k in sorted(value):
            yield from _flatten(value[k], f"{prefix}.{k}" if prefix else str(k))
    elif (
        isinstance(value, list)
        and value
        and all(isinstance(v, dict) and "name" in v for v in value)
    ):
        for v in value:
            yield from _flatten(v, f"{prefix}[{v['name']}]")
    else:
        yield prefix, value


def field_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[FieldChange]:
    a, b = dict(_flatten(old)), dict(_flatten(new))
    out = []
    for path in sorted(set(a) | set(b)):
        if a.get(path, _MISSING) != b.get(path, _MISSING):
            out.append(FieldChange(path, a.get(path), b.get(path)))
    return out


def describe(item: Mapping[str, Any]) -> str:
    if item["type"] == "helm-chart":
        return f"helm {item['chart']} {item['version']} -n {item['namespace']}"
    if item["type"] == "kustomize":
        return f"kustomize {item.get('directory', item['id'])} -n {item.get('namespace')}"
    ns = f"{item['namespace']}/" if item.get("namespace") else ""
    return f"{item['kind']} {ns}{item['name']}"


@dataclass(frozen=True, kw_only=True)
class ChangedPair:
    """One item as a rule sees it: its plan entry, how it changed, its documents on both
    sides (empty where it does not exist) and the fields that differ."""

    item: Mapping[str, Any]
    change: Change
    old: dict[str, Any]
    new: dict[str, Any]
    fields: list[FieldChange]


Verdict = tuple[Klass, str]
"""A rule's finding: the class it puts the change in, and why."""
ItemRule = Callable[[ChangedPair], Verdict | None]
FieldRule = Callable[[ChangedPair, FieldChange], Verdict | None]


def _annotation(doc: Mapping[str, Any]) -> str | None:
    obj = doc.get("object") or {}
    value = ((obj.get("metadata") or {}).get("annotations") or {}).get(DISRUPTIVE_ANNOTATION)
    return str(value) if value else None


def _rail(item: Mapping[str, Any]) -> str:
    """The rail an item exists for (plan.json names it), else the object it is."""
    return str(item.get("rail") or item.get("name") or item["id"])


def _body_path(f: FieldChange) -> str:
    """The field's path inside the Kubernetes object."""
    return f.path.removeprefix("object.")


# Item rules: each speaks once for the whole item.


def declared_disruptive(pair: ChangedPair) -> Verdict | None:
    """The object carries gpufabric's disruptive annotation and is added, removed, or changed
    beyond its annotations."""
    note = _annotation(pair.new) or _annotation(pair.old)
    meaningful = [f for f in pair.fields if not f.path.startswith("object.metadata.annotations")]
    if note and (pair.change != "changed" or meaningful):
        return "disruptive", note
    return None


def operator_removed(pair: ChangedPair) -> Verdict | None:
    """A removed operator whose CRDs hold users' objects."""
    if pair.change == "removed" and pair.item.get("holds"):
        return (
            "disruptive",
            f"removing the operator deletes its CRDs and with them every {pair.item['holds']}",
        )
    return None


def rail_removed(pair: ChangedPair) -> Verdict | None:
    """A removed rail's NetworkAttachmentDefinition."""
    item = pair.item
    if (
        pair.change == "removed"
        and item.get("kind") == "NetworkAttachmentDefinition"
        and item.get("rail")
    ):
        return (
            "disruptive",
            f"rail {item['rail']} removed: pods requesting it no longer start and jobs "
            "lose that rail when they restart",
        )
    return None


def claim_removed(pair: ChangedPair) -> Verdict | None:
    """A tenant's shared-storage claim left the stack."""
    item = pair.item
    if pair.change == "removed" and item.get("kind") == "PersistentVolumeClaim":
        return (
            "disruptive",
            f"claim {item.get('namespace')}/{item.get('name')} removed: jobs that mount it no "
            "longer start; the claim and its data stay in the cluster (retained) until "
            "deleted by hand",
        )
    return None


# Field rules: each looks at one changed field.


def gpu_driver_change(pair: ChangedPair, f: FieldChange) -> Verdict | None:
    """The GPU Operator's chart version or driver values."""
    if pair.item.get("component") == GPU_OPERATOR and (
        f.path == "chart.version" or GPU_DRIVER_VALUES.match(f.path)
    ):
        return (
            "disruptive",
            f"GPU driver change ({f.path}): the driver DaemonSet restarts, GPUs are drained and "
            "running jobs are killed",
        )
    return None


def nic_driver_change(pair: ChangedPair, f: FieldChange) -> Verdict | None:
    """The NicClusterPolicy's DOCA driver."""
    if pair.item.get("kind") == "NicClusterPolicy" and f.path.startswith("object.spec.ofedDriver"):
        return (
            "disruptive",
            f"NIC driver change ({f.path}): the DOCA driver reloads on every GPU node, rails go "
            "down and RDMA jobs fail",
        )
    return None


def mtu_change(pair: ChangedPair, f: FieldChange) -> Verdict | None:
    """Any mtu in the network layer."""
    if pair.item.get("layer") == "network" and MTU.search(f.path):
        return (
            "disruptive",
            f"MTU change on {_rail(pair.item)} ({f.old} -> {f.new}): interfaces are "
            "reconfigured and both ends and the switches must match, or RDMA traffic stalls",
        )
    return None


def subnet_change(pair: ChangedPair, f: FieldChange) -> Verdict | None:
    """An nv-ipam pool's subnet or how it is carved per node."""
    if pair.item.get("kind") in ("IPPool", "CIDRPool") and SUBNET.match(_body_path(f)):
        return (
            "disruptive",
            f"rail subnet change ({f.path}: {f.old} -> {f.new}): pods get new addresses; "
            "running jobs lose their peers",
        )
    return None


def identity_change(pair: ChangedPair, f: FieldChange) -> Verdict | None:
    """The object's apiVersion, kind, name or namespace."""
    body_path = _body_path(f)
    if body_path in ("apiVersion", "kind", "metadata.name", "metadata.namespace"):
        return "replacing", f"{body_path} changed: Pulumi replaces the object"
    return None


def immutable_field(pair: ChangedPair, f: FieldChange) -> Verdict | None:
    """A field the pinned CRD declares immutable (``self == oldSelf``)."""
    kind = pair.item.get("kind")
    body_path = _body_path(f)
    if kind in IMMUTABLE and any(body_path.startswith(p) for p in IMMUTABLE[kind]):
        return "replacing", f"{body_path} is immutable: Pulumi replaces the {kind}"
    return None


def chart_identity_change(pair: ChangedPair, f: FieldChange) -> Verdict | None:
    """A chart's namespace, release or chart name."""
    # helm.v4.Chart has no release object: its objects are named and placed from these, so
    # they are deleted and created again. A repository (mirror) change fetches the same
    # chart from elsewhere: a plain update.
    if f.path in ("chart.namespace", "chart.release", "chart.chart"):
        return "replacing", f"{f.path} changed: the chart's objects are deleted and created again"
    return None


def storage_class_change(pair: ChangedPair, f: FieldChange) -> Verdict | None:
    """A StorageClass's parameters, mount options, reclaim policy or provisioner."""
    if pair.item.get("kind") == "StorageClass" and STORAGE_CLASS_FIELDS.match(_body_path(f)):
        return (
            "replacing",
            f"StorageClass {pair.item.get('name')}: {_body_path(f)} cannot be updated: Pulumi "
            "replaces the class; volumes already provisioned keep their old mount options, "
            "only new claims get the new ones",
        )
    return None


def _size(value: Any) -> int | None:
    try:
        return size_bytes(str(value))
    except ValueError:
        return None


def claim_change(pair: ChangedPair, f: FieldChange) -> Verdict | None:
    """A claim that shrinks, or moves to another StorageClass."""
    if pair.item.get("kind") != "PersistentVolumeClaim":
        return None
    claim = f"{pair.item.get('namespace')}/{pair.item.get('name')}"
    body = _body_path(f)
    old, new = _size(f.old), _size(f.new)
    if body == CLAIM_SIZE and old is not None and new is not None and new < old:
        return (
            "disruptive",
            f"claim {claim} shrinks ({f.old} -> {f.new}): Kubernetes refuses to shrink a "
            "claim, so the update fails; keep the size or move the data to a new claim",
        )
    if body == "spec.storageClassName":
        return (
            "disruptive",
            f"claim {claim} moves to StorageClass {f.new}: Pulumi replaces it with a new, empty "
            "volume; its data stays on the old one and jobs see an empty mount",
        )
    return None


def immutable_configmap_data(pair: ChangedPair, f: FieldChange) -> Verdict | None:
    """The data of a ConfigMap marked immutable."""
    if (
        pair.item.get("kind") == "ConfigMap"
        and (pair.new.get("object") or {}).get("immutable")
        and _body_path(f).startswith("data")
    ):
        return "replacing", "immutable ConfigMap data changed: Pulumi replaces it"
    return None


ITEM_RULES: tuple[ItemRule, ...] = (
    declared_disruptive,
    operator_removed,
    rail_removed,
    claim_removed,
)
"""Rules over the whole item, in the order their reasons are listed."""
FIELD_RULES: tuple[FieldRule, ...] = (
    gpu_driver_change,
    nic_driver_change,
    mtu_change,
    subnet_change,
    identity_change,
    immutable_field,
    chart_identity_change,
    immutable_configmap_data,
    storage_class_change,
    claim_change,
)
"""Rules over each changed field, in order; per field, the first rule of each class that
fires gives that class's reason (a field is one disruption and one replacement at most)."""


def _field_verdicts(pair: ChangedPair, f: FieldChange) -> list[Verdict]:
    """The first finding of each class for one field."""
    found: dict[Klass, str] = {}
    for rule in FIELD_RULES:
        verdict = rule(pair, f)
        if verdict is not None and verdict[0] not in found:
            found[verdict[0]] = verdict[1]
    return list(found.items())


def classify(
    item: Mapping[str, Any],
    change: Change,
    old: dict[str, Any],
    new: dict[str, Any],
    fields: list[FieldChange],
) -> tuple[Klass, list[str]]:
    """The class of one item's change and the reasons for it: disruptive when any rule finds
    a disruption (its reasons first, then the replacements'), else replacing when any finds
    a replacement, else a plain update."""
    pair = ChangedPair(item=item, change=change, old=old, new=new, fields=fields)
    verdicts = [v for rule in ITEM_RULES if (v := rule(pair)) is not None]
    for f in fields:
        verdicts += _field_verdicts(pair, f)
    disruptive = [reason for klass, reason in verdicts if klass == "disruptive"]
    replacing = [reason for klass, reason in verdicts if klass == "replacing"]
    if disruptive:
        return "disruptive", _unique(disruptive + replacing)
    if replacing:
        return "replacing", _unique(replacing)
    return "update", []


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def diff(base: Side, head: Side) -> list[ItemDiff]:
    """Per item, in the head's apply order; removed items follow at the end, in reverse
    base order (the order Pulumi deletes them)."""
    out: list[ItemDiff] = []
    for item_id, item in head.items.items():
        new = head.docs[item_id]
        if item_id not in base.items:
            klass, reasons = classify(item, "added", {}, new, [])
            out.append(
                ItemDiff(
                    id=item_id,
                    what=describe(item),
                    change="added",
                    klass=klass,
                    reasons=reasons,
                    fields=field_changes({}, new),
                    pool=_pool(item),
                )
            )
            continue
        old = base.docs[item_id]
        was = base.items[item_id]
        fields = field_changes(old, new) + [
            FieldChange(f"plan.{k}", was.get(k), item.get(k))
            for k in PLAN_FIELDS
            if was.get(k) != item.get(k)
        ]
        if not fields:
            continue
        klass, reasons = classify(item, "changed", old, new, fields)
        out.append(
            ItemDiff(
                id=item_id,
                what=describe(item),
                change="changed",
                klass=klass,
                reasons=reasons,
                fields=fields,
                pool=_pool(item),
            )
        )
    for item_id in reversed(list(base.items)):
        if item_id not in head.items:
            old = base.docs[item_id]
            klass, reasons = classify(base.items[item_id], "removed", old, {}, [])
            out.append(
                ItemDiff(
                    id=item_id,
                    what=describe(base.items[item_id]),
                    change="removed",
                    klass=klass,
                    reasons=reasons,
                    fields=field_changes(old, {}),
                    pool=_pool(base.items[item_id]),
                )
            )
    return out


def _pool(item: Mapping[str, Any]) -> str | None:
    pool = item.get("pool")
    return pool if isinstance(pool, str) and pool else None


def pools_changed(base: Side, head: Side) -> tuple[list[str], list[str]]:
    """(pools added, pools removed) between two renders. A one-pool render counts as its
    fleet's first pool: the pool a stack had before it listed its pools is the one listed
    first (its objects keep their ids)."""
    before = list(base.pools) or list(head.pools[:1])
    after = list(head.pools) or list(base.pools[:1])
    if not base.items:  # a stack new in this change: nothing is added pool by pool
        return [], []
    return [p for p in after if p not in before], [p for p in before if p not in after]


class NewPartition(NamedTuple):
    """An InfiniBand partition key the head's networks carry and the base's do not: the
    subnet manager must define it, with the GPU nodes' rail ports as full members, before
    the change is applied (pods attached to it get no connectivity until then)."""

    pkey: str
    namespaces: tuple[str, ...]
    """Namespaces of the networks that carry it (the tenants whose pods join it)."""


def _pkeys(side: Side) -> dict[str, set[str]]:
    """Each partition key the side's objects carry (a NAD's ``config.pkey``), with the
    namespaces of the objects that carry it."""
    out: dict[str, set[str]] = {}
    for doc in side.docs.values():
        for path, value in _flatten(doc):
            if path.rsplit(".", 1)[-1] == "pkey" and isinstance(value, str) and value:
                namespace = (doc.get("object") or {}).get("metadata", {}).get("namespace")
                out.setdefault(value.lower(), set()).update([namespace] if namespace else [])
    return out


def partitions_added(base: Side, head: Side) -> list[NewPartition]:
    """Partition keys new in the head (a tenant's new or changed ``pkey``, the fabric's),
    sorted; none for a stack new in this change (its runbook's prerequisites say them)."""
    if not base.items:
        return []
    before, after = _pkeys(base), _pkeys(head)
    return [
        NewPartition(pkey, tuple(sorted(after[pkey])))
        for pkey in sorted(after)
        if pkey not in before
    ]


def _partition_lines(partitions: list[NewPartition]) -> list[str]:
    """The subnet manager's step, before apply: each new partition and who joins it."""
    if not partitions:
        return []
    lines = ["#### Before apply: the subnet manager"]
    for p in partitions:
        who = ", ".join(f"`{n}`" for n in p.namespaces) or "the stack's networks"
        lines.append(
            f"- **partition {p.pkey} is new** (the networks of {who}): define it in the subnet "
            "manager (OpenSM `partitions.conf` or UFM) with every GPU node's rail ports as "
            "full members before `pulumi up`; pods attached to it get no connectivity until "
            "then"
        )
    return [*lines, ""]


# ------------------------------------------------------------------------------- output


def summary(diffs: list[ItemDiff]) -> dict[str, int]:
    return {
        "disruptive": sum(d.klass == "disruptive" for d in diffs),
        "replacing": sum(d.klass == "replacing" for d in diffs),
        "update": sum(d.klass == "update" for d in diffs),
        "added": sum(d.change == "added" for d in diffs),
        "removed": sum(d.change == "removed" for d in diffs),
        "changed": sum(d.change == "changed" for d in diffs),
    }


def summary_line(stack: str, diffs: list[ItemDiff]) -> str:
    if not diffs:
        return f"`{stack}`: no changes"
    s = summary(diffs)
    head = []
    if s["disruptive"]:
        head.append(f"**{s['disruptive']} disruptive**")
    if s["replacing"]:
        head.append(f"{s['replacing']} replacing")
    head.append(f"{s['update']} plain")
    return (
        f"`{stack}`: {len(diffs)} items change — {', '.join(head)} "
        f"({s['added']} added, {s['changed']} changed, {s['removed']} removed)"
    )


MAX_INNER_LINES = 10
"""Changed elements shown for one field whose value is a list or mapping."""


def _leaves(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every scalar inside a value, by its path below it: lists by element name where each
    has one, else by index (``[0].flavors[default].resources[nvidia.com/gpu]...``)."""
    if isinstance(value, dict) and value:
        for k in sorted(value):
            yield from _leaves(value[k], f"{prefix}.{k}")
    elif isinstance(value, list) and value:
        named = all(isinstance(v, dict) and "name" in v for v in value)
        for i, v in enumerate(value):
            yield from _leaves(v, f"{prefix}[{v['name'] if named else i}]")
    else:
        yield prefix, value


def change_lines(f: FieldChange) -> list[str]:
    """A field's change as Markdown list lines: old → new, or, where both sides are lists or
    mappings (a ClusterQueue's resourceGroups), each element that changed, so a quota going
    from 256 to 192 is visible rather than cut off inside a long JSON list."""
    if isinstance(f.old, str) and isinstance(f.new, str) and _long(f.old, f.new):
        return _text_lines(f.path, f.old, f.new)
    if not (isinstance(f.old, list | dict) and isinstance(f.new, list | dict) and f.old and f.new):
        return [f"`{f.path}`: {_short(f.old)} → {_short(f.new)}"]
    a, b = dict(_leaves(f.old)), dict(_leaves(f.new))
    changed = [p for p in sorted(set(a) | set(b)) if a.get(p, _MISSING) != b.get(p, _MISSING)]
    lines = [
        f"`{f.path}{p}`: {_short(a.get(p))} → {_short(b.get(p))}" for p in changed[:MAX_INNER_LINES]
    ]
    if len(changed) > MAX_INNER_LINES:
        lines.append(f"... {len(changed) - MAX_INNER_LINES} more changes in `{f.path}`")
    return lines or [f"`{f.path}`: {_short(f.old)} → {_short(f.new)}"]


def _long(old: str, new: str) -> bool:
    """Text a change line would cut off: over 60 characters, or several lines."""
    return max(len(old), len(new)) > 60 or "\n" in old or "\n" in new


def _text_lines(path: str, old: str, new: str) -> list[str]:
    """A long text's change where it is: each changed line of multi-line text (a chart's
    embedded config), or the stretch of one long line around its first difference (a CEL
    expression), so the change is visible rather than cut off after a common start."""
    a, b = old.splitlines(), new.splitlines()
    if len(a) > 1 or len(b) > 1:
        lines = []
        matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal":
                continue
            was = " ⏎ ".join(a[i1:i2])
            now = " ⏎ ".join(b[j1:j2])
            lines.append(f"`{path}` line {j1 + 1}: {_short(was or None)} → {_short(now or None)}")
        shown = lines[:MAX_INNER_LINES]
        if len(lines) > MAX_INNER_LINES:
            shown.append(f"... {len(lines) - MAX_INNER_LINES} more changes in `{path}`")
        return shown
    start = next((i for i, (x, y) in enumerate(zip(old, new, strict=False)) if x != y), None)
    if start is None:
        start = min(len(old), len(new))
    at = max(start - 20, 0)
    lead = "..." if at else ""
    return [f"`{path}` at {start}: {lead}{_short(old[at:])} → {lead}{_short(new[at:])}"]


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else value
    text = "∅" if value is None else text
    return text if len(text) <= 60 else text[:57] + "..."


PoolChanges = tuple[list[str], list[str]]
"""(pools added, pools removed): :func:`pools_changed`."""


def _pool_lines(diffs: list[ItemDiff], pools: PoolChanges) -> list[str]:
    """A section per pool added or removed, with its objects."""
    lines: list[str] = []
    for verb, names in (("added", pools[0]), ("removed", pools[1])):
        for name in names:
            own = [d for d in diffs if d.pool == name and d.change == verb]
            lines.append(f"#### pool {name} {verb} ({len(own)} items)")
            lines += [f"- `{d.id}` {d.what}" for d in own]
            lines.append("")
    return lines


def to_markdown(
    stack: str,
    base_label: str,
    diffs: list[ItemDiff],
    pools: PoolChanges = ([], []),
    partitions: list[NewPartition] | None = None,
) -> str:
    lines = [
        f"### gpufabric diff: `{stack}` against `{base_label}`",
        "",
        summary_line(stack, diffs)
        + "".join(
            f"; **before apply: partition {p.pkey} in the subnet manager**"
            for p in partitions or []
        ),
        "",
        *_partition_lines(partitions or []),
        *_pool_lines(diffs, pools),
    ]
    disruptive = [d for d in diffs if d.klass == "disruptive"]
    replacing = [d for d in diffs if d.klass == "replacing"]
    if disruptive:
        lines.append("#### Disruptive (nodes restart or running jobs are killed)")
        for d in disruptive:
            lines.append(f"- **{d.id}** ({d.where}, {d.change})")
            lines += [f"  - {r}" for r in d.reasons]
        lines.append("")
    if replacing:
        lines.append("#### Replaced by Pulumi")
        for d in replacing:
            lines.append(f"- **{d.id}** ({d.where}): " + "; ".join(d.reasons))
        lines.append("")
    if diffs:
        lines += ["<details><summary>All changes in apply order</summary>", ""]
        for d in diffs:
            lines.append(f"- `{d.id}` {d.where}: {d.change}, {d.klass}")
            for f in d.fields[:40]:
                lines += [f"  - {line}" for line in change_lines(f)]
            if len(d.fields) > 40:
                lines.append(f"  - ... {len(d.fields) - 40} more fields")
        lines += ["", "</details>"]
    return "\n".join(lines) + "\n"


def to_json(
    stack: str,
    base_label: str,
    diffs: list[ItemDiff],
    pools: PoolChanges = ([], []),
    partitions: list[NewPartition] | None = None,
) -> str:
    doc = {
        "stack": stack,
        "base": base_label,
        "summary": summary(diffs),
        **({"partitionsAdded": [p._asdict() for p in partitions]} if partitions else {}),
        **({"poolsAdded": pools[0]} if pools[0] else {}),
        **({"poolsRemoved": pools[1]} if pools[1] else {}),
        "items": [d.as_dict() for d in diffs],
    }
    return json.dumps(doc, indent=2, default=str) + "\n"
