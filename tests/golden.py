"""Golden digests of everything gpufabric writes for a matrix of stacks.

A refactor must not change a byte of what users get. This module renders a fixed set of
stacks (the shipped examples, variants of them that reach every fabric x NIC mode x
scheduler combination the model accepts, and the 1,024-node stress stack) through the CLI
and records a SHA-256 per output: every file of ``render``, the runbook, ``plan``,
``images``, the jobs ``job`` writes, ``verify nccl --dry-run`` (also ``--sweep``), the node
expectations ``verify nodes`` loads, and ``diff`` between variants.

    .venv/bin/python tests/golden.py --update    # after an intended output change

``tests/test_golden.py`` compares a fresh run with ``tests/fixtures/golden.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import hashlib
import io
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from builders import SHIPPED_STACKS, example_config  # noqa: E402

SHOW = "--show" in sys.argv
DIGESTS = HERE / "fixtures" / "golden.json"

Mutation = Callable[[dict[str, Any]], None]


def _fabric(cfg: dict[str, Any]) -> dict[str, Any]:
    fabric: dict[str, Any] = cfg["gpufabric:fabric"]
    return fabric


def _ib_shared(cfg: dict[str, Any]) -> None:
    f = _fabric(cfg)
    f["rdma"] = "shared"
    f.pop("sriov", None)
    f["infiniband"] = {"pkeyManagement": "static"}


def _ib_hostdevice(cfg: dict[str, Any]) -> None:
    f = _fabric(cfg)
    f["rdma"] = "hostdevice"
    f["infiniband"] = {"pkeyManagement": "static"}


UFM = {
    "address": "ufm.example.internal",
    "username": "k8s",
    "password": {"secure": "v1:AAAAAAAAAAAAAAAA:BBBBBBBBBBBB"},
}


def _ib_tenant_pkeys(cfg: dict[str, Any]) -> None:
    """Tenants' own partitions: only UFM through ib-kubernetes keeps them apart."""
    _fabric(cfg)["nadScope"] = "tenant"
    _fabric(cfg)["infiniband"].update(pkeyManagement="ufm", ufm=UFM)
    for i, tenant in enumerate(cfg["gpufabric:tenants"]):
        tenant["pkey"] = f"0x80{i + 1}0"
    cfg["gpufabric:tenants"][1]["gpuBorrowingLimit"] = 32


def _ib_ufm_peermem(cfg: dict[str, Any]) -> None:
    f = _fabric(cfg)
    f["gpuDirect"] = "peermem"
    f["multus"] = "network-operator"
    f["infiniband"] = {
        "pkey": "0x8002",
        "pkeyManagement": "ufm",
        "ufm": UFM,
    }


def _ib_volcano(cfg: dict[str, Any]) -> None:
    cfg["gpufabric:scheduling"] = {
        "gang": "volcano",
        "topologyLevels": ["topology.gpufabric.io/block", "topology.gpufabric.io/leaf"],
        "allOrNothingTimeout": "7m",
    }


def _roce_sriov_vlans(cfg: dict[str, Any]) -> None:
    f = _fabric(cfg)
    f["rdma"] = "sriov"
    f["sriov"] = {"numVfs": 4}
    f["nadScope"] = "tenant"
    f["nicDriver"] = {"source": "operator"}
    for i, tenant in enumerate(cfg["gpufabric:tenants"]):
        tenant["vlan"] = 100 + i


def _roce_hostdevice(cfg: dict[str, Any]) -> None:
    f = _fabric(cfg)
    f["rdma"] = "hostdevice"
    f["gpuDirect"] = "peermem"
    f["nicDriver"] = {"source": "operator"}


def _roce_none(cfg: dict[str, Any]) -> None:
    f = _fabric(cfg)
    f["rdma"] = "none"
    f.get("roce", {}).pop("gidIndex", None)


def _roce_kueue(cfg: dict[str, Any]) -> None:
    cfg["gpufabric:scheduling"] = {
        "gang": "kueue",
        "topologyLevels": ["topology.gpufabric.io/leaf", "kubernetes.io/hostname"],
    }
    cfg["gpufabric:tenants"][0]["gpuBorrowingLimit"] = 8


def _stress(_cfg: dict[str, Any]) -> None:
    """Replaced wholesale in :func:`variants`."""


VARIANTS: dict[str, tuple[str, tuple[Mutation, ...]]] = {
    "ib-shared": ("prod-ib", (_ib_shared,)),
    "ib-hostdevice": ("prod-ib", (_ib_hostdevice, _ib_volcano)),
    "ib-sriov-tenant-pkeys": ("prod-ib", (_ib_tenant_pkeys,)),
    "ib-ufm-peermem": ("prod-ib", (_ib_ufm_peermem,)),
    "ib-volcano": ("prod-ib", (_ib_volcano,)),
    "roce-sriov-vlans": ("lab-roce", (_roce_sriov_vlans,)),
    "roce-hostdevice": ("lab-roce", (_roce_hostdevice,)),
    "roce-none": ("lab-roce", (_roce_none,)),
    "roce-sriov-kueue": ("roce-sriov-volcano", (_roce_kueue,)),
}
DIFFS = (
    ("lab-roce", "roce-sriov-vlans"),
    ("prod-ib", "ib-shared"),
    ("prod-ib", "ib-volcano"),
    ("roce-sriov-volcano", "roce-sriov-kueue"),
)


def stress_config() -> dict[str, Any]:
    sys.path.insert(0, str(HERE.parent / "benchmarks"))
    try:
        import render_stress
    finally:
        sys.path.pop(0)
    return {f"gpufabric:{k}": v for k, v in render_stress.stress_config(200).items()}


def variants() -> dict[str, dict[str, Any]]:
    """Stack name -> its ``config:`` mapping."""
    out = {name: example_config(name) for name in SHIPPED_STACKS}
    for name, (base, mutations) in VARIANTS.items():
        cfg = copy.deepcopy(out[base])
        for mutate in mutations:
            mutate(cfg)
        out[name] = cfg
    out["stress"] = stress_config()
    return out


WORK = "<work>"
"""Stands for the temporary directory in what commands print (paths differ per run)."""


def _cli(argv: list[str], work: Path) -> tuple[int, str]:
    from gpufabric.cli import main

    buf, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    text = f"exit {code}\n{buf.getvalue()}\n--- stderr\n{err.getvalue()}"
    text = text.replace(str(work), WORK)
    if SHOW:
        print(
            f"== {' '.join(argv[:2])} {argv[-1]}: exit {code}, {len(text)} chars", file=sys.stderr
        )
    return code, text


def _digest(text: str | bytes) -> str:
    data = text.encode() if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()


def _tree(directory: Path) -> Iterator[tuple[str, str]]:
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            yield path.relative_to(directory).as_posix(), _digest(path.read_bytes())


def _outputs(name: str, stack: Path, work: Path) -> Iterator[tuple[str, str]]:
    from gpufabric.model.stackfile import load_stack
    from gpufabric.plan.build import build_plan
    from gpufabric.verify.expect import from_facts

    loaded = load_stack(str(stack))
    plan = build_plan(loaded.name, loaded.model)
    out = work / "render" / name
    code, text = _cli(["render", "--stack", str(stack), "--out", str(out)], work)
    yield "render.exit", str(code)
    yield "render.stdout", _digest(text)
    for rel, digest in _tree(out):
        yield f"render/{rel}", digest
    if name == "stress":
        return
    for command in (["runbook"], ["plan"], ["images", "--format", "json"], ["validate"]):
        yield command[0], _digest(_cli([command[0], "--stack", str(stack), *command[1:]], work)[1])
    yield "expectation", _digest(from_facts(plan.facts).to_json())
    tenants = list(plan.facts.tenants)
    per_node = plan.facts.nodes.gpus_per_node
    # four nodes, or as many as the tenant's queue can ever admit (more is refused)
    nodes = {t: max(1, min(4, c.gpu_admissible // per_node)) for t, c in plan.facts.tenants.items()}
    for kind in ("mpijob", "pytorchjob", "jaxjob", "trainjob", "tfjob"):
        for tenant in tenants[:2]:
            argv = ["job", "--stack", str(stack), "--tenant", tenant, "--kind", kind]
            yield (
                f"job/{kind}/{tenant}",
                _digest(_cli([*argv, "--nodes", str(nodes[tenant])], work)[1]),
            )
    # the last tenant whose queue admits the acceptance test's two nodes
    tenant = next((t for t in reversed(tenants) if nodes[t] >= 2), tenants[-1])
    base = ["verify", "nccl", "--stack", str(stack), "--tenant", tenant, "--dry-run"]
    yield "verify-nccl-dry-run", _digest(_cli(base, work)[1])
    yield "verify-sweep-dry-run", _digest(_cli([*base, "--sweep"], work)[1])


def compute(work: Path) -> dict[str, dict[str, str]]:
    """Stack -> output -> SHA-256, for every stack of the matrix."""
    stacks = work / "stacks"
    stacks.mkdir(parents=True, exist_ok=True)
    result: dict[str, dict[str, str]] = {}
    for name, cfg in variants().items():
        path = stacks / f"Pulumi.{name}.yaml"
        path.write_text(yaml.safe_dump({"config": cfg}, sort_keys=True))
        result[name] = dict(_outputs(name, path, work))
    for before, after in DIFFS:
        for fmt in ("md", "json"):
            argv = ["diff", "--stack", str(stacks / f"Pulumi.{after}.yaml")]
            argv += ["--base", str(work / "render" / before), "--format", fmt]
            result.setdefault("diff", {})[f"{before}..{after}.{fmt}"] = _digest(_cli(argv, work)[1])
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description="golden output digests")
    ap.add_argument("--show", action="store_true", help="print each command's exit code")
    ap.add_argument("--update", action="store_true", help=f"rewrite {DIGESTS.name}")
    args = ap.parse_args()
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        digests = compute(Path(tmp))
    text = json.dumps(digests, indent=1, sort_keys=True) + "\n"
    if args.update:
        DIGESTS.write_text(text)
        print(f"wrote {DIGESTS} ({sum(len(v) for v in digests.values())} digests)")
        return 0
    old = json.loads(DIGESTS.read_text())
    changed = [
        f"{s}/{o}"
        for s in sorted(set(old) | set(digests))
        for o in sorted(set(old.get(s, {})) | set(digests.get(s, {})))
        if old.get(s, {}).get(o) != digests.get(s, {}).get(o)
    ]
    print("\n".join(changed) or "identical")
    return 1 if changed else 0


if __name__ == "__main__":
    raise SystemExit(main())
