"""``gpufabric verify``: prove a cluster built from a stack works.

* :mod:`nodes` — node preflight checks (GPUs, driver, GPUDirect prerequisites, HCAs, ports,
  RoCE GIDs/MTU/PFC, PCIe ACS, IOMMU, RDMA devices, memlock), read from a configurable root
  so they run against a live host, a probe pod with the host mounted, or a fixture tree;
  :mod:`pods` — the same for a workload pod (rail interfaces, devices, /dev/shm, IPC_LOCK).
  Both run as a pytest-testinfra suite (:mod:`gpufabric.verify.suite`).
* :mod:`cluster` — readiness through the Kubernetes API.
* :mod:`nccl` — the NCCL acceptance job (MPIJob, TrainJob or PyTorchJob), judged by :mod:`gpufabric.verify.nccl_report`.
* :mod:`results` — one result model for all of them: terminal table, JSON, JUnit XML.
"""
