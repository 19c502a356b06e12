"""``gpufabric verify``: prove a cluster built from a stack works.

Four families, each a package, over a few shared modules:

* :mod:`~gpufabric.verify.nodes` — node preflight checks (GPUs, driver, GPUDirect
  prerequisites, HCAs, ports, RoCE GIDs/MTU/PFC, PCIe ACS, IOMMU, RDMA devices, memlock) and
  the same for a workload pod, read through a probe (a live host, a probe pod with the host
  mounted, or a fixture tree), run over a fleet or as a pytest-testinfra suite.
* :mod:`~gpufabric.verify.nccl` — the NCCL acceptance job (MPIJob, TrainJob or PyTorchJob),
  the analyzer that judges its log, and the per-node acceptance record.
* :mod:`~gpufabric.verify.sweep` — the bad-node sweep: rounds of two-node jobs, planned,
  run, judged, and its cost forecast.
* :mod:`~gpufabric.verify.storage` — each tenant's claims proven from its own pods.

Shared by all of them: :mod:`~gpufabric.verify.kube` (the API client with deadlines),
:mod:`~gpufabric.verify.results` (one result model: terminal table, JSON, JUnit XML),
:mod:`~gpufabric.verify.expect` (what a stack's nodes must show),
:mod:`~gpufabric.verify.interrupts` (signals and clean-up) and
:mod:`~gpufabric.verify.cluster` (readiness through the Kubernetes API).
"""
