"""Pins in manifests/versions.yaml and the compatibility rules a stack override must obey."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLE_STACKS, sections

from gpufabric.model.problems import StackError
from gpufabric.model.stackfile import model_from_config
from gpufabric.model.versions import check_versions, effective_components, load_catalog


def problems_of(config: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(StackError) as info:
        model_from_config(sections(config), "test", from_file=True)
    return {p.path: p.message for p in info.value.problems}


def test_pins_match_the_supported_releases() -> None:
    c = load_catalog().components
    assert c["gpu-operator"].version == "v26.7.0"
    assert c["network-operator"].version == "26.4.1"
    # the DOCA driver follows the Network Operator release (its hack/release.yaml Mofed tag)
    assert c["doca-driver"].version == "doca3.4.1-26.04-1.1.0.0-1"
    assert effective_components({"network-operator": "26.1.2"})["doca-driver"].version == (
        "doca3.3.0-26.01-1.0.0.0-0"
    )
    pinned = {"network-operator": "26.1.2", "doca-driver": "doca3.3.1-26.01-1.0.0.0-0"}
    assert effective_components(pinned)["doca-driver"].version == pinned["doca-driver"]
    assert c["multus"].version == "v4.3.0"
    assert c["kueue"].version == "0.19.2"
    assert c["volcano"].version == "1.15.1"
    assert c["training-operator"].version == "v1.9.4"
    assert c["trainer"].version == "2.3.0"
    assert c["mpi-operator"].version.startswith("v0.8.")


def test_default_pins_satisfy_every_rule() -> None:
    everything = {"kueue", "mpi-operator", "training-operator", "trainer", "topology", "dmabuf"}
    assert check_versions({}, everything, "1.33") == []
    assert check_versions({}, {"volcano", "topology", "peermem"}, "1.33") == []


def test_manifest_urls_and_images_carry_the_pinned_tag() -> None:
    multus = effective_components({"multus": "v4.2.4"})["multus"]
    assert multus.manifest_url is not None
    assert "/v4.2.4/" in multus.manifest_url
    assert multus.image_ref == "ghcr.io/k8snetworkplumbingwg/multus-cni:v4.2.4-thick"
    mpi = effective_components({})["mpi-operator"]
    assert mpi.image_ref == f"mpioperator/mpi-operator:{mpi.version.lstrip('v')}"


def test_kueue_with_an_old_mpi_operator_is_refused(lab: dict[str, Any]) -> None:
    lab["gpufabric:versions"] = {"mpi-operator": "v0.7.0"}
    message = problems_of(lab)["versions.mpi-operator"]
    assert "kueue-mpijob-needs-mpi-operator-0.8" in message
    assert "'v0.7.0'" in message
    assert ">=0.8.0" in message


def test_the_same_old_mpi_operator_is_fine_without_kueue(lab: dict[str, Any]) -> None:
    lab["gpufabric:versions"] = {"mpi-operator": "v0.7.0"}
    lab["gpufabric:scheduling"]["gang"] = "volcano"
    model = model_from_config(sections(lab), "test", from_file=True)
    assert model.versions == {"mpi-operator": "v0.7.0"}


def test_unknown_component_and_unparsable_version(lab: dict[str, Any]) -> None:
    lab["gpufabric:versions"] = {"kueu": "0.19.0", "volcano": "latest"}
    found = problems_of(lab)
    assert "did you mean 'kueue'" in found["versions.kueu"]
    assert "'latest' is not a release version" in found["versions.volcano"]


def test_conditional_rule_on_network_operator_version(lab: dict[str, Any]) -> None:
    lab["gpufabric:versions"] = {"gpu-operator": "v25.0.0"}
    found = problems_of(lab)
    assert "network-operator-26-needs-gpu-operator-25.3" in found["versions.gpu-operator"]


def test_kubernetes_version_outside_the_supported_range(lab: dict[str, Any]) -> None:
    lab["gpufabric:cluster"]["kubernetesVersion"] = "1.29"
    assert (
        "outside what the pinned releases support" in problems_of(lab)["cluster.kubernetesVersion"]
    )


def test_undocumented_gpudirect_pair_warns_and_documented_pair_does_not() -> None:
    from gpufabric.model.versions import undocumented_gpudirect_pair

    # the pins: GPU Operator 26.7 + Network Operator 26.4, the pair NVIDIA's AI Cluster
    # Runtime ships and tests (testedPairs), though the GPUDirect RDMA matrix stops at 26.1
    assert undocumented_gpudirect_pair({}) is None
    assert undocumented_gpudirect_pair({"network-operator": "26.1.2"}) is None  # documented
    warning = undocumented_gpudirect_pair({"network-operator": "26.7.0"})  # a stack's choice
    assert warning is not None
    assert warning.warning
    assert "not a pair NVIDIA documents for GPUDirect RDMA" in warning.message
    # it says why the defaults are what they are
    assert "Network Operator 26.4.1, are the pair NVIDIA AI Cluster Runtime" in warning.message
    assert "lists no pair newer than Network Operator 26.1" in warning.message
    assert "26.1.x reaches End of Support with Network Operator 26.7" in warning.message
    assert undocumented_gpudirect_pair({"network-operator": "26.1.0"}) is None
    assert undocumented_gpudirect_pair({"gpu-operator": "v26.3.2", "network-operator": "26.4.0"})


def test_stack_warnings_carry_the_pair_only_with_rdma(lab: dict[str, Any]) -> None:
    from gpufabric.model.stackfile import stack_warnings

    assert not any(  # the default pins are a tested pair
        "GPUDirect RDMA" in p.message
        for p in stack_warnings(model_from_config(sections(lab), "t", from_file=True))
    )
    lab["gpufabric:versions"] = {"network-operator": "26.7.0"}
    assert any(
        "GPUDirect RDMA" in p.message
        for p in stack_warnings(model_from_config(sections(lab), "t", from_file=True))
    )
    lab["gpufabric:versions"] = {"network-operator": "26.1.0"}
    lab["gpufabric:fabric"]["gpuDirect"] = "dmabuf"
    assert not any(
        "GPUDirect RDMA" in p.message
        for p in stack_warnings(model_from_config(sections(lab), "t", from_file=True))
    )


@pytest.mark.parametrize("name", EXAMPLE_STACKS)
def test_fresh_render_of_an_example_stack_prints_no_warning(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`make render` (lab-roce) and every example: the default pins warn about nothing."""
    from gpufabric.cli import main

    assert main(["render", "--stack", name, "--out", str(tmp_path / name)]) == 0
    err = capsys.readouterr().err
    assert "warning" not in err.lower(), err


def test_the_catalog_is_read_as_pyyaml_reads_it() -> None:
    """versions.yaml goes through libyaml (yamlcodec) for speed: the values, and their types
    (1 is not True, "1.0" not 1.0), are exactly what PyYAML's safe_load gives."""
    import json

    import yaml

    from gpufabric.support import yamlcodec
    from gpufabric.support.templates import MANIFESTS_DIR

    text = (MANIFESTS_DIR / "versions.yaml").read_text()

    def typed(value: Any) -> str:
        return json.dumps(value, sort_keys=True, default=lambda v: f"{type(v).__name__}:{v}")

    assert typed(yamlcodec.load(text)) == typed(yaml.safe_load(text))
