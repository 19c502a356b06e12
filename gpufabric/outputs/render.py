"""Writing a Plan to files for GitOps and pull-request review (no cluster needed).

Output contract (other tools build on it)::

    <out>/plan.json                       items in apply order: id, type, layer, dependsOn,
                                          files, protect, retainOnDelete; the rail an item
                                          exists for, the users' objects its CRDs hold, the
                                          pinned component of a chart
    <out>/objects/<layer>/<ns>/<kind>-<name>.yaml   one object per file (_cluster: cluster-scoped)
    <out>/charts/<release>/chart.yaml     repository, chart, version, namespace, release name
    <out>/charts/<release>/values.yaml    values computed from the stack
    <out>/kustomize/<name>/...            the local overlay, as applied

Secrets are written as ``<secret:path>`` placeholders, never values. Output is
byte-identical for the same stack: keys are sorted, nothing depends on time or order of
dictionary insertion, and the directory is replaced whole so no stale file survives. A
render only ever replaces a directory it wrote (``.gpufabric-render`` marks it): an existing
directory with other files, a file, a link, ``/``, the home or the working directory are
refused.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpufabric.plan.build import Plan
from gpufabric.plan.items import HelmChart, Item, K8sObject, KustomizeOverlay, SecretRef
from gpufabric.support import yamlcodec

CLUSTER_SCOPE_DIR = "_cluster"


def to_yaml(data: Any) -> str:
    """A body as the YAML text render writes: block style, keys sorted, secrets as
    placeholders, multi-line strings as literal blocks."""
    return yamlcodec.dump(plain(data))


def plain(data: Any) -> Any:
    """A JSON/YAML-ready copy of a body: secrets become placeholders, mappings dicts."""
    if isinstance(data, SecretRef):
        return data.placeholder
    if isinstance(data, Mapping):
        return {str(k): plain(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [plain(v) for v in data]
    return data


def object_path(item: Item, obj: K8sObject) -> str:
    scope = obj.namespace or CLUSTER_SCOPE_DIR
    return f"objects/{item.layer.value}/{scope}/{obj.kind.lower()}-{obj.name}.yaml"


def files_of(item: Item) -> dict[str, str]:
    """Relative path -> file content for one item."""
    payload = item.payload
    if isinstance(payload, K8sObject):
        return {object_path(item, payload): to_yaml(payload.body)}
    if isinstance(payload, HelmChart):
        base = f"charts/{payload.release}"
        meta: dict[str, Any] = {
            "repository": payload.repository,
            "chart": payload.chart,
            "version": payload.version,
            "namespace": payload.namespace,
            "release": payload.release,
        }
        if payload.awaits:
            meta["awaits"] = dict(payload.awaits)
        return {f"{base}/chart.yaml": to_yaml(meta), f"{base}/values.yaml": to_yaml(payload.values)}
    return _overlay_files(payload)


def _overlay_files(overlay: KustomizeOverlay) -> dict[str, str]:
    # One overlay per pinned component: its name names the directory.
    return {f"kustomize/{overlay.component}/{rel}": text for rel, text in overlay.files().items()}


def plan_document(plan: Plan, files: Mapping[str, list[str]]) -> dict[str, Any]:
    return {
        "stack": plan.stack,
        "items": [
            {
                "id": it.id,
                "type": it.type,
                "layer": it.layer.value,
                "dependsOn": list(it.depends_on),
                "protect": it.protect,
                "retainOnDelete": it.retain_on_delete,
                "files": files[it.id],
                **({"rail": it.rail} if it.rail is not None else {}),
                **({"holds": it.holds} if it.holds is not None else {}),
                **_summary(it),
            }
            for it in plan.items
        ],
    }


def _summary(item: Item) -> dict[str, Any]:
    p = item.payload
    if isinstance(p, K8sObject):
        return {
            "apiVersion": p.api_version,
            "kind": p.kind,
            "name": p.name,
            "namespace": p.namespace,
        }
    if isinstance(p, HelmChart):
        return {
            "chart": p.chart,
            "version": p.version,
            "namespace": p.namespace,
            "component": p.release,
        }
    return {"directory": p.directory, "namespace": p.namespace}


def indented_json(value: Any, indent: str = "") -> str:
    """``json.dumps(value, indent=2, sort_keys=True)``, byte for byte, at C speed: the
    standard library falls back to its pure-Python encoder whenever ``indent`` is set."""
    inner = indent + "  "
    if isinstance(value, dict) and value:
        body = ",\n".join(
            f"{inner}{json.dumps(k)}: {indented_json(value[k], inner)}" for k in sorted(value)
        )
        return f"{{\n{body}\n{indent}}}"
    if isinstance(value, list | tuple) and value:
        body = ",\n".join(f"{inner}{indented_json(v, inner)}" for v in value)
        return f"[\n{body}\n{indent}]"
    return json.dumps(value)


def render_files(plan: Plan) -> dict[str, str]:
    """Every output file of a plan, by relative path."""
    files: dict[str, str] = {}
    per_item: dict[str, list[str]] = {}
    for item in plan.items:
        item_files = files_of(item)
        clash = files.keys() & item_files.keys()
        if clash:
            raise ValueError(f"two plan items write {sorted(clash)[0]}")
        files.update(item_files)
        per_item[item.id] = sorted(item_files)
    doc = plan_document(plan, per_item)
    files["plan.json"] = indented_json(doc) + "\n"
    return files


MARKER = ".gpufabric-render"
"""File in every directory ``render`` writes: only such a directory is ever replaced."""
_STAGING = ".gpufabric-staging-"
_RETIRED = ".gpufabric-old-"


class OutputError(Exception):
    """An output path gpufabric refuses to write (the user's files would be at risk)."""


def _refused_roots() -> set[Path]:
    roots = {Path("/").resolve(), Path.cwd().resolve()}
    with contextlib.suppress(RuntimeError):  # no home directory
        roots.add(Path.home().resolve())
    return roots


def check_output_dir(out: Path) -> Path:
    """The directory ``render`` may replace, resolved; OutputError saying why not."""
    if out.is_symlink():
        raise OutputError(
            f"{out} is a symbolic link; give the directory itself (a render never writes "
            "through links)"
        )
    target = out.resolve()
    if target in _refused_roots() or any(target == p for p in Path.cwd().resolve().parents):
        raise OutputError(
            f"{out} is {'/' if target == Path('/') else 'the current, home or a parent directory'}"
            "; render into a directory of its own, e.g. out/<stack>"
        )
    if target.exists() and not target.is_dir():
        raise OutputError(f"{out} exists and is not a directory; choose a directory")
    if (
        target.is_dir()
        and any(target.iterdir())
        and not (target / MARKER).is_file()
        and not _earlier_render(target)
    ):
        raise OutputError(
            f"{out} holds files gpufabric did not write (no {MARKER}); render into an empty "
            "or new directory, or one an earlier render wrote"
        )
    return target


def _earlier_render(directory: Path) -> bool:
    """A render by a gpufabric from before the marker: its plan.json lists every file there."""
    try:
        doc = json.loads((directory / "plan.json").read_text(encoding="utf-8"))
        listed = {f for item in doc["items"] for f in item["files"]} | {"plan.json"}
    except (OSError, ValueError, KeyError, TypeError):
        return False
    present = {
        p.relative_to(directory).as_posix()
        for p in directory.rglob("*")
        if p.is_file() or p.is_symlink()
    }
    return bool(present) and present <= listed


def _leftovers(out: Path) -> list[Path]:
    """Staging and retired directories an interrupted render of ``out`` left beside it."""
    if not out.parent.is_dir():
        return []
    found = []
    for prefix in (_STAGING, _RETIRED):
        for p in out.parent.glob(f".{out.name}{prefix}*"):
            if p.is_dir() and not p.is_symlink() and (p / MARKER).is_file():
                found.append(p)
    return found


def _inside(rel: str) -> str:
    """The directory of a relative output path, refusing any path that could leave the
    output directory (absolute, ``..``, empty or ``.`` parts, backslashes)."""
    parts = rel.split("/")
    if not rel or "\\" in rel or "\0" in rel or any(part in ("", ".", "..") for part in parts):
        raise OutputError(f"refusing to write {rel!r} outside the output directory")
    return "/".join(parts[:-1]) or "."


def _create(path: Path, data: bytes) -> None:
    # Exclusive create: the staging directory is new and only write_tree writes in it.
    with open(path, "xb") as f:
        f.write(data)


def _link_if_same(old: Path, new: Path, data: bytes) -> bool:
    """Hard-link a file of the previous render that already holds ``data`` (a re-render
    changes few files; creating a thousand inodes is most of its time on some disks).
    A file linked elsewhere too is never shared with the new render."""
    try:
        st = os.lstat(old)
        if not stat.S_ISREG(st.st_mode) or st.st_size != len(data) or st.st_nlink != 1:
            return False
        with open(old, "rb") as f:
            if f.read(len(data) + 1) != data:
                return False
        os.link(old, new, follow_symlinks=False)
    except OSError:  # gone, unreadable, or no hard links on this file system: write it
        return False
    return True


def write_tree(files: Mapping[str, str], out: Path, stack: str = "") -> None:
    """Replace ``out`` with exactly ``files`` (and the marker), atomically: the new tree is
    written aside and swapped in, so an interrupted render leaves the previous one intact.

    ``out`` must be new, empty or an earlier render (:func:`check_output_dir`)."""
    out = check_output_dir(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for old in _leftovers(out):
        shutil.rmtree(old)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}{_STAGING}", dir=out.parent))
    try:
        (staging / MARKER).write_text(
            json.dumps({"writer": "gpufabric render", "stack": stack}) + "\n", encoding="utf-8"
        )
        previous = out if out.is_dir() else None
        made: set[str] = set()
        for rel, content in sorted(files.items()):
            directory = _inside(rel)
            if directory not in made:
                (staging / directory).mkdir(parents=True, exist_ok=True)
                made.add(directory)
            data = content.encode("utf-8")
            if previous is None or not _link_if_same(previous / rel, staging / rel, data):
                _create(staging / rel, data)
        if out.exists():
            retired = Path(tempfile.mkdtemp(prefix=f".{out.name}{_RETIRED}", dir=out.parent))
            os.replace(out, retired / "tree")
            (retired / MARKER).touch()  # so a later render may remove it if this one dies
            os.replace(staging, out)
            shutil.rmtree(retired)
        else:
            os.replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def write_file(path: Path, text: str) -> None:
    """Write one file atomically (a full disk leaves the previous file as it was)."""
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise OutputError(f"{path} exists and is not a regular file; choose a file path")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
