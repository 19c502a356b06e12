"""``gpufabric stacks``, ``validate`` and ``plan``: what the stacks are and what one
installs, without a cluster."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from gpufabric import nics
from gpufabric.exitcodes import ExitCode
from gpufabric.model.problems import StackError
from gpufabric.model.redaction import printable
from gpufabric.model.stackfile import Stack, list_stacks, load_stack, stacks_dir
from gpufabric.plan.build import Plan
from gpufabric.plan.items import HelmChart, K8sObject, KustomizeOverlay
from gpufabric.support.counts import counted


def _describe(stack: Stack) -> str:
    m = stack.model
    pools = m.pools
    if len(pools) == 1:
        f, nodes = pools[0].fabric, pools[0].nodes
        note = nics.mode(f.rdma).summary_note
        return (
            f"{f.type}, {counted(len(f.rails), 'rail')}, rdma {f.rdma}{note}, gpuDirect "
            f"{f.gpuDirect}, {m.scheduling.gang}, {nodes.count}x{nodes.gpusPerNode} GPUs, "
            f"{counted(len(m.tenants), 'tenant')}"
        )
    shown = "; ".join(
        f"{p.name}: {p.nodes.count}x{p.nodes.gpusPerNode} GPUs, {p.fabric.type} "
        f"{counted(len(p.fabric.rails), 'rail')} rdma {p.fabric.rdma}"
        for p in pools
    )
    return (
        f"{counted(len(pools), 'pool')} ({shown}), {m.scheduling.gang}, "
        f"{counted(len(m.tenants), 'tenant')}"
    )


def _validate_command(args: argparse.Namespace, name: str) -> str:
    """The command that lists a stack's problems, with the stacks directory it was found in."""
    where = f"--stacks-dir {shlex.quote(str(args.stacks_dir))} " if args.stacks_dir else ""
    return f"gpufabric {where}validate --stack {shlex.quote(name)}"


def cmd_stacks(args: argparse.Namespace, _stack: Stack | None = None) -> int:
    directory = args.stacks_dir or stacks_dir()
    names = list_stacks(directory)
    if not names:
        why = "" if Path(directory).is_dir() else " (no such directory)"
        print(f"gpufabric stacks: no stacks in {directory}{why}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    status = ExitCode.OK
    width = max(len(n) for n in names)
    for name in names:
        try:
            line = _describe(load_stack(name, directory))
        except StackError as err:
            found = counted(len(err.problems), "problem")
            line = f"INVALID ({found}; run {_validate_command(args, name)})"
            status = ExitCode.BAD_INPUT
        print(printable(f"{name:<{width}}  {line}"))  # a file's name is anyone's to choose
    return status


def cmd_validate(stack: Stack, _args: argparse.Namespace) -> int:
    plan = stack.plan
    print(f"{stack.source}: ok ({_describe(stack)}; {counted(len(plan.items), 'plan item')})")
    return ExitCode.OK


def _what(plan: Plan, index: int) -> str:
    it = plan.items[index]
    p = it.payload
    if isinstance(p, K8sObject):
        where = f" -n {p.namespace}" if p.namespace else ""
        return f"{p.kind} {p.name}{where}"
    if isinstance(p, HelmChart):
        return f"helm {p.chart} {p.version} -n {p.namespace}"
    assert isinstance(p, KustomizeOverlay)
    return f"kustomize {p.directory} -n {p.namespace}"


def cmd_plan(stack: Stack, _args: argparse.Namespace) -> int:
    plan = stack.plan
    print(f"stack {stack.name}: {counted(len(plan.items), 'item')} in apply order")
    width = max((len(it.id) for it in plan.items), default=0)
    for i, it in enumerate(plan.items):
        flags = " [protect]" if it.protect else ""
        after = f"  after: {', '.join(it.depends_on)}" if it.depends_on else ""
        print(f"{i + 1:4d}  {it.layer.value:<10}  {it.id:<{width}}  {_what(plan, i)}{flags}{after}")
    if not plan.facts.fleet:
        _print_pod_contract(plan)
    for pool in plan.facts.pool_names if plan.facts.fleet else ():
        _print_pod_contract(plan.for_pool(pool), f"pool {pool}: ")
    return ExitCode.OK


def _print_pod_contract(plan: Plan, heading: str = "") -> None:
    """What a training pod in each tenant namespace gets from the fabric (a fleet: on the
    pool ``plan`` is narrowed to, from its own nccl-env-<pool>)."""
    if not plan.wiring:
        return
    first = next(iter(plan.wiring.values()))
    print()
    print(
        f"{heading}pod contract (pod annotation k8s.v1.cni.cncf.io/networks, resources, "
        f"{first.nccl_env_name}):"
    )
    groups: dict[tuple[str, ...], list[str]] = {}
    mounts: dict[str, list[str]] = {}
    for namespace, w in plan.wiring.items():
        storage = plan.facts.storage_of(namespace)
        mounts[namespace] = [
            f"    volume    {c.mount_path} <- claim {c.name} ({c.size}, class {c.storage_class}, "
            f"{'read-only' if c.read_only else 'read-write'}, transport {c.transport or 'the class'})"
            for c in (storage.claims if storage else ())
        ]
        nets = json.dumps(dict(w.leaf_networks)) if w.leaf_networks else w.networks
        key = (nets, json.dumps(dict(w.rdma_resources)), json.dumps(dict(w.nccl_env)))
        groups.setdefault((*key, *mounts[namespace]), []).append(namespace)
    for namespaces in groups.values():
        wiring = plan.wiring[namespaces[0]]
        print(f"  tenants: {', '.join(namespaces)}")
        for line in mounts[namespaces[0]]:
            print(line)
        by_leaf = wiring.leaf_networks or {"": wiring.networks}
        for leaf, networks in by_leaf.items():
            under = f" (under {wiring.leaf_label}={leaf}: gpufabric job --leaf {leaf})"
            for net in json.loads(networks):
                where = f"{net['namespace']}/{net['name']}"
                print(f"    network   {net['interface']:<8} <- {where}{under if leaf else ''}")
        for resource, count in wiring.rdma_resources.items():
            print(f"    resource  {resource}: {count}")
        for name, value in wiring.nccl_env.items():
            print(f"    env       {name}={value}")
