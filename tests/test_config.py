"""The stack model and its validation: what a user's stack file may say, and how a bad one
is reported (every problem at once, by config path, with what is accepted)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from builders import problems_of
from conftest import EXAMPLE_STACKS, example_config, sections

from gpufabric.model.config import SecretValue
from gpufabric.model.problems import StackError
from gpufabric.model.stackfile import load_stack, model_from_config, parse_stack_text


@pytest.mark.parametrize("name", EXAMPLE_STACKS)
def test_example_stacks_are_valid(name: str) -> None:
    stack = load_stack(name)
    assert stack.name == name
    assert stack.model.fabric.rails


def test_defaults_are_the_safe_current_choices(lab: dict[str, Any]) -> None:
    fabric = lab["gpufabric:fabric"]
    for key in ("rdma", "gpuDirect", "nicDriver", "mtu", "ipam", "roce", "linkRateGbps"):
        fabric.pop(key, None)
    del lab["gpufabric:scheduling"]
    model = model_from_config(sections(lab), "test", from_file=True)
    assert model.fabric.gpuDirect == "dmabuf"
    assert model.fabric.rdma == "shared"
    assert model.fabric.multus == "thick"
    assert model.fabric.ipam.type == "nv-ipam"
    assert model.fabric.mtu is None  # resolved in the plan: the link's default_mtu
    assert model.scheduling.gang == "kueue"
    assert model.scheduling.allOrNothingTimeout == 300
    assert model.fabric.roce is None or model.fabric.roce.gidIndex is None


def test_unknown_keys_get_did_you_mean_and_accepted_keys(lab: dict[str, Any]) -> None:
    lab["gpufabric:gpuNodes"]["gpusPerNod"] = 8
    lab["gpufabric:fabric"]["rails"][1]["subnett"] = "10.0.0.0/24"
    lab["gpufabric:fabrik"] = {}
    found = problems_of(lab)
    assert "did you mean 'gpusPerNode'" in found["gpuNodes.gpusPerNod"]
    assert "did you mean 'subnet'" in found["fabric.rails[1].subnett"]
    assert "accepted keys:" in found["fabric.rails[1].subnett"]
    assert "did you mean 'fabric'" in found["gpufabric:fabrik"]


@pytest.mark.parametrize(
    "namespace", ["gpufabrc", "gpufarbic", "GpuFabric", "gpu-fabric", "gpufabricc"]
)
def test_a_mistyped_namespace_is_an_error_not_ignored(lab: dict[str, Any], namespace: str) -> None:
    """`gpufabrc:scheduling:` used to validate ok with the scheduling defaults."""
    import yaml

    lab[f"{namespace}:scheduling"] = lab.pop("gpufabric:scheduling")
    with pytest.raises(StackError) as err:
        parse_stack_text(yaml.safe_dump({"config": lab}), "x.yaml")
    found = {p.path: p.message for p in err.value.problems}
    assert found == {
        f"{namespace}:scheduling": f"unknown config namespace '{namespace}'; did you mean "
        "'gpufabric:scheduling'? (gpufabric reads only gpufabric:* keys; other namespaces "
        "belong to other providers, e.g. kubernetes:context)"
    }


def test_other_providers_keys_are_left_to_them(lab: dict[str, Any]) -> None:
    import yaml

    lab.update({"kubernetes:context": "lab", "aws:region": "us-east-1", "gcp:project": "p"})
    model = parse_stack_text(yaml.safe_dump({"config": lab}), "x.yaml")
    assert model.scheduling.gang == "kueue"


def test_an_unknown_top_level_key_is_an_error_even_when_the_config_is_valid(
    lab: dict[str, Any],
) -> None:
    """Reported only beside config problems before, ignored when the config was valid."""
    import yaml

    with pytest.raises(StackError) as err:
        parse_stack_text(yaml.safe_dump({"config": lab, "confg": {}}), "x.yaml")
    assert [p.path for p in err.value.problems] == ["confg"]


def test_every_problem_is_reported_at_once(lab: dict[str, Any]) -> None:
    fabric = lab["gpufabric:fabric"]
    fabric["rails"][1]["subnet"] = fabric["rails"][0]["subnet"]
    fabric["rails"][1]["netdev"] = fabric["rails"][0]["netdev"]
    fabric["mtu"] = 12000
    lab["gpufabric:tenants"][1]["namespace"] = lab["gpufabric:tenants"][0]["namespace"]
    lab["gpufabric:cluster"]["kubernetesVersion"] = "one.thirty"
    found = problems_of(lab)
    assert set(found) >= {
        "fabric.rails[1].subnet",
        "fabric.rails[1].netdev",
        "fabric.mtu",
        "tenants[1].namespace",
        "cluster.kubernetesVersion",
    }
    assert "12000 is outside 1500-9216 for roce" in found["fabric.mtu"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("10.10.0.1/16", "has host bits set; did you mean 10.10.0.0/16?"),
        ("10.10.0/16", "is not a CIDR"),
        ("10.10.0.0", "is not a CIDR"),
        (42, "is not a CIDR"),
    ],
)
def test_malformed_cidrs(lab: dict[str, Any], value: Any, expected: str) -> None:
    lab["gpufabric:fabric"]["rails"][0]["subnet"] = value
    assert expected in problems_of(lab)["fabric.rails[0].subnet"]


def test_rail_subnets_must_not_overlap_cluster_networks(lab: dict[str, Any]) -> None:
    lab["gpufabric:fabric"]["rails"][0]["subnet"] = "10.244.8.0/24"
    lab["gpufabric:fabric"]["rails"][1]["subnet"] = "10.100.0.0/24"
    found = problems_of(lab)
    assert "overlaps cluster.podCIDR 10.244.0.0/16" in found["fabric.rails[0].subnet"]
    assert "overlaps cluster.serviceCIDR 10.96.0.0/12" in found["fabric.rails[1].subnet"]


@pytest.mark.parametrize(
    ("subnet", "what"),
    [
        ("127.1.0.0/16", "loopback"),
        ("169.254.0.0/16", "link-local"),
        ("224.1.0.0/16", "multicast"),
        ("240.1.0.0/16", "reserved"),
    ],
)
def test_rail_subnets_that_no_host_can_use_are_refused(
    lab: dict[str, Any], subnet: str, what: str
) -> None:
    """What README promises, exactly: these are refused, a public range is not."""
    lab["gpufabric:fabric"]["rails"][0]["subnet"] = subnet
    found = problems_of(lab)
    assert found["fabric.rails[0].subnet"] == (
        f"{subnet} is {what}; a rail needs a unicast subnet (a private one, or one of the "
        "site's own public allocation)"
    )


def test_a_rail_subnet_from_a_public_allocation_is_accepted(lab: dict[str, Any]) -> None:
    lab["gpufabric:fabric"]["rails"][0]["subnet"] = "11.0.0.0/24"
    lab["gpufabric:fabric"]["rails"][1]["subnet"] = "8.8.8.0/24"
    model = model_from_config(sections(lab), "test", from_file=True)
    assert [str(r.subnet) for r in model.fabric.rails[:2]] == ["11.0.0.0/24", "8.8.8.0/24"]


def test_duplicate_rail_names_netdevs_and_hcas(lab: dict[str, Any]) -> None:
    rails = lab["gpufabric:fabric"]["rails"]
    rails[1].update(name=rails[0]["name"], netdev=rails[0]["netdev"], hca=rails[0]["hca"])
    found = problems_of(lab)
    for attr in ("name", "netdev", "hca"):
        assert "already used by rails[0]" in found[f"fabric.rails[1].{attr}"]


def test_gateway_must_be_inside_the_subnet(lab: dict[str, Any]) -> None:
    lab["gpufabric:fabric"]["rails"][0]["gateway"] = "192.168.99.1"
    assert "outside the rail subnet" in problems_of(lab)["fabric.rails[0].gateway"]


def test_ippool_must_fit_every_node(lab: dict[str, Any]) -> None:
    lab["gpufabric:gpuNodes"]["count"] = 64
    found = problems_of(lab)
    assert "64 nodes x perNodeBlockSize 16 need 1024" in found["fabric.rails[0].subnet"]


@pytest.mark.parametrize(
    ("fabric_type", "mtu", "ok"),
    [
        ("roce", 9000, True),
        ("roce", 1400, False),
        ("infiniband", 4092, True),
        ("infiniband", 70000, False),
    ],
)
def test_mtu_range_depends_on_the_fabric(
    lab: dict[str, Any], fabric_type: str, mtu: int, ok: bool
) -> None:
    fabric = lab["gpufabric:fabric"]
    fabric.update(type=fabric_type, mtu=mtu)
    if fabric_type == "infiniband":
        del fabric["roce"]
    if ok:
        model_from_config(sections(lab), "test", from_file=True)
    else:
        assert "fabric.mtu" in problems_of(lab)


def test_fabric_specific_options_are_rejected_on_the_other_fabric(lab: dict[str, Any]) -> None:
    lab["gpufabric:fabric"]["infiniband"] = {"pkey": "0x8001"}
    assert "fabric.type is roce" in problems_of(lab)["fabric.infiniband"]
    ib = dict(lab)
    ib["gpufabric:fabric"] = dict(lab["gpufabric:fabric"], type="infiniband", mtu=4092)
    del ib["gpufabric:fabric"]["infiniband"]
    assert "fabric.type is infiniband" in problems_of(ib)["fabric.roce"]


@pytest.mark.parametrize(
    ("pkey", "expected"),
    [
        ("8001", "not a partition key"),
        ("0x7fff", "reserved"),
        ("0x0000", "reserved"),
        ("0x12345", "not a partition key"),
    ],
)
def test_pkey_format(pkey: str, expected: str) -> None:
    config = example_config("prod-ib")
    config["gpufabric:fabric"]["infiniband"]["pkey"] = pkey
    assert expected in problems_of(config)["fabric.infiniband.pkey"]


def test_pkey_is_normalised() -> None:
    config = example_config("prod-ib")
    config["gpufabric:fabric"]["infiniband"]["pkey"] = "0X801"
    model = model_from_config(sections(config), "test", from_file=True)
    assert model.fabric.infiniband.pkey == "0x0801"


def test_infiniband_vf_limit_and_ufm_needs_sriov() -> None:
    config = example_config("prod-ib")
    fabric = config["gpufabric:fabric"]
    fabric["sriov"]["numVfs"] = 32
    found = problems_of(config)
    assert "more than 16 VFs per PF" in found["fabric.sriov.numVfs"]

    config = example_config("prod-ib")
    fabric = config["gpufabric:fabric"]
    fabric["rdma"] = "shared"
    del fabric["sriov"]
    fabric["infiniband"] = {"pkeyManagement": "ufm"}
    found = problems_of(config)
    assert "'ufm' needs rdma: sriov" in found["fabric.infiniband.pkeyManagement"]
    assert "required with pkeyManagement: ufm" in found["fabric.infiniband.ufm"]


def test_peermem_with_inbox_host_drivers_is_impossible(lab: dict[str, Any]) -> None:
    lab["gpufabric:fabric"]["gpuDirect"] = "peermem"
    assert "needs DOCA-OFED/MLNX_OFED" in problems_of(lab)["fabric.gpuDirect"]
    lab["gpufabric:fabric"]["nicDriver"] = {"source": "operator"}
    model_from_config(sections(lab), "test", from_file=True)


def test_fixed_gid_index_is_refused_with_macvlan(lab: dict[str, Any]) -> None:
    lab["gpufabric:fabric"]["roce"]["gidIndex"] = 3
    assert "differs per pod" in problems_of(lab)["fabric.roce.gidIndex"]


def test_traffic_class_must_agree_with_dscp(lab: dict[str, Any]) -> None:
    lab["gpufabric:fabric"]["roce"]["trafficClass"] = 96
    assert "marks DSCP 24" in problems_of(lab)["fabric.roce.trafficClass"]


def test_exactly_one_queueing_authority(lab: dict[str, Any]) -> None:
    lab["gpufabric:scheduling"]["gang"] = ["kueue", "volcano"]
    assert "exactly one" in problems_of(lab)["scheduling.gang"]
    lab["gpufabric:scheduling"]["gang"] = "slurm"
    assert "expected one of 'kueue' or 'volcano'" in problems_of(lab)["scheduling.gang"]


def test_kueue_topology_ends_with_hostname(lab: dict[str, Any]) -> None:
    lab["gpufabric:scheduling"]["topologyLevels"] = ["topology.gpufabric.io/block"]
    assert "kubernetes.io/hostname" in problems_of(lab)["scheduling.topologyLevels"]


def test_mpijob_scheme_is_refused(lab: dict[str, Any]) -> None:
    lab["gpufabric:training"]["trainingOperator"]["schemes"] = ["mpijob"]
    found = problems_of(lab)
    assert "served by the MPI Operator" in found["training.trainingOperator.schemes[0]"]


def test_tenant_namespaces_unique_and_not_system(lab: dict[str, Any]) -> None:
    lab["gpufabric:tenants"][1]["namespace"] = "kube-system"
    lab["gpufabric:tenants"].append({"namespace": "team-vision", "gpuQuota": 1})
    found = problems_of(lab)
    assert "system namespace" in found["tenants[1].namespace"]
    assert "already tenants[0]" in found["tenants[2].namespace"]


def test_tenant_quota_cannot_exceed_the_cluster(lab: dict[str, Any]) -> None:
    lab["gpufabric:tenants"][0]["gpuQuota"] = 33
    assert "4 nodes x 8 GPUs = 32" in problems_of(lab)["tenants[0].gpuQuota"]


def test_wrong_types_name_the_value(lab: dict[str, Any]) -> None:
    lab["gpufabric:gpuNodes"]["count"] = "many"
    lab["gpufabric:fabric"]["rails"] = "rail0"
    found = problems_of(lab)
    assert "'many'" in found["gpuNodes.count"]
    assert "expected a list" in found["fabric.rails"]


def test_missing_required_sections(lab: dict[str, Any]) -> None:
    del lab["gpufabric:fabric"]
    assert problems_of(lab)["gpufabric:fabric"] == "required section is missing"


def _ufm_config() -> dict[str, Any]:
    config = example_config("prod-ib")
    config["gpufabric:fabric"]["infiniband"] = {
        "pkey": "0x8001",
        "pkeyManagement": "ufm",
        "ufm": {"address": "ufm.internal", "username": "k8s", "password": {"secure": "AAABAJk="}},
    }
    return config


def test_encrypted_values_are_accepted_and_never_decrypted() -> None:
    model = model_from_config(sections(_ufm_config()), "test", from_file=True)
    ufm = model.fabric.infiniband.ufm
    assert ufm is not None
    assert ufm.password == SecretValue(ciphertext="AAABAJk=")
    assert ufm.password.plaintext is None
    assert "AAABAJk=" not in repr(model)


def test_plaintext_secrets_are_refused_in_stack_files() -> None:
    config = _ufm_config()
    config["gpufabric:fabric"]["infiniband"]["ufm"]["password"] = "hunter2"
    found = problems_of(config)
    message = found["fabric.infiniband.ufm.password"]
    assert "pulumi config set --secret" in message
    assert "hunter2" not in message


def test_pulumi_engine_hands_secrets_over_decrypted() -> None:
    config = _ufm_config()
    config["gpufabric:fabric"]["infiniband"]["ufm"]["password"] = "hunter2"
    model = model_from_config(sections(config), "test", from_file=False)
    ufm = model.fabric.infiniband.ufm
    assert ufm is not None
    assert ufm.password.plaintext == "hunter2"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "the stack file is empty"),
        ("config:\n  gpufabric:cluster: {name: x\n", "YAML syntax error at line"),
        ("- a\n- b\n", "expected a mapping"),
        ("configs: {}\n", "did you mean 'config'"),
    ],
)
def test_unusable_files(text: str, expected: str) -> None:
    with pytest.raises(StackError) as info:
        parse_stack_text(text, "x.yaml")
    assert expected in info.value.report()


def test_missing_stack_lists_known_ones(write_stack: Callable[..., Path]) -> None:
    with pytest.raises(StackError) as info:
        load_stack("lab-roc")
    assert "did you mean 'lab-roce'" in info.value.report()


def test_node_topology_must_name_every_switch_level_and_form_a_tree() -> None:
    from builders import example_config as example

    config = example("prod-ib")
    block, leaf = "topology.gpufabric.io/block", "topology.gpufabric.io/leaf"
    config["gpufabric:scheduling"]["nodeTopology"] = {
        "gpu-node-0": {block: "b1", leaf: "l1"},
        "gpu-node-1": {block: "b2", leaf: "l1"},  # l1 under two blocks
        "gpu-node-2": {leaf: "l3"},  # no block
    }
    found = problems_of(config)
    assert "a switch has one parent" in found["scheduling.nodeTopology.gpu-node-1"]
    assert f"missing {block}" in found["scheduling.nodeTopology.gpu-node-2"]
