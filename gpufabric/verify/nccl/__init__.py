"""``verify nccl``: the NCCL acceptance job and its verdict.

* :mod:`.job` — the acceptance job, as the kind the stack installs (MPIJob, TrainJob,
  PyTorchJob), with the tenant's full wiring;
* :mod:`.report` — the analyzer: an nccl-tests log in, a bandwidth verdict out;
* :mod:`.record` — each node's result in its NodeAcceptance object;
* :mod:`.sshkeys` — per-run SSH keys for a PyTorchJob launcher.
"""
