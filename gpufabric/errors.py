"""The one base class of the errors that end a ``gpufabric`` command, each carrying its exit
code (:mod:`gpufabric.exitcodes`) and the message it prints on standard error.

:class:`GpufabricError` is subclassed where each error is raised: the stack file's
(:class:`~gpufabric.model.problems.StackError`), an output path's
(:class:`~gpufabric.outputs.render.OutputError`), the cluster's
(:class:`~gpufabric.verify.kube.KubeError`) and the node checks' runner
(:class:`~gpufabric.verify.results.SuiteError`). The command line ends a command on any of
them in one place (:func:`gpufabric.cli.failure_exit`) without importing the modules that
define them: ``render`` never loads verify's. Anything else that escapes a command is a bug,
and shows its traceback.
"""

from __future__ import annotations

from typing import ClassVar

from gpufabric.exitcodes import ExitCode


class GpufabricError(Exception):
    """An error that ends a command with :attr:`exit_code` and :meth:`message`."""

    exit_code: ClassVar[ExitCode] = ExitCode.ERROR
    check_only: ClassVar[bool] = False
    """True: it ends the command only when it stopped a running check (``verify``,
    ``health``: :func:`gpufabric.verify.interrupts.stopped_check`); raised anywhere else it
    is a bug, and propagates."""

    def message(self, command: str) -> str:
        """What standard error says when this error stops ``gpufabric <command>``
        (``command``: the words typed after ``gpufabric``, e.g. ``verify nccl``)."""
        return f"gpufabric {command}: {self}"


__all__ = ["GpufabricError"]
