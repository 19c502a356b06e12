"""``gpufabric verify storage``: each tenant's claims, proven from its own pods on GPU nodes.

Two rounds of short-lived pods run in the tenant's namespace (plain pods the tenant
admission policy admits: no host access, no privilege), one per GPU node (or ``--sample``
of them), each mounting every claim of the tenant as its jobs do:

1. write round: the pod prints ``/proc/self/mountstats`` (judged here by
   :mod:`gpufabric.verify.storage.mountstats`: the transport each NFS mount's connections use),
   and on each writable claim writes this run's random token for its node, then writes
   and reads back a file with ``dd`` (buffered write closed by fsync; O_DIRECT read, past
   the page cache) whose own byte and second counts give the throughput;
2. read-back round: the pod on the next node (in name order, a ring) reads the token the
   previous node wrote and removes it: a claim that is not shared across nodes (RWX) shows
   a missing or different token.

Every step's output is framed by marker lines carrying its exit status, and read strictly:
a step whose frame or status is missing, or whose ``dd`` summary cannot be read, is an
ERROR, never a PASS; a transport other than the stack's, a throughput under the threshold
or a missing read-back is a FAIL naming the node. Every pod is deleted whatever ends the
run (its own end, a timeout, Ctrl-C, SIGTERM), and a pod whose deletion cannot be
confirmed is named with the command that deletes it.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpufabric.plan.build import Plan
from gpufabric.plan.facts import ClaimFacts
from gpufabric.verify.defaults import STORAGE_MIB
from gpufabric.verify.results import Check, error, failed, passed, skipped
from gpufabric.verify.storage import mountstats

THROUGHPUT_FRACTION = 0.05
"""Default --min-throughput: this fraction of one rail's line rate (one ``dd`` stream of
one node, against a server every node shares: a floor that a mount over the wrong network
or a degraded path misses, not a benchmark target)."""
DD_MIB = STORAGE_MIB
"""MiB each node writes and reads per writable claim (--size-mib)."""
MARKER = "==> gpufabric-storage: {step} <=="
_MARKER = re.compile(r"^==> gpufabric-storage: (?P<step>[a-z0-9 -]+) <==$")
_STATUS = re.compile(r"^rc (?P<rc>[0-9]{1,3})$")
WORK_DIR = ".gpufabric-verify"
"""Directory each writable claim gets for a run's files (removed by the read-back round)."""
LABELS = {"app.kubernetes.io/managed-by": "gpufabric-verify", "app.kubernetes.io/name": "storage"}


@dataclass(frozen=True, kw_only=True)
class ClaimTarget:
    """One claim of a tenant, as its jobs mount it."""

    name: str
    namespace: str
    mount_path: str
    read_only: bool = False
    transport: str | None = None
    """``rdma`` or ``tcp`` (NFS through gpufabric's StorageClass); None for a class the stack
    names (bring your own: its transport is not the stack's to say)."""
    storage_class: str = ""
    size: str = ""


@dataclass(frozen=True)
class StorageTarget:
    """A tenant and the claims its jobs mount."""

    tenant: str
    namespace: str
    claims: tuple[ClaimTarget, ...]

    @property
    def writable(self) -> tuple[ClaimTarget, ...]:
        return tuple(c for c in self.claims if not c.read_only)


def _claim(claim: ClaimFacts) -> ClaimTarget:
    return ClaimTarget(
        name=claim.name,
        namespace=claim.namespace,
        mount_path=claim.mount_path,
        read_only=claim.read_only,
        transport=claim.transport,
        storage_class=claim.storage_class,
        size=claim.size,
    )


def targets_from_plan(plan: Plan) -> tuple[StorageTarget, ...]:
    """The tenants' claims from the Plan's storage fact (``facts.storage``, one
    TenantStorage per tenant with claims, sorted by namespace); () without storage."""
    return tuple(
        StorageTarget(t.namespace, t.namespace, tuple(_claim(c) for c in t.claims))
        for t in plan.facts.storage
        if t.claims
    )


def default_threshold(link_rate_gbps: float | None) -> tuple[float | None, str]:
    """(MB/s, where it comes from): :data:`THROUGHPUT_FRACTION` of one rail's line rate."""
    if not link_rate_gbps:
        return None, "no rail line rate in the stack: pass --min-throughput"
    mbps = round(link_rate_gbps * 1000 / 8 * THROUGHPUT_FRACTION, 1)
    return mbps, f"{THROUGHPUT_FRACTION:g} x one rail's {link_rate_gbps:g} Gb/s"


# ------------------------------------------------------------------------------ the pods


def node_key(node: str) -> str:
    """A short file-name-safe key of a node name."""
    return hashlib.sha256(node.encode()).hexdigest()[:12]


def pod_name(run: str, step: str, namespace: str, node: str) -> str:
    return f"gpufabric-storage-{run}-{step}-{node_key(namespace + '/' + node)}"


def _mark(step: str) -> str:
    return f"m {shlex.quote(step)}"


def _work_dir(claim: ClaimTarget) -> str:
    return shlex.quote(claim.mount_path.rstrip("/") + "/" + WORK_DIR)


def _claim_dir(claim: ClaimTarget) -> str:
    return _work_dir(claim) + '/"$GF_RUN"'


def write_script(target: StorageTarget, mib: int = DD_MIB, token: bool = True) -> str:
    """The write round's shell program (values arrive as environment variables)."""
    lines = [
        "export LC_ALL=C",
        "m() { printf '==> gpufabric-storage: %s <==\\n' \"$1\"; }",
        _mark("mountstats"),
        'cat /proc/self/mountstats; m "rc $?"',
    ]
    for index, claim in enumerate(target.claims):
        if claim.read_only:
            continue
        d = _claim_dir(claim)
        if token:
            lines += [
                _mark(f"token {index}"),
                f'mkdir -p {d} && printf %s "$GF_TOKEN" > {d}/"$GF_NODE".token; m "rc $?"',
            ]
        lines += [
            _mark(f"write {index}"),
            f'mkdir -p {d} && dd if=/dev/zero of={d}/"$GF_NODE".dd bs=1M count={mib} '
            'conv=fsync 2>&1; m "rc $?"',
            _mark(f"read {index}"),
            f'dd if={d}/"$GF_NODE".dd of=/dev/null bs=1M iflag=direct 2>&1; m "rc $?"',
            f'rm -f {d}/"$GF_NODE".dd',
        ]
    return "\n".join(lines) + "\n"


def read_script(target: StorageTarget) -> str:
    """The read-back round's shell program: print the previous node's token, remove it."""
    lines = [
        "export LC_ALL=C",
        "m() { printf '==> gpufabric-storage: %s <==\\n' \"$1\"; }",
    ]
    for index, claim in enumerate(target.claims):
        if claim.read_only:
            continue
        d = _claim_dir(claim)
        lines += [
            _mark(f"readback {index}"),
            f't=$(cat {d}/"$GF_PARTNER".token 2>&1); r=$?; printf \'%s\\n\' "$t"; m "rc $r"',
            f'rm -f {d}/"$GF_PARTNER".token; rmdir {d} {_work_dir(claim)} 2>/dev/null; true',
        ]
    return "\n".join(lines) + "\n"


def pod(
    target: StorageTarget,
    node: str,
    name: str,
    image: str,
    script: str,
    env: Mapping[str, str],
    tolerations: Sequence[Mapping[str, Any]] = (),
    deadline_s: int = 600,
    pull_secrets: Sequence[str] = (),
) -> dict[str, Any]:
    """One pod of a round, on ``node``, mounting every claim of the tenant as its jobs do."""
    volumes = [
        {
            "name": f"claim-{i}",
            "persistentVolumeClaim": {"claimName": c.name, "readOnly": c.read_only},
        }
        for i, c in enumerate(target.claims)
    ]
    mounts = [
        {"name": f"claim-{i}", "mountPath": c.mount_path, "readOnly": c.read_only}
        for i, c in enumerate(target.claims)
    ]
    on_node = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "activeDeadlineSeconds": deadline_s,
        "terminationGracePeriodSeconds": 5,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [on_node]}
            }
        },
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {
                "name": "storage",
                "image": image,
                "command": ["/bin/sh", "-c", script],
                "env": [{"name": k, "value": v} for k, v in sorted(env.items())],
                "securityContext": {"allowPrivilegeEscalation": False},
                "resources": {
                    "requests": {"cpu": "100m", "memory": "64Mi"},
                    "limits": {"memory": "1Gi"},
                },
                "volumeMounts": mounts,
            }
        ],
        "volumes": volumes,
    }
    spec |= {"tolerations": [dict(t) for t in tolerations]} if tolerations else {}
    spec |= {"imagePullSecrets": [{"name": n} for n in pull_secrets]} if pull_secrets else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": target.namespace, "labels": dict(LABELS)},
        "spec": spec,
    }


# ------------------------------------------------------------------------- reading logs


@dataclass(frozen=True)
class Step:
    output: str
    rc: int | None
    """The step's exit status; None when its frame was cut (the pod ended mid-step)."""


class LogError(ValueError):
    """A pod's log is not what its program writes."""


def steps(log: str) -> dict[str, Step]:
    """Each framed step's output and status; LogError when a step appears twice."""
    out: dict[str, Step] = {}
    current: str | None = None
    body: list[str] = []
    for line in log.splitlines():
        m = _MARKER.match(line)
        if m is None:
            if current is not None:
                body.append(line)
            continue
        status = _STATUS.match(m["step"])
        if status is not None and current is not None:
            out[current] = Step("\n".join(body), int(status["rc"]))
            current = None
            continue
        if current is not None:
            out[current] = Step("\n".join(body), None)
        if m["step"] in out or status is not None:
            raise LogError(f"the step {m['step']!r} is framed twice or out of order")
        current, body = m["step"], []
    if current is not None:
        out[current] = Step("\n".join(body), None)
    return out


_DD = re.compile(
    r"^(?P<bytes>[0-9]+) bytes (?:\([^)]*\) )?copied, "
    r"(?P<seconds>[0-9]+(?:\.[0-9]+)?(?:e[-+]?[0-9]+)?) s(?:econds)?, .+$"
)


@dataclass(frozen=True)
class Transfer:
    bytes: int
    seconds: float

    @property
    def mbps(self) -> float:
        return self.bytes / 1e6 / self.seconds


def parse_dd(output: str, expected_bytes: int) -> Transfer:
    """The one summary line of GNU or BusyBox ``dd`` (``N bytes (...) copied, S s, ...``);
    ValueError unless there is exactly one, moving ``expected_bytes`` in a positive time."""
    found = [m for m in map(_DD.match, output.splitlines()) if m is not None]
    if len(found) != 1:
        raise ValueError(f"{len(found)} dd summary lines in {output[-200:]!r}")
    moved, seconds = int(found[0]["bytes"]), float(found[0]["seconds"])
    if moved != expected_bytes:
        raise ValueError(f"dd moved {moved} bytes, not {expected_bytes}")
    if not seconds > 0:
        raise ValueError(f"dd reports {seconds:g} s")
    return Transfer(moved, seconds)


# ---------------------------------------------------------------------------- judging


@dataclass(frozen=True)
class StorageJudge:
    """What the checks compare against."""

    min_mbps: float | None
    threshold_source: str
    mib: int = DD_MIB


@dataclass(kw_only=True)
class PodResult:
    """One pod's end: its state (Succeeded, Failed, Timeout, Error, Interrupted), what
    the API said, and its log."""

    node: str
    state: str
    message: str
    log: str = ""
    steps: dict[str, Step] = field(default_factory=dict)

    def parse(self) -> None:
        try:
            self.steps = steps(self.log)
        except LogError as exc:
            self.steps = {}
            self.message = f"{self.message}; unreadable log: {exc}"

    def why_missing(self, step: str) -> str:
        return f"no {step!r} step in the pod's log ({self.state}: {self.message})"


def _cid(claim: ClaimTarget, aspect: str) -> str:
    return f"storage.{claim.namespace}.{claim.name}.{aspect}"


_FALLBACK_HINT = (
    "on the node: lsmod | grep rpcrdma (modprobe rpcrdma); on the server: nfsd listening on "
    "20049 (grep rdma /proc/fs/nfsd/portlist); the StorageClass's mountOptions "
    "(proto=rdma,port=20049); remount by restarting the pod after fixing"
)


def judge_transport(res: PodResult, claim: ClaimTarget) -> Check:
    """The claim's mount on this node uses the transport the stack asked for."""
    cid = _cid(claim, "transport")
    step = res.steps.get("mountstats")
    if step is None or step.rc != 0:
        why = res.why_missing("mountstats") if step is None else f"exit {step.rc}"
        return error(cid, res.node, f"/proc/self/mountstats unread: {why}")
    try:
        mount = mountstats.mount_at(mountstats.parse(step.output), claim.mount_path)
    except mountstats.MountstatsError as exc:
        return error(cid, res.node, f"/proc/self/mountstats unreadable: {exc}")
    if mount is None:
        return error(cid, res.node, f"no mount at {claim.mount_path} in /proc/self/mountstats")
    seen = mountstats.transports(mount) if mount.is_nfs else ()
    where = f"{claim.mount_path} from {mount.device or '?'} ({mount.fstype})"
    if claim.transport is None:
        how = f" over {', '.join(seen)}" if seen else ""
        return skipped(cid, res.node, f"{where}{how}: the stack's class names no transport")
    if not mount.is_nfs:
        return failed(cid, res.node, f"{where}: not NFS over {claim.transport}", _FALLBACK_HINT)
    if not seen:
        return error(cid, res.node, f"{where}: no RPC transport shown yet")
    if seen != (claim.transport,):
        return failed(
            cid,
            res.node,
            f"{where} runs over {', '.join(seen)}, not {claim.transport} (fell back)",
            _FALLBACK_HINT,
        )
    count = len(mount.transports)
    return passed(
        cid, res.node, f"{where} over {claim.transport}, {count} connection(s)",
        transport=claim.transport, connections=count, options=",".join(mount.options),
    )  # fmt: skip


def judge_throughput(
    res: PodResult, claim: ClaimTarget, index: int, j: StorageJudge
) -> list[Check]:
    """Sequential write and read of the claim on this node against the threshold."""
    out = []
    for aspect in ("write", "read"):
        cid, step_name = _cid(claim, aspect), f"{aspect} {index}"
        step = res.steps.get(step_name)
        if step is None or step.rc is None:
            out.append(error(cid, res.node, res.why_missing(step_name)))
            continue
        last = step.output.strip().splitlines()[-1:] or ["no output"]
        if step.rc != 0:
            out.append(error(cid, res.node, f"dd exited {step.rc}: {last[0][:200]}"))
            continue
        try:
            t = parse_dd(step.output, j.mib << 20)
        except ValueError as exc:
            out.append(error(cid, res.node, f"unreadable dd output: {exc}"))
            continue
        figures = {"mbps": round(t.mbps, 1), "bytes": t.bytes, "seconds": t.seconds}
        said = f"{aspect} {t.mbps:,.0f} MB/s ({t.bytes >> 20} MiB in {t.seconds:g} s)"
        if j.min_mbps is None:
            out.append(error(cid, res.node, f"{said}; {j.threshold_source}"))
        elif t.mbps < j.min_mbps:
            hint = "compare with other nodes (a slow node: its NIC, cable, mount); the server"
            out.append(failed(cid, res.node, f"{said} < {j.min_mbps:g} MB/s", hint, **figures))
        else:
            out.append(passed(cid, res.node, f"{said} >= {j.min_mbps:g} MB/s", **figures))
    return out


def judge_readback(
    writer: PodResult, reader: PodResult | None, claim: ClaimTarget, index: int, token: str
) -> Check:
    """The token ``writer``'s node wrote is what ``reader``'s node reads (RWX)."""
    cid = _cid(claim, "readback")
    if reader is None:
        return error(cid, writer.node, "no other node to read it back (needs two GPU nodes)")
    wrote = writer.steps.get(f"token {index}")
    if wrote is None or wrote.rc is None:
        return error(cid, writer.node, writer.why_missing(f"token {index}"))
    if wrote.rc != 0:
        return failed(
            cid, writer.node, f"could not write to {claim.mount_path}: {wrote.output[-200:]}",
            "permissions of the claim's sub-directory on the server (owner, mode, root squash)",
        )  # fmt: skip
    step = reader.steps.get(f"readback {index}")
    if step is None or step.rc is None:
        return error(cid, writer.node, reader.why_missing(f"readback {index}"))
    if step.rc != 0 or step.output.strip() != token:
        seen = "not found" if step.rc != 0 else "different content"
        return failed(
            cid,
            writer.node,
            f"the file written on {writer.node} is {seen} on {reader.node}: "
            f"{step.output.strip()[:120]!r}",
            "the claim must be ReadWriteMany and every node must mount the same export",
        )
    return passed(cid, writer.node, f"written here, read back on {reader.node}")


def judge_node(
    target: StorageTarget,
    writer: PodResult,
    reader: PodResult | None,
    token: str,
    j: StorageJudge,
) -> list[Check]:
    """Every check of one node for one tenant."""
    checks = [judge_transport(writer, c) for c in target.claims]
    for index, claim in enumerate(target.claims):
        if claim.read_only:
            continue
        checks += judge_throughput(writer, claim, index, j)
        checks.append(judge_readback(writer, reader, claim, index, token))
    return checks


def ring(nodes: Sequence[str]) -> dict[str, str]:
    """Each node -> the node that reads back what it wrote (the next in name order)."""
    order = sorted(nodes)
    if len(order) < 2:
        return {}
    return {n: order[(i + 1) % len(order)] for i, n in enumerate(order)}


def new_run() -> tuple[str, Any]:
    """A run's id (in pod and directory names) and its source of tokens."""
    return secrets.token_hex(3), secrets.token_hex


def sample(nodes: Iterable[str], count: int | None) -> list[str]:
    """``count`` of the nodes chosen at random (all when None or more), in name order."""
    names = sorted(nodes)
    if count is None or count >= len(names):
        return names
    return sorted(secrets.SystemRandom().sample(names, count))
