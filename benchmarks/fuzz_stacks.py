"""Fuzz the CLI with mutated example stacks and print the classes of outcome.

    .venv/bin/python benchmarks/fuzz_stacks.py [--count 2000] [--seed 1]

Every command must end with exit 0 or 2 and no traceback within 10 s; the script prints
how many inputs were accepted or refused, per command, the slowest runs, and every crash
(exit 1 when there is one).
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from stackfuzz import fuzz


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        outcomes = list(fuzz(args.seed, args.count, Path(tmp)))
    classes = collections.Counter((o.command, o.code) for o in outcomes)
    kinds = collections.Counter(
        o.description.split(": ", 1)[1].split(" ")[0] for o in outcomes if o.command == "validate"
    )
    print(
        f"{args.count} mutated stacks (seed {args.seed}), {len(outcomes)} commands in {time.perf_counter() - start:.1f} s"
    )
    print("mutations: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
    for (command, code), n in sorted(classes.items()):
        print(f"  {command:<9} exit {code:>2}: {n}")
    slow = sorted(outcomes, key=lambda o: -o.seconds)[:3]
    print("slowest: " + "; ".join(f"{o.command} {o.seconds:.2f} s ({o.description})" for o in slow))
    bad = [o for o in outcomes if o.code not in (0, 2) or o.error]
    for o in bad:
        print(f"CRASH {o.description} / {o.command}: exit {o.code} {o.error}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
