"""The discovered stack as a commented stack file: a header saying where it came from and
what was left out, then the ``config:`` sections in the order the examples write them."""

from __future__ import annotations

import re
from typing import Any

from gpufabric.discover.infer import Notes
from gpufabric.support import yamlcodec

HEADER = re.compile(r"# [A-Za-z0-9_.-]+: discovered by `gpufabric discover` from ")
"""The first line of every stack file discover writes (:func:`text`)."""


def written_by_discover(first_line: str) -> bool:
    """Whether a file whose first line is ``first_line`` was written by discover (which
    replaces it; another file is overwritten only with --force)."""
    return HEADER.match(first_line) is not None


def text(name: str, context: str, config: dict[str, Any], notes: Notes) -> str:
    head = [
        f"# {name}: discovered by `gpufabric discover` from {context} (read-only).",
        "#",
        "# Values equal to gpufabric's defaults are left out. Review this file, then",
        f"# `gpufabric validate --stack {name}` and `gpufabric discover ... --allow-diff`",
        "# to see what `pulumi up` would change.",
    ]
    for path, command in notes.secrets:
        head.append(f"# {path}: not read (in a Secret); set it with `{command}`")
    for hint in notes.hints:
        head.append(f"# hint: {hint}")
    if notes.unmapped:
        head.append(
            f"# {len(notes.unmapped)} live field(s) could not be mapped (printed on stderr)."
        )
    if notes.foreign:
        head.append(f"# {len(notes.foreign)} foreign object(s) left alone (not gpufabric's).")
    body = yamlcodec.dump({"config": config})
    return "\n".join(head) + "\n" + body
