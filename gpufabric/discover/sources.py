"""What discovery reads: one row per collection, listed with get/list only.

The same table gives the ClusterRole ``gpufabric discover --print-rbac`` prints, so the
permissions asked for are exactly the collections read: nothing else, no Secrets (a UFM
password is never read; the stack gets a ``secure:`` placeholder instead).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpufabric.support import yamlcodec


@dataclass(frozen=True)
class Source:
    """One collection: its apiVersion and kind (listed across all namespaces)."""

    api_version: str
    kind: str
    plural: str
    why: str

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0] if "/" in self.api_version else ""


SOURCES: tuple[Source, ...] = (
    Source("v1", "Node", "nodes", "labels (GFD, NFD, topology), allocatable resources"),
    Source("v1", "Namespace", "namespaces", "tenant and system namespaces"),
    Source("v1", "ResourceQuota", "resourcequotas", "tenants' GPU quotas"),
    Source("v1", "ConfigMap", "configmaps", "tenants' nccl-env"),
    Source("v1", "PersistentVolumeClaim", "persistentvolumeclaims", "tenants' claims"),
    Source("storage.k8s.io/v1", "StorageClass", "storageclasses", "storage classes"),
    Source("mellanox.com/v1alpha1", "NicClusterPolicy", "nicclusterpolicies", "Network Operator"),
    Source("mellanox.com/v1alpha1", "NicNodePolicy", "nicnodepolicies", "per-pool NIC policy"),
    Source(
        "sriovnetwork.openshift.io/v1",
        "SriovNetworkNodePolicy",
        "sriovnetworknodepolicies",
        "SR-IOV VFs per rail",
    ),
    Source(
        "sriovnetwork.openshift.io/v1",
        "SriovNetworkNodeState",
        "sriovnetworknodestates",
        "the PFs each node reports",
    ),
    Source("nv-ipam.nvidia.com/v1alpha1", "IPPool", "ippools", "rails' subnets"),
    Source("nv-ipam.nvidia.com/v1alpha1", "CIDRPool", "cidrpools", "rails' subnets"),
    Source(
        "k8s.cni.cncf.io/v1",
        "NetworkAttachmentDefinition",
        "network-attachment-definitions",
        "rails' networks",
    ),
    Source("nvidia.com/v1", "ClusterPolicy", "clusterpolicies", "GPU Operator"),
    Source("nvidia.com/v1alpha1", "NVIDIADriver", "nvidiadrivers", "per-pool drivers"),
    Source("kueue.x-k8s.io/v1beta2", "ResourceFlavor", "resourceflavors", "pools as flavors"),
    Source("kueue.x-k8s.io/v1beta2", "ClusterQueue", "clusterqueues", "tenants' queues"),
    Source("kueue.x-k8s.io/v1beta2", "LocalQueue", "localqueues", "tenants' queues"),
    Source("kueue.x-k8s.io/v1beta2", "Topology", "topologies", "topology levels"),
    Source(
        "kueue.x-k8s.io/v1beta2",
        "WorkloadPriorityClass",
        "workloadpriorityclasses",
        "tenants' priorities",
    ),
    Source("scheduling.volcano.sh/v1beta1", "Queue", "queues", "Volcano queues"),
    Source("topology.volcano.sh/v1alpha1", "HyperNode", "hypernodes", "Volcano topology"),
    Source(
        "trainer.kubeflow.org/v1alpha1",
        "ClusterTrainingRuntime",
        "clustertrainingruntimes",
        "the Trainer's runtimes",
    ),
    Source(
        "monitoring.coreos.com/v1",
        "ServiceMonitor",
        "servicemonitors",
        "the labels the site's Prometheus selects by",
    ),
    Source(
        "monitoring.coreos.com/v1",
        "PrometheusRule",
        "prometheusrules",
        "fleet health alerts and their thresholds",
    ),
    Source("v1", "ServiceAccount", "serviceaccounts", "gpufabric's in-cluster health job"),
    Source("batch/v1", "CronJob", "cronjobs", "gpufabric's in-cluster health job"),
    Source("apps/v1", "Deployment", "deployments", "gpufabric's in-cluster health loop"),
    Source(
        "rbac.authorization.k8s.io/v1",
        "ClusterRole",
        "clusterroles",
        "what tenants may run (the training kinds)",
    ),
    Source(
        "rbac.authorization.k8s.io/v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        "gpufabric's own bindings",
    ),
    Source("rbac.authorization.k8s.io/v1", "Role", "roles", "gpufabric's own roles"),
    Source("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings", "tenants' groups"),
    Source(
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicy",
        "validatingadmissionpolicies",
        "tenants' guard rails",
    ),
    Source(
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
        "tenants' guard rails",
    ),
    Source("scheduling.k8s.io/v1", "PriorityClass", "priorityclasses", "gangs' priorities"),
    Source(
        "sriovnetwork.openshift.io/v1",
        "SriovNetworkPoolConfig",
        "sriovnetworkpoolconfigs",
        "RDMA exclusive mode of SR-IOV pools",
    ),
    Source(
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        "which operators are installed (MPI, Training, Trainer)",
    ),
)
"""Every collection discovery lists, in the order it lists them."""

MANAGED_BY = ("app.kubernetes.io/managed-by", "gpufabric")
STACK_LABEL = "gpufabric.io/stack"


def cluster_role(name: str = "gpufabric-discover") -> str:
    """The ClusterRole discovery needs, as YAML: get and list on each collection read."""
    groups: dict[str, list[str]] = {}
    for src in SOURCES:
        groups.setdefault(src.group, []).append(src.plural)
    rules: list[dict[str, Any]] = [
        {"apiGroups": [group], "resources": sorted(set(plurals)), "verbs": ["get", "list"]}
        for group, plurals in sorted(groups.items())
    ]
    # which group versions are served (Kubernetes grants it every user as system:discovery)
    rules.append({"nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*"], "verbs": ["get"]})
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": rules,
    }
    return yamlcodec.dump(role)
