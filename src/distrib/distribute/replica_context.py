"""``ReplicaContext``: what replica code sees inside ``strategy.run``.

Example (two replicas)::

    def step():
        ctx = distrib.get_replica_context()
        return ctx.all_reduce("sum", 1.0)     # tensor(2.) on both replicas

    strategy.run(step)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from distrib.comm.ops import CommunicationOptions, ReduceOp
from distrib.distribute import context
from distrib.distribute.group import StrategyLike
from distrib.distribute.values import PerReplica, unwrap
from distrib.errors import UsageError, explain
from distrib.nest import map_structure

__all__ = ["ReplicaContext", "ValueContext"]


class ValueContext:
    """Passed to ``experimental_distribute_values_from_function``'s ``value_fn``.

    Example:
        >>> ctx = ValueContext(2, 4)
        >>> ctx.replica_id_in_sync_group / ctx.num_replicas_in_sync
        0.5
    """

    def __init__(self, replica_id_in_sync_group: int = 0, num_replicas_in_sync: int = 1) -> None:
        for what, value, low in (("num_replicas_in_sync", num_replicas_in_sync, 1),
                                 ("replica_id_in_sync_group", replica_id_in_sync_group, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise UsageError(explain(f"ValueContext {what}", value,
                                         f"must be an int >= {low}", f"pass e.g. {what}={low}"))
        if replica_id_in_sync_group >= num_replicas_in_sync:
            raise UsageError(explain("ValueContext replica_id_in_sync_group",
                                     replica_id_in_sync_group, "must be below "
                                     f"num_replicas_in_sync ({num_replicas_in_sync})",
                                     "number the replicas from 0"))
        self.replica_id_in_sync_group = replica_id_in_sync_group
        self.num_replicas_in_sync = num_replicas_in_sync

    def __repr__(self) -> str:
        return (f"distrib.ValueContext(replica id {self.replica_id_in_sync_group}, "
                f"total replicas in sync: {self.num_replicas_in_sync})")


class ReplicaContext:
    """The context of one replica inside ``strategy.run``.

    Args:
        strategy: the strategy running the replica function.
        replica_id_in_sync_group: the replica's global id in ``[0, R)``.
        global_batch_size: the number of examples of this step over all replicas,
            when the caller knows it (``Model.fit`` does); see :meth:`global_batch_size`.
    """

    def __init__(self, strategy: StrategyLike, replica_id_in_sync_group: int,
                 global_batch_size: int | None = None) -> None:
        self._strategy = strategy
        self._replica_id = replica_id_in_sync_group
        self._global_batch_size = global_batch_size

    @property
    def strategy(self) -> StrategyLike:
        """The strategy this replica belongs to."""
        return self._strategy

    @property
    def replica_id_in_sync_group(self) -> torch.Tensor:
        """This replica's id in ``[0, num_replicas_in_sync)`` (an int32 tensor, as TF's)."""
        return torch.tensor(self._replica_id, dtype=torch.int32)

    @property
    def num_replicas_in_sync(self) -> int:
        """Number of replicas over which values are aggregated."""
        return int(self._strategy.num_replicas_in_sync)

    def global_batch_size(self, local_batch_size: int) -> int:
        """Examples of this step over all replicas, given this replica's own count.

        The count given by whoever ran the step when there is one (``Model.fit`` gives
        the exact count of every step, partial batches included); otherwise the SUM of
        ``local_batch_size`` over the replicas — one small all-reduce, remembered for the
        rest of the step.  Every replica must call it when one does.

        Example (two replicas holding 4 and 2 rows of a partial batch)::

            ctx.global_batch_size(x.shape[0])     # 6 on both replicas
        """
        if self._global_batch_size is None:
            group = self._strategy.extended.replica_group
            self._global_batch_size = group.count(int(local_batch_size))
        return self._global_batch_size

    def merge_call(self, merge_fn: Callable[..., Any], args: tuple[Any, ...] = (),
                   kwargs: dict[str, Any] | None = None) -> Any:
        """Run ``merge_fn(strategy, *args, **kwargs)`` in cross-replica context.

        Tensor arguments reach ``merge_fn`` as :class:`PerReplica` values; the result
        is unwrapped back for this replica.  Every replica calls ``merge_call`` at
        the same point, so collectives inside ``merge_fn`` (``strategy.reduce``,
        ``extended.reduce_to``) line up.

        Example:
            >>> ctx = context.get_replica_context()
            >>> ctx.merge_call(lambda strategy: 11) + 1
            12
        """
        if not callable(merge_fn):
            raise UsageError(explain("merge_call merge_fn", merge_fn, "must be callable",
                                     "pass a function merge_fn(strategy, *args)"))
        wrapped = map_structure(lambda x: PerReplica((x,)) if isinstance(x, torch.Tensor)
                                else x, args)
        with context.enter(self._strategy, None):
            result = merge_fn(self._strategy, *wrapped, **(kwargs or {}))
        return unwrap(result)

    def all_reduce(self, reduce_op: ReduceOp | str, value: Any,
                   options: CommunicationOptions | None = None) -> Any:
        """SUM or MEAN of ``value`` (a tensor, number or nest) over all replicas.

        Every replica must call it, in the same order.  Differentiable: the
        gradient is the same all-reduce of the upstream gradients.

        Example (two replicas): ``all_reduce("sum", 1.0)`` → ``tensor(2.)`` on both;
        ``all_reduce("sum", torch.tensor([1., 2.]))`` → ``tensor([2., 4.])``.
        """
        op = ReduceOp.from_value(reduce_op)
        group = self._strategy.extended.replica_group
        local = unwrap(value)
        group.check_signature("ReplicaContext.all_reduce", local, ())
        return group.all_reduce(op, local)

    def all_gather(self, value: Any, axis: int,
                   options: CommunicationOptions | None = None) -> Any:
        """Concatenate ``value`` (tensor or nest) from every replica along ``axis``.

        Shapes may differ only along ``axis``.  Example (two replicas):
        ``all_gather(torch.tensor([1, 2, 3]), 0)`` → ``tensor([1, 2, 3, 1, 2, 3])``.
        """
        group = self._strategy.extended.replica_group
        local = unwrap(value)
        group.check_signature("ReplicaContext.all_gather", local, (axis,))
        return map_structure(lambda x: group.all_gather(_rank_one(x), axis), local)

    def __repr__(self) -> str:
        return (f"ReplicaContext(replica {self._replica_id} of "
                f"{self.num_replicas_in_sync}, {type(self._strategy).__name__})")


def _rank_one(value: Any) -> torch.Tensor:
    t = value if isinstance(value, torch.Tensor) else torch.as_tensor(value)
    if t.dim() == 0:
        raise UsageError(explain("all_gather value", t, "must have rank >= 1",
                                 "reshape it, e.g. value.reshape(1)"))
    return t
