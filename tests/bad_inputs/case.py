"""One bad input for the public API and the clear error it must raise.

A :class:`Case` calls the public API with one bad input (optionally under some
environment variables) and names the exception type and the pieces of text the
message must contain: at least the bad value, and usually the fix.  Each area adds its
cases to a list in its own module (``cluster_cases.py``, ...); ``test_bad_inputs.py``
runs them all.

Example::

    Case("timeout-zero", lambda: distrib.CommunicationOptions(timeout_seconds=0),
         UsageError, ["timeout_seconds = 0", "Fix:"])
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

#: ``Case.returns`` when the case does not check what the call returns.
ANY = object()


@dataclass(frozen=True)
class Case:
    """A bad input and its class: a clear error, a warning, or accepted as TensorFlow does.

    * ``error`` an exception type: ``call()`` must raise it, with every piece of ``says``
      in its message (the bad value first, then the rule or the fix).
    * ``error`` a ``Warning`` type: ``call()`` must warn so (``says`` in the warning) and
      return ``returns`` (unless ``ANY``).
    * ``error`` None (see :func:`accepted`): TensorFlow accepts the input too; ``call()``
      must return ``returns``, TensorFlow's result, and ``says`` records why.

    Attributes:
        id: a short unique name (the pytest id).
        call: calls the public API with the bad input.
        error: the exception or warning type expected (a subclass is accepted), or None.
        says: pieces of the message (or, for an accepted input, TensorFlow's rule).
        env: environment variables set for the call (every cluster variable is unset).
        returns: what ``call()`` returns when it does not raise (``ANY``: not checked).
    """

    id: str
    call: Callable[[], Any]
    error: type[BaseException] | None
    says: list[str]
    env: Mapping[str, str] = field(default_factory=dict)
    returns: Any = ANY


def accepted(id: str, call: Callable[[], Any], returns: Any, tf: str) -> Case:
    """An input TensorFlow accepts as well: ``call()`` returns ``returns`` (TF's result)."""
    return Case(id, call, None, [tf], returns=returns)


class CommandFailed(Exception):
    """The ``distrib`` command exited with a non-zero status (its stderr is the message)."""

    def __init__(self, status: int, stderr: str) -> None:
        super().__init__(stderr.strip())
        self.status = status


def command(argv: list[str]) -> Callable[[], None]:
    """A call that runs ``distrib ARGV`` in-process and raises :class:`CommandFailed`.

    Nothing is started: a command that would start processes fails the case.
    """
    def run() -> None:
        from distrib.launch import cli

        err = io.StringIO()
        refuse = AssertionError(f"distrib {' '.join(argv)} would have started processes")
        with contextlib.redirect_stderr(err), \
                mock.patch.object(cli, "exec_torchrun", side_effect=refuse), \
                mock.patch.object(cli.LocalClusterLauncher, "run", side_effect=refuse):
            try:
                status = cli.main(argv)
            except SystemExit as exc:  # argparse's own errors
                status = int(exc.code or 0)
        if status != 0:
            raise CommandFailed(status, err.getvalue())
    return run


def tf_config(cluster: Any, task_type: Any = "worker", index: Any = 0, **extra: Any) -> str:
    """A TF_CONFIG text (the task is left out when ``task_type`` is None)."""
    config: dict[str, Any] = {"cluster": cluster, **extra}
    if task_type is not None:
        config["task"] = {"type": task_type, "index": index}
    return json.dumps(config)
