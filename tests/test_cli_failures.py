"""How an exception that stops a command ends it, its exit code and message
(``cli.failure_exit``): each case alone, the check-only errors only for a running check."""

from __future__ import annotations

import argparse
import signal

import pytest

from gpufabric import cli
from gpufabric.model.problems import Problem, StackError
from gpufabric.outputs.render import OutputError
from gpufabric.verify.interrupts import Terminated, check_running, leftovers, stopped_check
from gpufabric.verify.kube import KubeError
from gpufabric.verify.results import SuiteError

ARGS = argparse.Namespace(command="verify", verify_command="nccl")


def during_check(exc: BaseException) -> BaseException:
    """``exc`` as it leaves a running verify check."""
    with pytest.raises(type(exc)) as caught, check_running():
        raise exc
    assert caught.value is exc
    assert stopped_check(exc)
    return exc


@pytest.mark.parametrize(
    ("exc", "code", "message"),
    [
        (KubeError("no route"), 3, "gpufabric verify nccl: no route"),
        (SuiteError("no pytest"), 3, "gpufabric verify nccl: no pytest"),
        (KeyboardInterrupt(), 130, "gpufabric verify nccl: interrupted; cleaned up"),
        (
            Terminated(signal.SIGTERM),
            128 + signal.SIGTERM,
            "gpufabric verify nccl: stopped by SIGTERM; cleaned up",
        ),
        (Terminated(signal.SIGHUP), 128 + signal.SIGHUP, "stopped by SIGHUP"),
    ],
)
def test_what_stops_a_check(
    exc: BaseException, code: int, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    leftovers(clear=True)  # a check clears its record when it starts; this one starts here
    assert cli.failure_exit(during_check(exc), ARGS) == code
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("exc", [KubeError("x"), SuiteError("x")])
def test_check_entries_do_not_apply_outside_a_check(
    exc: BaseException, capsys: pytest.CaptureFixture[str]
) -> None:
    assert not stopped_check(exc)
    assert cli.failure_exit(exc, ARGS) is None
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("exc", "code", "words"),
    [
        (KeyboardInterrupt(), 130, "interrupted"),
        (Terminated(signal.SIGTERM), 143, "stopped by SIGTERM"),
    ],
)
def test_a_signal_outside_a_check_ends_the_command_in_one_line(
    exc: BaseException, code: int, words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not the check's words (nothing of a check's to clean up): the command and the
    signal, as for a render or a diff stopped by Ctrl-C or SIGTERM."""
    assert not stopped_check(exc)
    assert cli.failure_exit(exc, ARGS) == code
    assert capsys.readouterr().err == f"gpufabric verify nccl: {words}\n"


@pytest.mark.parametrize("in_check", [False, True])
@pytest.mark.parametrize(
    ("exc", "code", "message"),
    [
        (StackError("s.yaml", [Problem("--hosts", "is empty")]), 2, "--hosts"),
        (OutputError("/ is the root"), 2, "gpufabric verify: --out / is the root"),
        (PermissionError("denied"), 1, "gpufabric: denied"),
    ],
)
def test_what_stops_any_command(
    exc: BaseException,
    code: int,
    message: str,
    in_check: bool,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.failure_exit(during_check(exc) if in_check else exc, ARGS) == code
    assert message in capsys.readouterr().err


def test_stack_error_prints_its_report(capsys: pytest.CaptureFixture[str]) -> None:
    err = StackError("s.yaml", [Problem("--hosts", "is empty")])
    cli.failure_exit(err, ARGS)
    assert capsys.readouterr().err == err.report() + "\n"


def test_anything_else_propagates(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.failure_exit(during_check(ValueError("bug")), ARGS) is None
    assert capsys.readouterr().err == ""
