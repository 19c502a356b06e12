"""``verify nccl``: the NCCL acceptance job and its verdict.

* :mod:`.job` — the acceptance job, as the kind the stack installs (MPIJob, TrainJob,
  PyTorchJob), with the tenant's full wiring;
* the analyzer, an nccl-tests log in, a bandwidth verdict out:

  * :mod:`.parsed` — what one run says (``Run``, its table's ``Row``), filled by both parsers;
  * :mod:`.parse` — the text log: launcher prefixes, the results table, NCCL's INFO/WARN lines;
  * :mod:`.parse_json` — the ``-J`` JSON document;
  * :mod:`.rules` — what a run must show (``NcclExpectation``) and the verdict's rules;
  * :mod:`.report` — the verdict on each run and over all runs (``NcclReport``), JSON and text;

* :mod:`.record` — each node's result in its NodeAcceptance object;
* :mod:`.sshkeys` — per-run SSH keys for a PyTorchJob launcher.
"""
