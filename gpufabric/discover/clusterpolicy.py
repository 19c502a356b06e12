"""The GPU Operator's ClusterPolicy: its chart makes it from the values gpufabric sets, so it
is read back into ``gpuOperator`` settings and compared with the render at the values the
chart copies into it.

The pinned chart's ``templates/clusterpolicy.yaml`` (gpu-operator v26.7.0) copies each of
its values to the same path under ``spec``, with these exceptions, proven with the real
``helm template`` by tests/conformance/test_discover_upstream.py: ``driver.nvidiaDriverCRD.
enabled`` is ``spec.driver.useNvidiaDriverCRD``; with it on, the driver's own image and
module settings are left out; NFD's, the operator Deployment's, the DRA driver's and the
DCGM metrics ConfigMap's values make other objects.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from gpufabric.model.sources import get_path
from gpufabric.plan.items import HelmChart

CHART = "gpu-operator"
KIND = "ClusterPolicy"
RENAMED = {"driver.nvidiaDriverCRD.enabled": "driver.useNvidiaDriverCRD"}
ELSEWHERE = (
    "nfd.",
    "node-feature-discovery.",
    "operator.",
    "draDriver.",
    "dcgmExporter.config.create",
    "dcgmExporter.config.data",
)
"""Values that make other objects than the ClusterPolicy."""
WITHOUT_CRD = ("driver.kernelModuleType", "driver.usePrecompiled", "driver.repository", "driver.image", "driver.version")  # fmt: skip
"""Driver settings the chart leaves out of the policy when NVIDIADriver objects hold them."""


def _leaves(values: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in values.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping) and value:
            yield from _leaves(value, path)
        else:
            yield path, value


def policy_fields(values: Mapping[str, Any]) -> dict[str, Any]:
    """ClusterPolicy ``spec`` path -> value, for each of the chart values that the chart
    copies into the policy."""
    crd = bool(get_path(values, "driver.nvidiaDriverCRD.enabled"))
    out: dict[str, Any] = {}
    for path, value in _leaves(values):
        if path.startswith(ELSEWHERE) or (crd and path in WITHOUT_CRD):
            continue
        out[RENAMED.get(path, path)] = value
    return out


def spec(obj: Mapping[str, Any]) -> dict[str, Any]:
    return dict(obj.get("spec") or {})


def chart_values(items: Any) -> Mapping[str, Any] | None:
    """The GPU Operator chart's values among a plan's items (None: the plan has none)."""
    for item in items:
        if isinstance(item.payload, HelmChart) and item.payload.chart == CHART:
            return item.payload.values
    return None


def live_policy(objects: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The cluster's ClusterPolicy (the operator serves one)."""
    found = [o for o in objects if o.get("kind") == KIND]
    return found[0] if found else None


def compared(values: Mapping[str, Any], live: dict[str, Any]) -> Iterator[tuple[str, Any, Any]]:
    """(spec path, live, rendered) of each value gpufabric sets that the live policy holds
    otherwise."""
    have = spec(live)
    for path, value in sorted(policy_fields(values).items()):
        seen = get_path(have, path)
        if seen != value:
            yield f"spec.{path}", seen, value


# ------------------------------------------------------------------------------ reading back


def default_driver() -> str | None:
    """The driver version the pinned chart installs when the stack names none."""
    from gpufabric.model.sources import split_tag
    from gpufabric.model.versions import effective_components
    from gpufabric.plan.gpu import DRIVER_IMAGE_KEY

    component = effective_components({})[CHART]
    for entry in component.chart_images:
        if entry.key == DRIVER_IMAGE_KEY:
            return split_tag(component.expand(entry.image) or "")[1] or None
    return None


def gpu_operator(live: list[dict[str, Any]]) -> dict[str, Any]:
    """``gpuOperator`` settings the live ClusterPolicy shows that differ from the defaults."""
    policy = live_policy(live)
    if policy is None:
        return {}
    s = spec(policy)
    driver: dict[str, Any] = {}
    if get_path(s, "driver.enabled") is False:
        driver["enabled"] = False
    for key in ("usePrecompiled", "useNvidiaDriverCRD"):
        if get_path(s, f"driver.{key}") is True:
            driver[key] = True
    version = get_path(s, "driver.version")
    if driver.get("enabled", True) and version and str(version) != default_driver():
        driver["version"] = str(version)
    out: dict[str, Any] = {"driver": driver} if driver else {}
    for key in ("gdrcopy", "gds"):
        if get_path(s, f"{key}.enabled") is True:
            out[key] = True
    if get_path(s, "cdi.enabled") is False:
        out["cdi"] = False
    strategy = get_path(s, "mig.strategy")
    if strategy not in (None, "single"):
        out["migStrategy"] = strategy
    dcgm: dict[str, Any] = {}
    if get_path(s, "dcgmExporter.enabled") is False:
        dcgm["enabled"] = False
    if get_path(s, "dcgmExporter.serviceMonitor.enabled") is True:
        dcgm["serviceMonitor"] = True
    if dcgm:
        out["dcgmExporter"] = dcgm
    return out


def gpudirect(live: list[dict[str, Any]]) -> str | None:
    """``fabric.gpuDirect: peermem`` where the policy loads nvidia-peermem (``driver.rdma``)
    or keeps the chart's ``auto`` kernel modules, which gpufabric pins to ``open`` for
    DMA-BUF (plan/gpu.py); None: the default (DMA-BUF) or no policy."""
    policy = live_policy(live)
    if policy is None:
        return None
    s = spec(policy)
    if (
        get_path(s, "driver.rdma.enabled") is True
        or get_path(s, "driver.kernelModuleType") == "auto"
    ):
        return "peermem"
    return None
