"""GPU layer: the GPU Operator values a stack produces for each GPUDirect mode and NIC
driver source, and that every key set exists in the pinned chart's defaults."""

from __future__ import annotations

import tarfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml
from conftest import EXAMPLE_STACKS, SHARED, example_config, sections

from components.items import await_transform
from gpufabric.model.problems import StackError
from gpufabric.model.stackfile import load_stack, model_from_config
from gpufabric.plan.build import build_plan
from gpufabric.plan.ids import GPU_OPERATOR as CHART_ID
from gpufabric.plan.items import HelmChart


def chart_of(config: dict[str, Any]) -> HelmChart:
    plan = build_plan("t", model_from_config(sections(config), "t", from_file=True))
    chart = plan.item(CHART_ID).payload
    assert isinstance(chart, HelmChart)
    return chart


def driver_of(config: dict[str, Any]) -> Mapping[str, Any]:
    return chart_of(config).values["driver"]  # type: ignore[no-any-return]


def test_dmabuf_with_host_drivers(lab: dict[str, Any]) -> None:
    driver = driver_of(lab)
    assert driver["kernelModuleType"] == "open"
    # useHostMofed is read only on the peermem path: never set as an inert flag
    assert driver["rdma"] == {"enabled": False, "useHostMofed": False}


def test_dmabuf_with_operator_drivers() -> None:
    driver = driver_of(example_config("prod-ib"))
    assert driver["kernelModuleType"] == "open"
    assert driver["rdma"] == {"enabled": False, "useHostMofed": False}


def test_legacy_peermem(lab: dict[str, Any]) -> None:
    lab["gpufabric:fabric"]["gpuDirect"] = "peermem"
    lab["gpufabric:fabric"]["nicDriver"] = {"source": "host", "hostStack": "doca"}
    driver = driver_of(lab)
    assert driver["rdma"] == {"enabled": True, "useHostMofed": True}
    assert driver["kernelModuleType"] == "auto"


def test_no_rdma_means_no_gpudirect() -> None:
    driver = driver_of(example_config("kind-dev"))
    assert driver["rdma"] == {"enabled": False, "useHostMofed": False}


def test_options_pass_through(lab: dict[str, Any]) -> None:
    lab["gpufabric:gpuOperator"] = {
        "driver": {"version": "595.91.07", "usePrecompiled": True},
        "gdrcopy": True,
        "gds": True,
        "dcgmExporter": {"serviceMonitor": True},
        "migStrategy": "mixed",
    }
    # GDS needs storage it can read through: NFS over RDMA.
    lab["gpufabric:storage"] = {
        "backends": [{"name": "fs", "nfs": {"server": "10.0.0.5", "share": "/export"}}]
    }
    values = chart_of(lab).values
    assert values["driver"]["version"] == "595.91.07"
    assert values["driver"]["usePrecompiled"] is True
    assert values["gdrcopy"] == {"enabled": True}
    assert values["gds"] == {"enabled": True}
    assert values["dcgmExporter"]["serviceMonitor"] == {"enabled": True}
    assert values["mig"] == {"strategy": "mixed"}


def test_node_feature_discovery_runs_from_the_gpu_operator(lab: dict[str, Any]) -> None:
    assert chart_of(lab).values["nfd"] == {"enabled": True}


def test_cluster_policy_is_awaited(lab: dict[str, Any]) -> None:
    assert chart_of(lab).awaits == {"nvidia.com/v1/ClusterPolicy": "jsonpath={.status.state}=ready"}


@pytest.mark.parametrize(
    ("driver", "path"),
    [
        ({"enabled": False, "version": "595.91.07"}, "gpuOperator.driver.version"),
        ({"version": "latest"}, "gpuOperator.driver.version"),
        ({"usePrecompiled": True, "useNvidiaDriverCRD": True}, "gpuOperator.driver.usePrecompiled"),
    ],
)
def test_driver_option_errors(lab: dict[str, Any], driver: dict[str, Any], path: str) -> None:
    lab["gpufabric:gpuOperator"] = {"driver": driver}
    with pytest.raises(StackError) as info:
        model_from_config(sections(lab), "t", from_file=True)
    assert path in {p.path for p in info.value.problems}


def test_host_driver_cannot_do_peermem(lab: dict[str, Any]) -> None:
    lab["gpufabric:fabric"]["gpuDirect"] = "peermem"
    lab["gpufabric:fabric"]["nicDriver"] = {"source": "operator"}
    lab["gpufabric:gpuOperator"] = {"driver": {"enabled": False}}
    with pytest.raises(StackError) as info:
        model_from_config(sections(lab), "t", from_file=True)
    assert "gpuOperator.driver.enabled" in {p.path for p in info.value.problems}


def _leaves(values: Mapping[str, Any], prefix: str = "") -> Iterator[str]:
    for key, value in values.items():
        path = f"{prefix}.{key}" if prefix else key
        if isinstance(value, Mapping) and value:
            yield from _leaves(value, path)
        else:
            yield path


def _has(defaults: Mapping[str, Any], path: str) -> bool:
    node: Any = defaults
    for part in path.split("."):
        if node is None or isinstance(node, str):
            return True  # a free-form value (e.g. a config override) the stack fills in
        if isinstance(node, Mapping) and not node:
            return True  # an empty map (e.g. additionalLabels: {}) takes any key
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return True


def _in_subchart(chart: str, version: str, path: str) -> bool:
    """``path`` is ``<subchart>.<key>`` and the subchart's own values.yaml has the key."""
    sub, _, rest = path.partition(".")
    for name in {f"{chart}-{version}.tgz", f"{chart}-v{version.lstrip('v')}.tgz"}:
        package = SHARED / "upstream" / "charts" / name
        if package.is_file() and rest:
            with tarfile.open(package) as tar:
                try:
                    member = tar.extractfile(f"{chart}/charts/{sub}/values.yaml")
                except KeyError:
                    return False
                assert member is not None
                return _has(yaml.safe_load(member.read()), rest)
    return False


def _templated(chart: str, version: str, path: str) -> bool:
    """The chart's templates read ``.Values.<path>`` (a key its values.yaml documents only
    in a comment, e.g. the GPU Operator's dcgmExporter.config)."""
    for name in {f"{chart}-{version}.tgz", f"{chart}-v{version.lstrip('v')}.tgz"}:
        package = SHARED / "upstream" / "charts" / name
        if package.is_file():
            with tarfile.open(package) as tar:
                for member in tar.getmembers():
                    if f"{chart}/templates/" in member.name and member.isfile():
                        text = tar.extractfile(member).read().decode()  # type: ignore[union-attr]
                        if f".Values.{path}" in text:
                            return True
    return False


def _packaged_values(chart: str, version: str) -> Any:
    """The values.yaml inside the pinned chart's package in ../shared/upstream/charts (what
    `helm show values` prints) when ../shared/chart-values has no copy of it."""
    for name in {f"{chart}-{version}.tgz", f"{chart}-v{version.lstrip('v')}.tgz"}:
        package = SHARED / "upstream" / "charts" / name
        if package.is_file():
            with tarfile.open(package) as tar:
                member = tar.extractfile(f"{chart}/values.yaml")
                assert member is not None
                return yaml.safe_load(member.read())
    pytest.fail(f"no pinned default values for {chart} {version}")


@pytest.mark.parametrize("name", EXAMPLE_STACKS)
def test_every_values_key_exists_in_the_pinned_chart(name: str) -> None:
    stack = load_stack(name)
    plan = build_plan(name, stack.model)
    charts = [it.payload for it in plan.items if isinstance(it.payload, HelmChart)]
    checked = 0
    for chart in charts:
        version = "v" + chart.version.lstrip("v")
        defaults_file = SHARED / "chart-values" / f"{chart.chart}-{version}.values.yaml"
        if defaults_file.is_file():
            defaults = yaml.safe_load(Path(defaults_file).read_text())
        else:
            if not (SHARED / "chart-values").is_dir():
                pytest.skip("../shared/chart-values is absent (a user's clone has none)")
            defaults = _packaged_values(chart.chart, chart.version)
        # Image keys of subcharts (set for mirrors) live in the subchart's own values.
        subchart = {e.key for e in plan.components[chart.release].chart_images if e.subchart}
        missing = [
            p
            for p in _leaves(chart.values)
            if not _has(defaults, p)
            and p not in subchart
            and not _templated(chart.chart, chart.version, p)
            and not _in_subchart(chart.chart, chart.version, p)
        ]
        assert missing == [], f"{chart.chart}: keys not in the chart's values.yaml: {missing}"
        checked += 1
    assert checked == len(charts)


def test_await_transform_annotates_only_the_cluster_policy() -> None:
    transform = await_transform({"nvidia.com/v1/ClusterPolicy": "jsonpath={.status.state}=ready"})
    opts = pulumi.ResourceOptions()
    hit = transform(
        pulumi.ResourceTransformArgs(
            custom=True,
            type_="kubernetes:nvidia.com/v1:ClusterPolicy",
            name="cluster-policy",
            props={"metadata": {"name": "cluster-policy", "annotations": {"a": "b"}}},
            opts=opts,
        )
    )
    assert hit is not None
    assert hit.props["metadata"]["annotations"] == {
        "a": "b",
        "pulumi.com/waitFor": "jsonpath={.status.state}=ready",
    }
    miss = transform(
        pulumi.ResourceTransformArgs(
            custom=True, type_="kubernetes:apps/v1:DaemonSet", name="x", props={}, opts=opts
        )
    )
    assert miss is None


def test_dgx_style_host_driver_with_peermem_is_accepted_and_documented() -> None:
    """GPU driver and MLNX_OFED on the host (DGX OS), nvidia-peermem from the host's driver
    package: the operator leaves the driver (and peermem) alone, the runbook says how to load
    and persist the module, and verify checks it is loaded."""
    from builders import model_of

    from gpufabric.outputs.runbook import render
    from gpufabric.plan.pulls import collect
    from gpufabric.verify.expect import from_facts

    config = example_config("prod-ib")
    config["gpufabric:gpuOperator"] = {"driver": {"enabled": False}}
    config["gpufabric:fabric"]["gpuDirect"] = "peermem"
    config["gpufabric:fabric"]["nicDriver"] = {"source": "host", "hostStack": "mlnx-ofed"}
    model = model_of(config)
    plan = build_plan("prod-ib", model)
    driver = plan.item(CHART_ID).payload.values["driver"]  # type: ignore[union-attr]
    assert driver["enabled"] is False
    assert driver["rdma"]["enabled"] is False  # the operator does not manage peermem
    text = render(plan, collect("prod-ib", model))
    assert "modprobe nvidia-peermem" in text
    assert "/etc/modules-load.d/nvidia-peermem.conf" in text
    assert "host MLNX_OFED" in text
    assert from_facts(plan.facts).gpudirect == "peermem"


def test_host_gpu_driver_with_peermem_needs_the_nic_driver_on_the_host_too() -> None:
    from builders import problems_of

    config = example_config("prod-ib")
    config["gpufabric:gpuOperator"] = {"driver": {"enabled": False}}
    config["gpufabric:fabric"]["gpuDirect"] = "peermem"
    config["gpufabric:fabric"]["nicDriver"] = {"source": "operator"}
    assert "nicDriver.source: host" in problems_of(config)["gpuOperator.driver.enabled"]
