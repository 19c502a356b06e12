"""``gpufabric images``: every chart, manifest and image the stack pulls, for filling a
mirror (:mod:`gpufabric.outputs.images`, loaded when the command runs)."""

from __future__ import annotations

import argparse
import sys

from gpufabric.exitcodes import ExitCode
from gpufabric.model.stackfile import Stack


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--format",
        choices=("text", "json", "refs"),
        default="text",
        help="text (default); json; refs: one image per line, with its mirror when one is set",
    )


def cmd_images(stack: Stack, args: argparse.Namespace) -> int:
    from gpufabric.outputs import images

    pulled = stack.pulled
    if args.format == "json":
        sys.stdout.write(images.to_json(pulled))
    elif args.format == "refs":
        sys.stdout.write(images.to_refs(pulled))
    else:
        sys.stdout.write(images.to_text(pulled))
    return ExitCode.OK
