"""Settings that reach only a few objects are read back from those: the Kueue cohort (the
ClusterQueues), the gang restarts (the Trainer runtimes), MPIJob (the tenant role), the RoCE
traffic class and PFC priority (nccl-env, the PfcStorm alert), extra NCCL variables (the
tenants' nccl-env against their render). Each was lost before, several with exit 0."""

from __future__ import annotations

from typing import Any

import pytest
from builders import example_config, plan_of, two_roce_classes_config
from discoverseed import discovered, seeded


def round_trip(config: dict[str, Any], stack: str) -> dict[str, Any]:
    found, diffs, _ = discovered(seeded(plan_of(config, stack)), stack)
    assert diffs == []
    return found


def _set(config: dict[str, Any], path: str, value: Any) -> None:
    section, *keys = path.split(".")
    node = config.setdefault(f"gpufabric:{section}", {})
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value


def _get(config: dict[str, Any], path: str) -> Any:
    section, *keys = path.split(".")
    node = config[f"gpufabric:{section}"]
    for key in keys:
        node = node[key]
    return node


@pytest.mark.parametrize(
    ("stack", "path", "value"),
    [
        ("lab-roce", "scheduling.cohort", "research"),
        ("roce-sriov-volcano", "training.failurePolicy.maxRestarts", 5),
        ("roce-sriov-volcano", "training.mpiOperator", False),
        ("lab-roce", "fabric.roce.trafficClass", 106),
        ("roce-sriov-volcano", "fabric.roce.pfcPriority", 4),
        ("roce-sriov-volcano", "fabric.ncclEnv", {"NCCL_DEBUG": "WARN", "NCCL_IB_TIMEOUT": "22"}),
    ],
)
def test_a_setting_few_objects_carry_comes_back(stack: str, path: str, value: Any) -> None:
    config = example_config(stack)
    _set(config, path, value)
    assert _get(round_trip(config, stack), path) == value


def test_a_pools_own_nccl_variables_stay_the_pools() -> None:
    config = example_config("fleet-mixed")
    config["gpufabric:gpuNodes"][1].setdefault("fabric", {})["ncclEnv"] = {"NCCL_DEBUG": "INFO"}
    found = round_trip(config, "fleet-mixed")
    pools = found["gpufabric:gpuNodes"]
    assert pools[1]["fabric"]["ncclEnv"] == {"NCCL_DEBUG": "INFO"}
    assert "ncclEnv" not in pools[0].get("fabric", {})
    assert "ncclEnv" not in found["gpufabric:fabric"]


def test_a_roce_pool_after_an_infiniband_stack_keeps_its_class() -> None:
    # the PfcStorm alert now watches every RoCE pool's class; the pool's DSCP comes from its
    # nccl-env (before: a RoCE pool that was not the first lost both, silently, and its
    # runbook printed the default switch settings)
    config = example_config("fleet-mixed")
    config["gpufabric:monitoring"] = {"enabled": True}
    config["gpufabric:gpuNodes"][1]["fabric"]["roce"] = {"pfcPriority": 4, "dscp": 24}
    found = round_trip(config, "fleet-mixed")
    assert found["gpufabric:gpuNodes"][1]["fabric"]["roce"] == {"pfcPriority": 4, "dscp": 24}
    assert "roce" not in found["gpufabric:fabric"]  # InfiniBand: nothing of RoCE's


def test_a_traffic_class_carries_its_dscp() -> None:
    config = example_config("lab-roce")
    config["gpufabric:fabric"]["roce"] = {"trafficClass": 98, "dscp": 24}
    found = round_trip(config, "lab-roce")
    assert found["gpufabric:fabric"]["roce"]["trafficClass"] == 98
    assert found["gpufabric:fabric"]["roce"]["dscp"] == 24


def test_two_roce_pools_keep_their_own_pfc_priorities() -> None:
    # PfcStorm watches both classes; the fabric board names each rail's (before: said to be
    # on no object, and both pools fell back to priority 3)
    config = two_roce_classes_config()
    found = round_trip(config, "fleet-mixed")
    pools = {p["name"]: p for p in found["gpufabric:gpuNodes"]}
    prios = [
        (pools[n].get("fabric", {}).get("roce") or found["gpufabric:fabric"].get("roce") or {}).get(
            "pfcPriority"
        )
        for n in ("h100", "l40s")
    ]
    assert prios == [5, 4]
