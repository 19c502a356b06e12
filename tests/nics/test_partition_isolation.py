"""InfiniBand partitions that isolate: a model of the subnet manager's membership rules
(tests/partition_model.py) applied to the partitions.conf lines the runbook prints and, with
UFM, to what ib-kubernetes adds shows that no tenant's VF is a full member of another
tenant's partition and no two tenants' VFs can talk unless the stack puts them in one
partition, for every example stack, the golden matrix and a random sample of stacks. The
runbook's former form (every tenant's key ``defmember=full : ALL``) fails the same model."""

from __future__ import annotations

import copy
import random
from typing import Any

import golden
import partition_model as pm
import pytest
import yaml
from builders import SHIPPED_STACKS, example_config, model_of, plan_of, problems_of
from stackfuzz import mutate

from gpufabric.model.stackfile import StackError
from gpufabric.nics.cni import cni_config
from gpufabric.plan.build import Plan

UFM = golden.UFM
IB_SRIOV = "prod-ib"
"""The example stack with InfiniBand SR-IOV (dgx-h100 shares its ports: no partitions)."""


def _tenant_keys(plan: Plan) -> dict[str, str | None]:
    """Each tenant's network's pkey as its NAD carries it (the first rail's)."""
    f = plan.facts.fabric
    rail = f.rails[0]
    return {
        ns: cni_config(f, rail, contract).get("pkey") for ns, contract in plan.facts.tenants.items()
    }


def verdict(plan: Plan, lines: tuple[str, ...] | None = None) -> pm.Verdict | None:
    """The model's verdict on a plan (None: its rails put pods in no partition)."""
    ib = plan.facts.fabric.infiniband
    if ib is None or not ib.partitions or plan.facts.fabric.rails[0].cni != "ib-sriov":
        return None
    ufm = ib.pkey_management == "ufm"
    ports = pm.fabric(_tenant_keys(plan), rails=2, nodes=2, ufm=ufm)
    members = pm.apply_conf(ib.partitions_conf if lines is None else lines, ports)
    if ufm:
        pm.ib_kubernetes(members, [p for p in ports if p.kind == "vf"])
    return pm.judge(members, ports, [(p.pkey, p.tenants) for p in ib.partitions])


def _assert_isolated(plan: Plan) -> pm.Verdict | None:
    v = verdict(plan)
    if v is not None:
        assert v.isolated, v
        assert not v.unreachable, v
    return v


def _tenant_pkeys_ufm() -> dict[str, Any]:
    config = example_config("prod-ib")
    config["gpufabric:fabric"]["nadScope"] = "tenant"
    config["gpufabric:fabric"]["infiniband"].update(pkeyManagement="ufm", ufm=UFM)
    for i, tenant in enumerate(config["gpufabric:tenants"][:3]):
        tenant["pkey"] = f"0x80{i + 1}0"
    return config


# ----------------------------------------------------------------- the model's own cases


def _ports() -> list[pm.Port]:
    return pm.fabric({"a": "0x8010", "b": "0x8020"}, rails=1, nodes=2, ufm=False, seed=1)


def test_model_full_and_limited() -> None:
    """Full meets full and limited; limited never meets limited; a later statement
    overwrites an earlier one; no rule for Default: every end port limited, SELF full."""
    ports = _ports()
    vf_a, vf_b = [p for p in ports if p.tenant == "a"][:1] + [p for p in ports if p.tenant == "b"][
        :1
    ]
    sm = ports[0]
    m = pm.apply_conf([f"P=0x10 : ALL=limited, {vf_a.guid:#x}=full;"], ports)
    assert m[0x10][vf_a.guid] == pm.FULL
    assert m[0x10][vf_b.guid] == pm.LIMITED
    assert pm.shared(m, vf_a.guid, vf_b.guid) == [0x10]
    assert m[pm.DEFAULT][sm.guid] == pm.FULL
    assert m[pm.DEFAULT][vf_a.guid] == pm.LIMITED
    assert pm.shared(m, vf_a.guid, vf_b.guid) == [0x10]  # not in Default: both limited
    m = pm.apply_conf([f"P=0x10, defmember=full : {vf_a.guid:#x}, ALL=limited;"], ports)
    assert m[0x10][vf_a.guid] == pm.LIMITED  # ALL came later
    assert pm.shared(m, vf_a.guid, vf_b.guid) == []
    m = pm.apply_conf(["P=0x8010, defmember=both : ALL; # a comment ALL=full", "Q=0x0010 : SELF;"], ports)  # fmt: skip
    assert set(m) == {0x10, pm.DEFAULT}  # 0x8010 and 0x0010 are one partition
    assert m[0x10][vf_a.guid] == pm.FULL  # both: full (no allow_both_pkeys); SELF leaves it
    with pytest.raises(ValueError, match="without a key"):
        pm.apply_conf(["NoKey : ALL;"], ports)


def test_model_catches_the_former_runbook_form() -> None:
    """Every tenant's key `defmember=full : ALL` (the runbook before this change): each
    tenant's VF is a full member of every other tenant's partition."""
    plan = plan_of(_tenant_pkeys_ufm())
    ib = plan.facts.fabric.infiniband
    assert ib is not None
    former = (
        "Default=0x7fff, ipoib, defmember=full : ALL, ALL_SWITCHES=full, SELF=full;",
        *(f"{p.name}={p.pkey}, ipoib, defmember=full : ALL;" for p in ib.partitions),
    )
    v = verdict(plan, former)
    assert v is not None
    assert not v.isolated
    assert any("llm-pretrain's VF" in f and "0x0020" in f for f in v.foreign_full)
    assert any("meet in 0x0010, 0x0020" in r or "0x7fff" in r for r in v.reachable)
    # UFM's default left as UFM ships it (HCA ports full in 0x7fff): tenants meet there
    as_shipped = ("Default=0x7fff, ipoib, defmember=full : ALL, SELF=full;",)
    v = verdict(plan, as_shipped)
    assert v is not None
    assert v.foreign_full == []
    assert any("0x7fff" in r for r in v.reachable)


def test_ufm_partitions_isolate_and_still_connect() -> None:
    v = _assert_isolated(plan_of(_tenant_pkeys_ufm()))
    assert v is not None


# ------------------------------------------------------------ every stack and a sample


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_every_example_stack(stack: str) -> None:
    config = example_config(stack)
    plan = plan_of(config, stack)
    _assert_isolated(plan)
    for pool in plan.facts.pool_names if plan.facts.fleet else ():
        _assert_isolated(plan.for_pool(pool))


@pytest.mark.parametrize("variant", sorted(golden.variants()))
def test_golden_matrix(variant: str) -> None:
    if variant == "stress":
        pytest.skip("200 tenants: the sample covers the shape")
    _assert_isolated(plan_of(golden.variants()[variant], variant))


def _random_ib(rng: random.Random) -> dict[str, Any]:
    """prod-ib with its management, the stack's key, the networks' scope and each tenant's
    own key drawn (a tenant's key only where the networks are per tenant, as validate
    requires)."""
    config = example_config(IB_SRIOV)
    f = config["gpufabric:fabric"]
    ib = f.setdefault("infiniband", {})
    ib.pop("pkey", None)
    ufm = rng.random() < 0.5
    if ufm or rng.random() < 0.7:
        ib["pkey"] = f"0x{0x8000 | rng.randrange(0x7000, 0x7FFF):04x}"
    if ufm:
        ib.update(pkeyManagement="ufm", ufm=UFM)
    else:
        ib.update(pkeyManagement="static")
        ib.pop("ufm", None)
    f["nadScope"] = rng.choice(("system", "tenant"))
    keys = rng.sample(range(0x10, 0x7000), len(config["gpufabric:tenants"]))
    for tenant, key in zip(config["gpufabric:tenants"], keys, strict=True):
        tenant.pop("pkey", None)
        if f["nadScope"] == "tenant" and rng.random() < 0.6:
            tenant["pkey"] = f"0x{0x8000 | key:04x}"
    return config


def _refused_static_tenant_key(config: dict[str, Any]) -> bool:
    ib = config["gpufabric:fabric"].get("infiniband") or {}
    return (
        config["gpufabric:fabric"].get("nadScope") == "tenant"
        and ib.get("pkeyManagement", "static") == "static"
        and any("pkey" in t for t in config["gpufabric:tenants"])
    )


def test_random_sample_of_stacks() -> None:
    """120 random InfiniBand stacks (management, scope, shared and own keys drawn) and 60
    mutations of the InfiniBand examples (tests/stackfuzz.py): each either refused (a static
    stack with a tenant's own key, by tenants[i].pkey) or isolated."""
    rng = random.Random(41)
    judged = refused = 0
    for _ in range(120):
        config = _random_ib(rng)
        if _refused_static_tenant_key(config):
            problems = problems_of(config)
            assert any(p.startswith("tenants[") and p.endswith(".pkey") for p in problems), problems
            refused += 1
            continue
        try:
            plan = plan_of(config)
        except StackError:
            continue  # refused for another reason (the ufm section with a shared key missing)
        judged += _assert_isolated(plan) is not None
    for _ in range(60):
        _desc, text = mutate(rng, IB_SRIOV)
        try:
            doc = yaml.safe_load(text)
            config = copy.deepcopy(doc["config"])
            plan = plan_of(config)
        except Exception:
            continue
        judged += _assert_isolated(plan) is not None
    assert judged >= 100, (judged, refused)
    assert refused >= 20, (judged, refused)


def test_static_stack_with_a_tenant_key_is_refused_naming_the_options() -> None:
    config = _tenant_pkeys_ufm()
    config["gpufabric:fabric"]["infiniband"]["pkeyManagement"] = "static"
    del config["gpufabric:fabric"]["infiniband"]["ufm"]
    problems = problems_of(config)
    message = problems["tenants[0].pkey"]
    assert "pkeyManagement: ufm" in message
    assert "remove the tenant's pkey" in message
    assert "ALL" in message
    assert set(problems) == {"tenants[0].pkey", "tenants[1].pkey", "tenants[2].pkey"}
    model_of(_tenant_pkeys_ufm())  # the UFM form is accepted
