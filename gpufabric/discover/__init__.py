"""``gpufabric discover``: read a running cluster (get/list only) into a stack file whose
render gives back the live objects, and the round-trip gate that proves it.

- :mod:`.sources`: every collection discovery reads, and the ClusterRole that allows it;
- :mod:`.snapshot`: reading them through :class:`gpufabric.verify.kube.Kube`, paged, bounded;
- :mod:`.pools`: GPU nodes grouped into pools by what they are;
- :mod:`.infer`: the snapshot read into a stack's ``config:`` mapping, with what could not be
  mapped and what is foreign;
- :mod:`.stackwrite`: the commented stack file;
- :mod:`.roundtrip`: render the discovered stack and diff it against the live objects.
"""
