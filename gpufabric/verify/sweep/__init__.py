"""``verify nccl --sweep``: find the bad nodes and paths with rounds of two-node jobs.

The planner and the judge are pure: no cluster, no clock. The same nodes, topology and
results give the same rounds and the same verdicts (pairings are ordered by a SHA-256 of the
round and the node name, never by Python's per-process hash).

* :mod:`.job` — a job of the sweep, and the topology its nodes sit in;
* :mod:`.rounds` — which nodes run together in the screening rounds, and how a failing group
  job splits;
* :mod:`.faults` — path faults: uplinks whose every job across them failed;
* :mod:`.ledger` — the record of jobs, kept as the planner and the judge read it;
* :mod:`.judge` — each node's verdict (:class:`~.judge.NodeVerdict`) from the record, and
  the rounds that adapt to it;
* :mod:`.cost` — what a job and a round take, and the screening mode chosen by it;
* :mod:`.run` — running the rounds against a cluster and localising rails;
* :mod:`.forecast` — what a sweep will take, said before it starts;
* :mod:`.session` — one sweep of a cluster's GPU nodes, as ``verify nccl --sweep`` runs it:
  the nodes it pairs, the jobs it submits and deletes, its result as JSON and checks.
"""
