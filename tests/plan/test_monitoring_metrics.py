"""Every metric an alert or a dashboard queries is one the configured exporters emit,
checked against the exporters' own lists, not a list kept here:

- DCGM_*: the counters CSV the stack hands the DCGM exporter (the Plan's GPU Operator
  values), so no rule waits on a counter that is switched off;
- node_infiniband_* / node_ethtool_*: node-exporter's collector source at the pinned
  release (``collector/infiniband_linux.go``; the ethtool names derived from our
  ``--collector.ethtool.metrics-include`` filter with the collector's own renaming rule),
  found under ``../shared/upstream/src/node_exporter-*`` or ``$GPUFABRIC_NODE_EXPORTER_SRC``;
  skipped where absent;
- gpufabric_*: the series kube-state-metrics makes of gpufabric's own resources, derived
  from the custom-resource-state configuration the stack renders (the kube-prometheus-stack
  values it installs, or the ConfigMap for an existing Prometheus) with kube-state-metrics'
  naming rule (``metricNamePrefix`` + "_" + the metric's name);
- kueue_* / volcano_*: the queueing authority's metrics source at the pin (Kueue's
  ``pkg/metrics/metrics.go`` with its ``pkg/constants``, Volcano's
  ``pkg/scheduler/metrics``), found under ``../shared/upstream/src/<name>-*`` or
  ``$GPUFABRIC_KUEUE_SRC`` / ``$GPUFABRIC_VOLCANO_SRC``; skipped where absent.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpufabric.plan import ids
from gpufabric.plan import node_acceptance as na
from gpufabric.plan.build import Plan
from gpufabric.support import yamlcodec
from tests.builders import REPO, body, chart, example_config, plan_of

STACKS = ("roce-sriov-volcano", "prod-ib")
_FUNCS = {
    "sum",
    "max",
    "min",
    "avg",
    "count",
    "by",
    "without",
    "on",
    "ignoring",
    "and",
    "or",
    "unless",
    "rate",
    "increase",
    "max_over_time",
    "absent",
    "time",
    "bool",
    "offset",
    "histogram_quantile",
    "quantile",
    "le",
}


def _exprs(plan: Plan) -> Iterator[str]:
    for group in body(plan, ids.MONITORING_RULES)["spec"]["groups"]:
        for rule in group["rules"]:
            yield rule["expr"]
    for it in plan.items:
        if it.id.startswith("monitoring/dashboard/"):
            for text in body(plan, it.id)["data"].values():
                for panel in json.loads(text)["panels"]:
                    for target in panel["targets"]:
                        yield target["expr"]


def metrics(expr: str) -> set[str]:
    """The metric names a PromQL expression reads."""
    text = re.sub(r'"[^"]*"', '""', expr)  # strings
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges
    text = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", text)  # grouping labels
    names = set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", text))
    return {n for n in names if n not in _FUNCS and not re.fullmatch(r"e\d*", n)}


def _queried(prefix: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for stack in STACKS:
        plan = plan_of(example_config(stack), stack)
        out[stack] = {m for e in _exprs(plan) for m in metrics(e) if m.startswith(prefix)}
    return out


def test_the_metric_parser_finds_the_metrics_of_an_expression() -> None:
    expr = 'sum by (node) (rate(a_total{x="b{c}"}[5m])) > 2 or absent(b_gauge) and on (n) c'
    assert metrics(expr) == {"a_total", "b_gauge", "c"}


@pytest.mark.parametrize("stack", STACKS)
def test_every_dcgm_metric_queried_is_in_the_exporters_counters_csv(stack: str) -> None:
    plan = plan_of(example_config(stack), stack)
    csv = chart(plan, ids.GPU_OPERATOR).values["dcgmExporter"]["config"]["data"]
    configured = {
        line.split(",")[0].strip()
        for line in csv.splitlines()
        if line.strip() and not line.startswith("#")
    }
    queried = {m for e in _exprs(plan) for m in metrics(e) if m.startswith("DCGM_")}
    assert queried, "no rule or dashboard reads a DCGM counter"
    assert queried <= configured, sorted(queried - configured)


def _node_exporter_src() -> Path | None:
    env = os.environ.get("GPUFABRIC_NODE_EXPORTER_SRC")
    if env:
        return Path(env)
    found = sorted((REPO.parent / "shared" / "upstream" / "src").glob("node_exporter-*"))
    return found[-1] if found else None


def _node_exporter_metrics(src: Path, ethtool_include: str) -> set[str]:
    ib = (src / "collector" / "infiniband_linux.go").read_text()
    # Every metric of the collector is "node_infiniband_" + a name it registers or pushes.
    names = {f"node_infiniband_{n}" for n in re.findall(r'"([a-z0-9_]+)"', ib)}
    eth = (src / "collector" / "ethtool_linux.go").read_text()
    rx = re.search(r"ethtoolReceivedRegex\s*=\s*regexp.MustCompile\(`([^`]+)`\)", eth)
    tx = re.search(r"ethtoolTransmitRegex\s*=\s*regexp.MustCompile\(`([^`]+)`\)", eth)
    assert rx, "node-exporter's ethtool renaming rule moved"
    assert tx, "node-exporter's ethtool renaming rule moved"
    stats = [f"{d}_prio{p}_pause" for d in ("rx", "tx") for p in range(8)]
    for stat in (s for s in stats if re.search(ethtool_include, s)):
        name = re.sub(rx.group(1), r"\1received\2", stat)
        name = re.sub(tx.group(1), r"\1transmitted\2", name)
        names.add(f"node_ethtool_{name}")
    return names


def test_every_node_exporter_metric_queried_is_one_its_collectors_emit() -> None:
    src = _node_exporter_src()
    if src is None or not (src / "collector" / "infiniband_linux.go").is_file():
        pytest.skip("node-exporter's collector source is not present")
    plan = plan_of(example_config("roce-sriov-volcano"), "roce-sriov-volcano")
    args = chart(plan, ids.PROMETHEUS).values["prometheus-node-exporter"]["extraArgs"]
    include = next(
        a.split("=", 1)[1] for a in args if a.startswith("--collector.ethtool.metrics-include")
    )
    emitted = _node_exporter_metrics(src, include)
    for stack, queried in _queried("node_").items():
        assert queried, stack
        assert queried <= emitted, (stack, sorted(queried - emitted))


# A Prometheus client metric as Kueue and Volcano declare it: its options' Subsystem (a
# constant) and Name; a histogram is exported as <name>_bucket, _sum and _count.
_OPTS = re.compile(
    r"prometheus\.(Histogram|Gauge|Counter|Summary)Opts\{\s*Subsystem:\s*([\w.]+),\s*"
    r'Name:\s*"(\w+)"'
)
_SUFFIXES = {"Histogram": ("_bucket", "_sum", "_count"), "Summary": ("_sum", "_count")}


def _declared_metrics(files: list[Path]) -> set[str]:
    text = "\n".join(f.read_text() for f in files)
    consts = dict(re.findall(r'\b(\w+)\s*=\s*"([\w-]+)"', text))
    names: set[str] = set()
    for kind, subsystem, name in _OPTS.findall(text):
        base = f"{consts[subsystem.rsplit('.', 1)[-1]]}_{name}"
        names |= {base + s for s in _SUFFIXES.get(kind, ("",))}
    return names


_AUTHORITY_SOURCES = {
    # authority -> an example stack that runs it, the files declaring its metrics and constants
    "kueue": ("prod-ib", ("pkg/metrics/metrics.go", "pkg/constants/constants.go")),
    "volcano": (
        "roce-sriov-volcano",
        tuple(f"pkg/scheduler/metrics/{n}.go" for n in ("metrics", "queue", "job", "namespace")),
    ),
}


def _authority_src(name: str, files: tuple[str, ...]) -> Path | None:
    env = os.environ.get(f"GPUFABRIC_{name.upper()}_SRC")
    found = [Path(env)] if env else []
    found += sorted((REPO.parent / "shared" / "upstream" / "src").glob(f"{name}-*"))
    return next((d for d in found if all((d / f).is_file() for f in files)), None)


def test_the_metric_source_reader_finds_histograms_by_their_series(tmp_path: Path) -> None:
    go = (
        'const X = "kueue"\nvar w = prometheus.NewHistogramVec(prometheus.HistogramOpts{\n'
        '  Subsystem: constants.X,\n  Name: "wait_seconds",\n'
        '}) ; g = prometheus.GaugeOpts{Subsystem: X, Name: "pending"}'
    )
    (tmp_path / "m.go").write_text(go)
    assert _declared_metrics([tmp_path / "m.go"]) == {
        "kueue_wait_seconds_bucket",
        "kueue_wait_seconds_sum",
        "kueue_wait_seconds_count",
        "kueue_pending",
    }


@pytest.mark.parametrize("authority", sorted(_AUTHORITY_SOURCES))
def test_every_queue_metric_queried_is_one_the_authority_declares(authority: str) -> None:
    """The tenants board's queue wait and pending panels read only metrics the pinned
    authority's own source registers (a renamed or removed metric fails here)."""
    stack, files = _AUTHORITY_SOURCES[authority]
    src = _authority_src(authority, files)
    if src is None:
        pytest.skip(f"{authority}'s metrics source is not present")
    declared = _declared_metrics([src / f for f in files])
    plan = plan_of(example_config(stack), stack)
    assert plan.facts.gang.authority == authority
    queried = {m for e in _exprs(plan) for m in metrics(e) if m.startswith(f"{authority}_")}
    assert queried, f"no dashboard reads a {authority} metric"
    assert queried <= declared, sorted(queried - declared)


def _custom_resource_state(plan: Plan) -> list[dict[str, Any]]:
    """The custom-resource-state configurations the stack hands kube-state-metrics: in the
    installed chart's values, else in the ConfigMaps rendered for an existing one."""
    if plan.facts.monitoring.install_prometheus:
        ksm = chart(plan, ids.PROMETHEUS).values.get("kube-state-metrics", {})
        crs = ksm.get("customResourceState", {})
        return [crs["config"]] if crs.get("enabled") else []
    return [
        yamlcodec.load(body(plan, it.id)["data"][na.KSM_CONFIG_KEY])
        for it in plan.items
        if it.id == ids.NODE_ACCEPTANCE_KSM_CONFIG
    ]


def ksm_custom_metrics(config: dict[str, Any]) -> set[str]:
    """The metric names kube-state-metrics exports for a custom-resource-state configuration:
    its prefix (``kube_customresource`` when unset, none when empty) joined to each name."""
    names = set()
    for resource in config["spec"]["resources"]:
        prefix = resource.get("metricNamePrefix", "kube_customresource")
        for metric in resource["metrics"]:
            names.add("_".join(p for p in (prefix, metric["name"]) if p))
    return names


def test_the_custom_resource_naming_rule_follows_kube_state_metrics() -> None:
    config = {
        "spec": {
            "resources": [
                {"metrics": [{"name": "a"}]},
                {"metricNamePrefix": "", "metrics": [{"name": "b"}]},
                {"metricNamePrefix": "p", "metrics": [{"name": "c"}]},
            ]
        }
    }
    assert ksm_custom_metrics(config) == {"kube_customresource_a", "b", "p_c"}


@pytest.mark.parametrize("stack", STACKS)
def test_every_gpufabric_metric_queried_is_one_kube_state_metrics_exports(stack: str) -> None:
    """The acceptance board's bus bandwidth per node reads series kube-state-metrics makes
    of NodeAcceptance, as the stack configures it, whichever Prometheus the stack uses."""
    plan = plan_of(example_config(stack), stack)
    configs = _custom_resource_state(plan)
    assert configs, "the stack gives kube-state-metrics no custom-resource-state configuration"
    exported = set().union(*(ksm_custom_metrics(c) for c in configs))
    queried = {m for e in _exprs(plan) for m in metrics(e) if m.startswith("gpufabric_")}
    # the board's bus bandwidth; AcceptanceStale's last run time and verdict per node
    assert {
        na.BUSBW_METRIC,
        "gpufabric_node_acceptance_last_run_timestamp_seconds",
        "gpufabric_node_acceptance_verdict",
    } <= queried
    assert queried <= exported, sorted(queried - exported)
