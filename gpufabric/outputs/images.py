"""``gpufabric images``: what a stack pulls (:mod:`gpufabric.plan.pulls`) as text, JSON or
one reference per line, for filling a mirror before an air-gapped install."""

from __future__ import annotations

import json

from msgspec.structs import asdict

from gpufabric.plan.pulls import Manifest, StackSources
from gpufabric.support.counts import counted

_BUILD = ("build", "build_file")
"""Manifest keys only a kustomize git base served by a file mirror has."""


def to_json(pulled: StackSources) -> str:
    doc = {
        "stack": pulled.stack,
        "mirrored": pulled.mirrored,
        "charts": [asdict(c) for c in pulled.charts],
        "manifests": [
            {k: v for k, v in asdict(m).items() if v is not None or k not in _BUILD}
            for m in pulled.manifests
        ],
        "images": [
            {
                "image": i.upstream,
                "pulled": i.pulled,
                "usedBy": i.used_by,
                **({"note": i.note} if i.note else {}),
            }
            for i in pulled.images
        ],
    }
    return json.dumps(doc, indent=2) + "\n"


def to_refs(pulled: StackSources) -> str:
    """One image per line (upstream, then the mirrored reference when it differs),
    ready for a copy loop."""
    lines = []
    for i in pulled.images:
        lines.append(i.upstream if i.pulled == i.upstream else f"{i.upstream} {i.pulled}")
    return "\n".join(lines) + "\n"


def _build_note(m: Manifest) -> str | None:
    """How to make the one file a plain file mirror serves for a kustomize git base."""
    if not m.build:
        return None
    return (
        "a kustomize git base, which a file mirror cannot serve: render it where upstream is "
        f"reachable (kubectl clones it with git), {m.build} ; then serve {m.build_file} at "
        "the URL above"
    )


def to_text(pulled: StackSources) -> str:
    out = [
        f"Stack {pulled.stack}: {counted(len(pulled.charts), 'chart')}, "
        f"{counted(len(pulled.manifests), 'manifest')}, {counted(len(pulled.images), 'image')}"
        + (" (through the stack's mirrors)" if pulled.mirrored else "")
    ]
    sections: list[tuple[str, list[tuple[str, str, str, str | None]]]] = [
        (
            "Charts",
            [
                (
                    f"{c.repository}  {c.chart} {c.version}",
                    c.pulled_repository,
                    c.repository,
                    None,
                )
                for c in pulled.charts
            ],
        ),
        (
            "Manifests",
            [(m.url, m.pulled_url, m.url, _build_note(m)) for m in pulled.manifests],
        ),
        (
            "Images",
            [
                (f"{i.upstream}    ({', '.join(i.used_by)})", i.pulled, i.upstream, i.note)
                for i in pulled.images
            ],
        ),
    ]
    for title, rows in sections:
        out += ["", title]
        for shown, target, upstream, note in rows:
            line = f"  {shown}"
            if target != upstream:
                line += f"\n      -> {target}"
            if note:
                line += f"\n      note: {note}"
            out.append(line)
    if pulled.version_overrides:
        out.append("")
        out.append(
            "Chart-default images of "
            + ", ".join(pulled.version_overrides)
            + " are those of the pinned release (the stack overrides the version): check "
            "the chart's values at your version."
        )
    return "\n".join(out) + "\n"


__all__ = ["to_json", "to_refs", "to_text"]
