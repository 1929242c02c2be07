"""What the layers above the strategies know about the replica group: a typed seam.

A strategy describes itself to the input, mixed-precision, checkpoint and training
layers with a frozen :class:`ReplicaGroupInfo` — how many replicas there are, which one
this process is, how they are spread over workers, this replica's device, and the
collectives those layers may use — available as ``strategy.extended.replica_group``.
Code below the strategies types a strategy as :class:`StrategyLike` (a
``typing.Protocol``), so it never needs the concrete class nor a private method.

Example:
    >>> info = ReplicaGroupInfo.single()
    >>> info.num_replicas_in_sync, info.replica_id, info.all_reduce_sum(torch.tensor([3]))
    (1, 0, tensor([3]))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from distrib.comm.collectives import check_same_signature
from distrib.comm.ops import ReduceOp
from distrib.nest import map_structure

__all__ = ["ReplicaGroupInfo", "PendingDataCheck", "StrategyLike", "ExtendedLike", "WrappedOptimizer", "AnyOptimizer",
           "SharedLossScale",
           "gather_lists"]


def _identity(t: torch.Tensor) -> torch.Tensor:
    return t


def _reduce_alone(op: ReduceOp, value: Any) -> Any:
    return map_structure(lambda x: x if isinstance(x, torch.Tensor) else torch.as_tensor(x),
                         value)


def _gather_alone(t: torch.Tensor, axis: int) -> torch.Tensor:
    return t


def _check_alone(what: str, value: Any, free_axes: Sequence[int]) -> None:
    check_same_signature(None, what, value, free_axes)


class PendingDataCheck:
    """The fingerprint of the global batch this replica's next step reads, left by the
    distributed iterator for that step to compare (a custom loop's data check, made
    where every step passes through: ``strategy.run``).  Loops that compare fingerprints
    in their own per-step agreement (the step engine) leave nothing here.

    Example:
        >>> check = PendingDataCheck(); check.note(7); check.take(), check.take()
        (7, None)
    """

    def __init__(self) -> None:
        self._digest: int | None = None

    def note(self, digest: int) -> None:
        """Leave ``digest`` for the next step (replacing one no step took)."""
        self._digest = digest

    def take(self) -> int | None:
        """The fingerprint left for this step, once (None when there is none)."""
        digest, self._digest = self._digest, None
        return digest


@dataclass(frozen=True)
class ReplicaGroupInfo:
    """The replica group as seen from one replica process.

    Attributes:
        num_replicas_in_sync: R, replicas over the whole cluster.
        replica_id: this process's replica id in ``[0, R)``.
        num_workers: W, training workers (one input pipeline each).
        worker_index: this worker's ``id_in_cluster`` (chief 0).
        local_replicas: L, replicas on this worker (``R == W * L``).
        local_replica_id: this replica's index on its worker.
        device: the device batches must be delivered to.
        wrap_per_replica: whether values are wrapped in ``PerReplica``
            (False for the default strategy and ``OneDeviceStrategy``).
        all_reduce_sum: SUM all-reduce over all R replicas of a small tensor,
            not differentiable (identity when R == 1).
        all_reduce: ``all_reduce(op, nest)``: SUM or MEAN of every leaf of a nest
            over all replicas; differentiable for leaves that require grad.
        all_gather: ``all_gather(tensor, axis)``: every replica's tensor concatenated
            along ``axis`` in replica order (sizes along ``axis`` may differ).
        devices_per_replica: the devices one replica program drives as a single SPMD
            program (``TPUStrategy``: every XLA device of its host); 1 for the
            one-process-per-device strategies.  The replica's batch is the whole
            batch of those devices, its values are already combined over them, and
            the strategy's ``num_replicas_in_sync`` counts devices:
            ``num_replicas_in_sync * devices_per_replica``.
        place_batch: how a batch of this replica reaches ``device`` (None: moved
            there); an SPMD strategy moves it and shards it over its devices.
        checkpoint_group: returns the ``torch.distributed`` process group that
            checkpoint I/O (``torch.distributed.checkpoint``) runs on: a group of
            its own, so that a save in a background thread never interleaves with
            the training collectives.  Created by the first call, which every
            replica must make at the same point; None in a group of one.
        check_signature: ``check_signature(what, nest, free_axes)`` raises the same
            error on every replica unless all pass a nest of the same structure,
            dtypes and shapes (dimensions in ``free_axes`` may differ) made of
            tensors and numbers; call it before a collective on user values.
            Nothing travels between replicas but tensors (no pickled objects).
        data_check: the input's fingerprint that the next ``strategy.run`` compares
            (:class:`PendingDataCheck`).

    Every replica must call a collective the same number of times, in the same order.
    """

    num_replicas_in_sync: int = 1
    replica_id: int = 0
    num_workers: int = 1
    worker_index: int = 0
    local_replicas: int = 1
    local_replica_id: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    wrap_per_replica: bool = False
    all_reduce_sum: Callable[[torch.Tensor], torch.Tensor] = _identity
    all_reduce: Callable[[ReduceOp, Any], Any] = _reduce_alone
    all_gather: Callable[[torch.Tensor, int], torch.Tensor] = _gather_alone
    devices_per_replica: int = 1
    place_batch: Callable[[Any], Any] | None = None
    checkpoint_group: Callable[[], Any] = lambda: None
    check_signature: Callable[[str, Any, Sequence[int]], None] = _check_alone
    data_check: PendingDataCheck = field(default_factory=PendingDataCheck, compare=False)

    @classmethod
    def single(cls, device: torch.device | str = "cpu", wrap_per_replica: bool = False
               ) -> ReplicaGroupInfo:
        """The group of a single replica on ``device`` (default strategy, OneDevice)."""
        return cls(device=torch.device(device), wrap_per_replica=wrap_per_replica)

    @property
    def num_devices_in_sync(self) -> int:
        """Devices over the whole cluster: ``num_replicas_in_sync * devices_per_replica``."""
        return self.num_replicas_in_sync * self.devices_per_replica

    @property
    def is_chief(self) -> bool:
        """Whether this replica is the chief's first replica (global replica 0)."""
        return self.replica_id == 0

    # ----------------------------------------------- collective decisions
    # The one vocabulary of decisions the replicas take together: each is one small
    # all-reduce (nothing on a group of one) and gives the same answer on every replica.

    def any(self, flag: bool) -> bool:
        """True on every replica when ``flag`` is True on any.

        Example:
            >>> ReplicaGroupInfo.single().any(True)
            True
        """
        if self.num_replicas_in_sync == 1:
            return bool(flag)
        t = self.all_reduce_sum(torch.tensor([1 if flag else 0], dtype=torch.int64))
        return bool(int(t[0]) > 0)

    def count(self, n: int) -> int:
        """The sum of ``n`` over the replicas (rows of a step, replicas that failed...).

        Example:
            >>> ReplicaGroupInfo.single().count(3)
            3
        """
        return self.counts([n])[0]

    def counts(self, values: Sequence[int]) -> list[int]:
        """:meth:`count` of several values at once (one all-reduce).

        Example:
            >>> ReplicaGroupInfo.single().counts([True, False, 2])
            [1, 0, 2]
        """
        if self.num_replicas_in_sync == 1:
            return [int(v) for v in values]
        vec = torch.tensor([int(v) for v in values], dtype=torch.int64)
        return [int(v) for v in self.all_reduce_sum(vec).tolist()]

    def each(self, values: Sequence[int]) -> list[list[int]]:
        """Every replica's ``values`` (ints of the same length on all), by replica id: one
        all-reduce of R slots.

        Example:
            >>> ReplicaGroupInfo.single().each([4, 7])
            [[4, 7]]
        """
        r = self.num_replicas_in_sync
        if r == 1:
            return [[int(v) for v in values]]
        vec = torch.zeros((r, len(values)), dtype=torch.int64)
        vec[self.replica_id] = torch.tensor([int(v) for v in values], dtype=torch.int64)
        return [[int(v) for v in row] for row in self.all_reduce_sum(vec).tolist()]

    def each_list(self, values: Sequence[int]) -> list[list[int]]:
        """Every replica's ``values`` (ints; the lengths may differ), by replica id: one
        all-gather (:func:`gather_lists`).

        Example:
            >>> ReplicaGroupInfo.single().each_list([3, 1, 4])
            [[3, 1, 4]]
        """
        if self.num_replicas_in_sync == 1:
            return [[int(v) for v in values]]
        return gather_lists(self.all_gather, values)

    def chief_value(self, value: int) -> int:
        """The chief's ``value`` on every replica (a seed, the chief's clock).

        Example:
            >>> ReplicaGroupInfo.single().chief_value(42)
            42
        """
        if self.num_replicas_in_sync == 1:
            return int(value)
        return int(self.all_gather(torch.tensor([int(value)], dtype=torch.int64), 0)[0])

    def chief_text(self, text: str | None, limit: int = 4096) -> str | None:
        """The chief's ``text`` (None stays None; at most ``limit`` UTF-8 bytes) on every
        replica: sent as bytes in an int64 tensor (one all-reduce), never pickled.

        Example:
            >>> ReplicaGroupInfo.single().chief_text("model.ckpt-100")
            'model.ckpt-100'
        """
        if self.num_replicas_in_sync == 1:
            return text
        data = torch.zeros(limit + 1, dtype=torch.int64)
        if self.is_chief and text is not None:
            raw = text.encode()[:limit]
            data[0] = 1
            data[1:len(raw) + 1] = torch.tensor(list(raw), dtype=torch.int64)
        data = self.all_reduce_sum(data)
        if int(data[0]) == 0:
            return None
        return bytes(int(b) for b in data[1:].tolist() if b).decode(errors="replace")

    def digest_equal(self, digest: int) -> list[int]:
        """The replica ids whose ``digest`` differs from the chief's (empty when every
        replica has the same), the same list on every replica.

        Example:
            >>> ReplicaGroupInfo.single().digest_equal(123)
            []
        """
        every = self.each([digest])
        return [r for r, (d,) in enumerate(every) if d != every[0][0]]


def gather_lists(all_gather: Callable[[torch.Tensor, int], torch.Tensor],
                 values: Sequence[int]) -> list[list[int]]:
    """Every replica's ``values`` through ``all_gather`` (a replica group's): each sends
    ``[len, *values]``, so the lengths may differ; every replica must call it."""
    every = all_gather(torch.tensor([len(values), *values], dtype=torch.int64), 0).tolist()
    out: list[list[int]] = []
    pos = 0
    while pos < len(every):
        n = int(every[pos])
        out.append([int(v) for v in every[pos + 1:pos + 1 + n]])
        pos += 1 + n
    return out


class WrappedOptimizer(Protocol):
    """An optimizer wrapper whose ``inner_optimizer`` applies the updates (loss scaling's
    ``LossScaleOptimizer``): its ``state_dict()`` holds the inner optimizer's state under
    ``"inner"`` beside its own entries."""

    @property
    def inner_optimizer(self) -> torch.optim.Optimizer: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


#: What the optimizer state-dict seams take: an optimizer or a wrapper of one.
AnyOptimizer = torch.optim.Optimizer | WrappedOptimizer


class SharedLossScale(Protocol):
    """A dynamic loss scale that a strategy keeps in one place for every process that steps
    (parameter servers keep it on a ``ps`` task, as TensorFlow keeps its variables there).

    ``update(used, finite)`` reports one step computed at scale ``used`` (its gradients
    finite or not) and answers ``(scale, counter)`` after the rule was applied; ``read()``
    answers them; ``assign(scale, counter)`` replaces them (a restored checkpoint).
    """

    def update(self, used: float, finite: bool) -> tuple[float, int]: ...

    def read(self) -> tuple[float, int]: ...

    def assign(self, scale: float, counter: int) -> None: ...


class ExtendedLike(Protocol):
    """What layers below the strategies use of ``strategy.extended``.

    ``module_state_dict(module)`` is what a checkpoint saves for a module created
    under the strategy and ``load_module_state_dict(module, state)`` loads it back;
    every replica calls both (a strategy that keeps variables elsewhere — parameter
    servers, shards — answers with what it holds).  ``optimizer_state_dict`` and
    ``load_optimizer_state_dict`` do the same for an optimizer, or a wrapper of one (the
    inner optimizer's state through the strategy, the wrapper's own entries beside it).
    ``manages_optimizer(optimizer)`` takes an optimizer in before a wrapper reads its
    parameters' gradients (a sharded strategy points it at the sharded parameters).
    ``shared_loss_scale(wrapper)`` is where a dynamic loss scale lives when the strategy
    keeps it away from the wrapper (None: in the wrapper).
    """

    @property
    def replica_group(self) -> ReplicaGroupInfo: ...

    @property
    def should_checkpoint(self) -> bool: ...

    @property
    def should_save_summary(self) -> bool: ...

    def module_state_dict(self, module: torch.nn.Module) -> dict[str, Any]: ...

    def load_module_state_dict(self, module: torch.nn.Module, state: dict[str, Any]
                               ) -> None: ...

    def optimizer_state_dict(self, optimizer: AnyOptimizer) -> dict[str, Any]: ...

    def load_optimizer_state_dict(self, optimizer: AnyOptimizer,
                                  state: dict[str, Any]) -> None: ...

    def manages_optimizer(self, optimizer: torch.optim.Optimizer) -> bool: ...

    def shared_loss_scale(self, optimizer: WrappedOptimizer) -> SharedLossScale | None: ...


class StrategyLike(Protocol):
    """What layers below the strategies use of a strategy (``distrib.Strategy`` is one).

    Example:
        >>> def replicas(strategy: StrategyLike) -> int:
        ...     return strategy.num_replicas_in_sync
    """

    @property
    def num_replicas_in_sync(self) -> int: ...

    @property
    def extended(self) -> ExtendedLike: ...
