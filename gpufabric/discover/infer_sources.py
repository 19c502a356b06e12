"""Image mirrors (``sources.registries``) from the image references gpufabric wrote: the
stack inferred so far is rendered, and where a live image or repository field reads
``<mirror>/<path>`` while the render reads ``<registry>/<path>``, ``<registry>`` is pulled
through ``<mirror>``."""

from __future__ import annotations

from typing import Any

import yaml

from gpufabric.discover.infer import Context
from gpufabric.discover.roundtrip import compare
from gpufabric.model.problems import StackError
from gpufabric.model.sources import split_registry
from gpufabric.model.stackfile import parse_stack_text
from gpufabric.plan.build import build_plan

IMAGE_FIELDS = ("image", "repository")


def mirror_of(live: str, rendered: str) -> tuple[str, str] | None:
    """(registry, mirror prefix) when ``live`` is ``rendered`` pulled through a mirror."""
    registry, rest = split_registry(rendered)
    if not rest or not live.endswith("/" + rest):
        # Docker Hub official images: the mirror holds library/<name> or <name>
        short = rest.removeprefix("library/")
        if not (short != rest and live.endswith("/" + short)):
            return None
        rest = short
    mirror = live[: -len(rest) - 1]
    if not mirror or mirror == registry or split_registry(mirror + "/x")[0] == registry:
        return None
    return registry, mirror


def registries(ctx: Context, config: dict[str, Any]) -> dict[str, str]:
    """The mirror of each registry whose images the live objects pull through one (empty
    where the inferred stack does not render)."""
    try:
        model = parse_stack_text(yaml.safe_dump({"config": config}), ctx.stack)
    except StackError:
        return {}
    from gpufabric.model.versions import known_upstreams

    upstream, _ = known_upstreams()
    gate = compare(build_plan(ctx.stack, model), ctx.snap.all())
    found: dict[str, str] = {}
    for diff in gate.differences:
        leaf = diff.field.rsplit(".", 1)[-1]
        if leaf not in IMAGE_FIELDS:
            continue
        if not (isinstance(diff.live, str) and isinstance(diff.rendered, str)):
            continue
        pair = mirror_of(diff.live, diff.rendered)
        if pair is None or pair[0] not in upstream:
            continue
        registry, mirror = pair
        if found.setdefault(registry, mirror) != mirror:
            ctx.notes.unmapped.append(
                f"{diff.object}: {diff.field}: {registry} pulled through {mirror} here and "
                f"{found[registry]} elsewhere: the first written as sources.registries"
            )
    return dict(sorted(found.items()))
