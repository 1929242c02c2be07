"""The default strategy: what ``distrib.get_strategy()`` returns outside every scope.

One replica, values never wrapped, datasets returned unchanged.

Example:
    >>> import distrib
    >>> s = distrib.get_strategy()
    >>> s.num_replicas_in_sync, s.extended.should_checkpoint
    (1, True)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn

import torch

from distrib.distribute.replica_context import ValueContext
from distrib.errors import ContextError, UsageError, explain
from distrib.input import InputContext, InputOptions
from distrib.nest import Nest
from distrib.strategies.base import Strategy, StrategyExtended
from distrib.strategies.extended import DatasetT, InputT

__all__ = ["DefaultStrategy"]


class _DefaultExtended(StrategyExtended):
    @property
    def worker_devices(self) -> tuple[str, ...]:
        raise ContextError("worker_devices() method unsupported by default tf.distribute.Strategy.")

    @property
    def parameter_devices(self) -> tuple[str, ...]:
        raise ContextError("parameter_devices() method unsupported by default "
                           "tf.distribute.Strategy.")

    def _enter_scope(self) -> None:  # the default strategy replicates nothing
        pass

    def _exit_scope(self, agree: bool = True) -> None:
        pass


class DefaultStrategy(Strategy):
    """The singleton default strategy (one replica, no distribution)."""

    _nested_run_allowed = True

    def __init__(self) -> None:
        super().__init__(_DefaultExtended(None, torch.device("cpu"), ("cpu:0",), wrap=False))

    def experimental_distribute_dataset(self, dataset: DatasetT,
                                        options: InputOptions | None = None) -> DatasetT:
        """Returns ``dataset`` unchanged, as TF's default strategy does."""
        return dataset

    def distribute_datasets_from_function(self, dataset_fn: Callable[[InputContext], InputT],
                                          options: InputOptions | None = None) -> InputT:
        """Returns ``dataset_fn(InputContext())``."""
        return dataset_fn(InputContext())

    def experimental_distribute_values_from_function(self, value_fn: Callable[[ValueContext],
                                                                             Nest]) -> Nest:
        if not callable(value_fn):
            raise UsageError(explain("value_fn", value_fn, "must be callable",
                                     "pass a function taking a distrib.ValueContext"))
        return value_fn(ValueContext())

    def __deepcopy__(self, memo: dict[int, object]) -> NoReturn:
        raise ContextError("Should only create a single instance of _DefaultDistributionStrategy")
