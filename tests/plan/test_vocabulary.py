"""Typed vocabulary of the resolved facts: every fact that can only be one of a few words is a
Literal of gpufabric.plan.vocabulary (or of the stack model), and every fact still typed with
``str`` is on a list of free-form values below, with what it holds. A new enumerated fact
typed ``str`` fails here until it gets a Literal (or is argued free-form on the list)."""

from __future__ import annotations

import inspect
import typing
from typing import Any

import msgspec
import pytest
from pydantic import BaseModel

from gpufabric.model.config import Fabric, GpuOperatorSettings, Infiniband, NicDriver
from gpufabric.plan import facts, vocabulary

FREE_FORM: dict[str, str] = {
    "AcceptanceResults.kind": "gpufabric's own kind name (NodeAcceptance)",
    "AcceptanceResults.plural": "its resource name",
    "AcceptanceResults.crd": "its CRD's name",
    "AcceptanceResults.writer_role": "ClusterRole name",
    "AcceptanceResults.reader_role": "ClusterRole name",
    "AcceptanceResults.ksm_config_map": "ConfigMap name",
    "AcceptanceResults.ksm_config_key": "ConfigMap key",
    "AcceptanceResults.busbw_metric": "Prometheus metric name",
    "BackendFacts.name": "storage backend name from the stack",
    "BackendFacts.driver_controller": "the driver chart's values key of its controller",
    "Facts.pull_secrets": "Secret names from the stack",
    "BackendFacts.title": "display text",
    "BackendFacts.storage_class": "StorageClass name",
    "BackendFacts.provisioner": "CSI driver name (an open set: the site's own drivers)",
    "BackendFacts.class_parameters": "the CSI driver's StorageClass parameters",
    "BackendFacts.mount_options": "mount options",
    "BackendFacts.driver": "pinned component name in versions.yaml",
    "BackendFacts.driver_values": "Helm values keys",
    "BackendFacts.runbook": "runbook fragment file name",
    "BackendFacts.server": "NFS server host",
    "BackendFacts.share": "export path",
    "ClaimFacts.name": "claim name from the stack",
    "ClaimFacts.namespace": "tenant namespace",
    "ClaimFacts.mount_path": "path in the container",
    "ClaimFacts.storage_class": "StorageClass name",
    "ClaimFacts.size": "Kubernetes quantity",
    "ClaimFacts.backend": "storage backend name from the stack",
    "TenantStorage.namespace": "tenant namespace",
    "TenantStorage.quota_storage": "Kubernetes quantity",
    "Partition.name": "partition name in the subnet manager's configuration",
    "Partition.pkey": "partition key (hex)",
    "Partition.tenants": "tenant namespaces",
    "DiscoveredTopology.api_version": "API group/version of the discovered objects",
    "DiscoveredTopology.kind": "kind of the discovered objects",
    "DiscoveredTopology.selector": "label selector",
    "RailFacts.name": "rail name from the stack",
    "RailFacts.netdev": "host netdev name",
    "RailFacts.hca": "RDMA device name",
    "RailFacts.subnet": "CIDR",
    "RailFacts.gateway": "IP address",
    "RailFacts.pod_interface": "interface name inside pods",
    "RailFacts.resource": "extended resource name",
    "RailFacts.device_plugin_resource": "device plugin resourceName",
    "RailFacts.nad": "NetworkAttachmentDefinition name",
    "RailFacts.pool": "nv-ipam pool name",
    "RailFacts.exclude": "addresses and address ranges",
    "BlockFacts.leaf": "leaf switch name (a node label value)",
    "BlockFacts.leaf_label": "node label key",
    "TenantContract.leaf_networks": "leaf name -> Multus networks annotation (JSON)",
    "TenantContract.leaf_label": "node label key",
    "TenantContract.node_selector": "node label key -> value",
    "BlockFacts.subnet": "CIDR",
    "BlockFacts.gateway": "IP address",
    "BlockFacts.pool": "nv-ipam pool name",
    "BlockFacts.nad": "NetworkAttachmentDefinition name",
    "BlockFacts.exclude": "addresses and address ranges",
    "LeafSpanFacts.leaf_label": "node label key",
    "SpanBlockFacts.leaf": "leaf switch name (a node label value)",
    "SpanBlockFacts.subnet": "CIDR",
    "NodePrefixFacts.node": "node name",
    "NodePrefixFacts.prefix": "CIDR",
    "NodePrefixFacts.gateway": "IP address",
    "TenantContract.span_leaves": "leaf switch names (node label values)",
    "RoceFacts.pfc_vector": "mlnx_qos --pfc argument (eight 0/1 flags)",
    "InfinibandFacts.pkey": "partition key (hex)",
    "FabricFacts.networks_namespace": "namespace name",
    "FabricFacts.rdma_resources": "extended resource names",
    "NodeFacts.gpu_model": "GPU product label value",
    "DcgmCounter.field": "DCGM field or dcgm-exporter field name",
    "DcgmCounter.help": "metric help text",
    "XidClass.action": "what a person does about the class",
    "MonitoringFacts.dcgm_config": "ConfigMap name",
    "MonitoringFacts.namespace": "namespace name",
    "MonitoringFacts.node_label": "Prometheus label name",
    "MonitoringFacts.quarantine_taint": "taint key",
    "MonitoringFacts.selector_labels": "labels the Prometheus selects by",
    "NodeFacts.selector": "node labels",
    "NodeFacts.selector_text": "node labels as kubectl -l takes them",
    "NodeFacts.tolerations": "Kubernetes tolerations",
    "NodeFacts.driver_version": "NVIDIA driver version",
    "GpuOperatorFacts.driver_version": "NVIDIA driver version",
    "GangPolicy.authority": (
        "module name of gpufabric.authorities: an open set by design (a third authority is "
        "one module, docs/decisions/code-structure.md), checked by authorities.get"
    ),
    "GangPolicy.title": "the authority's display name",
    "QueueMetrics.component": "pinned component name in versions.yaml",
    "QueueMetrics.service_labels": "the chart's Service label keys and values",
    "QueueMetrics.port": "the Service's port name",
    "QueueMetrics.wait": "PromQL expressions and Grafana legends",
    "QueueMetrics.pending": "PromQL expressions and Grafana legends",
    "QueueMetrics.note": "display text",
    "HealthFacts.fatal_conditions": "node condition types node-problem-detector's rules set",
    "InClusterHealth.image": "image reference from the stack, as pulled",
    "InClusterHealth.prometheus_url": "URL from the stack",
    "InClusterHealth.pull_secrets": "Secret names from the stack",
    "InClusterHealth.schedule": "cron schedule from the stack",
    "InClusterHealth.stacks_dir": "path inside the site's image",
    "InClusterHealth.tenant": "tenant name from the stack",
    "GangPolicy.topology_levels": "node label keys",
    "GangPolicy.switch_levels": "node label keys",
    "GangPolicy.gfd_levels": "node label keys (GPU Feature Discovery's)",
    "NvlinkFacts.clique_label": "node label key",
    "NvlinkFacts.min_driver": "a driver version",
    "NvlinkFacts.min_nccl": "an NCCL version",
    "GangPolicy.node_topology": "node names, label keys and switch names",
    "GangPolicy.preferred_topology_level": "node label key",
    "GangPolicy.frameworks": "job integration names, each authority module's own",
    "TenantContract.namespace": "namespace name",
    "TenantContract.networks": "JSON of the networks annotation",
    "TenantContract.rdma_resources": "extended resource names",
    "TenantContract.nccl_env": "environment variables",
    "TenantContract.nccl_env_name": "ConfigMap name",
    "TenantContract.queue": "queue name",
    "TenantContract.priority_class": "PriorityClass name",
    "TenantContract.pkey": "partition key (hex)",
    "TenantContract.cpu_quota": "Kubernetes quantity",
    "TenantContract.memory_quota": "Kubernetes quantity",
    "TenantContract.groups": "identity-provider group names",
    "TenantContract.network_namespace": "namespace name",
    "TenantContract.network_names": "NetworkAttachmentDefinition names",
    "TenantContract.gpu_admissible_why": "the authority's rule, in words (an error's reason)",
    "GangPolicy.cohort": "Kueue cohort name (a DNS label)",
    "Acceptance.threshold_source": "sentence explaining the threshold",
    "OperatorFacts.mpi_operator_args": "command-line flags",
    "OperatorFacts.training_operator_args": "command-line flags",
    "Facts.stack": "stack name",
    "Facts.cluster": "cluster name",
    "Facts.kubernetes_version": "version as the stack writes it",
    "Facts.kubernetes_minor": "version",
    "Facts.kube_context": "kubeconfig context name",
    "Facts.tenants": "namespace names",
    "Facts.nccl_env": "environment variables",
    "Facts.pool": "pool name (a DNS label)",
    "NodeFacts.pool": "pool name (a DNS label)",
    "PoolFacts.name": "pool name (a DNS label)",
    "PoolFacts.nccl_env": "environment variables",
    "PoolFacts.tenants": "namespace names",
    "PlanContext.stack": "stack name",
    "PlanContext.components": "pinned component names",
}


def _has_str(hint: Any) -> bool:
    """Whether ``str`` appears anywhere in a type (str, str | None, tuple[str, ...],
    Mapping[str, ...]); Literals do not count."""
    if hint is str:
        return True
    if typing.get_origin(hint) is typing.Literal:
        return False
    return any(_has_str(arg) for arg in typing.get_args(hint))


def _facts_records() -> list[type]:
    return [
        cls
        for cls in vars(facts).values()
        if inspect.isclass(cls)
        and issubclass(cls, msgspec.Struct)
        and cls.__module__ == facts.__name__
    ]


def str_typed_fields() -> set[str]:
    out = set()
    for cls in _facts_records():
        hints = typing.get_type_hints(cls)
        for name in cls.__struct_fields__:
            if _has_str(hints[name]):
                out.add(f"{cls.__name__}.{name}")
    return out


def test_every_str_typed_fact_is_free_form() -> None:
    found = str_typed_fields()
    assert sorted(found - FREE_FORM.keys()) == [], (
        "facts typed str that are not on the free-form list: give an enumerated one a "
        "Literal in gpufabric/plan/vocabulary.py"
    )
    assert sorted(FREE_FORM.keys() - found) == [], "stale entries on the free-form list"
    assert all(FREE_FORM.values())


def test_enumerated_facts_are_typed_by_the_vocabulary() -> None:
    def hint(cls: type, name: str) -> Any:
        return typing.get_type_hints(cls, include_extras=True)[name]

    assert hint(facts.RailFacts, "cni") == vocabulary.RailCni
    assert hint(facts.RailFacts, "pool_kind") == vocabulary.PoolKind
    assert hint(facts.FabricFacts, "type") == vocabulary.FabricType
    assert hint(facts.FabricFacts, "rdma") == vocabulary.RdmaMode
    assert hint(facts.OperatorFacts, "nfd_owner") == vocabulary.NfdOwner
    assert hint(facts.OperatorFacts, "job_kinds") == tuple[vocabulary.JobKind, ...]


def _field_values(model: type[BaseModel], name: str) -> set[str]:
    return set(typing.get_args(model.model_fields[name].annotation))


@pytest.mark.parametrize(
    ("alias", "model", "name"),
    [
        (vocabulary.FabricType, Fabric, "type"),
        (vocabulary.RdmaMode, Fabric, "rdma"),
        (vocabulary.GpuDirect, Fabric, "gpuDirect"),
        (vocabulary.MultusMode, Fabric, "multus"),
        (vocabulary.NadScope, Fabric, "nadScope"),
        (vocabulary.NicDriverSource, NicDriver, "source"),
        (vocabulary.HostStack, NicDriver, "hostStack"),
        (vocabulary.PkeyManagement, Infiniband, "pkeyManagement"),
        (vocabulary.MigStrategy, GpuOperatorSettings, "migStrategy"),
    ],
)
def test_vocabulary_named_from_the_model_matches_the_model(
    alias: Any, model: type[BaseModel], name: str
) -> None:
    assert set(typing.get_args(alias)) == _field_values(model, name)
