"""The most GPUs one job of a tenant can ever be admitted with (``gpu_admissible``), as each
authority computes it, read against the objects that authority admits jobs by: a job asking
more waits in its queue forever, so ``gpufabric job`` and ``verify nccl`` refuse it."""

from __future__ import annotations

from typing import Any

import pytest
from builders import example_config, plan_of

from gpufabric.plan.build import Plan

GPU = "nvidia.com/gpu"
TENANTS = [
    # may borrow up to the whole cluster (32 GPUs), but the quotas hold 28 of them: Kueue
    # lends only quota, so it caps the tenant at the cohort's 28; Volcano does not
    {"namespace": "big", "gpuQuota": 16, "gpuBorrowingLimit": 16},
    {"namespace": "fixed", "gpuQuota": 8},
    {"namespace": "lender", "gpuQuota": 4, "gpuBorrowingLimit": 4},
]


def plan_for(gang: str) -> Plan:
    config = example_config("lab-roce")
    config["gpufabric:scheduling"]["gang"] = gang
    config["gpufabric:tenants"] = TENANTS
    return plan_of(config)


def bodies(plan: Plan, kind: str) -> list[dict[str, Any]]:
    return [o.body for _, o in plan.objects() if o.body["kind"] == kind]


def test_kueue_admits_at_most_nominal_plus_borrowing_within_the_cohorts_quota() -> None:
    """Kueue's PotentialAvailable: min(nominalQuota + borrowingLimit, all nominalQuota of
    the cohort); every ClusterQueue sets a borrowingLimit and none a lendingLimit."""
    plan = plan_for("kueue")
    queues = {}
    for cq in bodies(plan, "ClusterQueue"):
        (gpu,) = [r for r in cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
                  if r["name"] == GPU]  # fmt: skip
        assert "lendingLimit" not in gpu
        queues[cq["metadata"]["name"]] = (cq["spec"]["cohortName"], gpu)
    assert len({cohort for cohort, _ in queues.values()}) == 1
    pooled = sum(gpu["nominalQuota"] for _, gpu in queues.values())
    expected = {
        name: min(gpu["nominalQuota"] + gpu["borrowingLimit"], pooled)
        for name, (_, gpu) in queues.items()
    }
    got = {ns: c.gpu_admissible for ns, c in plan.facts.tenants.items()}
    assert got == expected == {"big": 28, "fixed": 8, "lender": 8}
    assert "cohort is 28 GPUs" in plan.facts.tenants["big"].gpu_admissible_why


def test_volcano_admits_at_most_the_queues_capability() -> None:
    """Volcano's capacity plugin enqueues a job only within its Queue's capability
    (gpuQuota + gpuBorrowingLimit); there is no cohort to cap it further."""
    plan = plan_for("volcano")
    capability = {
        q["metadata"]["name"]: int(q["spec"]["capability"][GPU]) for q in bodies(plan, "Queue")
    }
    got = {ns: c.gpu_admissible for ns, c in plan.facts.tenants.items()}
    assert got == capability == {"big": 32, "fixed": 8, "lender": 8}


@pytest.mark.parametrize("gang", ["kueue", "volcano"])
def test_the_resource_quota_never_refuses_an_admissible_jobs_pods(gang: str) -> None:
    """The namespace's ResourceQuota holds the tenant's pods to at least what its queue
    admits (else an admitted job's pods would be refused)."""
    plan = plan_for(gang)
    held = {
        rq["metadata"]["namespace"]: int(rq["spec"]["hard"][f"requests.{GPU}"])
        for rq in bodies(plan, "ResourceQuota")
        if f"requests.{GPU}" in rq["spec"]["hard"]
    }
    assert held.keys() == plan.facts.tenants.keys()
    for ns, contract in plan.facts.tenants.items():
        assert held[ns] >= contract.gpu_admissible
