"""``distrib.input``: distributed datasets — TF's input side of ``tf.distribute``.

``InputContext``, ``InputOptions``, ``InputReplicationMode``, ``AutoShardPolicy``
and ``batch_sizes_for_worker`` carry TF's names and rules; ``piece_bounds`` is
the rows of one replica's piece of a global batch under DATA sharding.
``distribute_dataset`` and ``distribute_datasets_from_function`` are what the
strategies call for ``experimental_distribute_dataset`` and
``distribute_datasets_from_function``; ``as_dataset`` turns arrays, torch
datasets and DataLoaders into a ``distrib.data.Dataset``.

Example:
    >>> from distrib.input import InputContext, batch_sizes_for_worker
    >>> InputContext(num_replicas_in_sync=2).get_per_replica_batch_size(64)
    32
    >>> batch_sizes_for_worker(7, 2, 2, 0)
    [2, 2, 2, 1]
"""

from distrib.data.options import SHARD_HINT, AutoShardPolicy
from distrib.input.api import distribute_dataset, distribute_datasets_from_function, make_plan
from distrib.input.context import (
    InputContext,
    InputOptions,
    InputReplicationMode,
    batch_sizes_for_worker,
)
from distrib.input.convert import as_dataset
from distrib.input.distributed import DistributedDataset, DistributedIterator, Optional
from distrib.input.plan import StepPlan, piece_bounds

__all__ = ["InputContext", "InputOptions", "InputReplicationMode", "AutoShardPolicy",
           "SHARD_HINT", "batch_sizes_for_worker", "distribute_dataset",
           "distribute_datasets_from_function", "make_plan", "as_dataset",
           "DistributedDataset", "DistributedIterator", "Optional", "StepPlan", "piece_bounds"]
