"""NodeAcceptance: gpufabric's own resource holding each GPU node's last acceptance result,
so that bus bandwidth per node becomes a Prometheus series (the acceptance dashboard's graph).

kube-state-metrics' custom-resource-state refuses core Nodes (kube-state-metrics#2434), so
the result lives in a cluster-scoped custom resource of group ``gpufabric.io``, one object
per node named after it; its status holds the verdict, the bus bandwidth, the threshold, the
source (an acceptance run, a sweep, a re-certification), the job and the time. The monitoring
layer installs the CRD and:

- with kube-prometheus-stack installed: its kube-state-metrics subchart gets the
  custom-resource-state configuration (``customResourceState``) and list/watch on the
  resource (``rbac.extraRules``);
- with an existing Prometheus: the configuration as a ConfigMap and a ClusterRole to bind to
  that kube-state-metrics' service account (the runbook says how).

Writers (``gpufabric verify nccl``, its ``--sweep``, ``gpufabric health``) build their objects
with :func:`result_object`; ClusterRole ``gpufabric-node-acceptance-writer`` lets a person
or automation write them.
"""

from __future__ import annotations

import json
from typing import Any

from gpufabric.plan import ids
from gpufabric.plan.facts import AcceptanceResults, PlanContext
from gpufabric.plan.items import Item, Layer, object_item

GROUP = "gpufabric.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "NodeAcceptance"
PLURAL = "nodeacceptances"
CRD_NAME = f"{PLURAL}.{GROUP}"
VERDICTS = ("GOOD", "BAD", "FLAKY", "UNKNOWN")
SOURCES = ("acceptance", "sweep", "recertification")
"""What wrote a result: a plain ``verify nccl`` run, ``verify nccl --sweep``, ``gpufabric
health`` re-certifying a quarantined node."""

METRIC_PREFIX = "gpufabric_node_acceptance"
BUSBW_METRIC = f"{METRIC_PREFIX}_busbw_gbps"
THRESHOLD_METRIC = f"{METRIC_PREFIX}_threshold_gbps"
VERDICT_METRIC = f"{METRIC_PREFIX}_verdict"
LAST_RUN_METRIC = f"{METRIC_PREFIX}_last_run_timestamp_seconds"
INFO_METRIC = f"{METRIC_PREFIX}_info"

KSM_CONFIG_MAP = "gpufabric-ksm-node-acceptance"
KSM_CONFIG_KEY = "config.yaml"
READER_ROLE = "gpufabric-node-acceptance-reader"
WRITER_ROLE = "gpufabric-node-acceptance-writer"

READ_RULES: tuple[dict[str, Any], ...] = (
    {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["list", "watch"]},
)
"""What kube-state-metrics needs beyond its own rules to export NodeAcceptance."""
WRITE_RULES: tuple[dict[str, Any], ...] = (
    {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["get", "create", "update"]},
    {"apiGroups": [GROUP], "resources": [f"{PLURAL}/status"], "verbs": ["get", "update"]},
)
"""What a writer needs: create-or-update an object, then its status subresource."""


def facts() -> AcceptanceResults:
    return AcceptanceResults(
        kind=KIND,
        plural=PLURAL,
        crd=CRD_NAME,
        writer_role=WRITER_ROLE,
        reader_role=READER_ROLE,
        ksm_config_map=KSM_CONFIG_MAP,
        ksm_config_key=KSM_CONFIG_KEY,
        busbw_metric=BUSBW_METRIC,
    )


def _gauge(name: str, path: list[str], help_: str) -> dict[str, Any]:
    return {"name": name, "help": help_, "each": {"type": "Gauge", "gauge": {"path": path}}}


def ksm_config() -> dict[str, Any]:
    """kube-state-metrics' CustomResourceStateMetrics configuration for NodeAcceptance: every
    series is labelled ``node`` (the object's name). A gauge whose field is absent (no bus
    bandwidth in a run that failed early) has no series for that node."""
    short = len(METRIC_PREFIX) + 1
    metrics = [
        _gauge(
            BUSBW_METRIC[short:],
            ["status", "busbwGbps"],
            "Bus bandwidth of the node's last acceptance result (GB/s).",
        ),
        _gauge(
            THRESHOLD_METRIC[short:],
            ["status", "thresholdGbps"],
            "Acceptance threshold the result was judged at (GB/s).",
        ),
        _gauge(
            LAST_RUN_METRIC[short:],
            ["status", "lastRunTime"],
            "When the node's last acceptance run ended (Unix seconds).",
        ),
        {
            "name": VERDICT_METRIC[short:],
            "help": "The node's last acceptance verdict (1 for the verdict it has).",
            "each": {
                "type": "StateSet",
                "stateSet": {
                    "labelName": "verdict",
                    "path": ["status", "verdict"],
                    "list": list(VERDICTS),
                },
            },
        },
        {
            "name": INFO_METRIC[short:],
            "help": "What wrote the node's last acceptance result, and its job.",
            "each": {
                "type": "Info",
                "info": {
                    "labelsFromPath": {
                        "source": ["status", "source"],
                        "job_name": ["status", "jobName"],
                    }
                },
            },
        },
    ]
    resource = {
        "groupVersionKind": {"group": GROUP, "version": VERSION, "kind": KIND},
        "resourcePlural": PLURAL,
        "metricNamePrefix": METRIC_PREFIX,
        "labelsFromPath": {"node": ["metadata", "name"]},
        "metrics": metrics,
    }
    return {"kind": "CustomResourceStateMetrics", "spec": {"resources": [resource]}}


def ksm_values() -> dict[str, Any]:
    """kube-prometheus-stack values for its kube-state-metrics subchart: the configuration
    above mounted and passed with --custom-resource-state-config-file, list/watch on
    NodeAcceptance in its ClusterRole (the chart adds list/watch on CRDs itself), and the
    plural in --resources: the chart passes its collectors there, and kube-state-metrics
    exports a custom resource only when --resources is empty or names it
    (kube-state-metrics#1779)."""
    return {
        "customResourceState": {"enabled": True, "config": ksm_config()},
        "collectorsExtra": [PLURAL],
        "rbac": {"extraRules": [dict(r) for r in READ_RULES]},
    }


def result_object(node: str, stack: str, status: dict[str, Any]) -> dict[str, Any]:
    """The NodeAcceptance object a writer creates or updates for ``node``."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": node,
            "labels": {"app.kubernetes.io/managed-by": "gpufabric", "gpufabric.io/stack": stack},
        },
        "status": status,
    }


def _crd(ctx: PlanContext) -> Item:
    item = object_item(
        ids.NODE_ACCEPTANCE_CRD,
        Layer.MONITORING,
        "monitoring/node-acceptance-crd.yaml.j2",
        stack=ctx.stack,
        group=GROUP,
        version=VERSION,
        kind=KIND,
        plural=PLURAL,
        verdicts=VERDICTS,
        sources=SOURCES,
    )
    # Deleting a CRD deletes every result: kept like the other CRDs gpufabric installs.
    return Item(
        id=item.id, layer=item.layer, payload=item.payload, protect=True, holds=f"{KIND} results"
    )


def _role(ctx: PlanContext, item_id: str, name: str, rules: tuple[dict[str, Any], ...]) -> Item:
    return object_item(
        item_id,
        Layer.MONITORING,
        "monitoring/node-acceptance-role.yaml.j2",
        (ids.NODE_ACCEPTANCE_CRD,),
        stack=ctx.stack,
        name=name,
        rules=rules,
    )


def _ksm_config_map(ctx: PlanContext) -> Item:
    return object_item(
        ids.NODE_ACCEPTANCE_KSM_CONFIG,
        Layer.MONITORING,
        "monitoring/ksm-node-acceptance.yaml.j2",
        stack=ctx.stack,
        name=KSM_CONFIG_MAP,
        namespace=ctx.facts.monitoring.namespace,
        key=KSM_CONFIG_KEY,
        config=json.dumps(ksm_config(), indent=2, sort_keys=True) + "\n",
    )


def items(ctx: PlanContext) -> list[Item]:
    """The CRD and the writer role; with an existing Prometheus, the kube-state-metrics
    configuration and reader role its owner wires in (an installed stack gets them through
    :func:`ksm_values`)."""
    out = [_crd(ctx), _role(ctx, ids.NODE_ACCEPTANCE_WRITER, WRITER_ROLE, WRITE_RULES)]
    if not ctx.facts.monitoring.install_prometheus:
        out += [
            _ksm_config_map(ctx),
            _role(ctx, ids.NODE_ACCEPTANCE_READER, READER_ROLE, READ_RULES),
        ]
    return out


__all__ = [
    "API_VERSION",
    "BUSBW_METRIC",
    "CRD_NAME",
    "KIND",
    "PLURAL",
    "SOURCES",
    "VERDICTS",
    "facts",
    "items",
    "ksm_config",
    "ksm_values",
    "result_object",
]
