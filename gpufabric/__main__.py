"""The ``gpufabric`` program (and ``python -m gpufabric``)."""

from __future__ import annotations

import sys


def main() -> int:
    from gpufabric.cli import entry

    return entry()


if __name__ == "__main__":
    sys.exit(main())
