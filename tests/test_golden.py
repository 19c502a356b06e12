"""Everything gpufabric writes stays byte-identical unless a change means it to differ.

The digests in tests/fixtures/golden.json were recorded before the "Rooms for what varies"
redesign; a refactor that changes one byte of a rendered file, the runbook, a job or a
command's output fails here with the outputs that differ. An intended change records new
digests with ``.venv/bin/python tests/golden.py --update`` and says why in its commit.
"""

from __future__ import annotations

import json
from pathlib import Path

import golden


def test_every_output_matches_the_recorded_digests(tmp_path: Path) -> None:
    recorded = json.loads(golden.DIGESTS.read_text())
    fresh = golden.compute(tmp_path)
    changed = [
        f"{stack}/{output}"
        for stack in sorted(set(recorded) | set(fresh))
        for output in sorted(set(recorded.get(stack, {})) | set(fresh.get(stack, {})))
        if recorded.get(stack, {}).get(output) != fresh.get(stack, {}).get(output)
    ]
    assert not changed, f"{len(changed)} outputs changed: {changed[:40]}"


def test_the_matrix_reaches_every_nic_mode_and_scheduler() -> None:
    seen = {
        (
            cfg["gpufabric:fabric"]["type"],
            cfg["gpufabric:fabric"].get("rdma", "shared"),
            cfg["gpufabric:scheduling"].get("gang", "kueue"),
        )
        for cfg in golden.variants().values()
    }
    modes = {(t, r) for t, r, _ in seen}
    assert modes == {
        ("infiniband", "shared"),
        ("infiniband", "sriov"),
        ("infiniband", "hostdevice"),
        ("roce", "shared"),
        ("roce", "sriov"),
        ("roce", "hostdevice"),
        ("roce", "none"),
    }
    assert {g for _, _, g in seen} == {"kueue", "volcano"}
