"""gpufabric: GPU Operator, RDMA networking, training operators and gang scheduling for a
GPU training cluster, one Pulumi stack per environment.

The core flow is stack file -> :mod:`gpufabric.model.config` model -> :mod:`gpufabric.plan`
Plan -> Pulumi components, rendered files, runbook and cluster checks.
"""

__version__ = "0.1.0"
