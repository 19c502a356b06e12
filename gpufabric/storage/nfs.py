"""NFS backends through the pinned csi-driver-nfs chart (kubernetes-csi/csi-driver-nfs).

gpufabric writes one StorageClass per backend (``gpufabric-<name>``, provisioner
``nfs.csi.k8s.io``): ``server`` and ``share`` from the stack, ``subDir``
``${pvc.metadata.namespace}/${pvc.metadata.name}`` so each tenant's claim is its own
directory (the chart's provisioner runs with ``--extra-create-metadata``, which the driver
needs to fill those in), ``onDelete`` following the reclaim policy. Mount options carry the
transport: ``proto=rdma,port=20049`` for NFS over RDMA (the port nfsd listens on for RDMA,
RFC 8267 / the kernel's ``rpcrdma`` default), ``proto=tcp,nconnect=N`` over TCP, and
``nfsvers`` 4.1 or 4.2 either way.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gpufabric.model.problems import Problem
from gpufabric.model.storage import NfsBackend, StorageBackend
from gpufabric.plan.facts import BackendFacts

PROVISIONER = "nfs.csi.k8s.io"
COMPONENT = "csi-driver-nfs"
RDMA_PORT = 20049
DEFAULT_NCONNECT = 8
CONTROLLER = "csi-nfs-controller"
"""The chart's controller Deployment (and its pods' ``app`` label)."""
CONTROLLER_VALUES = "controller"
"""The chart's values key of that Deployment (its ``affinity`` and ``tolerations``)."""
OWNED_OPTIONS = ("proto", "port", "nfsvers", "vers", "nconnect", "rdma", "tcp", "udp")
"""Mount options the transport and version set: the stack's own options may not."""


def mount_options(nfs: NfsBackend) -> tuple[str, ...]:
    """Transport and version first, then the stack's own options."""
    if nfs.transport == "rdma":
        transport = ["proto=rdma", f"port={RDMA_PORT}"]
    else:
        transport = ["proto=tcp", f"nconnect={nfs.nconnect or DEFAULT_NCONNECT}"]
    return (f"nfsvers={nfs.nfsVersion}", *transport, *nfs.mountOptions)


def class_parameters(nfs: NfsBackend, reclaim: str) -> dict[str, str]:
    return {
        "server": nfs.server,
        "share": nfs.share,
        "subDir": "${pvc.metadata.namespace}/${pvc.metadata.name}",
        "onDelete": "retain" if reclaim == "Retain" else "delete",
    }


def driver_values() -> dict[str, Any]:
    """The chart's values: no snapshot controller or sidecar (gpufabric takes no snapshots),
    no StorageClass from the chart (gpufabric writes its own). A mirror rewrites each image's
    repository to a full name (manifests/versions.yaml), which the chart then takes as it is
    (it joins ``image.baseRepo`` only to names starting with '/')."""
    return {
        "controller": {"enableSnapshotter": False},
        "externalSnapshotter": {"enabled": False},
        "storageClass": {"create": False},
    }


class NfsKind:
    """NFS served by a server the site runs, through csi-driver-nfs."""

    key = "nfs"

    def selected(self, backend: StorageBackend) -> bool:
        return backend.nfs is not None

    def problems(
        self, backend: StorageBackend, path: str, serves_checkpoints: bool
    ) -> Iterator[Problem]:
        nfs = backend.nfs
        if nfs is None:
            return
        if nfs.nconnect is not None and nfs.transport != "tcp":
            yield Problem(
                f"{path}.nfs.nconnect",
                f"{nfs.nconnect} with transport {nfs.transport}: nconnect spreads NFS over "
                "several TCP connections; remove it, or set transport: tcp",
            )
        for i, option in enumerate(nfs.mountOptions):
            name = option.partition("=")[0]
            if name in OWNED_OPTIONS:
                yield Problem(
                    f"{path}.nfs.mountOptions[{i}]",
                    f"'{option}' is set by transport and nfsVersion; remove it "
                    f"(gpufabric sets {', '.join(mount_options(nfs)[:3])})",
                )
        if serves_checkpoints and nfs.reclaimPolicy != "Retain":
            yield Problem(
                f"{path}.nfs.reclaimPolicy",
                f"{nfs.reclaimPolicy} on the backend of a checkpoints claim: deleting the "
                "claim would delete every checkpoint; expected Retain",
            )

    def facts(self, backend: StorageBackend, stack: str) -> BackendFacts:
        nfs = backend.nfs
        assert nfs is not None, "selected() first"
        over = "RDMA" if nfs.transport == "rdma" else "TCP"
        return BackendFacts(
            name=backend.name,
            title=f"NFS {nfs.nfsVersion} over {over} from {nfs.server}:{nfs.share}",
            storage_class=f"gpufabric-{backend.name}",
            provisioner=PROVISIONER,
            transport=nfs.transport,
            # GDS reads NFS through its RDMA path only; over TCP it falls back to copies.
            gds=nfs.transport == "rdma",
            class_parameters=class_parameters(nfs, nfs.reclaimPolicy),
            mount_options=mount_options(nfs),
            reclaim_policy=nfs.reclaimPolicy,
            driver=COMPONENT,
            driver_values=driver_values(),
            runbook=f"storage-nfs-{nfs.transport}.md.j2",
            # The controller mounts the share with the class's options (proto=rdma,port=20049
            # over RDMA) to create each claim's directory (pkg/nfs/controllerserver.go,
            # CreateVolume -> internalMount): placed by the chart's default on any Linux node,
            # a node without rpcrdma or outside the export leaves every new claim Pending.
            driver_controller=CONTROLLER_VALUES,
            server=nfs.server,
            share=nfs.share,
            nfs_version=nfs.nfsVersion,
        )


KIND = NfsKind()
