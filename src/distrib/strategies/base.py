"""``Strategy`` (the user API) and ``StrategyExtended`` (the library API).

Public methods validate their arguments and the current context, then call
the ``_underscore`` hooks of :class:`StrategyExtended`, which each strategy file
configures.  Every process is one replica (docs/architecture.md), so a strategy's
"local results" are this process's replica only.

Example::

    strategy = distrib.MirroredStrategy(devices=["cpu:0", "cpu:1"])
    with strategy.scope():
        net = torch.nn.Linear(4, 1)          # identical on both replicas
    out = strategy.run(lambda: distrib.get_replica_context().replica_id_in_sync_group)
    strategy.reduce("sum", out, axis=None)   # tensor(1) == 0 + 1 on both replicas
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NoReturn

import torch

from distrib.cluster import ClusterResolver
from distrib.comm.ops import ReduceOp
from distrib.distribute import context
from distrib.distribute.replica_context import ValueContext
from distrib.distribute.values import (
    DistributedValues,
    Mirrored,
    local_results,
    unwrap,
    wrap_nest,
)
from distrib.errors import ContextError, InvalidTypeError, UsageError, explain
from distrib.input import DistributedDataset, InputContext, InputOptions
from distrib.nest import Nest, map_structure
from distrib.strategies.extended import DatasetT, InputT, StrategyExtended

__all__ = ["Strategy", "StrategyExtended"]

class Strategy:
    """A distribution strategy (``tf.distribute.Strategy``).  See the module docstring."""

    #: Whether ``run`` may be called inside this strategy's replica function (TF allows
    #: it only in the default strategy's replica context).
    _nested_run_allowed = False

    def __init__(self, extended: StrategyExtended) -> None:
        self._extended = extended
        extended._strategy = self

    # -------------------------------------------------------------- basics
    @property
    def extended(self) -> StrategyExtended:
        return self._extended

    @property
    def num_replicas_in_sync(self) -> int:
        """Number of replicas over which gradients are aggregated."""
        return self._extended._num_replicas

    @property
    def cluster_resolver(self) -> ClusterResolver | None:
        """The cluster resolver (None when the strategy has no cluster)."""
        return self._extended._cluster_resolver

    def __copy__(self) -> NoReturn:
        raise ContextError("Must only deepcopy DistributionStrategy.")

    def __deepcopy__(self, memo: dict[int, object]) -> NoReturn:
        raise ContextError(f"{type(self).__name__} cannot be copied: it owns this process's "
                           "place in the replica group. Fix: pass the strategy itself around.")

    @contextlib.contextmanager
    def scope(self) -> Iterator[Strategy]:
        """Enter cross-replica context; modules created inside become replicated.

        Example::

            with strategy.scope():
                model = make_model()       # identical on every replica after the block
        """
        with context.enter(self, None):
            self._extended._enter_scope()
            try:
                yield self
            except BaseException:  # no collective while unwinding: a peer may be mid-step
                self._extended._exit_scope(agree=False)
                raise
            self._extended._exit_scope()

    # ----------------------------------------------------------------- run
    def run(self, fn: Callable[..., Nest], args: list[Nest] | tuple[Nest, ...] = (),
            kwargs: Mapping[str, Nest] | None = None, options: object = None) -> Nest:
        """Run ``fn`` on this process's replica in replica context.

        Distributed arguments are unwrapped to this replica's component; the result
        is wrapped in ``PerReplica`` (plain for one-device strategies).

        Example:
            >>> import distrib
            >>> distrib.get_strategy().run(lambda x: x * 2, args=(torch.tensor(3),))
            tensor(6)
        """
        if not callable(fn):
            raise UsageError(explain("fn", fn, "strategy.run needs the function to run on "
                                     "every replica", "pass a function: strategy.run("
                                     "step_fn, args=(batch,))"))
        if kwargs is not None and not isinstance(kwargs, Mapping):
            raise UsageError(explain("kwargs", kwargs, "keyword arguments must be a mapping "
                                     f"of names to values, got {type(kwargs).__name__}",
                                     "pass kwargs={'name': value}, or the values in args=(...)"))
        if not isinstance(args, (list, tuple)):
            raise UsageError(explain("args", args,
                                     f"positional args must be a list or tuple, got {type(args)}",
                                     "pass args=(x,) — note the comma for a single argument"))
        frame = context.current_frame()
        if frame is not None and frame.replica_context is not None \
                and not getattr(frame.strategy, "_nested_run_allowed", False):
            raise ContextError(explain(
                "strategy.run", getattr(fn, "__name__", fn), "was called inside the replica "
                "function of another strategy.run; run needs cross-replica context (as in "
                "TensorFlow)", "call the inner function directly (it already runs on every "
                "replica), or leave replica context with "
                "distrib.get_replica_context().merge_call(...)"))
        result = self._extended.call_for_each_replica(fn, tuple(args), kwargs)
        self._extended.sync_on_read.synchronize()  # metrics updated in fn: global sums
        return wrap_nest(result) if self._extended._wrap else result

    # -------------------------------------------------------------- reduce
    @staticmethod
    def _in_replica_fn() -> bool:
        frame = context.current_frame()
        return frame is not None and frame.replica_context is not None

    def _check_cross_replica(self, method: str) -> None:
        if self._in_replica_fn():
            raise ContextError(
                f"`{method}` must be called in cross-replica context, not inside `strategy.run`."
                " Fix: call it on the value that `strategy.run` returned, or use "
                "`distrib.get_replica_context().all_reduce(...)` inside the replica function.")

    def reduce(self, reduce_op: ReduceOp | str, value: Nest, axis: int | tuple[int, ...] | None
               ) -> Nest:
        """Reduce a per-replica value across replicas (and along ``axis`` if given).

        ``axis`` with MEAN divides by the true global number of elements, so a
        partial batch split 4 + 2 divides by 6.

        Example (two replicas, each holding ``torch.tensor([1., 2.])``):
        ``reduce("sum", v, axis=None)`` → ``tensor([2., 4.])``;
        ``reduce("mean", v, axis=0)`` → ``tensor(1.5)``.

        A value that is not a ``PerReplica`` (a plain tensor or number) is this
        replica's value like any other: ``"sum"`` and ``"mean"`` both combine it over
        all replicas, so every replica gets the same result (the value itself when
        the replicas hold equal values and the op is MEAN).  TensorFlow, one
        process, returns a plain value as-is for MEAN and refuses SUM.  Values whose
        structure, shapes or dtypes differ between replicas raise ``UsageError`` on
        every replica, naming them.

        The result is detached from autograd (it is read in cross-replica context);
        inside the replica function, ``get_replica_context().all_reduce`` is differentiable.
        """
        if axis is not None and not isinstance(reduce_op, (ReduceOp, str)):
            raise InvalidTypeError(
                f"Expected `reduce_op` to be a `tf.distribute.ReduceOp`, not: {reduce_op!r}. "
                "Fix: pass distrib.ReduceOp.SUM / MEAN or 'sum' / 'mean'.")
        op = ReduceOp.from_value(reduce_op)
        self._check_cross_replica("reduce")
        free = () if axis is None else tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
        if all(isinstance(a, int) for a in free) and len(set(free)) != len(free):
            raise UsageError(explain("axis", axis, "lists an axis twice",
                                     "give each axis once, e.g. axis=(0, 1)"))
        self._extended.replica_group.check_signature("strategy.reduce", unwrap(value), free)
        with torch.no_grad():  # a cross-replica result; use ReplicaContext.all_reduce for grads
            return map_structure(lambda x: self._reduce_leaf(op, x, axis), value)

    def _reduce_leaf(self, op: ReduceOp, value: Any, axis: int | tuple[int, ...] | None) -> Any:
        ext = self._extended
        distributed = isinstance(value, DistributedValues)
        local = value.values[0] if distributed else value
        t = local.detach() if isinstance(local, torch.Tensor) else torch.as_tensor(local)
        if axis is None:
            if isinstance(value, Mirrored) and op is ReduceOp.MEAN:
                return t
            group = ext.replica_group  # MEAN over the replica programs that hold values
            total = group.all_reduce(ReduceOp.SUM, t)
            return total / group.num_replicas_in_sync if op is ReduceOp.MEAN else total
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
        for a in axes:
            if not -t.dim() <= a < t.dim():
                raise UsageError(f"`axis` = {axis!r} out of range for `value` with rank "
                                 f"{t.dim()}. Fix: pass an axis in [-{t.dim()}, {t.dim()}).")
        numer = t.sum(dim=axes)
        if op is ReduceOp.SUM:
            return ext.replica_group.all_reduce(ReduceOp.SUM, numer)
        count = 1
        for a in axes:
            count *= t.shape[a]
        packed = torch.cat([numer.reshape(-1).to(torch.float64),
                            torch.tensor([float(count)], dtype=torch.float64, device=t.device)])
        red = ext.replica_group.all_reduce(ReduceOp.SUM, packed)
        result = (red[:-1] / red[-1]).reshape(numer.shape)
        return result.to(numer.dtype) if numer.is_floating_point() else result

    def gather(self, value: Nest, axis: int) -> Nest:
        """Concatenate every replica's component along ``axis`` (cross-replica context only).

        Example: four replicas each holding shape ``(1, 2, 3)`` give ``(4, 2, 3)`` for
        axis 0, ``(1, 8, 3)`` for axis 1 and ``(1, 2, 12)`` for axis 2.
        """
        if self._in_replica_fn():
            raise ContextError("tf.distribute.Strategy.gather method requires cross-replica "
                               "context, use get_replica_context().all_gather() instead")
        group = self._extended.replica_group
        group.check_signature("strategy.gather", unwrap(value), (axis,))
        return map_structure(lambda x: group.all_gather(_rank_one(unwrap(x)), axis), value)

    # ---------------------------------------------------------- values
    def experimental_local_results(self, value: Nest) -> tuple[Nest, ...]:
        """The components of ``value`` for this process's replicas, as a tuple.

        Example:
            >>> import distrib
            >>> distrib.get_strategy().experimental_local_results({"a": 1.0})
            ({'a': 1.0},)
        """
        return local_results(value)

    def experimental_distribute_values_from_function(self, value_fn: Callable[[ValueContext],
                                                                             Nest]) -> Nest:
        """``value_fn(ValueContext(replica_id, R))`` for this replica, as a ``PerReplica``."""
        if not callable(value_fn):
            raise UsageError(explain("value_fn", value_fn, "must be callable",
                                     "pass a function taking a distrib.ValueContext"))
        ext = self._extended
        out = value_fn(ValueContext(ext._replica_id, ext._num_replicas))
        return wrap_nest(out) if ext._wrap else out

    # ------------------------------------------------------------- input
    def experimental_distribute_dataset(self, dataset: DatasetT,
                                        options: InputOptions | None = None
                                        ) -> DistributedDataset | DatasetT:
        """Split every global batch of ``dataset`` across the replicas."""
        return self._extended.distribute_dataset(dataset, options)

    def distribute_datasets_from_function(self, dataset_fn: Callable[[InputContext], InputT],
                                          options: InputOptions | None = None
                                          ) -> DistributedDataset | InputT:
        """Build one input pipeline per worker with ``dataset_fn(InputContext)``."""
        return self._extended.distribute_datasets_from_function(dataset_fn, options)

    experimental_distribute_datasets_from_function = distribute_datasets_from_function

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_replicas_in_sync={self.num_replicas_in_sync})"



def _rank_one(value: Any) -> torch.Tensor:
    t = value if isinstance(value, torch.Tensor) else torch.as_tensor(value)
    if t.dim() == 0:
        raise UsageError(explain("gather value", t, "must have rank >= 1 (components are "
                                 "concatenated along `axis`)", "reshape it, e.g. value.reshape(1)"))
    return t
