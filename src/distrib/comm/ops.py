"""Reduction operations and communication options (TF's names).

Example:
    >>> ReduceOp.from_value("sum")
    <ReduceOp.SUM: 'SUM'>
    >>> CommunicationOptions(implementation="ring").implementation
    <CommunicationImplementation.RING: 'RING'>
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any

from distrib.errors import InvalidTypeError, UsageError, explain

__all__ = ["ReduceOp", "CommunicationImplementation", "CommunicationOptions"]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class ReduceOp(enum.Enum):
    """How values from different replicas are combined: ``SUM`` or ``MEAN``.

    Strings are accepted wherever a ``ReduceOp`` is (``"sum"``, ``"MEAN"``).

    Example:
        >>> ReduceOp("SUM") is ReduceOp.SUM
        True
    """

    SUM = "SUM"
    MEAN = "MEAN"

    @classmethod
    def from_value(cls, op: Any, *, axis_given: bool = False) -> ReduceOp:
        """Convert ``op`` (a ReduceOp or a string) into a :class:`ReduceOp`.

        Raises:
            UsageError: for a string that names no member (``"max"``).
            InvalidTypeError: for any other object.

        Example:
            >>> ReduceOp.from_value("mean")
            <ReduceOp.MEAN: 'MEAN'>
        """
        if isinstance(op, ReduceOp):
            return op
        if isinstance(op, str):
            try:
                return cls(op.upper())
            except ValueError:
                raise UsageError(
                    explain("reduce_op", op, "must be one of ReduceOp.SUM or ReduceOp.MEAN "
                            "(TF has no other reductions across replicas)",
                            "pass 'sum' or 'mean'; for a max, all_gather the values "
                            "and take torch.max of the result")) from None
        raise InvalidTypeError(
            explain("reduce_op", op,
                    "Expected `reduce_op` to be a `tf.distribute.ReduceOp`, not: "
                    f"{op!r}", "pass distrib.ReduceOp.SUM, distrib.ReduceOp.MEAN, "
                    "'sum' or 'mean'"))


class CommunicationImplementation(enum.Enum):
    """Which engine carries the collectives.

    ``RING`` is gloo (CPU and GPU tensors), ``NCCL`` is NVIDIA's NCCL for CUDA
    tensors (other tensors still use gloo), ``AUTO`` picks NCCL for CUDA tensors
    and gloo for the rest.
    """

    AUTO = "AUTO"
    RING = "RING"
    NCCL = "NCCL"


@dataclass(frozen=True)
class CommunicationOptions:
    """Options for cross-replica communication (``tf.distribute.experimental.CommunicationOptions``).

    Args:
        bytes_per_pack: gradient bucket size in bytes (0: the engine's default,
            25 MiB buckets); must be non-negative.
        timeout_seconds: how long any collective may wait for its peers before
            every replica raises an error that names the lost task.  ``None``
            uses distrib's default of 180 s; TF's ``0`` (no timeout) is not
            offered because a collective that waits forever is a hang.
        implementation: ``"auto"``, ``"ring"`` or ``"nccl"`` (or the enum).

    Example:
        >>> CommunicationOptions(timeout_seconds=10).effective_timeout()
        10.0
    """

    bytes_per_pack: int = 0
    timeout_seconds: float | None = None
    implementation: CommunicationImplementation | str = CommunicationImplementation.AUTO

    DEFAULT_TIMEOUT_SECONDS = 180.0

    def __post_init__(self) -> None:
        if not _is_int(self.bytes_per_pack) or self.bytes_per_pack < 0:
            raise UsageError(explain("bytes_per_pack", self.bytes_per_pack,
                                     "bytes_per_pack must be non-negative (an integer count of bytes)",
                                     "pass 0 for the default bucket size or a byte count"))
        if self.timeout_seconds is not None:
            t = self.timeout_seconds
            if not _is_number(t) or not math.isfinite(t) or t <= 0:
                raise UsageError(explain(
                    "timeout_seconds", self.timeout_seconds,
                    "must be a positive, finite number of seconds (a collective without a "
                    "timeout can hang forever when a peer is lost)",
                    "pass None for the default (180 s) or a value such as 600"))
        impl = self.implementation
        if isinstance(impl, str):
            try:
                impl = CommunicationImplementation(impl.upper())
            except ValueError:
                raise UsageError(explain("implementation", self.implementation,
                                         "must be 'auto', 'ring' or 'nccl'",
                                         "use 'ring' for gloo, 'nccl' for NCCL on GPUs, "
                                         "or 'auto'")) from None
        elif not isinstance(impl, CommunicationImplementation):
            raise UsageError(explain("implementation", impl,
                                     "must be a CommunicationImplementation or a string",
                                     "use 'auto', 'ring' or 'nccl'"))
        object.__setattr__(self, "implementation", impl)

    def effective_timeout(self) -> float:
        """The timeout in seconds that applies (the default when unset)."""
        if self.timeout_seconds is None:
            return self.DEFAULT_TIMEOUT_SECONDS
        return float(self.timeout_seconds)

    def merge(self, other: CommunicationOptions | None) -> CommunicationOptions:
        """Fields of ``other`` that differ from the defaults override this one's (TF's rule)."""
        if other is None:
            return self
        return CommunicationOptions(
            bytes_per_pack=other.bytes_per_pack or self.bytes_per_pack,
            timeout_seconds=(other.timeout_seconds if other.timeout_seconds is not None
                             else self.timeout_seconds),
            implementation=(other.implementation
                            if other.implementation is not CommunicationImplementation.AUTO
                            else self.implementation),
        )
