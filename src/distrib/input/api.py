"""The two ways a strategy distributes input, called by every strategy.

``distribute_dataset``: the user batches by the GLOBAL batch; each replica
receives its part of it, exactly as in TensorFlow 2.21: every global batch cut
into R ceil-sized pieces under DATA sharding (the default for in-memory
sources), or each worker's pipeline re-batched with the sizes of
``batch_sizes_for_worker`` under OFF, FILE and HINT (see docs/input_distribution.md).

``distribute_datasets_from_function``: ``dataset_fn(InputContext)`` builds a
per-replica-batched pipeline per worker; the worker's replicas take its
batches in turn.  No automatic sharding.

Unseeded shuffles use one run seed shared by all replicas: the chief's
``torch.initial_seed()``, gathered once when the dataset is distributed.

Example:
    >>> group = ReplicaGroupInfo(num_replicas_in_sync=2, replica_id=1, num_workers=1,
    ...                          local_replicas=2, local_replica_id=1)
    >>> [b.tolist() for b in distribute_dataset(Dataset.range(4).batch(2), group)]
    [[1], [3]]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from distrib.data import AutoShardPolicy, Dataset, graph
from distrib.distribute.group import ReplicaGroupInfo
from distrib.errors import DataError, InvalidTypeError, UsageError, explain
from distrib.input.context import (
    InputContext,
    InputOptions,
    InputReplicationMode,
    batch_sizes_for_worker,
    check_replicas_per_worker,
)
from distrib.input.convert import as_dataset
from distrib.input.distributed import DistributedDataset
from distrib.input.plan import StepPlan
from distrib.input.sharding import apply_policy

if TYPE_CHECKING:
    from torch.utils.data import DataLoader

__all__ = ["distribute_dataset", "distribute_datasets_from_function", "make_plan"]

def _call_batch_error(replicas: int) -> DataError:
    return DataError(explain(
        "dataset", "an unbatched dataset",
        "Call the `batch` method on the input Dataset in order to be able to split your input "
        f"across {replicas} replicas. Please see the tf.distribute.Strategy guide",
        "batch it by the GLOBAL batch size first: dataset.batch(per_replica_batch * "
        f"{replicas})"))


def _check_options(options: InputOptions | None, from_function: bool) -> InputOptions:
    options = InputOptions() if options is None else options
    if not isinstance(options, InputOptions):
        raise InvalidTypeError(explain("options", options, "must be a distrib.InputOptions",
                                       "build one with distrib.InputOptions(...)"))
    per_replica = options.experimental_replication_mode == InputReplicationMode.PER_REPLICA
    if per_replica and not from_function:
        raise UsageError(explain(
            "experimental_replication_mode", "PER_REPLICA",
            "InputReplicationMode.PER_REPLICA is only supported in "
            "`distribute_datasets_from_function`",
            "use distribute_datasets_from_function, or PER_WORKER"))
    if options.experimental_place_dataset_on_device:
        if not per_replica:
            raise UsageError(explain(
                "experimental_place_dataset_on_device", True,
                "When `experimental_place_dataset_on_device` is set for dataset placement, you "
                "must also specify `PER_REPLICA` for the replication mode",
                "set experimental_replication_mode=InputReplicationMode.PER_REPLICA"))
        if options.experimental_fetch_to_device:
            raise UsageError(explain(
                "experimental_fetch_to_device", True,
                "`experimental_place_dataset_on_device` can not be set to True when "
                "experimental_fetch_to_device is True and replication mode is set to "
                "`PER_REPLICA`", "leave experimental_fetch_to_device unset or False"))
    return options


def _shared_seed(local: int, group: ReplicaGroupInfo) -> int:
    """The chief's seed on every replica (one integer per replica travels, as a tensor)."""
    return group.chief_value(local % (1 << 63))


def make_plan(dataset: Dataset, group: ReplicaGroupInfo) -> StepPlan:
    """The :class:`StepPlan` of ``experimental_distribute_dataset`` for this replica.

    One replica reads the pipeline as it is.  Otherwise the dataset must be
    batched (by the global batch ``G``) and the auto-shard policy in effect
    decides, as in TensorFlow 2.21: DATA (AUTO without files) splits every global
    batch into R pieces (``split``); OFF, FILE and HINT re-batch each worker's
    pipeline with the sizes of ``batch_sizes_for_worker`` (``rebatch``), or cut
    each of its batches into R pieces when the batch size is unknown (``pieces``).

    Example:
        >>> make_plan(Dataset.range(8).batch(4), ReplicaGroupInfo.single()).mode
        'stride'
    """
    r, w = group.num_replicas_in_sync, group.num_workers
    per_worker = check_replicas_per_worker(r, w)

    def plan(ds: Dataset, mode: str, **kw: Any) -> StepPlan:
        return StepPlan(ds, mode, num_replicas=r, num_workers=w, local_replicas=per_worker,
                        worker_index=group.worker_index,
                        local_replica_id=group.local_replica_id, **kw)

    policy = dataset.options().experimental_distribute.auto_shard_policy
    ds, effective = apply_policy(dataset, policy, w, group.worker_index)
    batched, global_batch, _ = graph.batch_info(dataset)
    if r == 1:
        if not batched and group.devices_per_replica > 1:
            raise _call_batch_error(group.num_devices_in_sync)
        return plan(ds, "stride")
    if not batched:
        raise _call_batch_error(r)
    if effective == AutoShardPolicy.DATA or (global_batch is None and w == 1):
        return plan(ds, "split")
    if global_batch is None:   # batches of a size unknown here: TF's legacy rebatch
        return plan(ds, "pieces", source=dataset, shared=ds is dataset, portable=False)
    sizes = tuple(tuple(batch_sizes_for_worker(global_batch, w, per_worker, i))
                  for i in range(w))
    return plan(ds, "rebatch", sizes=sizes, source=dataset, shared=w == 1 or ds is dataset,
                portable=False)


def distribute_dataset(dataset: Dataset | DataLoader[Any], group: ReplicaGroupInfo,
                       options: InputOptions | None = None) -> DistributedDataset:
    """Split the global batches of ``dataset`` across the replicas of ``group``.

    Args:
        dataset: a ``distrib.data.Dataset`` batched by the global batch size, or
            a ``DataLoader`` (its ``batch_size`` is the global batch).
        group: this replica's view of the group (``strategy.extended.replica_group``).
        options: ``InputOptions``.

    Example (two replicas on one worker; replica 1 gets the second half of each batch)::

        dist = distribute_dataset(Dataset.range(100).batch(10), group)
        next(iter(dist))      # replica 0: [0..4], replica 1: [5..9]
    """
    options = _check_options(options, from_function=False)
    if not isinstance(dataset, Dataset):
        from torch.utils.data import DataLoader

        if not isinstance(dataset, DataLoader):
            raise UsageError(explain(
                "dataset", type(dataset).__name__,
                "must be a distrib.data.Dataset batched by the global batch size, or a "
                "DataLoader (whose batch_size is the global batch)",
                "convert arrays or a torch Dataset with "
                "distrib.input.as_dataset(x, y, batch_size=global_batch_size)"))
        dataset = as_dataset(dataset)
    plan = make_plan(dataset, group)
    seed = _shared_seed(graph.run_seed(dataset), group)
    return DistributedDataset(plan, group, options, seed)


def distribute_datasets_from_function(dataset_fn: Callable[[InputContext], object],
                                      group: ReplicaGroupInfo,
                                      options: InputOptions | None = None
                                      ) -> DistributedDataset:
    """Build this worker's pipeline with ``dataset_fn(InputContext)``.

    ``dataset_fn`` gets ``InputContext(W, worker_index, R)`` and must return a
    dataset batched by the PER-REPLICA batch size, sharded as the user wants
    (no automatic sharding).  Local replica ``j`` of a worker with ``L``
    replicas takes its batches ``j, j + L, ...`` — the worker dequeues ``L``
    consecutive batches per step, as TF does.  With ``PER_REPLICA`` each
    replica gets ``InputContext(R, replica_id, R)`` and all of its batches.

    Example (two workers, one replica each)::

        def dataset_fn(ctx):
            b = ctx.get_per_replica_batch_size(10)
            return Dataset.range(100).repeat().batch(b).shard(ctx.num_input_pipelines,
                                                            ctx.input_pipeline_id)
        # first batch: [0..4] on the chief, [5..9] on the worker
    """
    if not callable(dataset_fn):
        raise UsageError(explain("dataset_fn", dataset_fn, "must be callable",
                                 "pass a function taking an InputContext"))
    options = _check_options(options, from_function=True)
    r, w = group.num_replicas_in_sync, group.num_workers
    per_worker = check_replicas_per_worker(r, w)
    devices, concat = group.num_devices_in_sync, group.devices_per_replica
    if options.experimental_replication_mode == InputReplicationMode.PER_REPLICA:
        if concat > 1:
            raise UsageError(explain(
                "experimental_replication_mode", "PER_REPLICA",
                f"one program drives {concat} devices here (SPMD), so there is one input "
                "pipeline per host", "use InputReplicationMode.PER_WORKER (the default)"))
        ctx = InputContext(r, group.replica_id, r)
        stride, offset = 1, 0
    else:
        # An SPMD replica program takes the next batch of each of its devices every step.
        ctx = InputContext(w, group.worker_index, devices)
        stride, offset = per_worker, group.local_replica_id
    dataset = dataset_fn(ctx)
    if not isinstance(dataset, Dataset):
        dataset = as_dataset(dataset)
    plan = StepPlan(dataset, "stride", num_replicas=r, num_workers=w, local_replicas=per_worker,
                    worker_index=group.worker_index, local_replica_id=group.local_replica_id,
                    stride=stride, offset=offset, concat=concat, shared=r == 1,
                    portable=False)
    seed = _shared_seed(graph.run_seed(dataset), group)
    return DistributedDataset(plan, group, options, seed)

