"""NVL72 racks: what a pool of GB200/GB300 NVL72 compute trays is, and what it needs.

An NVL72 rack is 18 compute trays of 4 GPUs on one multi-node NVLink domain (NVIDIA's
GB200/GB300 NVL72 systems). Kubernetes reaches that domain through the DRA driver for NVIDIA
GPUs: a ComputeDomain per job runs an IMEX daemon on each of the job's trays, and every pod
claims the domain's IMEX channel. GPU Feature Discovery labels each tray with its domain
(``nvidia.com/gpu.clique``: the cluster UUID and clique id its GPUs' fabric reports).

Minimums, from the DRA driver's docs/prerequisites.md at v0.4.0: Kubernetes 1.34.2
(``resource.k8s.io/v1``), NVIDIA driver 570.158.01 for ComputeDomains (the
``IMEXDaemonsWithDNSNames`` feature gate the driver enables by default), CDI in the container
runtime, GFD for the clique label, and the hosts' ``nvidia-imex.service`` disabled. NCCL uses
multi-node NVLink on GB200 from 2.25.2 (NVIDIA's MNNVL tuning guide, "NVIDIA NCCL").
"""

from __future__ import annotations

from typing import Final

GPUS_PER_TRAY: Final = 4
TRAYS_PER_DOMAIN: Final = 18
CLIQUE_LABEL: Final = "nvidia.com/gpu.clique"
"""GPU Feature Discovery's label of a tray's NVLink domain: ``<cluster UUID>.<clique id>``."""
MIN_KUBERNETES: Final = (1, 34)
MIN_KUBERNETES_PATCH: Final = (1, 34, 2)
"""The DRA driver 0.4.0's prerequisite: Kubernetes v1.34.2 or later (resource.k8s.io/v1)."""
MIN_DRIVER: Final = "570.158.01"
"""The NVIDIA driver ComputeDomains need (DRA driver 0.4.0, docs/prerequisites.md)."""
MIN_NCCL: Final = "2.25.2"
"""The NCCL release from which NCCL uses multi-node NVLink on GB200."""

NCCL_ENV: Final = {
    # Multi-node NVLink on: 1 makes NCCL fail ("MNNVL is not supported on this system")
    # rather than fall back to the network between trays of one rack, where 2 (auto) would
    # fall back silently (NCCL src/init.cc, checkMNNVL).
    "NCCL_MNNVL_ENABLE": "1",
    # MNNVL needs cuMem allocations (fabric handles); checkMNNVL returns 0 without them.
    "NCCL_CUMEM_ENABLE": "1",
    # NVLink SHARP on the NVLink switches of the domain.
    "NCCL_NVLS_ENABLE": "1",
}
"""The NCCL variables every pod of an NVL72 pool gets, before the fabric's own ncclEnv."""

DOMAIN_BARS: Final[dict[str, tuple[float, str]]] = {
    "GB200": (
        750.0,
        "GB200 NVL72 default: about 90% of 834.57 GB/s, all_reduce over 72 GPUs at 8 GiB "
        "(coreweave/nccl-tests pull request #43, NCCL 2.26.2)",
    ),
    "GB300": (
        800.0,
        "GB300 NVL72 default: about 90% of 889.35 GB/s (NVCRE; AICR's validator measured "
        "895.08 GB/s on the same rack, NVIDIA/aicr#2701)",
    ),
}
"""Each NVL72 system's default all_reduce bus-bandwidth bar inside one NVLink domain, at
:data:`DOMAIN_BAR_GIB` and above, by :func:`product`."""
DOMAIN_BAR_GIB: Final = 8
"""The message size (GiB) the bars are stated at: the published figures' size."""


def product(system: str) -> str:
    """The GPU product of an NVL72 system, as the bars are keyed: GB200 of GB200-NVL72."""
    return system.split("-", 1)[0]


def version_tuple(text: str) -> tuple[int, ...]:
    """(570, 158, 1) from '570.158.01'; (1, 34) from 'v1.34'."""
    return tuple(int(part) for part in text.lstrip("v").split("."))


def domains(trays: int) -> int:
    """NVLink domains (racks) ``trays`` fill: whole racks, a partial one counted."""
    return -(-trays // TRAYS_PER_DOMAIN)
