"""The bootstrap runbook of a stack: Markdown rendered from manifests/runbooks/*.md.j2.

Everything stack-specific comes from the Plan: its resolved facts (rails, MTU, RoCE class,
thresholds, tenants, the queueing authority), its items (phases in apply order with their
``pulumi up --target`` URNs, named as the components name them) and what it pulls; the
templates hold the prose, and the queueing authority's own fragment its part. ``gpufabric runbook --stack S`` prints it;
docs/runbooks/<stack>.md are the committed renders of the example stacks.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpufabric import nics
from gpufabric.model import nvlink
from gpufabric.model.stackfile import is_path
from gpufabric.outputs import importmap
from gpufabric.outputs.jobs import (
    JobKind,
    default_job_name,
    first_worker_pod,
    inspection_kind,
    resume_facts,
)
from gpufabric.plan import alerts, ids
from gpufabric.plan.build import Plan
from gpufabric.plan.facts import Facts, TenantContract
from gpufabric.plan.items import LAYER_ORDER, HelmChart, Item, K8sObject, KustomizeOverlay, Layer
from gpufabric.plan.pulls import StackSources
from gpufabric.support.templates import MANIFESTS_DIR, environment

RUNBOOK_DIR = MANIFESTS_DIR / "runbooks"
LAYER_TITLES = {
    Layer.GPU: "GPU Operator",
    Layer.NETWORK: "RDMA network",
    Layer.TRAINING: "Training operators",
    Layer.SCHEDULING: "Gang scheduling and queues",
    Layer.TENANTS: "Tenants",
    Layer.MONITORING: "Fleet health monitoring",
    Layer.STORAGE: "Shared storage",
}


@dataclass(frozen=True)
class FoundAs:
    """How the command line found the stack, so that every command the runbook prints finds
    it the same way: ``--stack`` as given (a name or a path to the file) and, for a name,
    the ``--stacks-dir`` it was looked up in (None: the project's stacks directory)."""

    stack: str
    stacks_dir: str | None = None

    def options(self) -> tuple[str, str]:
        """(``gpufabric`` with its global options, the ``--stack`` option), as shell words."""
        global_opts = "gpufabric"
        if self.stacks_dir is not None and not is_path(self.stack):
            global_opts += f" --stacks-dir {shell_word(self.stacks_dir)}"
        return global_opts, f"--stack {shell_word(self.stack)}"

    def outside_project(self) -> bool:
        """The file is not in the project's stack directory (Pulumi's stackConfigDir), so
        ``pulumi up --stack <name>`` would read another file (or none)."""
        from gpufabric.model.stackfile import stacks_dir

        if not is_path(self.stack) and self.stacks_dir is None:
            return False
        where = Path(self.file()).resolve().parent
        return where != stacks_dir().resolve()

    def path(self) -> Path:
        """The stack file where the command read it (the project's stacks/ for a name)."""
        from gpufabric.model.stackfile import stacks_dir

        if is_path(self.stack):
            return Path(self.stack)
        directory = stacks_dir() if self.stacks_dir is None else Path(self.stacks_dir)
        return directory / f"Pulumi.{self.stack}.yaml"

    def file(self) -> str:
        """The stack file, as the reader finds it."""
        if is_path(self.stack):
            return self.stack
        directory = "stacks" if self.stacks_dir is None else self.stacks_dir.rstrip("/")
        return f"{directory}/Pulumi.{self.stack}.yaml"


@dataclass(frozen=True)
class Phase:
    number: int
    layer: Layer
    title: str
    items: tuple[Item, ...]
    """Items this phase applies for the first time: the layer's own, plus items of later
    layers they depend on (e.g. Volcano before the job operators)."""
    pulled_forward: tuple[Item, ...]
    targets: tuple[str, ...]
    layers_so_far: tuple[Layer, ...]

    @property
    def layers_arg(self) -> str:
        return ",".join(layer.value for layer in self.layers_so_far)


def _closure(item_ids: Sequence[str], by_id: Mapping[str, Item], applied: set[str]) -> list[str]:
    """``ids`` and everything they depend on that is not applied yet, dependencies first."""
    out: list[str] = []

    def need(item_id: str) -> None:
        if item_id in applied or item_id in out:
            return
        for dep in by_id[item_id].depends_on:
            need(dep)
        out.append(item_id)

    for item_id in item_ids:
        need(item_id)
    return out


def phases(plan: Plan) -> list[Phase]:
    """One phase per layer in apply order. A phase also applies the items of later layers
    that its own items depend on, so each ``pulumi up --target`` is complete by itself."""
    stack, cluster = plan.stack, plan.facts.cluster
    by_id = {it.id: it for it in plan.items}
    applied: set[str] = set()
    out: list[Phase] = []
    so_far: list[Layer] = []
    for layer in LAYER_ORDER:
        own = [it for it in plan.items if it.layer == layer]
        if not own:
            continue
        so_far.append(layer)
        needed = _closure([it.id for it in own], by_id, applied)
        items = tuple(it for it in plan.items if it.id in needed)
        pulled = tuple(it for it in items if it.layer != layer)
        applied.update(needed)
        # Names are unique in the stack; `**` spans the parent type chain (root component,
        # its provider, the layer components, their items and the charts' children).
        targets = [ids.urn(stack, "**", cluster), ids.urn(stack, "**", ids.provider_name(cluster))]
        for other in dict.fromkeys(it.layer for it in pulled):
            targets.append(ids.urn(stack, "**", ids.layer_component_name(cluster, other.value)))
            for it in pulled:
                if it.layer == other:
                    name = ids.child_name(cluster, other.value, it.id)
                    targets.append(ids.urn(stack, "**", f"{name}*"))
        targets.append(ids.urn(stack, "**", ids.layer_component_name(cluster, layer.value)))
        targets.append(ids.urn(stack, "**", ids.child_name(cluster, layer.value, "*")))
        out.append(
            Phase(
                number=len(out) + 1,
                layer=layer,
                title=LAYER_TITLES[layer],
                items=items,
                pulled_forward=pulled,
                targets=tuple(targets),
                layers_so_far=tuple(so_far),
            )
        )
    return out


def _describe(item: Item, plan: Plan) -> str:
    p, md = item.payload, markdown_code
    if isinstance(p, HelmChart):
        return f"Helm chart `{md(p.chart)}` {md(p.version)} in `{md(p.namespace)}`"
    if isinstance(p, KustomizeOverlay):
        c = plan.components[p.component]
        return f"{md(c.name)} {md(c.version)} (upstream manifest + overlay) in `{md(p.namespace)}`"
    ns = f"{p.namespace}/" if p.namespace else ""
    return f"{p.kind} `{md(ns + p.name)}`"


def context(
    plan: Plan, pulled: StackSources, found: FoundAs | None = None, pool: str | None = None
) -> dict[str, Any]:
    """What the templates read: the Plan's facts and items, what the stack pulls, and how
    the printed commands find the stack (``found``; None: by its name in the project).
    ``pool``: the context of one pool of a fleet (the Plan narrowed to it, the commands
    naming it with ``--pool``); None: the stack's, with ``pools`` the fleet's pools."""
    found = found or FoundAs(plan.stack)
    gpufabric, stack_arg = found.options()
    facts = plan.facts
    job_kind = inspection_kind(facts)
    facts_first = platform_tenant(facts, pool is not None)
    placing = _placing(facts, facts_first)
    charts = {
        it.payload.release: it.payload for it in plan.items if isinstance(it.payload, HelmChart)
    }
    return {
        "stack": plan.stack,
        "gpufabric": gpufabric,
        "stack_arg": stack_arg,
        "stack_file": found.file(),
        "facts": facts,
        "fabric": facts.fabric,
        "nodes": facts.nodes,
        "gang": facts.gang,
        "ops": facts.operators,
        "acceptance": facts.acceptance,
        "tenants": list(facts.tenants.values()),
        "authority": plan.authority,
        "link": nics.link(facts.fabric.type),
        "nic": nics.mode(facts.fabric.rdma),
        "roce": facts.fabric.roce,
        "ib": facts.fabric.infiniband,
        "rails": facts.fabric.rails,
        "phases": phases(plan),
        "describe": lambda item: _describe(item, plan),
        "components": plan.components,
        "charts": charts,
        "overlays": [it.payload for it in plan.items if isinstance(it.payload, KustomizeOverlay)],
        "first_tenant": facts_first,
        "sources": pulled,
        "mirrored": pulled.mirrored,
        "first_netdev": facts.fabric.rails[0].netdev,
        **_first_tenant_keys(facts, facts_first, job_kind),
        "quota_name": lambda t: _object_name(plan, ids.tenant_quota(t.namespace)),
        "nccl_env_name": lambda t: t.nccl_env_name,
        "quota_text": lambda t: _quota_text(facts, t),
        "monitoring": facts.monitoring,
        "alert_classes": alerts.classes(facts) if facts.monitoring.enabled else [],
        "rule_name": _object_name(plan, ids.MONITORING_RULES) if facts.monitoring.enabled else "",
        "resume": resume_facts(facts),
        "nvlink_bar": _nvlink_bar(facts),
        **placing,
        **_pool_keys(plan, pulled, found, pool),
        "adopt": _adoption(plan, found) if pool is None else None,
    }


def _adoption(plan: Plan, found: FoundAs) -> dict[str, Any] | None:
    """The phase that imports the live objects `gpufabric discover` found, when its import
    map lies beside the stack file (None: no map, the runbook is a fresh cluster's)."""
    path = importmap.path_beside(found.path())
    if not path.is_file():
        return None
    shown = str(importmap.path_beside(found.file()))
    imported = importmap.read(path, shown, plan)
    stack, cluster = plan.stack, plan.facts.cluster
    parents = {
        layer: f"PARENT_{layer.upper()}="
        + _single_quote(
            f"{ids.layer_component_name(cluster, layer)}="
            f"{importmap.layer_urn(stack, cluster, layer)}"
        )
        for layer in imported.layers
    }
    provider = "PROVIDER=" + _single_quote(
        f"{ids.provider_name(cluster)}={importmap.provider_urn(stack, cluster)}"
    )
    lines = {
        layer: [
            f"pulumi import --stack {shell_word(stack)} {shell_word(e.type)} "
            f'{shell_word(e.name)} {shell_word(e.id)} --parent "$PARENT_{layer.upper()}" '
            '--provider "$PROVIDER" --generate-code=false'
            for e in imported.entries
            if e.layer == layer
        ]
        for layer in imported.layers
    }
    charts = importmap.adopted_by_charts(plan)
    return {
        "file": shown,
        "count": len(imported.entries),
        "targets": [
            importmap.root_urn(stack, cluster),
            importmap.provider_urn(stack, cluster),
            *(importmap.layer_urn(stack, cluster, layer) for layer in imported.layers),
        ],
        "variables": [provider, *parents.values()],
        "lines": lines,
        "charts": [_describe(it, plan) for it in charts],
        "created": importmap.created(plan, imported),
    }


def _nvlink_bar(facts: Facts) -> dict[str, Any] | None:
    """An NVL72 pool's bar inside one NVLink domain (``verify nccl``'s default), for its
    acceptance text; None on other pools."""
    domains = facts.nodes.nvlink
    if domains is None:
        return None
    gbps, source = nvlink.DOMAIN_BARS[nvlink.product(domains.system)]
    return {"gbps": gbps, "source": source, "gib": nvlink.DOMAIN_BAR_GIB}


def _first_tenant_keys(
    facts: Facts, tenant: str | None, job_kind: JobKind | None
) -> dict[str, Any]:
    """The job the runbook's inspection and acceptance steps run through ``tenant``."""
    return {
        "job_kind": job_kind,
        "worker_pod": first_worker_pod(job_kind, default_job_name(tenant, job_kind, facts))
        if job_kind and tenant
        else None,
        # the most GPU nodes one job of the tenant may span: its quota admits no more
        "quota_nodes": facts.tenants[tenant].gpu_admissible // facts.nodes.gpus_per_node
        if tenant
        else 0,
    }


def _placing(facts: Facts, tenant: str | None) -> dict[str, Any]:
    """What places the printed jobs: a fleet's ``--pool`` (the stack's context: its first
    pool), the leaf scopes where rails are routed per leaf, and both as one option string."""
    pool_arg = f" --pool {shell_word(facts.pool)}" if facts.fleet else ""
    leaf_scopes = _leaf_scopes(facts, tenant, pool_arg)
    return {
        "pool_arg": pool_arg,
        "leaf_scopes": leaf_scopes,
        "leaf_arg": leaf_scopes[0]["arg"] if leaf_scopes else pool_arg,
    }


def _pool_keys(
    plan: Plan, pulled: StackSources, found: FoundAs, pool: str | None
) -> dict[str, Any]:
    """What the templates read of pools: the pool a context is of, a fleet's pools (their
    contexts) and the NicNodePolicies of the network phase."""
    return {
        "pool": pool,
        "pools": _pool_contexts(plan, pulled, found) if pool is None else [],
        "nic_policies": [
            _object_name(plan, it.id)
            for it in plan.items
            if isinstance(it.payload, K8sObject) and it.payload.kind == "NicNodePolicy"
        ],
    }


def platform_tenant(facts: Facts, pool: bool = False) -> str | None:
    """The tenant the runbook's acceptance, sweep, health and example jobs run through: the
    platform tenant the stack names for re-certification (``monitoring.health.inCluster.
    tenant``; in a pool's context, when it has a quota there), else the first tenant (in a
    pool's context, the first with a quota there)."""
    in_cluster = facts.monitoring.health.in_cluster
    named = in_cluster.tenant if in_cluster is not None else None
    if (
        named is not None
        and named in facts.tenants
        and (not pool or facts.tenants[named].gpu_quota > 0)
    ):
        return named
    return _pool_tenant(facts) if pool else next(iter(facts.tenants), None)


def _pool_tenant(facts: Facts) -> str | None:
    """The tenant a pool's acceptance runs through: the first with a quota in the pool (the
    first tenant when none has one: the runbook then says the test cannot start)."""
    with_quota = (ns for ns, t in facts.tenants.items() if t.gpu_quota > 0)
    return next(with_quota, next(iter(facts.tenants), None))


def _pool_contexts(plan: Plan, pulled: StackSources, found: FoundAs) -> list[dict[str, Any]]:
    """A fleet's pools, each the context of the Plan narrowed to it (empty for one pool:
    its runbook is the stack's)."""
    if not plan.facts.fleet:
        return []
    return [context(plan.for_pool(name), pulled, found, name) for name in plan.facts.pool_names]


def _leaf_scopes(facts: Facts, tenant: str | None, pool_arg: str = "") -> list[dict[str, Any]]:
    """Where rails are routed per leaf: per leaf, the `--leaf` option a tenant's jobs take
    (after ``pool_arg``, a fleet's `--pool`), the GPU nodes under it (from
    scheduling.nodeTopology) and a JUnit file name."""
    contract = facts.tenants.get(tenant) if tenant else None
    if contract is None or not contract.leaf_networks or contract.leaf_label is None:
        return []
    label = contract.leaf_label
    # without a node table the nodes under a leaf are unknown: two, the smallest test; a
    # leaf with one GPU node has no pair to test within it (verify nccl refuses --nodes 1)
    sizes = {leaf: facts.gang.nodes_under(label, leaf) or 2 for leaf in contract.leaf_networks}
    return [
        {
            "arg": f"{pool_arg} --leaf {shell_word(leaf)}",
            "nodes": sizes[leaf],
            "junit": shell_word(
                f"nccl-{facts.pool}-{leaf}.xml" if pool_arg else f"nccl-{leaf}.xml"
            ),
        }
        for leaf in contract.leaf_networks
        if sizes[leaf] >= 2
    ]


def _quota_text(facts: Facts, tenant: TenantContract) -> str:
    """What the tenant's GPU ResourceQuota is made of: its quota (in a fleet, each pool's,
    summed) plus its borrowing limit (in a fleet, in each pool)."""
    borrow = tenant.gpu_borrowing_limit
    if not facts.fleet:
        return f"the GPU quota {tenant.gpu_quota}" + (
            f" plus the borrowing limit {borrow}" if borrow else ""
        )
    shares = " + ".join(
        f"{pool} {c.gpu_quota}" for pool, c in facts.tenant_in_pools(tenant.namespace)
    )
    return f"the GPU quotas {shares}" + (
        f" plus the borrowing limit {borrow} in each pool" if borrow else ""
    )


def _object_name(plan: Plan, item_id: str) -> str:
    """The name of the object an item writes (what a reader's ``kubectl get`` names)."""
    payload = next(it.payload for it in plan.items if it.id == item_id)
    assert isinstance(payload, K8sObject), item_id
    return str(payload.body["metadata"]["name"])


def render(plan: Plan, pulled: StackSources, found: FoundAs | None = None) -> str:
    """The runbook of a Plan; ``pulled`` is what its stack pulls (``plan.pulls.collect``),
    ``found`` how its commands find the stack (None: by its name in the project)."""
    env = environment(RUNBOOK_DIR)
    env.filters["sq"] = _single_quote
    env.filters["sh"] = shell_word
    env.filters["md"] = markdown_code

    def pool_part(part: str, pool: Mapping[str, Any]) -> str:
        """One part of the runbook (a template) as one pool of a fleet reads it, its
        headings one level down (under the pool's own)."""
        text = env.get_template("pool.md.j2").render(part=part, **pool)
        return _demote_headings(text)

    env.globals["pool_part"] = pool_part
    text = env.get_template("runbook.md.j2").render(**context(plan, pulled, found))
    # One blank line between blocks, a single trailing newline: stable, diff-friendly output.
    lines: list[str] = []
    for line in text.splitlines():
        line = line.rstrip()
        if not line and (not lines or not lines[-1]):
            continue
        lines.append(line)
    return "\n".join(lines).rstrip("\n") + "\n"


def _demote_headings(text: str) -> str:
    """Markdown headings one level down, outside code blocks (a shell comment stays); ""
    for a part with nothing to say."""
    if not text.strip():
        return ""
    out: list[str] = []
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,5} ", line):
            line = "#" + line
        out.append(line)
    return "\n".join(out) + "\n"


def _single_quote(value: str) -> str:
    """Quote for a POSIX shell (URNs carry `$` and `*`)."""
    return _markdown_safe_shell(str(value), "'" + str(value).replace("'", "'\\''") + "'")


# What may not stand in a Markdown line, code span or table cell: line breaks and other
# control characters, backticks (end a code span), pipes (end a table cell), and anything
# beyond ASCII (look-alikes, bidirectional overrides).
_NOT_MARKDOWN_SAFE = re.compile(r"[^\x20-\x7e]|[`|]")


def _escape(char: str) -> str:
    code = ord(char)
    return (
        f"\\x{code:02x}"
        if code < 0x100
        else f"\\u{code:04x}"
        if code < 0x10000
        else f"\\U{code:08x}"
    )


def _markdown_safe_shell(value: str, quoted: str) -> str:
    if not _NOT_MARKDOWN_SAFE.search(value):
        return quoted
    # bash's $'...' spells every such character as an escape, keeping the exact value.
    body = "".join(_escape(c) if _NOT_MARKDOWN_SAFE.match(c) or c in "\\'" else c for c in value)
    return f"$'{body}'"


def shell_word(value: object) -> str:
    """One shell word holding exactly ``value``, safe in a Markdown line or table cell: a
    value from the stack reaching a command the reader pastes (``shlex.quote``; ``$'...'``
    where the value holds characters Markdown would act on)."""
    text = str(value)
    return _markdown_safe_shell(text, shlex.quote(text))


def markdown_code(value: object) -> str:
    """A value from the stack inside a Markdown code span or table cell: characters that
    would end the span, the cell or the line are shown as escapes."""
    return _NOT_MARKDOWN_SAFE.sub(lambda m: _escape(m.group()), str(value))


__all__ = [
    "RUNBOOK_DIR",
    "FoundAs",
    "Phase",
    "context",
    "markdown_code",
    "phases",
    "render",
    "shell_word",
]
