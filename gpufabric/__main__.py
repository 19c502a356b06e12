"""The ``gpufabric`` program (and ``python -m gpufabric``).

The command's modules are loaded with the cyclic garbage collector off: what they build
(the config model's validators, the templates, the schemas) lives as long as the process,
and collecting while they load walks that heap again and again (a tenth of a large
render's time). :func:`gpufabric.cli.entry` then freezes it and turns the collector on.

pydantic's plugins are off (``PYDANTIC_DISABLE_PLUGINS=__all__`` unless the environment
sets it): finding them reads the entry points of every installed distribution as the
first model class is built, a cost every command paid for plugins that would only
instrument gpufabric's own config model.
"""

from __future__ import annotations

import gc
import os
import sys


def main() -> int:
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    gc.disable()
    try:
        from gpufabric.cli import entry
    except BaseException:
        gc.enable()
        raise
    return entry()


if __name__ == "__main__":
    sys.exit(main())
