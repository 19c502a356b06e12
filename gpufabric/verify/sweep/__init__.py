"""``verify nccl --sweep``: find the bad nodes and paths with rounds of two-node jobs.

* :mod:`.plan` — which pairs run in each round, and what the results say (pure);
* :mod:`.run` — running the rounds against a cluster and localising rails;
* :mod:`.forecast` — what a sweep will take, said before it starts;
* :mod:`.session` — one sweep of a cluster's GPU nodes, as ``verify nccl --sweep`` runs it:
  the nodes it pairs, the jobs it submits and deletes, its result as JSON and checks.
"""
