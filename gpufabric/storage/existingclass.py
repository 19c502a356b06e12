"""A StorageClass the cluster already has (Lustre, Weka, VAST, CephFS, ...).

gpufabric writes no class and installs no driver: its claims name the class. Whether the
class offers ReadWriteMany is the provisioner's business; render warns when the stack names
no provisioner or one not known to, and ``verify storage`` proves the mount either way.
"""

from __future__ import annotations

from collections.abc import Iterator

from gpufabric.model.problems import Problem
from gpufabric.model.storage import StorageBackend
from gpufabric.plan.facts import BackendFacts

RWX_PROVISIONERS = frozenset(
    {
        "nfs.csi.k8s.io",  # kubernetes-csi/csi-driver-nfs
        "cephfs.csi.ceph.com",  # ceph-csi CephFS
        "csi.weka.io",  # WEKA CSI plugin
        "csi.vastdata.com",  # VAST CSI driver
        "fsx.csi.aws.com",  # Amazon FSx for Lustre
        "efs.csi.aws.com",  # Amazon EFS
        "filestore.csi.storage.gke.io",  # Google Filestore
        "file.csi.azure.com",  # Azure Files
        "spectrumscale.csi.ibm.com",  # IBM Storage Scale (GPFS)
        "exa.csi.ddn.com",  # DDN EXAScaler (Lustre)
    }
)
"""CSI drivers whose file systems serve ReadWriteMany volumes."""


class ExistingClassKind:
    """A class the site provides; gpufabric names it and proves it."""

    key = "existingClass"

    def selected(self, backend: StorageBackend) -> bool:
        return backend.existingClass is not None

    def problems(
        self, backend: StorageBackend, path: str, serves_checkpoints: bool
    ) -> Iterator[Problem]:
        cls = backend.existingClass
        if cls is None:
            return
        if cls.provisioner is None:
            yield Problem(
                f"{path}.existingClass.provisioner",
                f"unset: gpufabric cannot tell whether class {cls.name} offers ReadWriteMany; "
                "name its CSI driver, and run `gpufabric verify storage` after install",
                warning=True,
            )
        elif cls.provisioner not in RWX_PROVISIONERS:
            yield Problem(
                f"{path}.existingClass.provisioner",
                f"{cls.provisioner} is not known to offer ReadWriteMany volumes (known: "
                f"{', '.join(sorted(RWX_PROVISIONERS))}); claims stay Pending if it does not; "
                "run `gpufabric verify storage` after install",
                warning=True,
            )

    def facts(self, backend: StorageBackend, stack: str) -> BackendFacts:
        cls = backend.existingClass
        assert cls is not None, "selected() first"
        return BackendFacts(
            name=backend.name,
            title=f"existing StorageClass {cls.name}",
            storage_class=cls.name,
            provisioner=cls.provisioner,
            transport=None,
            gds=cls.gds,
            reclaim_policy=None,
        )


KIND = ExistingClassKind()
