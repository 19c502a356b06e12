"""What a discovered stack's first `pulumi up` adopts: the import map `gpufabric discover`
writes beside the stack file is Pulumi's bulk-import file, its URNs are the ones the Pulumi
program registers (under Pulumi's mocks), and the runbook's adopt phase prints commands whose
words (through the real bash) are those of the map. UFM credentials, which live in a Secret
discovery never reads, come back as placeholders with the commands that set them."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml
from builders import REPO, example_config, plan_of
from discoverseed import nodes, objects
from fake_kube import FakeKube
from pulumi.runtime import mocks as pulumi_mocks

from gpufabric.cli import main
from gpufabric.model.stackfile import load_stack
from gpufabric.plan.build import Plan, build_plan

PULUMI_IMPORT_FIELDS = {
    # pulumi/pulumi pkg/cmd/pulumi/operations/import.go, importSpec's JSON names
    "type",
    "name",
    "id",
    "parent",
    "provider",
    "version",
    "pluginDownloadUrl",
    "properties",
    "component",
    "remote",
    "logicalName",
}


def _found(stack: str) -> Plan:
    """The example stack's plan as stack ``found`` made it (each object labelled so)."""
    return build_plan("found", load_stack(stack).model)


def _discover(plan: Plan, workdir: Path, stem: str = "found") -> tuple[int, str, str, Path]:
    """`gpufabric discover` of a cluster seeded from the plan into workdir/stacks."""
    out = workdir / "stacks" / f"Pulumi.{stem}.yaml"
    workdir.mkdir(parents=True, exist_ok=True)
    with FakeKube() as fake:
        for obj in nodes(plan) + objects(plan):
            fake.add(obj)
        argv = ["discover", "--kubeconfig", str(fake.kubeconfig(workdir)), "--out", str(out)]
        err, std = io.StringIO(), io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(std):
            code = main(argv)
        assert "secrets" not in " ".join(p for _, p in fake.requests)
    return code, std.getvalue(), err.getvalue(), out


# ------------------------------------------------------------------ Pulumi's own rules


def check_import_file(doc: dict[str, Any]) -> None:
    """The checks `pulumi import --file` makes before it imports anything (parseImportFile):
    known fields, a type, name and id each, parents and providers named in nameTable,
    unique names, URNs in nameTable well formed."""
    assert set(doc) == {"nameTable", "resources"}
    table = doc["nameTable"]
    for name, urn in table.items():
        assert isinstance(name, str)
        assert name
        assert re.fullmatch(r"urn:pulumi:[^:]+::[^:]+::[^:]+(\$[^:]+|:[^:]+)*::.+", urn), urn
    names = [r["name"] for r in doc["resources"]]
    assert len(names) == len(set(names))
    assert not set(names) & set(table)
    for res in doc["resources"]:
        assert set(res) <= PULUMI_IMPORT_FIELDS
        assert res["type"]
        assert res["name"]
        assert res["id"]
        assert res["parent"] in table
        assert res["provider"] in table


def pulumi_urn(stack: str, parent_urn: str, type_: str, name: str) -> str:
    """resource.NewURN as `pulumi import` computes it: the parent's qualified type, `$`, the
    resource's type (the root Stack's children have no parent type)."""
    parent_type = parent_urn.split("::")[2]
    return f"urn:pulumi:{stack}::gpufabric::{parent_type}${type_}::{name}"


# ----------------------------------------------------------------- the program, mocked


class _Recorder(pulumi.runtime.Mocks):
    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        return f"{args.name}-id", args.inputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict[str, Any]:
        return {}


class _Monitor(pulumi_mocks.MockMonitor):
    """Keeps each registration's type and parent, to build the URN the engine gives it."""

    def __init__(self, mocks: _Recorder) -> None:
        super().__init__(mocks)
        self.parents: dict[str, tuple[str, str, str]] = {}

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)
        self.parents[response.urn] = (request.type, request.name, request.parent)
        return response


def engine_urns(stack: str, monitor: _Monitor) -> set[str]:
    """The URNs the engine registers. The Python mock's URN keeps only the parent's last
    type; the engine (resource.NewURN with the parent URN's QualifiedType) keeps the chain
    of every parent type below the root Stack."""

    def chain(urn: str) -> str:
        type_, _name, parent = monitor.parents[urn]
        if not parent or parent.split("::")[2].endswith("pulumi:pulumi:Stack"):
            return type_
        return f"{chain(parent)}${type_}"

    return {
        f"urn:pulumi:{stack}::gpufabric::{chain(urn)}::{name}"
        for urn, (type_, name, _) in monitor.parents.items()
        if type_ != "pulumi:pulumi:Stack"
    }


def registered_urns(stack: str, stack_file: Path) -> set[str]:
    """Every URN the Pulumi program registers for this stack file's config."""
    config = yaml.safe_load(stack_file.read_text(encoding="utf-8"))["config"]
    recorder = _Recorder()
    monitor = _Monitor(recorder)
    pulumi.runtime.set_mocks(recorder, project="gpufabric", stack=stack, monitor=monitor)
    pulumi.runtime.set_all_config({k: json.dumps(v) for k, v in config.items()})
    from pulumi.runtime import sync_await

    from components.program import main as program

    fabric = program()
    done = pulumi.Output.all(*[r.urn for r in fabric.resources.values()])
    sync_await._sync_await(done.future())
    return engine_urns(stack, monitor)


@pytest.fixture(autouse=True)
def _reset_config() -> Iterator[None]:
    yield
    pulumi.runtime.set_all_config({})


@pytest.mark.parametrize("stack", ["lab-roce", "fleet-mixed", "roce-sriov-volcano"])
def test_import_map_is_pulumis_format_with_the_urns_the_program_registers(
    stack: str, tmp_path: Path
) -> None:
    code, out, _err, stack_file = _discover(_found(stack), tmp_path)
    assert code == 0
    path = tmp_path / "stacks" / "Pulumi.found.import.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    check_import_file(doc)
    count = len(doc["resources"])
    assert f"wrote {path}: {count} live object(s) to import" in out
    urns = registered_urns("found", stack_file)
    table = doc["nameTable"]
    assert set(table.values()) <= urns
    imported = {
        pulumi_urn("found", table[r["parent"]], r["type"], r["name"]) for r in doc["resources"]
    }
    missing = imported - urns
    assert not missing, sorted(missing)[:3]
    # every object discovery read that the stack renders is in it, with pulumi-kubernetes'
    # id (<namespace>/<name>, <name> cluster-scoped)
    plan = load_stack(str(stack_file)).plan
    live = {
        (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objects(plan)
    }
    ids = {r["id"] for r in doc["resources"]}
    rendered = [p for _, p in plan.objects() if (p.kind, p.namespace, p.name) in live]
    assert count == len(rendered)
    assert {f"{p.namespace}/{p.name}" if p.namespace else p.name for p in rendered} == ids
    # nodes are never gpufabric's: none is imported
    assert not any(r["type"] == "kubernetes:core/v1:Node" for r in doc["resources"])


def test_import_map_is_the_same_on_a_second_discovery(tmp_path: Path) -> None:
    plan = _found("dgx-h100")
    _discover(plan, tmp_path / "a")
    _discover(plan, tmp_path / "b")
    first = (tmp_path / "a" / "stacks" / "Pulumi.found.import.json").read_bytes()
    assert first == (tmp_path / "b" / "stacks" / "Pulumi.found.import.json").read_bytes()


# ------------------------------------------------------------------------- the runbook


def _workdir(tmp_path: Path) -> Path:
    (tmp_path / "Pulumi.yaml").write_text(
        (REPO / "Pulumi.yaml").read_text(encoding="utf-8"), encoding="utf-8"
    )
    return tmp_path


def _runbook(workdir: Path, stack: str = "found") -> subprocess.CompletedProcess[str]:
    code = "import sys; from gpufabric.cli import main; sys.exit(main(sys.argv[1:]))"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-c", code, "runbook", "--stack", stack],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _adopt_section(text: str) -> str:
    start = text.index("### Before phase 1: Adopt the existing objects")
    return text[start : text.index("### Phase 1:", start)]


RECORD = "pulumi() { python3 -c 'import json, sys; print(json.dumps(sys.argv[1:]))' \"$@\"; }\n"
"""`pulumi` as a shell function that prints the words bash gives it."""


def _words(block: str, cwd: Path) -> list[list[str]]:
    done = subprocess.run(
        ["bash", "-euc", RECORD + block], cwd=cwd, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def _import_file_of(argv: list[str]) -> dict[str, Any]:
    """The import file `pulumi import TYPE NAME ID --parent n=urn --provider n=urn` makes
    (makeImportFile: name=URN specs into nameTable)."""
    assert argv[0] == "import"
    flags: dict[str, str] = {}
    args: list[str] = []
    rest = iter(argv[1:])
    for word in rest:
        if word.startswith("--") and "=" in word:
            key, _, value = word[2:].partition("=")
            flags[key] = value
        elif word.startswith("--"):
            flags[word[2:]] = next(rest)
        else:
            args.append(word)
    type_, name, id_ = args
    parent_name, _, parent_urn = flags["parent"].partition("=")
    provider_name, _, provider_urn = flags["provider"].partition("=")
    assert flags["generate-code"] == "false"
    return {
        "stack": flags["stack"],
        "nameTable": {parent_name: parent_urn, provider_name: provider_urn},
        "resource": {
            "type": type_,
            "name": name,
            "id": id_,
            "parent": parent_name,
            "provider": provider_name,
        },
    }


def test_runbook_adopt_phase_prints_the_maps_objects_as_pulumi_takes_them(
    tmp_path: Path,
) -> None:
    workdir = _workdir(tmp_path)
    code, _, _, stack_file = _discover(_found("lab-roce"), workdir)
    assert code == 0
    done = _runbook(workdir)
    assert done.returncode == 0, done.stderr
    section = _adopt_section(done.stdout)
    doc = json.loads((workdir / "stacks" / "Pulumi.found.import.json").read_text("utf-8"))
    count = len(doc["resources"])
    assert f"found {count} of the objects this stack renders" in section
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    assert len(blocks) == 3
    urns = registered_urns("found", stack_file)
    # 1. the targeted `pulumi up` registers the parents and the provider, all of them URNs
    #    the program has
    up = _words(blocks[0], workdir)[0]
    assert up[:3] == ["up", "--stack", "found"]
    targets = up[4::2]
    assert all(w == "--target" for w in up[3::2])
    assert set(targets) <= urns
    assert set(doc["nameTable"].values()) <= set(targets)
    # 2. the whole file, found from the working directory as the runbook prints it
    whole = _words(blocks[1], workdir)[0]
    assert whole[:4] == ["import", "--stack", "found", "--file"]
    assert json.loads((workdir / whole[4]).read_text("utf-8")) == doc
    assert whole[5:] == ["--generate-code=false"]
    # 3. one line per object, the same objects as the file
    one_by_one = [_import_file_of(argv) for argv in _words(blocks[2], workdir)]
    assert [o["resource"] for o in one_by_one] == doc["resources"]
    for one in one_by_one:
        assert one["stack"] == "found"
        for name, urn in one["nameTable"].items():
            assert doc["nameTable"][name] == urn
    # each names charts and overlays as adopting their own objects
    assert "Helm chart `gpu-operator`" in section
    assert "`AlreadyExists`" in section


def test_runbook_without_an_import_map_has_no_adopt_phase_and_is_otherwise_the_same(
    tmp_path: Path,
) -> None:
    workdir = _workdir(tmp_path)
    _discover(_found("lab-roce"), workdir)
    with_map = _runbook(workdir).stdout
    (workdir / "stacks" / "Pulumi.found.import.json").unlink()
    without = _runbook(workdir).stdout
    assert "Adopt the existing objects" not in without
    assert with_map.replace(_adopt_section(with_map), "") == without


def test_a_map_of_another_stack_or_version_is_refused(tmp_path: Path) -> None:
    workdir = _workdir(tmp_path)
    _discover(_found("lab-roce"), workdir)
    stacks = workdir / "stacks"
    # the same cluster's map copied to another stack name: its URNs name the other stack
    (stacks / "Pulumi.other.yaml").write_text(
        (stacks / "Pulumi.found.yaml").read_text("utf-8"), "utf-8"
    )
    (stacks / "Pulumi.other.import.json").write_text(
        (stacks / "Pulumi.found.import.json").read_text("utf-8"), "utf-8"
    )
    done = _runbook(workdir, "other")
    assert done.returncode == 2
    assert "stacks/Pulumi.other.import.json: written for another stack or cluster" in done.stderr
    assert "Traceback" not in done.stderr
    # a tenant removed from the stack after discovery: its objects are no longer the Plan's
    config = yaml.safe_load((stacks / "Pulumi.found.yaml").read_text("utf-8"))
    config["config"]["gpufabric:tenants"] = config["config"]["gpufabric:tenants"][:1]
    (stacks / "Pulumi.found.yaml").write_text(yaml.safe_dump(config), "utf-8")
    done = _runbook(workdir)
    assert done.returncode == 2
    assert "is no object of stack found's Plan; run `gpufabric discover" in done.stderr


# ------------------------------------------------------------------------------- UFM


def _ufm_plan() -> Plan:
    config = example_config("prod-ib")
    config["gpufabric:fabric"]["infiniband"].update(
        pkeyManagement="ufm",
        ufm={
            "address": "ufm.fabric.internal",
            "username": "k8s-ib",
            "password": {"secure": "v1:AAAA:BBBB"},
        },
    )
    return plan_of(config, "found")


def test_ufm_in_use_gives_placeholders_and_the_commands_that_set_them(tmp_path: Path) -> None:
    # the NicClusterPolicy runs ib-kubernetes against UFM (ufmSecret); the credentials are in
    # a Secret discovery never reads (before: the stack came back without pkeyManagement:
    # ufm, and the NADs' ibKubernetesEnabled showed as 8 differences)
    code, out, err, stack_file = _discover(_ufm_plan(), tmp_path)
    assert code == 0, err
    assert "0 field difference(s)" in out
    text = stack_file.read_text("utf-8")
    config = yaml.safe_load(text)["config"]
    ib = config["gpufabric:fabric"]["infiniband"]
    assert ib["pkeyManagement"] == "ufm"
    assert set(ib["ufm"]) == {"address", "username", "password"}
    assert set(ib["ufm"]["password"]) == {"secure"}
    commands = {
        "address": "pulumi config set --path 'gpufabric:fabric.infiniband.ufm.address'",
        "username": "pulumi config set --path 'gpufabric:fabric.infiniband.ufm.username'",
        "password": "pulumi config set --secret --path 'gpufabric:fabric.infiniband.ufm.password'",
    }
    for key, command in commands.items():
        assert (
            f"# fabric.infiniband.ufm.{key}: not read (in a Secret); set it with `{command}`"
            in text
        )
        assert f"set before pulumi up: fabric.infiniband.ufm.{key}: {command}" in err
        # the --path names the very key the stack file holds the placeholder at
        words = shlex.split(command)
        assert words[:3] == ["pulumi", "config", "set"]
        section, _, dotted = words[-1].partition(".")
        node: Any = config[section]
        for part in dotted.split("."):
            node = node[part]
        assert node == ib["ufm"][key]
    assert "Secret ib-kubernetes-ufm-secret" in err


def test_no_ufm_no_placeholders(tmp_path: Path) -> None:
    code, _, err, stack_file = _discover(_found("prod-ib"), tmp_path)
    assert code == 0
    assert "ufm" not in stack_file.read_text("utf-8")
    assert "set before pulumi up" not in err
