"""``verify nodes`` and ``verify pods``: what a node and a training pod must show.

* :mod:`.checks` — the node checks (GPUs, driver, GPUDirect, PCIe ACS, IOMMU, RDMA devices,
  memlock), each reading the machine through a :mod:`.probe`;
* :mod:`.rails` — the per-rail checks (HCA, port, GID, MTU, partition keys, PFC);
* :mod:`.sysfs` — what a node's files say, read the same way by every check;
* :mod:`.pods` — the checks inside a training pod;
* :mod:`.gather` — every fact a host's checks need, read in one round trip;
* :mod:`.fleet` — many hosts at once, a bounded number in flight;
* :mod:`.daemonset` — the privileged probe pod for ``--via-cluster``;
* :mod:`.suite` and :mod:`.suite_runner` — the same checks as a pytest-testinfra suite.
"""
