"""``verify nccl --sweep``: find the bad nodes and paths with rounds of two-node jobs.

* :mod:`.plan` — which pairs run in each round, and what the results say (pure);
* :mod:`.run` — running the rounds against a cluster and localising rails;
* :mod:`.forecast` — what a sweep will take, said before it starts.
"""
