"""The Plan: every item a stack installs, in apply order, with its dependencies and the
resolved facts every output reads.

A Plan is computed once from the stack model by pure functions (no I/O besides reading the
templates and pins shipped with the project, no clock, no randomness), and everything else
reads it: the Pulumi components register its items, ``gpufabric render`` writes them to
files, the runbook describes them and ``verify`` checks a cluster against them.

Modules: :mod:`~gpufabric.plan.items` (what items are), :mod:`~gpufabric.plan.ids` (their
ids and Pulumi names), :mod:`~gpufabric.plan.facts` and :mod:`~gpufabric.plan.resolve` (the
resolved facts), one builder module per layer, and :mod:`~gpufabric.plan.build` (``Plan``
and ``build_plan``). This package imports none of them, so the records (facts, items, ids)
can be imported without the builders: the NIC modes and queueing authorities the builders
call import those records.
"""
