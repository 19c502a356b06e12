"""``python -m gpufabric.cli``: the ``gpufabric`` program, as ``python -m gpufabric`` runs
it (:func:`gpufabric.cli.entry`)."""

from __future__ import annotations

import sys

from gpufabric.cli import entry

if __name__ == "__main__":
    sys.exit(entry())
