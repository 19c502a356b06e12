"""GPU layer of a fleet: pools whose driver differs get an NVIDIADriver each, on their own
nodes; the chart's default NVIDIADriver (the stack's driver) serves every other GPU node."""

from __future__ import annotations

from typing import Any

from builders import body, plan_of
from fleetvariants import fleet_mixed, fleet_sriov_drivers

from gpufabric.plan import ids
from gpufabric.plan.build import Plan
from gpufabric.plan.items import HelmChart


def drivers(plan: Plan) -> dict[str, dict[str, Any]]:
    out = {}
    for item in plan.items:
        obj = getattr(item.payload, "body", None)
        if isinstance(obj, dict) and obj.get("kind") == "NVIDIADriver":
            out[obj["metadata"]["name"]] = obj["spec"]
    return out


def chart_driver(plan: Plan) -> dict[str, Any]:
    chart = plan.item(ids.GPU_OPERATOR).payload
    assert isinstance(chart, HelmChart)
    return chart.values["driver"]  # type: ignore[no-any-return]


def test_pools_with_their_own_driver_get_an_nvidia_driver_on_their_nodes() -> None:
    plan = plan_of(fleet_sriov_drivers())
    found = drivers(plan)
    assert sorted(found) == ["h200", "l40s"]  # h100 runs the stack's driver
    l40s = found["l40s"]
    assert l40s["default"] is False
    assert l40s["driverType"] == "gpu"
    assert l40s["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-L40S"}
    assert (l40s["repository"], l40s["image"], l40s["version"]) == (
        "nvcr.io/nvidia",
        "driver",
        "580.95.05",
    )
    assert l40s["usePrecompiled"] is False
    assert l40s["kernelModuleType"] == "open"  # DMA-BUF needs the open modules
    h200 = found["h200"]
    # precompiled driver containers are named by the branch of the pinned driver
    assert (h200["usePrecompiled"], h200["version"]) == (True, "595")
    assert {
        "key": "dedicated",
        "operator": "Equal",
        "value": "h200",
        "effect": "NoSchedule",
    } in h200["tolerations"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in h200[
        "tolerations"
    ]
    # the chart keeps the stack's driver (none pinned: the chart's) and its default CR
    driver = chart_driver(plan)
    assert driver["nvidiaDriverCRD"] == {"enabled": True}
    assert "version" not in driver
    assert driver["usePrecompiled"] is False
    for pool in ("l40s", "h200"):
        assert plan.item(ids.nvidia_driver(pool)).depends_on == (ids.GPU_OPERATOR,)


def test_the_chart_keeps_the_stacks_version_not_the_first_pools() -> None:
    cfg = fleet_sriov_drivers()
    cfg["gpufabric:gpuOperator"]["driver"]["version"] = "595.91.07"
    cfg["gpufabric:gpuNodes"][0]["driver"] = {"version": "590.48.01"}
    plan = plan_of(cfg)
    assert chart_driver(plan)["version"] == "595.91.07"
    assert drivers(plan)["h100"]["version"] == "590.48.01"


def test_a_pool_with_another_gpudirect_mode_gets_its_own_peermem_driver() -> None:
    cfg = fleet_mixed()
    cfg["gpufabric:gpuOperator"] = {"driver": {"useNvidiaDriverCRD": True}}
    l40s = cfg["gpufabric:gpuNodes"][1]["fabric"]
    l40s["gpuDirect"] = "peermem"
    l40s["nicDriver"] = {"source": "host", "hostStack": "doca"}
    found = drivers(plan_of(cfg))
    assert list(found) == ["l40s"]
    assert found["l40s"]["rdma"] == {"enabled": True, "useHostMofed": True}
    assert found["l40s"]["kernelModuleType"] == "auto"


def test_a_fleet_of_one_driver_renders_no_nvidia_driver() -> None:
    plan = plan_of(fleet_mixed())
    assert not drivers(plan)
    assert ids.GPU_OPERATOR in {it.id for it in plan.items}
    assert body(plan, ids.GPU_NAMESPACE)["kind"] == "Namespace"
