"""Writing a Plan to files for GitOps and pull-request review (no cluster needed).

Output contract (other tools build on it)::

    <out>/plan.json                       items in apply order: id, type, layer, dependsOn,
                                          files, protect, retainOnDelete; the rail an item
                                          exists for, the users' objects its CRDs hold, the
                                          pinned component of a chart; a fleet's pools, and
                                          the pool an item belongs to
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
import ctypes
import errno
import fcntl
import functools
import json
import os
import shutil
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from gpufabric.errors import GpufabricError
from gpufabric.exitcodes import ExitCode
from gpufabric.plan.build import Plan
from gpufabric.plan.items import HelmChart, Item, K8sObject, KustomizeOverlay, SecretRef
from gpufabric.plan.poolitems import pool_of
from gpufabric.support import yamlcodec
from gpufabric.verify.interrupts import shielded

CLUSTER_SCOPE_DIR = "_cluster"


def to_yaml(data: Any) -> str:
    """A body as the YAML text render writes: block style, keys sorted, secrets as
    placeholders, multi-line strings as literal blocks."""
    return yamlcodec.dump(data, convert=plain)


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
    facts = plan.facts
    # a fleet's pools, and each item's (one-pool stacks: neither, their plan.json unchanged)
    pools = {"pools": list(facts.pool_names)} if facts.fleet else {}
    return {
        "stack": plan.stack,
        **pools,
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
                **({"pool": pool} if (pool := pool_of(it, facts)) is not None else {}),
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


def indented_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True)


def render_files(plan: Plan) -> dict[str, str]:
    """Every output file of a plan, by relative path (in plan order, plan.json last)."""
    files: dict[str, str] = {}
    per_item: dict[str, list[str]] = {}
    for item in plan.items:
        texts = files_of(item)
        clash = next((p for p in sorted(texts) if p in files), None)
        if clash is not None:
            raise ValueError(f"two plan items write {clash}")
        files.update(texts)
        per_item[item.id] = sorted(texts)
    files["plan.json"] = indented_json(plan_document(plan, per_item)) + "\n"
    return files


MARKER = ".gpufabric-render"
"""File in every directory ``render`` writes, with the record of the files it wrote: a
render replaces only those, never anything else."""
_STAGING = ".gpufabric-staging-"
_RETIRED = ".gpufabric-old-"
LOCK_WAIT_S = 300.0
"""How long a render waits for another render of the same parent directory to finish."""
_FOREIGN_SHOWN = 8


class OutputError(GpufabricError):
    """An output path gpufabric refuses to write (the user's files would be at risk): exit 2,
    said as a problem of the command's --out."""

    exit_code = ExitCode.BAD_INPUT

    def message(self, command: str) -> str:
        return f"gpufabric {command.split(' ', 1)[0]}: --out {self}"


def _refused_roots() -> set[Path]:
    roots = {Path("/").resolve(), Path.cwd().resolve()}
    with contextlib.suppress(RuntimeError):  # no home directory
        roots.add(Path.home().resolve())
    return roots


def _link_in(out: Path) -> Path | None:
    """The first part of ``out``, as given, that is a symbolic link (a relative path's parts
    only: the working directory is where the user already is)."""
    current = Path(out.parts[0]) if out.parts else Path(".")
    for part in (*out.parts[1:], None):
        if current.is_symlink():
            return current
        if part is None:
            return None
        current = current / part
    return None


def check_output_dir(out: Path) -> Path:
    """The directory ``render`` may replace, resolved; OutputError saying why not."""
    link = _link_in(out)
    if link is not None:
        raise OutputError(
            f"{out}: {link} is a symbolic link; a render never writes through links: give "
            f"the real path ({os.path.realpath(out)})"
        )
    target = out.resolve()
    if target in _refused_roots() or any(target == p for p in Path.cwd().resolve().parents):
        raise OutputError(
            f"{out} is {'/' if target == Path('/') else 'the current, home or a parent directory'}"
            "; render into a directory of its own, e.g. out/<stack>"
        )
    if target.exists() and not target.is_dir():
        raise OutputError(f"{out} exists and is not a directory; choose a directory")
    if target.is_dir() and os.path.ismount(target):
        raise _mount_point(out)
    foreign = _foreign_entries(target) if target.is_dir() else []
    if foreign:
        shown = ", ".join(foreign[:_FOREIGN_SHOWN])
        more = f" and {len(foreign) - _FOREIGN_SHOWN} more" if len(foreign) > _FOREIGN_SHOWN else ""
        raise OutputError(
            f"{out} holds files gpufabric did not write: {shown}{more}. A render replaces its "
            "directory whole, so it refuses one holding anything an earlier render did not "
            "write (a .git or notes included): move them out, or render into a new or empty "
            "directory (inside a repository: a directory of its own, e.g. out/<stack>)"
        )
    return target


def _mount_point(out: Path) -> OutputError:
    return OutputError(
        f"{out} is a mount point: a render swaps its directory in by renaming, which a mount "
        f"point cannot be; render into a directory inside it, e.g. {out / '<stack>'}"
    )


def _record(directory: Path) -> set[str]:
    """The files an earlier render wrote in ``directory``: the marker's record, or for a
    render from before the record the files its plan.json lists; empty when neither."""
    with contextlib.suppress(OSError, ValueError, TypeError):
        marker = json.loads((directory / MARKER).read_text(encoding="utf-8"))
        if isinstance(marker, dict) and isinstance(marker.get("files"), list):
            return {f for f in marker["files"] if isinstance(f, str)}
    try:
        doc = json.loads((directory / "plan.json").read_text(encoding="utf-8"))
        return {f for item in doc["items"] for f in item["files"]} | {"plan.json"}
    except (OSError, ValueError, KeyError, TypeError):
        return set()


def _foreign_entries(directory: Path) -> list[str]:
    """Entries under ``directory`` that no earlier render wrote (relative, sorted; a
    foreign directory is named, not its contents)."""
    files = _record(directory) | {MARKER}
    folders = {"/".join(f.split("/")[:i]) for f in files for i in range(1, f.count("/") + 1)}
    foreign: list[str] = []
    pending = [""]
    while pending:
        prefix = pending.pop()
        with os.scandir(directory / prefix if prefix else directory) as entries:
            for entry in entries:
                rel = f"{prefix}{entry.name}"
                if rel in folders and entry.is_dir(follow_symlinks=False):
                    pending.append(rel + "/")
                elif rel not in files or entry.is_dir(follow_symlinks=False):
                    foreign.append(rel + ("/" if entry.is_dir(follow_symlinks=False) else ""))
    return sorted(foreign)


# Linux renameat2(2): swap two paths in one step, or rename without replacing.
_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2


@functools.cache
def _renameat2() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # a C library without it: the fallback
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


def _rename2(parent: int, src: str, dst: str, flags: int) -> bool:
    """renameat2 within the directory ``parent``; False where the system or the file
    system does not have it (the caller falls back), OSError for any other failure."""
    fn = _renameat2()
    if fn is None:
        return False
    if fn(parent, os.fsencode(src), parent, os.fsencode(dst), flags) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), src, None, dst)


@contextlib.contextmanager
def _locked(parent: Path) -> Iterator[int]:
    """An exclusive lock on ``parent`` (renders into it take turns), as an open descriptor
    of it that the renames use; OutputError after LOCK_WAIT_S seconds of waiting."""
    fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise OutputError(
                        f"{parent}: another render has been writing here for over "
                        f"{LOCK_WAIT_S:.0f} s; try again when it has finished"
                    ) from None
                time.sleep(0.02)
        yield fd
    finally:
        os.close(fd)  # releases the lock


def _leftovers(out: Path) -> list[Path]:
    """Staging and retired directories an interrupted render of ``out`` left beside it."""
    prefixes = tuple(f".{out.name}{kind}" for kind in (_STAGING, _RETIRED))
    with os.scandir(out.parent) as entries:
        return sorted(
            Path(e.path)
            for e in entries
            if e.name.startswith(prefixes) and e.is_dir(follow_symlinks=False)
        )


def _recover(out: Path) -> None:
    """Undo what a render killed mid-way left: the previous output back in place if it was
    moved aside (the fallback swap), then its staging and retired trees removed."""
    leftovers = _leftovers(out)
    retired = [p for p in leftovers if _RETIRED in p.name]
    if retired and not os.path.lexists(out):
        os.rename(retired[0], out)
        leftovers.remove(retired[0])
    for p in leftovers:
        if (p / MARKER).is_file():
            shutil.rmtree(p)
        else:  # an empty directory moved aside; anything else is not ours
            with contextlib.suppress(OSError):
                p.rmdir()


def _inside(rel: str) -> str:
    """The directory of a relative output path, refusing any path that could leave the
    output directory (absolute, ``..``, empty or ``.`` parts, backslashes)."""
    parts = rel.split("/")
    if not rel or "\\" in rel or "\0" in rel or any(part in ("", ".", "..") for part in parts):
        raise OutputError(f"refusing to write {rel!r} outside the output directory")
    return "/".join(parts[:-1]) or "."


def _create(path: Path, data: bytes) -> None:
    """Write a new file (exclusive create: the staging directory is new and only write_tree
    writes in it)."""
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


def marker_text(files: Mapping[str, str], stack: str) -> str:
    """The marker: who wrote the directory, and the record of every file it wrote."""
    record = {"writer": "gpufabric render", "stack": stack, "files": sorted(files)}
    return indented_json(record) + "\n"


def _stage(files: Mapping[str, str], out: Path, stack: str, staging: Path) -> None:
    """Write the complete new tree into ``staging``, a new directory beside ``out``."""
    directories = {rel: _inside(rel) for rel in files}  # every path checked before writing
    (staging / MARKER).write_text(marker_text(files, stack), encoding="utf-8")
    previous = out if out.is_dir() else None
    made: set[str] = set()
    for rel in sorted(files):
        directory = directories[rel]
        if directory not in made:
            (staging / directory).mkdir(parents=True, exist_ok=True)
            made.add(directory)
        data = files[rel].encode("utf-8")
        if previous is None or not _link_if_same(previous / rel, staging / rel, data):
            _create(staging / rel, data)


def _swap(parent: int, staging: Path, out: Path) -> None:
    """Put ``staging`` in place of ``out``: one atomic exchange where the system has it
    (``out`` always holds a whole tree); else ``out`` moved aside and ``staging`` renamed
    in, a gap that the next render closes by moving the previous tree back."""
    if not os.path.lexists(out):
        if not _rename2(parent, staging.name, out.name, _RENAME_NOREPLACE):
            os.rename(staging.name, out.name, src_dir_fd=parent, dst_dir_fd=parent)
        return
    if _rename2(parent, staging.name, out.name, _RENAME_EXCHANGE):
        shutil.rmtree(staging)  # the previous tree now
        return
    retired = staging.with_name(staging.name.replace(_STAGING, _RETIRED, 1))
    os.rename(out.name, retired.name, src_dir_fd=parent, dst_dir_fd=parent)
    try:
        os.rename(staging.name, out.name, src_dir_fd=parent, dst_dir_fd=parent)
    except BaseException:
        os.rename(retired.name, out.name, src_dir_fd=parent, dst_dir_fd=parent)
        raise
    shutil.rmtree(retired)


_UMASK_LOCK = threading.Lock()


def umask() -> int:
    """The process's umask (files we create in place of others' get the mode ``open()``
    would give them): read from /proc where Linux shows it, else set and restored under a
    lock."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def write_tree(files: Mapping[str, str], out: Path, stack: str = "") -> None:
    """Replace ``out`` with exactly ``files`` (and the marker), all or nothing: the new
    tree is written beside it and swapped in, under a lock that makes concurrent renders
    take turns, so a reader sees the previous tree or the new one, never a part.

    ``out`` must be new, empty or an earlier render (:func:`check_output_dir`)."""
    check_output_dir(out)
    parent = out.resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    with _locked(parent) as fd:
        _recover(out.resolve())
        out = check_output_dir(out)  # again: another render may have written meanwhile
        staging: Path | None = None
        try:
            with shielded():  # a signal lands once the cleanup below knows the directory
                staging = Path(tempfile.mkdtemp(prefix=f".{out.name}{_STAGING}", dir=out.parent))
            os.chmod(staging, 0o777 & ~umask())  # mkdtemp's 0700 would outlive the swap
            _stage(files, out, stack, staging)
            _swap(fd, staging, out)
        except BaseException as exc:
            if staging is not None:
                with shielded():  # a second Ctrl-C must not leave half a tree beside the output
                    shutil.rmtree(staging, ignore_errors=True)
            if isinstance(exc, OSError) and exc.errno in (errno.EBUSY, errno.EXDEV):
                raise _mount_point(out) from None
            raise


def write_file(path: Path, text: str) -> None:
    """Write one file atomically (a full disk leaves the previous file as it was)."""
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise OutputError(f"{path} exists and is not a regular file; choose a file path")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.fchmod(fd, 0o666 & ~umask())  # as open() would create it, not mkstemp's 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
