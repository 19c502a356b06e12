"""The pytest-testinfra suite behind ``gpufabric verify nodes`` and ``gpufabric verify pods``.

Run through the CLI, or directly::

    pytest --pyargs gpufabric.verify.nodes.suite.test_node -p gpufabric.verify.nodes.suite.plugin \
        --hosts ssh://gpu-a,ssh://gpu-b --gpufabric-expect expect.json [--gpufabric-root /host]

``expect.json`` is what ``gpufabric verify nodes --stack S --write-expect FILE`` writes.
"""

from pathlib import Path

SUITE_DIR = Path(__file__).parent
