"""Exception types of distrib and the helper that writes their messages.

Every error distrib raises for bad input names three things: the bad value, the
rule it breaks, and what to do instead.  :func:`explain` builds that message so
all errors read alike::

    >>> from distrib.errors import ConfigError, explain
    >>> raise ConfigError(explain("TF_CONFIG task.index", 3,
    ...     "must be below the number of 'worker' tasks (2)",
    ...     "use an index from 0 to 1"))
    Traceback (most recent call last):
    ...
    distrib.errors.ConfigError: TF_CONFIG task.index = 3: must be below the number ...

The classes also derive from the builtin type TensorFlow raises in the same
situation (``ValueError``, ``RuntimeError``, ``TypeError``), so code written
against ``tf.distribute`` that catches those keeps working.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

__all__ = [
    "DistribError",
    "ConfigError",
    "UsageError",
    "ContextError",
    "ScopeError",
    "InvalidTypeError",
    "PeerLostError",
    "CollectiveTimeoutError",
    "DataError",
    "CheckpointError",
    "CheckpointMismatchError",
    "RemoteError",
    "CancelledError",
    "explain",
    "warn",
]


class DistribError(Exception):
    """Base class of every error raised by distrib."""


class ConfigError(DistribError, ValueError):
    """A cluster configuration (TF_CONFIG, torchrun or SLURM variables, arguments) is invalid."""


class UsageError(DistribError, ValueError):
    """An argument of a public function is invalid (TF raises ``ValueError`` here)."""


class InvalidTypeError(DistribError, TypeError):
    """An argument has the wrong type (TF raises ``TypeError`` here)."""


class ContextError(DistribError, RuntimeError):
    """A function was called in the wrong context (scope, replica or cross-replica)."""


class ScopeError(ContextError, ValueError):
    """A model or module is used under a strategy whose ``scope()`` did not create it.

    TensorFlow raises ``ValueError`` here; the class is also a :class:`ContextError`.
    """


class PeerLostError(DistribError, RuntimeError):
    """Another task of the cluster died or stopped answering.

    Attributes:
        lost: the names of the tasks found lost (for example ``["worker:1"]``);
            empty when the failure could not be attributed.
    """

    def __init__(self, message: str, lost: list[str] | None = None) -> None:
        super().__init__(message)
        self.lost = list(lost or [])


class CollectiveTimeoutError(PeerLostError):
    """A collective did not complete within ``CommunicationOptions.timeout_seconds``."""


class ReplicaFailedError(PeerLostError):
    """Another replica raised an exception inside a collective call (``fit``, a step), so
    this replica stopped too.

    Attributes:
        replica: the failed replica's rank.
        original: ``"<ExceptionType>: <first line of its message>"``.
    """

    def __init__(self, message: str, lost: list[str] | None = None, replica: int = -1,
                 original: str = "") -> None:
        super().__init__(message, lost)
        self.replica = replica
        self.original = original


class UnmatchedCallError(DistribError, RuntimeError):
    """A collective call (``evaluate``, ``predict``, ``save``...) was made on some replicas
    only: another replica ended its program without making it.

    Attributes:
        replica: the rank of the replica that did not make the call.
        call: the call (``"Model.evaluate"``).
    """

    def __init__(self, message: str, replica: int = -1, call: str = "") -> None:
        super().__init__(message)
        self.replica = replica
        self.call = call


class DataError(DistribError, ValueError):
    """A dataset cannot be used the way it was asked (bad batch size, sharding, ...)."""


class CheckpointError(DistribError, RuntimeError):
    """A checkpoint could not be written or read (unwritable directory, full disk, corrupt files)."""


class CheckpointMismatchError(DistribError, ValueError, AssertionError):
    """A checkpoint does not match the objects it is restored into.

    Raised for a checkpoint of another model (the message lists the missing,
    unexpected and mis-shaped entries), and by ``LoadStatus.assert_consumed()``
    (TensorFlow raises ``AssertionError`` there, ``ValueError`` for shapes).
    """


class RemoteError(DistribError, RuntimeError):
    """A function failed on another task (a scheduled function on a worker, a call to a ps).

    Attributes:
        type_name: the name of the exception type raised there (``"ZeroDivisionError"``).
        remote_traceback: the traceback printed there, as text.
    """

    def __init__(self, message: str, type_name: str = "", remote_traceback: str = "") -> None:
        super().__init__(message)
        self.type_name = type_name
        self.remote_traceback = remote_traceback


class CancelledError(DistribError, RuntimeError):
    """A scheduled function was cancelled (TF's ``tf.errors.CancelledError``)."""


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


def explain(what: str, value: Any, rule: str, fix: str) -> str:
    """Format the message of a distrib error: ``<what> = <value>: <rule>. Fix: <fix>.``

    Args:
        what: the name of the bad value (an argument, a TF_CONFIG field, an
            environment variable).
        value: the value found.
        rule: the rule the value breaks.
        fix: what the user should do.

    Example:
        >>> explain("global_batch_size", 65, "must be divisible by num_replicas_in_sync (2)",
        ...         "use a multiple of 2, such as 64")
        'global_batch_size = 65: must be divisible by num_replicas_in_sync (2). Fix: use a multiple of 2, such as 64.'
    """
    rule = rule.rstrip(".")
    fix = fix.rstrip(".")
    return f"{what} = {_show(value)}: {rule}. Fix: {fix}."


_PACKAGE = os.path.dirname(__file__) + os.sep  # as the code objects of distrib name their files


def warn(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` at the user's line: the first caller outside the distrib package.

    Python reports a warning at the frame ``stacklevel`` names; distrib's warnings are
    issued deep inside ``fit``, a strategy or a checkpoint manager, so every call site
    uses this helper instead of counting frames (``skip_file_prefixes`` on Python
    3.12+, the same walk up the stack before).

    Example::

        warn("Your input ran out of data; interrupting training.")  # at the user's fit(...)
    """
    if sys.version_info >= (3, 12):
        warnings.warn(message, category, skip_file_prefixes=(_PACKAGE,))
        return
    level, frame = 2, sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)
