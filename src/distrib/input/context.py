"""``InputContext``, ``InputOptions``, ``InputReplicationMode`` and the batch split rule.

Example:
    >>> ctx = InputContext(num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=4)
    >>> ctx.get_per_replica_batch_size(64), str(ctx)
    (16, 'distrib.InputContext(input pipeline id 1, total: 2)')
    >>> batch_sizes_for_worker(7, 2, 2, 1)
    [2, 1, 2, 2]
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from distrib.errors import InvalidTypeError, UsageError, explain

__all__ = ["InputContext", "InputOptions", "InputReplicationMode", "batch_sizes_for_worker",
           "check_replicas_per_worker"]


class InputReplicationMode(enum.Enum):
    """How many input pipelines ``distribute_datasets_from_function`` builds.

    PER_WORKER (default): one per worker; its batches go to the worker's
    replicas in turn.  PER_REPLICA: one per replica, called with
    ``InputContext(R, replica_id, R)``.

    Example:
        >>> InputReplicationMode.PER_WORKER.value
        'PER_WORKER'
    """

    PER_WORKER = "PER_WORKER"
    PER_REPLICA = "PER_REPLICA"


def _check_flag(what: str, value: object, optional: bool) -> None:
    """Raise :class:`InvalidTypeError` unless ``value`` is a bool (or None when ``optional``)."""
    if isinstance(value, bool) or (optional and value is None):
        return
    allowed = "True, False or None" if optional else "True or False"
    raise InvalidTypeError(explain(what, value, f"must be {allowed}",
                                   f"pass {allowed} (a bool, not {type(value).__name__})"))


def _positive_int(what: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(explain(what, value, "must be a positive int", "pass 1 or more"))
    return value


class InputContext:
    """What ``dataset_fn`` needs to build this worker's share of the input (TF's class).

    Attributes:
        num_input_pipelines: input pipelines in the cluster (the number of workers).
        input_pipeline_id: this pipeline's index (the worker's ``id_in_cluster``).
        num_replicas_in_sync: replicas over the whole cluster.

    Example:
        >>> def dataset_fn(ctx):
        ...     batch = ctx.get_per_replica_batch_size(64)
        ...     return (Dataset.range(1000).shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        ...             .batch(batch))
    """

    def __init__(self, num_input_pipelines: int = 1, input_pipeline_id: int = 0,
                 num_replicas_in_sync: int = 1) -> None:
        self._num_input_pipelines = _positive_int("num_input_pipelines", num_input_pipelines)
        if isinstance(input_pipeline_id, bool) or not isinstance(input_pipeline_id, int) \
                or not 0 <= input_pipeline_id < num_input_pipelines:
            raise UsageError(explain("input_pipeline_id", input_pipeline_id,
                                     f"must be in [0, {num_input_pipelines})",
                                     "use the worker's index in the cluster"))
        self._input_pipeline_id = input_pipeline_id
        self._num_replicas_in_sync = _positive_int("num_replicas_in_sync", num_replicas_in_sync)

    @property
    def num_input_pipelines(self) -> int:
        """The number of input pipelines (workers)."""
        return self._num_input_pipelines

    @property
    def input_pipeline_id(self) -> int:
        """This input pipeline's index in ``[0, num_input_pipelines)``."""
        return self._input_pipeline_id

    @property
    def num_replicas_in_sync(self) -> int:
        """Replicas whose gradients are combined each step, over the whole cluster."""
        return self._num_replicas_in_sync

    def get_per_replica_batch_size(self, global_batch_size: int) -> int:
        """``global_batch_size // num_replicas_in_sync``; it must divide exactly (TF's rule).

        Example:
            >>> InputContext(num_replicas_in_sync=2).get_per_replica_batch_size(65)
            Traceback (most recent call last):
            ...
            distrib.errors.UsageError: global_batch_size = 65: The `global_batch_size` 65 is ...
        """
        r = self._num_replicas_in_sync
        if isinstance(global_batch_size, bool) or not isinstance(global_batch_size, int) \
                or global_batch_size % r:
            lower = global_batch_size // r * r if isinstance(global_batch_size, int) else r
            raise UsageError(explain(
                "global_batch_size", global_batch_size,
                f"The `global_batch_size` {global_batch_size!r} is not divisible by "
                f"`num_replicas_in_sync` {r!r}",
                f"use a multiple of {r}, such as {max(lower, r)} or {max(lower, 0) + r}"))
        return global_batch_size // r

    def __str__(self) -> str:
        return (f"distrib.InputContext(input pipeline id {self._input_pipeline_id}, "
                f"total: {self._num_input_pipelines})")

    def __repr__(self) -> str:
        return (f"InputContext(num_input_pipelines={self._num_input_pipelines}, "
                f"input_pipeline_id={self._input_pipeline_id}, "
                f"num_replicas_in_sync={self._num_replicas_in_sync})")


@dataclass(frozen=True)
class InputOptions:
    """Options of ``experimental_distribute_dataset`` / ``distribute_datasets_from_function``.

    Attributes:
        experimental_fetch_to_device: deliver batches on the replica's device
            (None means True); False leaves them on the host.
        experimental_replication_mode: ``PER_WORKER`` or ``PER_REPLICA`` (the
            latter only for ``distribute_datasets_from_function``).
        experimental_place_dataset_on_device: build the pipeline on the device
            (only with ``PER_REPLICA`` and ``experimental_fetch_to_device=False``);
            distrib builds it on the host and copies, so the flag only validates.
        experimental_per_replica_buffer_size: batches staged on the device ahead
            of the step (0 disables the device prefetch).

    Example:
        >>> InputOptions(experimental_fetch_to_device=False).experimental_per_replica_buffer_size
        1
    """

    experimental_fetch_to_device: bool | None = None
    experimental_replication_mode: InputReplicationMode = InputReplicationMode.PER_WORKER
    experimental_place_dataset_on_device: bool = False
    experimental_per_replica_buffer_size: int = 1

    def __post_init__(self) -> None:
        _check_flag("experimental_fetch_to_device", self.experimental_fetch_to_device,
                    optional=True)
        _check_flag("experimental_place_dataset_on_device",
                    self.experimental_place_dataset_on_device, optional=False)
        if not isinstance(self.experimental_replication_mode, InputReplicationMode):
            raise InvalidTypeError(explain("experimental_replication_mode",
                                           self.experimental_replication_mode,
                                           "must be an InputReplicationMode",
                                           "use InputReplicationMode.PER_WORKER or PER_REPLICA"))
        size = self.experimental_per_replica_buffer_size
        if isinstance(size, bool) or not isinstance(size, int):
            raise InvalidTypeError(explain("experimental_per_replica_buffer_size", size,
                                           "must be an int >= 0", "use 1 (the default) or 0"))
        if size < 0:
            raise UsageError(explain("experimental_per_replica_buffer_size", size,
                                     "must be an int >= 0", "use 1 (the default) or 0"))

    @property
    def fetch_to_device(self) -> bool:
        """Whether batches go to the replica's device (the effective value)."""
        if self.experimental_fetch_to_device is None:
            return not self.experimental_place_dataset_on_device
        return self.experimental_fetch_to_device


def batch_sizes_for_worker(global_batch_size: int, num_workers: int,
                           num_replicas_per_worker: int, worker_index: int) -> list[int]:
    """The sub-batch sizes worker ``worker_index`` cycles through (TF's rule).

    ``N = num_workers * num_replicas_per_worker`` sub-batches; the first
    ``G % N`` have ``G // N + 1`` elements, the rest ``G // N``; worker ``i``'s
    list is worker 0's rotated left by ``i * num_replicas_per_worker``.  Each
    list has N entries summing to G, and sizes differ by at most 1.

    Example:
        >>> batch_sizes_for_worker(7, 2, 2, 0), batch_sizes_for_worker(7, 2, 2, 1)
        ([2, 2, 2, 1], [2, 1, 2, 2])
    """
    g = _positive_int("global_batch_size", global_batch_size)
    w = _positive_int("num_workers", num_workers)
    per = _positive_int("num_replicas_per_worker", num_replicas_per_worker)
    if isinstance(worker_index, bool) or not isinstance(worker_index, int) \
            or not 0 <= worker_index < w:
        raise UsageError(explain("worker_index", worker_index, f"must be in [0, {w})",
                                 "use the worker's index in the cluster"))
    n = w * per
    floor, extra = divmod(g, n)
    sizes = [floor + 1 if k < extra else floor for k in range(n)]
    shift = worker_index * per
    return sizes[shift:] + sizes[:shift]


def check_replicas_per_worker(num_replicas_in_sync: int, num_workers: int) -> int:
    """Replicas per worker; every worker must have the same number (TF's check).

    Example:
        >>> check_replicas_per_worker(4, 2)
        2
    """
    if num_replicas_in_sync % num_workers:
        raise UsageError(explain(
            "num_replicas_in_sync", num_replicas_in_sync,
            "tf.distribute expects every worker to have the same number of replicas. However, "
            f"encountered `num_replicas_in_sync` ({num_replicas_in_sync}) that cannot be "
            f"divided by `num_workers` ({num_workers})",
            "run the same number of replica processes on every worker"))
    return num_replicas_in_sync // num_workers
