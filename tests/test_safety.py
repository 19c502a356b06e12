"""A user's directory, stack file and secrets are precious: render refuses what it did not
write, stack files are read strictly, and every refusal is a clean exit 2 naming why."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import example_config, problem_lines, problems_of

from gpufabric.cli import main
from gpufabric.outputs import render as render_module
from gpufabric.outputs.render import MARKER, OutputError, write_file, write_tree


def render(out: Path | str, stack: str = "kind-dev") -> int:
    return main(["render", "--stack", stack, "--out", str(out)])


# ----------------------------------------------------------------------- output safety


def test_render_refuses_a_directory_it_did_not_write(tmp_path: Path, capsys: Any) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("precious")
    assert render(mine) == 2
    assert (mine / "notes.txt").read_text() == "precious"
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    assert "holds files gpufabric did not write" in capsys.readouterr().err


@pytest.mark.parametrize("where", [".", "..", "/", "~"])
def test_render_refuses_cwd_parents_root_and_home(
    where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "keep.txt").write_text("x")
    monkeypatch.chdir(work)
    monkeypatch.setenv("HOME", str(work))
    assert render(os.path.expanduser(where)) == 2
    assert (work / "keep.txt").read_text() == "x"


def test_render_refuses_a_file_and_leaves_it(tmp_path: Path) -> None:
    target = tmp_path / "out"
    target.write_text("a file")
    assert render(target) == 2
    assert target.read_text() == "a file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_render_refuses_a_symlink_and_leaves_its_target(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "data").write_text("x")
    link = tmp_path / "link"
    link.symlink_to(real)
    assert render(link) == 2
    assert (real / "data").read_text() == "x"


def test_render_replaces_its_own_output_and_marks_it(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert render(out) == 0
    assert (out / MARKER).is_file()
    kind_dev = {p.relative_to(out) for p in out.rglob("*") if p.is_file()}
    assert render(out, "lab-roce") == 0
    lab_roce = {p.relative_to(out) for p in out.rglob("*") if p.is_file()}
    assert kind_dev - lab_roce  # files only the first render wrote are gone
    assert (out / "plan.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # nothing left beside it


def test_an_interrupted_render_keeps_the_previous_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    assert render(out) == 0
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    real_create = render_module._create
    calls = {"n": 0}

    def dying_create(path: Path, content: bytes) -> None:
        calls["n"] += 1
        if calls["n"] > 5:
            raise KeyboardInterrupt
        real_create(path, content)

    monkeypatch.setattr(render_module, "_create", dying_create)
    with pytest.raises(KeyboardInterrupt):
        write_tree({f"objects/f{i}.yaml": "x" for i in range(20)}, out)
    assert calls["n"] == 6
    monkeypatch.undo()
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_rerender_keeps_unchanged_files_and_rewrites_changed_ones(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_tree({"objects/a.yaml": "a: 1\n", "objects/b.yaml": "b: 1\n", "c.yaml": "c\n"}, out)
    inode = {p.name: p.stat().st_ino for p in out.rglob("*.yaml")}
    outside = tmp_path / "backup-of-c.yaml"
    os.link(out / "c.yaml", outside)  # the user keeps a hard link to one file
    write_tree({"objects/a.yaml": "a: 1\n", "objects/b.yaml": "b: 2\n", "c.yaml": "c\n"}, out)
    assert (out / "objects/a.yaml").stat().st_ino == inode["a.yaml"]  # same bytes: kept
    assert (out / "objects/b.yaml").read_text() == "b: 2\n"
    assert (out / "objects/b.yaml").stat().st_ino != inode["b.yaml"]
    # A file linked elsewhere is written anew: editing the user's link never changes a render.
    assert (out / "c.yaml").stat().st_ino != outside.stat().st_ino
    assert outside.read_text() == "c\n"
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == [
        MARKER,
        "c.yaml",
        "objects/a.yaml",
        "objects/b.yaml",
    ]


def test_leftovers_of_a_killed_render_are_removed_by_the_next(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert render(out) == 0
    left = tmp_path / ".out.gpufabric-staging-abc"
    left.mkdir()
    (left / MARKER).write_text("{}")
    foreign = tmp_path / ".out.gpufabric-staging-notours"
    foreign.mkdir()  # no marker: not ours, kept
    (foreign / "notes.txt").write_text("mine")
    empty = tmp_path / ".out.gpufabric-staging-killedbeforethemarker"
    empty.mkdir()  # empty: removing it loses nothing
    assert render(out) == 0
    assert not left.exists()
    assert (foreign / "notes.txt").read_text() == "mine"
    assert not empty.exists()


@pytest.mark.parametrize(
    "rel",
    ["../escape.yaml", "/etc/escape.yaml", "objects/../../x.yaml", "a//b.yaml", "./a.yaml", ""],
)
def test_a_file_path_that_could_leave_the_output_is_refused(tmp_path: Path, rel: str) -> None:
    out = tmp_path / "out"
    with pytest.raises(OutputError, match="outside the output directory"):
        write_tree({"objects/ok.yaml": "x", rel: "y"}, out)
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no staging left behind


def test_runbook_out_is_written_atomically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "runbook.md"
    target.write_text("previous runbook")

    def full_disk(fd: int, data: Any) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", lambda fd: full_disk(fd, b""))
    with pytest.raises(OSError, match="No space left"):
        write_file(target, "new runbook")
    assert target.read_text() == "previous runbook"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runbook.md"]
    with pytest.raises(OutputError):
        write_file(tmp_path, "x")  # a directory is not replaced by a file


def test_diff_against_a_malformed_render_is_a_clean_error(tmp_path: Path, capsys: Any) -> None:
    base = tmp_path / "base"
    base.mkdir()
    (base / "plan.json").write_text('{"items": [{"id": "x", "type": "object", "files": ["a"]}]}')
    assert main(["diff", "--stack", "kind-dev", "--base", str(base)]) == 2
    assert "plan.json items[0] (x): kind is missing" in capsys.readouterr().err
    (base / "plan.json").write_text("{")
    assert main(["diff", "--stack", "kind-dev", "--base", str(base)]) == 2


def test_job_command_with_an_unbalanced_quote_is_named(capsys: Any) -> None:
    code = main(
        ["job", "--stack", "lab-roce", "--tenant", "team-vision", "--kind", "mpijob",
         "--command", "python -c 'print(1)"]
    )  # fmt: skip
    assert code == 2
    assert "--command: cannot be split into words" in capsys.readouterr().err


# ------------------------------------------------------------------------ strict loading


def validate(path: Path, capsys: Any) -> tuple[int, str]:
    code = main(["validate", "--stack", str(path)])
    return code, capsys.readouterr().err


def test_duplicate_keys_are_refused_with_both_lines(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "Pulumi.dup.yaml"
    text = yaml.safe_dump({"config": example_config("lab-roce")}, sort_keys=False)
    text += "  gpufabric:tenants:\n  - namespace: other\n    gpuQuota: 1\n"
    path.write_text(text)
    code, err = validate(path, capsys)
    assert code == 2
    assert "duplicate key 'gpufabric:tenants'" in err
    assert "(first at line" in err


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"config:\n  gpufabric:cluster: {name: \xff}\n", "line 2: byte 0xff"),
        ("config: {}\n".encode("utf-16"), "UTF-16-encoded; save it as UTF-8"),
    ],
)
def test_non_utf8_files_are_named(tmp_path: Path, capsys: Any, data: bytes, expected: str) -> None:
    path = tmp_path / "Pulumi.enc.yaml"
    path.write_bytes(data)
    code, err = validate(path, capsys)
    assert code == 2
    assert expected in err
    assert "Traceback" not in err


def test_alias_bombs_are_refused_quickly(tmp_path: Path, capsys: Any) -> None:
    lines = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        prev, cur = chr(96 + i), chr(97 + i)
        lines.append(f"{cur}: &{cur} [" + ", ".join([f"*{prev}"] * 9) + "]")
    body = "".join(f"      {line}\n" for line in lines)
    path = tmp_path / "Pulumi.lol.yaml"
    path.write_text("config:\n  gpufabric:fabric:\n    ncclEnv:\n" + body)
    code, err = validate(path, capsys)
    assert code == 2
    assert "once aliases are expanded" in err


def test_a_huge_string_aliased_many_times_is_refused(tmp_path: Path, capsys: Any) -> None:
    big = "x" * 200_000
    refs = "".join(f"      K{i}: *big\n" for i in range(50))
    path = tmp_path / "Pulumi.big.yaml"
    path.write_text(f"big: &big {big}\nconfig:\n  gpufabric:fabric:\n    ncclEnv:\n{refs}")
    code, err = validate(path, capsys)
    assert code == 2
    assert "characters of values once aliases are expanded" in err


def test_deep_nesting_and_huge_files_are_refused(tmp_path: Path, capsys: Any) -> None:
    deep = tmp_path / "Pulumi.deep.yaml"
    deep.write_text("config:\n  gpufabric:tenants: " + "[" * 600 + "]" * 600 + "\n")
    code, err = validate(deep, capsys)
    assert code == 2
    assert "nested more than 32 levels deep; a stack file nests about 6 levels, so this is " in err
    huge = tmp_path / "Pulumi.huge.yaml"
    huge.write_text("#" * (2 << 20))
    code, err = validate(huge, capsys)
    assert code == 2
    assert "too large for a stack file" in err


# ------------------------------------------------------------------- names and values


def lab(**changes: Any) -> dict[str, Any]:
    config = example_config("lab-roce")
    for path, value in changes.items():
        section, _, key = path.partition("__")
        config[f"gpufabric:{section}"][key] = value
    return config


@pytest.mark.parametrize(
    "namespace", ["nvidia-network-operator", "kube-system", "default", "gpu-operator"]
)
def test_network_namespace_must_be_its_own(namespace: str) -> None:
    found = problems_of(lab(fabric__networkNamespace=namespace))
    assert "need a namespace of their own" in found["fabric.networkNamespace"]


def test_tenants_cannot_take_system_or_network_namespaces() -> None:
    config = lab()
    config["gpufabric:tenants"][0]["namespace"] = "kube-public"
    config["gpufabric:tenants"][1]["namespace"] = "gpufabric-networks"
    found = problems_of(config)
    assert "system namespace" in found["tenants[0].namespace"]
    assert "system namespace" in found["tenants[1].namespace"]


@pytest.mark.parametrize(
    ("subnet", "why"),
    [
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local"),
        ("224.0.0.0/8", "multicast"),
        ("0.0.0.0/0", "wider than /8"),
        ("16.0.0.0/4", "wider than /8"),
    ],
)
def test_unusable_rail_subnets_are_refused(subnet: str, why: str) -> None:
    config = lab()
    config["gpufabric:fabric"]["rails"][0]["subnet"] = subnet
    assert why in problems_of(config)["fabric.rails[0].subnet"]


@pytest.mark.parametrize("name", ["eth0", "lo"])
def test_rails_cannot_take_the_pods_own_interfaces(name: str) -> None:
    config = lab()
    config["gpufabric:fabric"]["rails"][0]["name"] = name
    assert "choose another" in problems_of(config)["fabric.rails[0].name"]


def test_values_that_reach_commands_and_labels_are_checked() -> None:
    config = lab()
    config["gpufabric:gpuNodes"]["nodeSelector"] = {"gpu": "yes please; rm -rf /"}
    config["gpufabric:gpuNodes"]["gpuModel"] = "H100\n```sh\nrm -rf /"
    config["gpufabric:gpuNodes"]["tolerations"] = [
        {"key": "gpu", "operator": "Equal", "value": "a b"}
    ]
    found = problems_of(config)
    assert "label value" in found["gpuNodes.nodeSelector.gpu"]
    assert "not a GPU model name" in found["gpuNodes.gpuModel"]
    assert "\n" not in found["gpuNodes.gpuModel"]  # echoed escaped, never as lines
    assert "label value" in found["gpuNodes.tolerations[0].value"]


def test_numbers_are_numbers() -> None:
    config = lab(fabric__linkRateGbps=True, cluster__kubernetesVersion=1.30)
    config["gpufabric:tenants"][0]["gpuBorrowingLimit"] = 10**30
    found = problems_of(config)
    assert "boolean" in found["fabric.linkRateGbps"]
    assert (
        'YAML read 1.3 as a number; quote the version, e.g. "1.30"'
        in found["cluster.kubernetesVersion"]
    )
    assert "tenants[0].gpuBorrowingLimit" in found


@pytest.mark.parametrize("version", ["0.20 .1", "1!0.20.1", "0.20.1+local", "latest"])
def test_version_overrides_are_plain_versions(version: str) -> None:
    found = problems_of(lab() | {"gpufabric:versions": {"kueue": version}})
    assert "not a release version" in found["versions.kueue"]


def test_absurd_durations_are_refused() -> None:
    found = problems_of(lab(scheduling__allOrNothingTimeout="100000h"))
    assert "longer than 7 days" in found["scheduling.allOrNothingTimeout"]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("charts", {"https://user:pw@helm.ngc.nvidia.com/nvidia": "https://mirror.example/x"}),
        ("manifests", "https://user:pw@mirror.example/raw"),
        ("registries", {"nvcr.io": "user:pw@registry.example/nvcr"}),
    ],
)
def test_credentials_in_urls_are_refused_and_never_printed(key: str, value: Any) -> None:
    config = lab()
    config["gpufabric:sources"] = {key: value}
    lines = problem_lines(config)
    assert any("carries credentials" in line for line in lines)
    assert not any("pw@" in line for line in lines)


def test_a_malformed_secret_block_never_echoes_the_secret() -> None:
    config = example_config("prod-ib")
    config["gpufabric:fabric"]["infiniband"] = {
        "pkeyManagement": "ufm",
        "ufm": ["ufm.example.com", "admin", "hunter2-plaintext"],
    }
    lines = problem_lines(config)
    assert lines
    assert not any("hunter2" in line for line in lines)


def test_every_section_is_checked_when_one_key_is_broken() -> None:
    """Fixing one key must not reveal problems that were there all along."""
    config = lab(fabric__linkRateGbps="fast")
    config["gpufabric:fabric"]["rails"][1]["subnet"] = config["gpufabric:fabric"]["rails"][0][
        "subnet"
    ]
    config["gpufabric:fabric"]["networkNamespace"] = "kube-system"
    found = problems_of(config)
    assert "fabric.linkRateGbps" in found
    assert "overlaps rails[0]" in found["fabric.rails[1].subnet"]
    assert "fabric.networkNamespace" in found


def test_every_stack_in_the_stacks_directory_validates() -> None:
    """Users add their own stacks beside the examples: each must load (the example-specific
    tests select the shipped stacks by name, so they never judge a user's stack)."""
    from builders import STACKS_DIR

    from gpufabric.model.stackfile import list_stacks, load_stack

    for name in list_stacks(STACKS_DIR):
        load_stack(name, STACKS_DIR)


def test_a_stack_name_that_cannot_label_objects_is_refused(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "Pulumi.my stack!.yaml"
    path.write_text(yaml.safe_dump({"config": example_config("kind-dev")}))
    code, err = validate(path, capsys)
    assert code == 2
    assert "label value" in err


def test_a_render_from_before_the_marker_is_replaced_but_not_with_extra_files(
    tmp_path: Path, capsys: Any
) -> None:
    """Earlier gpufabric renders have no marker: one whose plan.json lists every file in it is
    still ours; one file more (a user's) and it is refused."""
    out = tmp_path / "out"
    assert render(out) == 0
    (out / MARKER).unlink()
    assert render(out) == 0  # exactly the files its plan.json lists
    (out / MARKER).unlink()
    (out / "my-notes.txt").write_text("mine")
    assert render(out) == 2
    assert (out / "my-notes.txt").read_text() == "mine"
