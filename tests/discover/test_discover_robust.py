"""gpufabric discover against what a new user meets: a hostile or slow API server, odd
kubeconfigs, an --out that cannot be written or is someone else's file, label values that
other YAML readers take for numbers, long values that differ late. Each ends in one clear
line and its exit code, never a traceback."""

from __future__ import annotations

import copy
import json
import logging
import re
import socket
from pathlib import Path
from typing import Any

import pytest
import yaml
from discoverseed import nodes, objects
from fake_kube import TOKEN, FakeKube

from gpufabric.cli import main
from gpufabric.discover import stackwrite
from gpufabric.discover.compose import infer
from gpufabric.discover.infer import Notes
from gpufabric.discover.roundtrip import Difference
from gpufabric.discover.snapshot import Snapshot
from gpufabric.model.stackfile import load_stack
from gpufabric.plan.build import Plan

STACK = "lab-roce"


def _serve(fake: FakeKube, plan: Plan) -> None:
    for obj in nodes(plan, per_pool=4) + objects(plan):
        fake.add(obj)


def _discover(tmp_path: Path, *extra: str, kubeconfig: Path | None = None) -> int:
    out = tmp_path / "stacks" / f"Pulumi.{STACK}.yaml"
    argv = ["discover", "--out", str(out), "--allow-diff", *extra]
    return main([*argv, *(["--kubeconfig", str(kubeconfig)] if kubeconfig else [])])


def _one_problem(err: str) -> str:
    assert "Traceback" not in err, err
    return err.strip()


# ------------------------------------------------------------------ 1. YAML 1.1 and 1.2


CORE_1_2 = (
    (r"null|Null|NULL|~|", "null"),
    (r"true|True|TRUE|false|False|FALSE", "bool"),
    (r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+", "int"),
    (r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?", "float"),
    (r"[-+]?\.(inf|Inf|INF)|\.nan|\.NaN|\.NAN", "float"),
)
"""The YAML 1.2.2 core schema's plain-scalar resolution (section 10.3.2), written from the
spec: an independent reader to check the stack file against."""


def core_1_2(plain: str) -> str:
    return next((kind for rx, kind in CORE_1_2 if re.fullmatch(rx, plain)), "str")


AMBIGUOUS = ["09", "1e3", "0o17", "6e1", "+1", ".5", "1_000", "1.", "-1e3", "+.5", "y", "N"]


def test_label_values_a_yaml_1_2_reader_takes_for_numbers_are_quoted_in_the_stack_file() -> None:
    # a label value 09 was written plain: YAML 1.2 (Go's yaml.v3, Pulumi's reader) reads
    # the int 9, 1e3 a float, 0o17 an int; y and N are YAML 1.1 booleans
    selector = {f"example.com/k{i}": v for i, v in enumerate(AMBIGUOUS)}
    config = {"gpufabric:gpuNodes": {"nodeSelector": selector, "count": 2}}
    text = stackwrite.text("x", "context c", config, Notes())
    assert "example.com/k0: '09'" in text
    plain = [
        node.value
        for node in _scalars(yaml.compose(text))
        if node.style is None and node.tag.endswith(":str")
    ]
    assert [p for p in plain if core_1_2(p) != "str"] == []
    assert yaml.safe_load(text)["config"]["gpufabric:gpuNodes"]["nodeSelector"] == selector


def _scalars(node: Any) -> list[Any]:
    if isinstance(node, yaml.ScalarNode):
        return [node]
    if isinstance(node, yaml.MappingNode):
        return [s for k, v in node.value for s in _scalars(k) + _scalars(v)]
    return [s for v in node.value for s in _scalars(v)]


# ------------------------------------------------------------------ 2. nulls, wrong types, tokens


def test_an_nccl_env_configmap_with_null_data_is_read_as_empty() -> None:
    # before: AttributeError in infer_fabric._roce ((cm or {}).get("data", {}) is None)
    snap = Snapshot()
    for obj in nodes(load_stack(STACK).plan, per_pool=2) + objects(load_stack(STACK).plan):
        if obj["kind"] == "ConfigMap" and obj["metadata"]["name"].startswith("nccl-env"):
            obj["data"] = None
        snap.objects.setdefault(obj["kind"], []).append(obj)
    _, config, _ = infer(snap, STACK)
    assert config["gpufabric:fabric"]["type"] == "roce"


@pytest.mark.parametrize("field", ["data", "labels", "annotations", "spec", "status"])
def test_null_maps_on_every_object_read_as_absent(field: str, tmp_path: Path, capsys) -> None:
    plan = load_stack(STACK).plan
    with FakeKube() as fake:
        _serve(fake, plan)
        for obj in fake.objects.values():
            (obj["metadata"] if field in ("labels", "annotations") else obj)[field] = None
        code = _discover(tmp_path, kubeconfig=fake.kubeconfig(tmp_path))
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert code in (0, 2), err  # a stack (valid or not, said so), no crash


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("labels", ["a"], "metadata.labels is a list, not an object"),
        (
            "labels",
            {"gpufabric.io/tenant": 9},
            "metadata.labels.gpufabric.io/tenant is not a string",
        ),
        ("spec", "x", "spec is a str, not an object"),
        ("data", [1], "data is a list, not an object"),
    ],
)
def test_wrong_typed_maps_are_a_clear_error(
    field: str, value: Any, said: str, tmp_path: Path, capsys
) -> None:
    plan = load_stack(STACK).plan
    kind, collection = (
        ("ConfigMap", "/configmaps") if field == "data" else ("Namespace", "/namespaces")
    )
    named: list[str] = []

    def hostile(method: str, raw: str, status: int, body: Any) -> tuple[int, Any] | None:
        if method != "GET" or not raw.split("?")[0].endswith(collection) or not body["items"]:
            return None
        body = copy.deepcopy(body)
        obj = body["items"][0]
        named.append(obj["metadata"]["name"])
        (obj["metadata"] if field == "labels" else obj)[field] = value
        return status, body

    with FakeKube() as fake:
        _serve(fake, plan)
        fake.mutators.append(hostile)
        code = _discover(tmp_path, kubeconfig=fake.kubeconfig(tmp_path))
    err = _one_problem(capsys.readouterr().err)
    assert code == 3, err
    assert f"GET /api/v1{collection}: {kind} " in err
    assert named[0] in err
    assert said in err


@pytest.mark.parametrize("where", ["tokenFile", "token"])
def test_a_token_ending_in_a_line_break_is_trimmed(where: str, tmp_path: Path, capsys) -> None:
    # kubectl trims a token file; before: "Bearer x\n", ValueError: Invalid header value
    plan = load_stack(STACK).plan
    with FakeKube() as fake:
        _serve(fake, plan)
        cfg = _kubeconfig(fake, tmp_path)
        user = cfg["users"][0]["user"]
        if where == "tokenFile":
            (tmp_path / "token").write_text(TOKEN + "\n", encoding="utf-8")
            user.pop("token")
            user["tokenFile"] = "token"  # relative to the kubeconfig's directory
        else:
            user["token"] = TOKEN + "\n"
        code = _discover(tmp_path, kubeconfig=_write(tmp_path, cfg))
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert code == 0, err


def _kubeconfig(fake: FakeKube, tmp_path: Path) -> dict[str, Any]:
    cfg: dict[str, Any] = json.loads(fake.kubeconfig(tmp_path).read_text(encoding="utf-8"))
    return cfg


def _write(tmp_path: Path, cfg: dict[str, Any], name: str = "kubeconfig") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


# ------------------------------------------------------------------ 3. --timeout


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0"])
def test_timeout_must_be_finite_and_positive(value: str, tmp_path: Path, capsys) -> None:
    # before: nan and inf were accepted and meant no deadline at all
    assert _discover(tmp_path, f"--timeout={value}") == 2
    err = _one_problem(capsys.readouterr().err)
    assert f"--timeout: {float(value)}: expected a positive, finite number of seconds" in err


# ------------------------------------------------------------------ 4. slow and absent servers


def test_a_hanging_server_is_said_to_have_timed_out(tmp_path: Path, capsys) -> None:
    # before: "GET /api/v1/nodes: the API server could not be reached"
    with FakeKube() as fake:
        fake.faults.append(("GET", "/api/v1/nodes", 5.0))
        code = _discover(tmp_path, "--timeout", "2", kubeconfig=fake.kubeconfig(tmp_path))
        url = fake.url
    err = _one_problem(capsys.readouterr().err)
    assert code == 3
    assert (
        f"GET /api/v1/nodes: timed out after --timeout 2s, the command's time limit, asking "
        f"the API server at {url} (the kubeconfig's current context, fake)"
    ) in err
    assert "could not be reached" not in err


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("command", [["discover"], ["verify", "cluster", "--stack", STACK]])
def test_an_unreachable_server_is_named_with_its_context(
    command: list[str], tmp_path: Path, capsys
) -> None:
    with FakeKube() as fake:
        cfg = _kubeconfig(fake, tmp_path)
    url = f"http://127.0.0.1:{_closed_port()}"
    cfg["clusters"][0]["cluster"]["server"] = url
    argv = [*command, "--kubeconfig", str(_write(tmp_path, cfg)), "--context", "fake"]
    if command == ["discover"]:
        argv += ["--out", str(tmp_path / "Pulumi.x.yaml"), "--timeout", "3"]
    assert main(argv) == 3
    err = _one_problem(capsys.readouterr().err)
    assert f"cannot reach the API server at {url} (context fake): " in err
    assert "Connection refused" in err
    assert " at 0x" not in err  # no object addresses: the same text every run


# ------------------------------------------------------------------ 5. kubeconfigs


def test_a_yaml_file_that_is_no_kubeconfig_is_said_to_be_none(tmp_path: Path, capsys) -> None:
    # before: "sets no current-context: pass --context"
    other = tmp_path / "Pulumi.prod.yaml"
    other.write_text("config:\n  gpufabric:cluster:\n    name: prod\n", encoding="utf-8")
    assert _discover(tmp_path, kubeconfig=other) == 2
    err = _one_problem(capsys.readouterr().err)
    assert f"--kubeconfig: {other}: not a kubeconfig" in err
    assert "current-context" not in err


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ("users", "client-certificate"),
        ("users", "client-key"),
        ("users", "tokenFile"),
        ("clusters", "certificate-authority"),
    ],
)
def test_a_file_the_kubeconfig_names_that_is_missing_is_named(
    section: str, field: str, tmp_path: Path, capsys
) -> None:
    # before: the client skipped a missing certificate over http and the server said 401
    with FakeKube() as fake:
        cfg = _kubeconfig(fake, tmp_path)
        entry = cfg[section][0][section[:-1]]
        entry[field] = "certs/missing.pem"
        if field == "tokenFile":
            entry.pop("token")  # an inline token wins over the file, for kubectl too
        code = _discover(tmp_path, kubeconfig=_write(tmp_path, cfg))
        assert fake.requests == []
    err = _one_problem(capsys.readouterr().err)
    assert code == 2
    assert f"{field} {tmp_path / 'certs' / 'missing.pem'}: cannot be read (No such file" in err
    assert str(tmp_path / "kubeconfig") in err


def test_a_failing_credential_plugin_is_one_line_without_log_noise(tmp_path: Path, capsys) -> None:
    # before: ERROR:root:exec: process returned 7 and urllib3's "WARNING: Retrying" lines,
    # then requests without credentials
    with FakeKube() as fake:
        cfg = _kubeconfig(fake, tmp_path)
        cfg["users"][0]["user"] = {
            "exec": {
                "apiVersion": "client.authentication.k8s.io/v1beta1",
                "command": "sh",
                "args": ["-c", "echo token expired >&2; exit 7"],
            }
        }
        code = _discover(tmp_path, kubeconfig=_write(tmp_path, cfg))
        assert fake.requests == []
    err = capsys.readouterr().err
    assert code == 3
    assert err.strip().splitlines() == [
        f"gpufabric discover: {tmp_path / 'kubeconfig'}: user 'tester': the credential plugin "
        "`sh -c echo token expired >&2; exit 7` exited with status 7: token expired; nothing "
        "was sent to the cluster"
    ]
    assert not [h for h in logging.getLogger().handlers if type(h).__name__ == "_Captured"]


# ------------------------------------------------------------------ 6, 7. --out


def test_an_out_that_cannot_be_written_is_refused_before_the_cluster_is_read(
    tmp_path: Path, capsys
) -> None:
    # before: exit 1, "[Errno 2] No such file or directory", after the whole read
    with FakeKube() as fake:
        kubeconfig = str(fake.kubeconfig(tmp_path))
        assert main(["discover", "--kubeconfig", kubeconfig, "--out", "/proc/Pulumi.x.yaml"]) == 2
        (tmp_path / "afile").write_text("", encoding="utf-8")
        beneath = tmp_path / "afile" / "Pulumi.x.yaml"
        assert main(["discover", "--kubeconfig", kubeconfig, "--out", str(beneath)]) == 2
        assert fake.requests == []
    err = _one_problem(capsys.readouterr().err)
    assert "--out: /proc/Pulumi.x.yaml: cannot be written in /proc (" in err
    assert f"--out: {beneath}: cannot be written: {tmp_path / 'afile'} is not a directory" in err


def test_a_hand_written_out_file_is_kept_unless_forced(tmp_path: Path, capsys) -> None:
    # before: a hand-written stacks/Pulumi.prod.yaml was silently overwritten
    plan = load_stack(STACK).plan
    out = tmp_path / "stacks" / f"Pulumi.{STACK}.yaml"
    out.parent.mkdir()
    mine = "# my own stack\nconfig:\n  gpufabric:cluster:\n    name: mine\n"
    out.write_text(mine, encoding="utf-8")
    beside = out.with_name(f"Pulumi.{STACK}.import.json")
    beside.write_text("not discover's", encoding="utf-8")
    with FakeKube() as fake:
        _serve(fake, plan)
        kubeconfig = fake.kubeconfig(tmp_path)
        assert _discover(tmp_path, kubeconfig=kubeconfig) == 2
        assert fake.requests == []  # refused before the cluster is read
        err = _one_problem(capsys.readouterr().err)
        assert (
            f"--out: {out}: exists and was not written by gpufabric discover (its first line "
            "is not discover's header); --force overwrites it"
        ) in err
        assert out.read_text(encoding="utf-8") == mine
        assert _discover(tmp_path, "--force", kubeconfig=kubeconfig) == 0
        first = out.read_text(encoding="utf-8")
        assert first.startswith(f"# {STACK}: discovered by `gpufabric discover`")
        assert json.loads(beside.read_text(encoding="utf-8"))  # the map is always discover's
        assert _discover(tmp_path, kubeconfig=kubeconfig) == 0  # its own file: replaced
    assert out.read_text(encoding="utf-8") == first
    capsys.readouterr()


def test_force_and_the_read_flags_are_refused_beside_print_rbac(capsys) -> None:
    assert main(["discover", "--print-rbac", "--force"]) == 2
    assert "--force: applies only with --out" in capsys.readouterr().err


# ------------------------------------------------------------------ 8. long differences


def test_long_values_that_differ_late_show_where_they_differ() -> None:
    # before: both sides cut at 160 characters, the same text on each side
    nets = [{"name": f"rx{i}", "namespace": "gpufabric-networks"} for i in range(8)]
    live = json.dumps(nets)
    nets[6]["namespace"] = "tenant-a"
    diff = Difference(
        "ConfigMap foundation/nccl-env-b200", "metadata.annotations.x", live, json.dumps(nets)
    )
    text = str(diff)
    at = next(i for i, (a, b) in enumerate(zip(live, json.dumps(nets), strict=False)) if a != b)
    assert "\n" not in text
    assert f"(they differ from character {at + 1} on)" in text
    shown_live, shown_rendered = text.split(", rendered ")
    assert 'rx6\\", \\"namespace\\": \\"gpufabric-networks' in shown_live
    assert 'rx6\\", \\"namespace\\": \\"tenant-a' in shown_rendered
    assert "tenant-a" not in shown_live
    assert str(Difference("X", "f", "short", None)) == 'X: f: live "short", rendered (absent)'


# ------------------------------------------------------------------ 9. usage


def test_usage_says_out_is_required_unless_print_rbac(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["discover", "--help"])
    assert "(--out stacks/Pulumi.<name>.yaml | --print-rbac)" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main(["discover"])
    assert exc.value.code == 2
    assert "one of the arguments --out --print-rbac is required" in capsys.readouterr().err
