"""``verify storage``: each tenant's claims, proven from its own pods on GPU nodes.

* :mod:`.judge` — the pods, what they write and read, and the verdict;
* :mod:`.run` — running a round of pods within deadlines, every pod deleted;
* :mod:`.mountstats` — which transport each NFS mount uses, read from the kernel's file.
"""
