"""Grafana dashboards a person reads at a glance, computed from the Plan's facts: fleet
health, the fabric per rail, tenants (GPU use against quota, queue wait and pending work
from the queueing authority's own metrics) and acceptance history (runs by outcome, and each
node's bus bandwidth over time from its NodeAcceptance result).

Each board is plain Grafana dashboard JSON over the Prometheus data source; the monitoring
layer wraps each in a ConfigMap the Grafana sidecar loads. Every query reads a metric the
configured exporters emit (tests/plan/test_monitoring_metrics.py checks it against the
exporters' own lists).
"""

from __future__ import annotations

from typing import Any

from gpufabric.plan import node_acceptance as results
from gpufabric.plan.alerts import ACCEPTANCE_JOB, acceptance_master
from gpufabric.plan.facts import GPU_RESOURCE, Facts

_DS = {"type": "prometheus", "uid": "${datasource}"}


def _panel(
    n: int, title: str, targets: list[tuple[str, str]], kind: str = "timeseries"
) -> dict[str, Any]:
    """Panel ``n`` (laid out two per row) with its queries (expression, legend)."""
    return {
        "id": n + 1,
        "type": kind,
        "title": title,
        "datasource": _DS,
        "gridPos": {"h": 8, "w": 12, "x": 12 * (n % 2), "y": 8 * (n // 2)},
        "targets": [
            {"datasource": _DS, "expr": expr, "legendFormat": legend, "refId": chr(65 + i)}
            for i, (expr, legend) in enumerate(targets)
        ],
    }


def _board(
    uid: str, title: str, stack: str, panels: list[tuple[str, list[tuple[str, str]], str]]
) -> dict[str, Any]:
    return {
        "uid": f"gpufabric-{uid}",
        "title": f"gpufabric {stack}: {title}",
        "tags": ["gpufabric"],
        "schemaVersion": 39,
        "editable": False,
        "time": {"from": "now-24h", "to": "now"},
        "refresh": "1m",
        "templating": {
            "list": [{"name": "datasource", "type": "datasource", "query": "prometheus"}]
        },
        "panels": [_panel(i, t, q, k) for i, (t, q, k) in enumerate(panels)],
    }


def _fleet(f: Facts) -> dict[str, Any]:
    m = f.monitoring
    fatal = "|".join(str(c) for x in m.xid_classes if x.quarantine for c in x.codes)
    nonfatal = "|".join(str(c) for x in m.xid_classes if not x.quarantine for c in x.codes)
    n = f.nodes.gpus_per_node
    return _board(
        "fleet",
        "fleet health",
        f.stack,
        [
            (
                "GPU nodes by state",
                [
                    ("count(count by (node) (DCGM_FI_DEV_GPU_TEMP))", "reporting GPUs"),
                    (
                        f"count(count by (node) (DCGM_FI_DEV_GPU_TEMP) < {n})",
                        f"fewer than {n} GPUs",
                    ),
                    (f'count(kube_node_spec_taint{{key="{m.quarantine_taint}"}})', "quarantined"),
                    ("count(kube_node_spec_unschedulable > 0)", "cordoned"),
                ],
                "stat",
            ),
            (
                "Firing alerts by class",
                [('sum by (class) (ALERTS{alertstate="firing", class!=""})', "{{class}}")],
                "timeseries",
            ),
            (
                "Xids by class (per hour)",
                [
                    (
                        f'sum(max_over_time(DCGM_EXP_XID_ERRORS_COUNT{{xid=~"{fatal}"}}[1h]))',
                        "fatal",
                    ),
                    (
                        f'sum(max_over_time(DCGM_EXP_XID_ERRORS_COUNT{{xid=~"{nonfatal}"}}[1h]))',
                        "non-fatal",
                    ),
                ],
                "timeseries",
            ),
            (
                "Memory errors by node",
                [
                    ("sum by (node) (DCGM_FI_DEV_ECC_DBE_VOL_TOTAL)", "{{node}} DBE"),
                    ("sum by (node) (rate(DCGM_FI_DEV_ECC_SBE_VOL_TOTAL[1h]))", "{{node}} SBE/s"),
                    ("sum by (node) (DCGM_FI_DEV_ROW_REMAP_PENDING)", "{{node}} remap pending"),
                    ("sum by (node) (DCGM_FI_DEV_ROW_REMAP_FAILURE)", "{{node}} remap failed"),
                ],
                "timeseries",
            ),
            *_error_panels(),
        ],
    )


Panel = tuple[str, list[tuple[str, str]], str]
"""A panel: its title, its queries (expression, legend) and its Grafana type."""


def _error_panels() -> list[Panel]:
    return [
        (
            "NVLink and PCIe errors (per second)",
            [
                (
                    "sum by (node) (rate(DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL[10m]))",
                    "{{node}} CRC",
                ),
                (
                    "sum by (node) (rate(DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL[10m]))",
                    "{{node}} replay",
                ),
                (
                    "sum by (node) (rate(DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL[10m]))",
                    "{{node}} recovery",
                ),
                (
                    "sum by (node) (rate(DCGM_FI_DEV_PCIE_REPLAY_COUNTER[10m]))",
                    "{{node}} PCIe replay",
                ),
            ],
            "timeseries",
        ),
        (
            "GPUs with clock events (throttling)",
            [("count by (node) (DCGM_FI_DEV_CLOCKS_EVENT_REASONS > 1)", "{{node}}")],
            "timeseries",
        ),
    ]


def _rail_panels(
    f: Facts, label: str, sel: str, priorities: tuple[int, ...] | None = None
) -> list[tuple[str, list[tuple[str, str]], str]]:
    """A rail's panels (``priorities``: the PFC classes its pools pause on; None: every
    pool's)."""
    legend = "{{node}} {{device}}/{{port}}"
    panels: list[tuple[str, list[tuple[str, str]], str]] = [
        (
            f"{label}: ports not ACTIVE",
            [(f"count by (node) (node_infiniband_state_id{sel} != 4)", "{{node}}")],
            "timeseries",
        ),
        (
            f"{label}: link errors (per hour)",
            [
                (
                    f"rate(node_infiniband_link_downed_total{sel}[1h]) * 3600",
                    f"{legend} link downed",
                ),
                (f"rate(node_infiniband_symbol_error_total{sel}[1h]) * 3600", f"{legend} symbol"),
                (
                    f"rate(node_infiniband_port_errors_received_total{sel}[1h]) * 3600",
                    f"{legend} receive",
                ),
            ],
            "timeseries",
        ),
        (
            f"{label}: congestion",
            [
                (
                    f"rate(node_infiniband_port_discards_transmitted_total{sel}[5m])",
                    f"{legend} xmit discards/s",
                ),
                (
                    f"rate(node_infiniband_port_transmit_wait_total{sel}[5m])",
                    f"{legend} xmit wait ticks/s",
                ),
                (
                    f"rate(node_infiniband_port_data_transmitted_bytes_total{sel}[5m])",
                    f"{legend} bytes/s out",
                ),
            ],
            "timeseries",
        ),
    ]
    mine = f.pfc_priorities if priorities is None else priorities
    for p in mine:  # the rail's pools' lossless classes (a fleet's may differ)
        title = label if len(f.pfc_priorities) == 1 else f"{label} (priority {p})"
        panels.append(_roce_panel(p, title, sel))
    return panels


def _roce_panel(p: int, label: str, sel: str) -> tuple[str, list[tuple[str, str]], str]:
    legend = "{{node}} {{device}}/{{port}}"
    return (
        f"{label}: RoCE congestion control",
        [
            (
                f"rate(node_infiniband_np_ecn_marked_roce_packets_received_total{sel}[5m])",
                f"{legend} ECN marked/s",
            ),
            (
                f"rate(node_infiniband_np_cnp_packets_sent_total{sel}[5m])",
                f"{legend} CNP sent/s",
            ),
            (
                f"rate(node_infiniband_rp_cnp_packets_handled_total{sel}[5m])",
                f"{legend} CNP handled/s",
            ),
            (
                f"rate(node_ethtool_received_prio{p}_pause[5m])",
                "{{node}} {{device}} PFC pauses in/s",
            ),
            (
                f"rate(node_ethtool_transmitted_prio{p}_pause[5m])",
                "{{node}} {{device}} PFC pauses out/s",
            ),
        ],
        "timeseries",
    )


def _fabric(f: Facts) -> dict[str, Any]:
    panels: list[tuple[str, list[tuple[str, str]], str]] = []
    rails = {r.name: r for p in f.pools for r in p.fabric.rails} or {
        r.name: r for r in f.fabric.rails
    }  # every pool's rails, each once (a rail name is one network cluster-wide)
    named = [r for r in rails.values() if r.hca]
    if named:
        for rail in named:
            device = str(rail.hca).split(":")[0]
            own = tuple(
                sorted(
                    {
                        p.fabric.pfc_priority
                        for p in f.pools
                        if p.fabric.pfc_priority is not None
                        and any(r.name == rail.name for r in p.fabric.rails)
                    }
                )
            )
            sel = f'{{device="{device}"}}'
            panels += _rail_panels(f, f"rail {rail.name} ({device})", sel, own if f.pools else None)
    else:
        # The stack names no RDMA devices: the rails are found from their netdevs on each
        # node, so the board shows every RDMA port.
        panels += _rail_panels(f, "all RDMA ports", "")
    return _board("fabric", "fabric per rail", f.stack, panels)


def _tenants(f: Facts) -> dict[str, Any]:
    resource = f"requests.{GPU_RESOURCE}"
    panels: list[tuple[str, list[tuple[str, str]], str]] = [
        (
            f"{ns}: GPUs in use against quota",
            [
                (
                    f'kube_resourcequota{{namespace="{ns}", resource="{resource}", type="used"}}',
                    "in use",
                ),
                (
                    f'kube_resourcequota{{namespace="{ns}", resource="{resource}", type="hard"}}',
                    "ceiling (quota + borrowing)",
                ),
                (
                    f'sum(kube_pod_status_phase{{namespace="{ns}", phase="Pending"}})',
                    "pods pending",
                ),
            ],
            "timeseries",
        )
        for ns in sorted(f.tenants)
    ]
    q = f.gang.queue_metrics
    if q is None:
        return _board("tenants", "tenants", f.stack, panels)
    panels += [
        ("Queue wait (p50 / p90 over the range, seconds)", list(q.wait), "timeseries"),
        ("Work pending", list(q.pending), "timeseries"),
    ]
    board = _board("tenants", "tenants", f.stack, panels)
    for panel in board["panels"][-2:]:
        panel["description"] = q.note
    return board


def _acceptance(f: Facts) -> dict[str, Any]:
    job = f'job_name=~"{ACCEPTANCE_JOB}.*"'
    since = f"max_over_time(kube_job_status_completion_time{{{job}}}[30d])"
    outcomes = [
        (
            f"sum by (namespace, job_name) (kube_job_status_succeeded{{{job}}})",
            "{{job_name}} succeeded",
        ),
        (f"sum by (namespace, job_name) (kube_job_status_failed{{{job}}})", "{{job_name}} failed"),
    ]
    if f.operators.acceptance_kind == "pytorchjob":  # bare pods: the Master's ending
        done = acceptance_master("Completed")
        since = f"max_over_time(timestamp({done} == 1)[30d:5m])"
        outcomes = [
            (f"sum by (namespace, pod) ({acceptance_master('Completed')})", "{{pod}} succeeded"),
            (f"sum by (namespace, pod) ({acceptance_master('Error')})", "{{pod}} failed"),
        ]
    return _board(
        "acceptance",
        "acceptance history",
        f.stack,
        [
            (
                "Hours since the last successful acceptance run",
                [(f"(time() - max({since})) / 3600", "hours")],
                "stat",
            ),
            ("Acceptance runs by outcome", outcomes, "timeseries"),
            *_per_node(),
        ],
    )


def _per_node() -> list[Panel]:
    """Each node's last result (its NodeAcceptance, exported by kube-state-metrics): bus
    bandwidth against the threshold over time, and the nodes by verdict."""
    return [
        (
            "Bus bandwidth per node (GB/s, last acceptance result)",
            [
                (f"max by (node) ({results.BUSBW_METRIC})", "{{node}}"),
                (f"max({results.THRESHOLD_METRIC})", "threshold"),
            ],
            "timeseries",
        ),
        (
            "GPU nodes by last acceptance verdict",
            [(f"sum by (verdict) ({results.VERDICT_METRIC} == 1)", "{{verdict}}")],
            "stat",
        ),
    ]


def boards(f: Facts) -> dict[str, dict[str, Any]]:
    """Dashboard name -> Grafana dashboard JSON."""
    return {
        "fleet": _fleet(f),
        "fabric": _fabric(f),
        "tenants": _tenants(f),
        "acceptance": _acceptance(f),
    }
