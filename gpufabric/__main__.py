"""The ``gpufabric`` program (and ``python -m gpufabric``).

The command's modules are loaded with the cyclic garbage collector off: what they build
(the config model's validators, the templates, the schemas) lives as long as the process,
and collecting while they load walks that heap again and again (a tenth of a large
render's time). :func:`gpufabric.cli.entry` then freezes it and turns the collector on.
"""

from __future__ import annotations

import gc
import sys


def main() -> int:
    gc.disable()
    try:
        from gpufabric.cli import entry
    except BaseException:
        gc.enable()
        raise
    return entry()


if __name__ == "__main__":
    sys.exit(main())
