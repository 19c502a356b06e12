"""``fabric.ncclEnv`` (and a pool's): the NCCL variables the tenants' ``nccl-env``
ConfigMaps hold beyond, or otherwise than, what the stack inferred so far renders. The
stack is rendered and each tenant's ConfigMap compared with its render; a variable every
tenant's copy holds alike is the fabric's (``nccl-env``) or its pool's (``nccl-env-<pool>``)."""

from __future__ import annotations

import re
from typing import Any

import yaml

from gpufabric.discover.infer import Context, meta
from gpufabric.model.problems import StackError
from gpufabric.model.stackfile import parse_stack_text
from gpufabric.plan.build import build_plan

NCCL = re.compile(r"^NCCL_[A-Z0-9_]+$")
PREFIX = "nccl-env"


def apply(ctx: Context, config: dict[str, Any]) -> None:
    """Write the ncclEnv each ``nccl-env[-<pool>]`` shows into the config's fabrics."""
    try:
        model = parse_stack_text(yaml.safe_dump({"config": config}), ctx.stack)
    except StackError:
        return
    rendered = {
        (o.body["metadata"].get("namespace"), o.name): dict(o.body.get("data") or {})
        for _, o in build_plan(ctx.stack, model).objects()
        if o.kind == "ConfigMap" and o.name.startswith(PREFIX)
    }
    extra: dict[str, dict[str, str]] = {}
    for cm in ctx.managed("ConfigMap"):
        key = (meta(cm).get("namespace"), str(meta(cm).get("name")))
        if key not in rendered:
            continue
        live = {str(k): str(v) for k, v in ((cm.get("data") or {}).items())}
        mine = {k: v for k, v in live.items() if NCCL.match(k) and rendered[key].get(k) != v}
        seen = extra.setdefault(key[1], mine)
        if seen != mine:
            ctx.notes.unmap(
                cm, "data", "the tenants' NCCL variables differ from one another: the first kept"
            )
    for name, env in sorted(extra.items()):
        if env:
            _fabric(config, name.removeprefix(PREFIX).removeprefix("-"))["ncclEnv"] = env


def _fabric(config: dict[str, Any], pool: str) -> dict[str, Any]:
    """The fabric section ``nccl-env-<pool>`` belongs to (the stack's for ``nccl-env``)."""
    nodes = config.get("gpufabric:gpuNodes")
    if pool and isinstance(nodes, list):
        for entry in nodes:
            if entry.get("name") == pool:
                fabric: dict[str, Any] = entry.setdefault("fabric", {})
                return fabric
    stack: dict[str, Any] = config.setdefault("gpufabric:fabric", {})
    return stack
