"""The closed sets of values resolved facts take, each named once.

A fact that can only be one of a few words is typed by one of these Literals, so mypy
checks every place that sets or compares it. Where the stack model already names the set
(:data:`~gpufabric.model.config.FabricType`, :data:`~gpufabric.model.config.RdmaMode`,
:data:`~gpufabric.model.config.TrainingScheme`,
:data:`~gpufabric.model.config.TrainerRuntime`) the model's alias is reused; the sets the
model spells inline on a field (``gpuDirect``, ``nicDriver.source``, ...) are named here, and
tests/plan/test_vocabulary.py holds them equal to the model's fields. The facts left typed
``str`` are free-form (names, CIDRs, versions); the same test lists them.
"""

from __future__ import annotations

from typing import Literal

from gpufabric.model.config import (
    FabricType,
    NvlinkSystem,
    RdmaMode,
    TrainerRuntime,
    TrainingScheme,
)

# --------------------------------------------------------------- as the stack writes them

GpuDirect = Literal["dmabuf", "peermem"]
"""How GPUs and NICs share memory for GPUDirect RDMA (``fabric.gpuDirect``)."""
NicDriverSource = Literal["host", "operator"]
"""Where the NIC driver comes from (``fabric.nicDriver.source``)."""
HostStack = Literal["doca", "mlnx-ofed", "inbox"]
"""What the hosts run when they bring the NIC driver (``fabric.nicDriver.hostStack``)."""
MultusMode = Literal["thick", "network-operator"]
"""Who installs Multus (``fabric.multus``)."""
NadScope = Literal["system", "tenant"]
"""Where the NetworkAttachmentDefinitions live (``fabric.nadScope``)."""
PkeyManagement = Literal["static", "ufm"]
"""Who manages InfiniBand partition keys (``fabric.infiniband.pkeyManagement``)."""
PartitionMembership = Literal["full", "limited"]
"""What a port is of an InfiniBand partition (OpenSM partitions.conf =full / =limited)."""
MigStrategy = Literal["none", "single", "mixed"]
"""How the GPU Operator exposes MIG partitions (``gpuOperator.migStrategy``)."""

# ---------------------------------------------------------------- resolved from the stack

RailCni = Literal["macvlan", "ipoib", "sriov", "ib-sriov", "host-device"]
"""CNI plugin of a rail's network."""
PoolKind = Literal["IPPool", "CIDRPool"]
"""The nv-ipam pool kind a rail's addresses come from."""
LinkLayer = Literal["InfiniBand", "Ethernet"]
"""A rail port's sysfs ``link_layer``."""
NcclLinkLayer = Literal["IB", "RoCE"]
"""How NCCL names the link layer in its NET/IB lines."""
DeviceLinkType = Literal["infiniband", "ether"]
"""The device plugin selectors' ``linkTypes``."""
NfdOwner = Literal["gpu-operator", "network-operator"]
"""The component that runs Node Feature Discovery."""
StorageTransport = Literal["rdma", "tcp"]
"""How a storage backend's mounts reach the server (``storage.backends[].nfs.transport``)."""
NfsVersion = Literal["4.1", "4.2"]
"""The NFS protocol version mounts use (``storage.backends[].nfs.nfsVersion``)."""
ReclaimPolicy = Literal["Retain", "Delete"]
"""What happens to a volume when its claim is deleted (``storage.backends[].nfs.reclaimPolicy``)."""
JobKind = Literal["mpijob", "trainjob"] | TrainingScheme
MetricsScheme = Literal["http", "https"]
"""How a metrics endpoint is scraped (https: with the scraper's service account token)."""
XidAction = Literal["fatal", "nonfatal"]
"""Xid classes after NVIDIA's catalog (:mod:`gpufabric.plan.xids`): fatal or reset-required
ones quarantine the node; non-fatal ones never do."""
"""A job kind the cluster serves: MPIJob, a Training Operator v1 scheme, or TrainJob."""

__all__ = [
    "DeviceLinkType",
    "FabricType",
    "GpuDirect",
    "HostStack",
    "JobKind",
    "LinkLayer",
    "MetricsScheme",
    "MultusMode",
    "NadScope",
    "NcclLinkLayer",
    "NfdOwner",
    "NfsVersion",
    "NicDriverSource",
    "NvlinkSystem",
    "PartitionMembership",
    "PkeyManagement",
    "PoolKind",
    "RailCni",
    "RdmaMode",
    "ReclaimPolicy",
    "StorageTransport",
    "TrainerRuntime",
    "TrainingScheme",
    "XidAction",
]
