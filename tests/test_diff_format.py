"""How `gpufabric diff` shows a changed value in Markdown: a change inside a list or mapping
(a ClusterQueue's quota) is shown as the element that changed, never a cut-off JSON list."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from builders import example_config

from gpufabric.cli import main
from gpufabric.outputs.diff import FieldChange, change_lines


def _stack(directory: Path, config: dict[str, object]) -> Path:
    directory.mkdir(parents=True)
    path = directory / "Pulumi.s.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    return path


def test_a_quota_change_in_a_cluster_queue_shows_the_changed_quota(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = example_config("prod-ib")
    tenant = config["gpufabric:tenants"][0]
    before = tenant["gpuQuota"]
    assert (
        main(
            [
                "render",
                "--stack",
                str(_stack(tmp_path / "b", config)),
                "--out",
                str(tmp_path / "base"),
            ]
        )
        == 0
    )
    tenant["gpuQuota"] = before * 3 // 4
    head = _stack(tmp_path / "h", config)
    capsys.readouterr()
    assert main(["diff", "--stack", str(head), "--base", str(tmp_path / "base")]) == 0
    out = capsys.readouterr().out
    assert (
        "`object.spec.resourceGroups[0].flavors[gpu-nodes].resources[nvidia.com/gpu]"
        f".nominalQuota`: {before} → {before * 3 // 4}" in out
    ), out
    assert "..." not in out


def test_many_changes_inside_one_value_are_counted_not_cut() -> None:
    old = [{"n": i} for i in range(15)]
    new = [{"n": i + 1} for i in range(15)]
    lines = change_lines(FieldChange("spec.list", old, new))
    assert lines[0] == "`spec.list[0].n`: 0 → 1"
    assert lines[-1] == "... 5 more changes in `spec.list`"


def test_a_scalar_or_a_type_change_is_one_line() -> None:
    assert change_lines(FieldChange("spec.x", 1, 2)) == ["`spec.x`: 1 → 2"]
    assert change_lines(FieldChange("spec.x", None, [1])) == ["`spec.x`: ∅ → [1]"]
    assert change_lines(FieldChange("spec.x", [], [1])) == ["`spec.x`: [] → [1]"]


def test_a_long_text_change_shows_where_it_changed() -> None:
    """A chart's embedded config or a CEL expression: the changed line or stretch is shown,
    not two equal cut-off starts (a new user saw `kind: Configura... → kind: Configura...`)."""
    from gpufabric.outputs.diff import FieldChange, change_lines

    config = (
        "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nresources:\n  - rdma/ib0\n"
    )
    (line,) = change_lines(FieldChange("values.config", config, config + "  - rdma/a100r0\n"))
    assert line == "`values.config` line 5: ∅ →   - rdma/a100r0"
    old = "^( *gpufabric-networks/(ib0|ib1|ib2|ib3|ib4|ib5|ib6|ib7|roce0|roce1) *)$"
    new = old.replace("roce1)", "roce1|a100r0)")
    (line,) = change_lines(FieldChange("spec.expression", old, new))
    assert "a100r0" in line
    assert line.startswith("`spec.expression` at 67: ...")
