"""The fleet-health alerts, run by Prometheus's own rule engine (``promtool``): for every
failure class, series that must fire it and series that must not (an application Xid never
quarantines, a port that is not a rail is not a rail down, a slow symbol-error trickle is
not a degraded link). The rules are the ones the stack renders; the tests skip cleanly
where promtool is not installed (Debian/Ubuntu: the ``prometheus`` package)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufabric.plan import alerts
from gpufabric.plan.build import Plan
from tests.builders import body, example_config, plan_of

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed")

AGE_H = 168


def _plan(age_h: int = AGE_H) -> Plan:
    config = example_config("lab-roce")  # two RoCE rails on mlx5_0/mlx5_1, PFC priority 3
    config["gpufabric:monitoring"] = {
        "enabled": True,
        "thresholds": {
            "symbolErrorsPerHour": 10,
            "pfcPausesPerSecond": 10_000,
            "acceptanceMaxAgeHours": age_h,
        },
    }
    return plan_of(config, "lab")


def _rules_file(plan: Plan, tmp: Path) -> Path:
    spec = body(plan, "monitoring/rules")["spec"]
    path = tmp / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": spec["groups"]}))
    return path


def _annotations(cls: alerts.AlertClass, labels: dict[str, str]) -> dict[str, str]:
    def fill(text: str) -> str:
        return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], text)

    return {"summary": fill(cls.summary), "action": fill(cls.action)}


def _fires(plan: Plan, alert: str, **labels: str) -> dict[str, Any]:
    cls = next(c for c in alerts.classes(plan.facts) if c.alert == alert)
    full = {
        **labels,
        "class": alert,
        "severity": cls.severity,
        "quarantine": "true" if cls.quarantine else "false",
    }
    return {"exp_labels": full, "exp_annotations": _annotations(cls, labels)}


def _run(tmp: Path, rules: Path, tests: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    spec = tmp / "tests.yaml"
    spec.write_text(
        yaml.safe_dump({"rule_files": [rules.name], "evaluation_interval": "1m", "tests": tests})
    )
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, "test", "rules", spec.name],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _gpu_temps(node: str, gpus: int) -> list[dict[str, str]]:
    return [
        {"series": f'DCGM_FI_DEV_GPU_TEMP{{node="{node}", gpu="{g}"}}', "values": "40x40"}
        for g in range(gpus)
    ]


def _missing(plan: Plan, node: str, seen: int) -> dict[str, Any]:
    expected = _fires(plan, "GpusMissing", node=node)
    expected["exp_annotations"]["summary"] = (
        f"{node} reports {seen} GPUs, the stack expects {plan.facts.nodes.gpus_per_node}"
    )
    return expected


def _gpu_cases(plan: Plan) -> dict[str, Any]:
    series = [
        {"series": 'DCGM_EXP_XID_ERRORS_COUNT{node="n1", gpu="0", xid="79"}', "values": "0 1 1 1"},
        {"series": 'DCGM_EXP_XID_ERRORS_COUNT{node="n2", gpu="3", xid="13"}', "values": "0 2 2 2"},
        {"series": 'DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{node="n1", gpu="0"}', "values": "0 1 1 1"},
        {"series": 'DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{node="n2", gpu="0"}', "values": "0x3"},
        {"series": 'DCGM_FI_DEV_ROW_REMAP_FAILURE{node="n1", gpu="1"}', "values": "1x3"},
        {"series": 'DCGM_FI_DEV_ROW_REMAP_FAILURE{node="n2", gpu="1"}', "values": "0x3"},
        # Pending for 40 minutes on n1; on n2 only for 10 minutes, then reset.
        {"series": 'DCGM_FI_DEV_ROW_REMAP_PENDING{node="n1", gpu="2"}', "values": "1x40"},
        {"series": 'DCGM_FI_DEV_ROW_REMAP_PENDING{node="n2", gpu="2"}', "values": "1x10 0x30"},
        # NVLink CRC errors keep rising on n1; stuck at an old value on n2.
        {
            "series": 'DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL{node="n1", gpu="4"}',
            "values": "0+5x40",
        },
        {
            "series": 'DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL{node="n2", gpu="4"}',
            "values": "7x40",
        },
        *_gpu_temps("n1", 8),
        *_gpu_temps("n2", 7),
    ]
    at = "3m"
    return {
        "interval": "1m",
        "input_series": series,
        "alert_rule_test": [
            {
                "eval_time": at,
                "alertname": "GpuFatalXid",
                "exp_alerts": [_fires(plan, "GpuFatalXid", node="n1", gpu="0", xid="79")],
            },
            {
                "eval_time": at,
                "alertname": "GpuNonFatalXid",
                "exp_alerts": [_fires(plan, "GpuNonFatalXid", node="n2", gpu="3", xid="13")],
            },
            {
                "eval_time": at,
                "alertname": "GpuEccDoubleBit",
                "exp_alerts": [_fires(plan, "GpuEccDoubleBit", node="n1", gpu="0")],
            },
            {
                "eval_time": at,
                "alertname": "GpuRowRemapFailure",
                "exp_alerts": [_fires(plan, "GpuRowRemapFailure", node="n1", gpu="1")],
            },
            {
                "eval_time": "30m",
                "alertname": "GpuRowRemapPending",
                "exp_alerts": [_fires(plan, "GpuRowRemapPending", node="n1", gpu="2")],
            },
            {
                "eval_time": "35m",
                "alertname": "GpuNvlinkErrorsRising",
                "exp_alerts": [_fires(plan, "GpuNvlinkErrorsRising", node="n1", gpu="4")],
            },
            {"eval_time": "5m", "alertname": "GpusMissing", "exp_alerts": []},
            {
                "eval_time": "15m",
                "alertname": "GpusMissing",
                "exp_alerts": [_missing(plan, "n2", 7)],
            },
        ],
    }


def _fabric_cases(plan: Plan) -> dict[str, Any]:
    series = [
        {
            "series": 'node_infiniband_state_id{node="n1", device="mlx5_0", port="1"}',
            "values": "4x10",
        },
        {
            "series": 'node_infiniband_state_id{node="n2", device="mlx5_1", port="1"}',
            "values": "1x10",
        },
        # Not a rail of this stack (e.g. a storage or management NIC): never a rail alert.
        {
            "series": 'node_infiniband_state_id{node="n3", device="mlx5_9", port="1"}',
            "values": "1x10",
        },
        {
            "series": 'node_infiniband_link_downed_total{node="n1", device="mlx5_0", port="1"}',
            "values": "0 1 2 3 3 3 3 3 3 3",
        },
        {
            "series": 'node_infiniband_link_downed_total{node="n2", device="mlx5_0", port="1"}',
            "values": "0 1 1 1 1 1 1 1 1 1",
        },
        # 60 symbol errors an hour on n1 (above 10); 6 an hour on n2 (below).
        {
            "series": 'node_infiniband_symbol_error_total{node="n1", device="mlx5_1", port="1"}',
            "values": "0+1x80",
        },
        {
            "series": 'node_infiniband_symbol_error_total{node="n2", device="mlx5_1", port="1"}',
            "values": "0+0.1x80",
        },
        # 20,000 pauses/s on the lossless priority 3 on n1; 100/s on n2; a storm on another
        # priority (4) on n3 is not the RDMA class's.
        {
            "series": 'node_ethtool_received_prio3_pause{node="n1", device="ens1f0np0"}',
            "values": "0+1200000x20",
        },
        {
            "series": 'node_ethtool_received_prio3_pause{node="n2", device="ens1f0np0"}',
            "values": "0+6000x20",
        },
        {
            "series": 'node_ethtool_received_prio4_pause{node="n3", device="ens1f0np0"}',
            "values": "0+1200000x20",
        },
    ]
    rail = {"device": "mlx5_1", "port": "1"}
    return {
        "interval": "1m",
        "input_series": series,
        "alert_rule_test": [
            {
                "eval_time": "5m",
                "alertname": "RailDown",
                "exp_alerts": [_fires(plan, "RailDown", node="n2", **rail)],
            },
            {
                "eval_time": "5m",
                "alertname": "RailFlapping",
                "exp_alerts": [
                    {
                        **_fires(plan, "RailFlapping", node="n1", device="mlx5_0", port="1"),
                        "exp_annotations": {
                            "summary": "Rail port mlx5_0/1 on n1 went down 3 times in an hour",
                            "action": "replace the cable or transceiver; watch RailDown",
                        },
                    }
                ],
            },
            {
                "eval_time": "75m",
                "alertname": "RailSymbolErrors",
                "exp_alerts": [_fires(plan, "RailSymbolErrors", node="n1", **rail)],
            },
            {
                "eval_time": "15m",
                "alertname": "PfcStorm",
                "exp_alerts": [_fires(plan, "PfcStorm", node="n1", device="ens1f0np0")],
            },
        ],
    }


H = 3600
LAST_RUN = "gpufabric_node_acceptance_last_run_timestamp_seconds"
VERDICT = "gpufabric_node_acceptance_verdict"


def _record(node: str, at_h: int, verdict: str, until_h: int) -> list[dict[str, str]]:
    """The series kube-state-metrics makes of ``node``'s NodeAcceptance written at hour
    ``at_h`` with ``verdict`` (a StateSet: 1 for the verdict it has, 0 for the others),
    sampled every minute up to hour ``until_h``."""
    before, after = at_h * 60, (until_h - at_h) * 60
    crs = 'customresource_group="gpufabric.io", customresource_kind="NodeAcceptance"'
    out = [
        {
            "series": f'{LAST_RUN}{{node="{node}", {crs}}}',
            "values": f"_x{before} {at_h * H}x{after}" if before else f"{at_h * H}x{after}",
        }
    ]
    for v in ("GOOD", "BAD", "FLAKY", "UNKNOWN"):
        value = 1 if v == verdict else 0
        out.append(
            {
                "series": f'{VERDICT}{{node="{node}", verdict="{v}", {crs}}}',
                "values": f"_x{before} {value}x{after}" if before else f"{value}x{after}",
            }
        )
    return out


def _gpu_node(node: str, until_h: int) -> dict[str, str]:
    return {
        "series": f'DCGM_FI_DEV_GPU_TEMP{{node="{node}", gpu="0"}}',
        "values": f"40x{until_h * 60}",
    }


STALE_H = 3
"""The window of the acceptance cases: short, so promtool replays hours, not a week."""


def _acceptance_cases(plan: Plan) -> list[dict[str, Any]]:
    """Per node, the window being STALE_H = 3 hours: a GOOD result written at hour 1 goes
    stale at hour 4 and fires an hour later (the rule's ``for``); one written at hour 4 is
    fresh; a node never accepted, and one whose fresh result is not GOOD, fire once the
    rule's hour has passed; the record of a node that left the fleet (no GPUs reported)
    never fires."""
    end = 7
    series = [
        *(_gpu_node(n, end) for n in ("fresh", "old", "never", "failed")),
        *_record("old", 1, "GOOD", end),
        *_record("fresh", 4, "GOOD", end),
        *_record("failed", 4, "UNKNOWN", end),
        *_record("gone", 1, "GOOD", end),
    ]

    def at(time: str, *nodes: str) -> dict[str, Any]:
        exp = [_fires(plan, "AcceptanceStale", node=n) for n in nodes]
        return {"eval_time": time, "alertname": "AcceptanceStale", "exp_alerts": exp}

    return [
        {
            "interval": "1m",
            "input_series": series,
            "alert_rule_test": [
                at("30m"),
                # before hour 4 'fresh' and 'failed' have no record yet
                at("3h", "failed", "fresh", "never"),
                # 'old' went stale at hour 4: pending, not firing, for the rule's hour
                at("4h30m", "failed", "never"),
                at("6h", "failed", "never", "old"),
            ],
        },
        {  # No GPU node and no record: nothing to prove, nothing fires.
            "interval": "1m",
            "input_series": [{"series": 'up{job="x"}', "values": "1x180"}],
            "alert_rule_test": [at("2h")],
        },
    ]


@needs_promtool
def test_rendered_rules_pass_promtool_check(tmp_path: Path) -> None:
    """What Prometheus loads: ``promtool check rules`` over the rendered groups, for an
    installed and an existing Prometheus stack."""
    for name in ("roce-sriov-volcano", "prod-ib"):
        rules = _rules_file(plan_of(example_config(name), name), tmp_path)
        assert PROMTOOL is not None
        out = subprocess.run(
            [PROMTOOL, "check", "rules", str(rules)], capture_output=True, text=True, check=False
        )
        assert out.returncode == 0, out.stdout + out.stderr


@needs_promtool
def test_each_gpu_failure_class_fires_and_healthy_series_do_not(tmp_path: Path) -> None:
    plan = _plan()
    out = _run(tmp_path, _rules_file(plan, tmp_path), [_gpu_cases(plan)])
    assert out.returncode == 0, out.stdout + out.stderr


@needs_promtool
def test_each_fabric_failure_class_fires_and_healthy_ports_do_not(tmp_path: Path) -> None:
    plan = _plan()
    out = _run(tmp_path, _rules_file(plan, tmp_path), [_fabric_cases(plan)])
    assert out.returncode == 0, out.stdout + out.stderr


@needs_promtool
def test_acceptance_goes_stale_per_node_without_a_fresh_good_result(tmp_path: Path) -> None:
    """AcceptanceStale reads each node's NodeAcceptance result: it read job completions,
    fired once for the whole fleet, and stayed quiet while one node had never been proven
    as long as any acceptance job had completed."""
    plan = _plan(STALE_H)
    out = _run(tmp_path, _rules_file(plan, tmp_path), _acceptance_cases(plan))
    assert out.returncode == 0, out.stdout + out.stderr


@needs_promtool
def test_a_wrong_expectation_fails(tmp_path: Path) -> None:
    """The harness can fail: a non-fatal Xid expected to quarantine is refused."""
    plan = _plan()
    case = _gpu_cases(plan)
    case["alert_rule_test"] = [
        {
            "eval_time": "3m",
            "alertname": "GpuFatalXid",
            "exp_alerts": [_fires(plan, "GpuFatalXid", node="n2", gpu="3", xid="13")],
        }
    ]
    out = _run(tmp_path, _rules_file(plan, tmp_path), [case])
    assert out.returncode != 0


@needs_promtool
def test_a_pytorchjob_acceptance_run_keeps_the_acceptance_fresh(tmp_path: Path) -> None:
    """A PyTorchJob runs bare pods and leaves no batch Job: AcceptanceStale once read only
    kube_job_* and fired on a PyTorchJob-only stack however often its acceptance passed.
    It now reads the NodeAcceptance results every acceptance kind writes: the same cases
    hold on a PyTorchJob-only stack."""
    config = example_config("lab-roce")
    config["gpufabric:training"] = {
        "mpiOperator": False,
        "trainingOperator": {"schemes": ["pytorchjob"]},
    }
    config["gpufabric:monitoring"] = {
        "enabled": True,
        "thresholds": {"acceptanceMaxAgeHours": STALE_H},
    }
    plan = plan_of(config, "lab")
    assert plan.facts.operators.acceptance_kind == "pytorchjob"
    out = _run(tmp_path, _rules_file(plan, tmp_path), _acceptance_cases(plan))
    assert out.returncode == 0, out.stdout + out.stderr
    # the acceptance dashboard reads the same Master series, in queries Prometheus parses
    from gpufabric.plan.dashboards import boards

    exprs = [t["expr"] for p in boards(plan.facts)["acceptance"]["panels"] for t in p["targets"]]
    # (its per-node panels read NodeAcceptance results, whatever the job's kind)
    runs = [e for e in exprs if "gpufabric_node_acceptance" not in e]
    assert runs
    assert all("-master-0" in e for e in runs)
    rules = tmp_path / "board.yaml"
    records = [{"record": f"board:q{i}", "expr": e} for i, e in enumerate(exprs)]
    rules.write_text(yaml.safe_dump({"groups": [{"name": "board", "rules": records}]}))
    assert PROMTOOL is not None
    check = subprocess.run([PROMTOOL, "check", "rules", str(rules)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
