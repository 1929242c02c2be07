"""Turning ``fit``/``evaluate``/``predict`` inputs into per-replica batches.

Inputs, as Keras takes them:

* arrays — numpy arrays, torch tensors, or tuples/dicts of them — with ``y``
  (and ``sample_weight``; ``distrib.training.arrays``): held in memory and cut
  into global batches of ``batch_size`` (default 32), each split across the
  replicas by TF's rule (``batch_sizes_for_worker``; a final partial batch fills
  the replicas in order, so its pieces can be uneven, and replicas left without
  rows get empty batches).  Every replica draws the same shuffled order (same
  seed); it slices only its own rows, in the training thread, with no copy when
  not shuffled.  The number of examples of every step is known in advance, so no
  communication is needed;
* torch ``Dataset``s: through ``distrib.input.as_dataset``; a ``DataLoader`` keeps its
  workers, sampler and collate, its batches split across the replicas
  (``distrib.training.torch_loaders``);
* a batched ``distrib.data.Dataset``: each global batch is split across the
  replicas (``strategy.experimental_distribute_dataset``); on one replica any
  iterable of batches works too;
* a Python generator of batches or a ``distrib.utils.Sequence``: every replica
  process makes the same global batches and keeps its slice of each (see
  ``distrib.training.sequence``);
* a dataset the strategy already distributed: used as it is.

Features are cast as Keras casts them to the model's dtype: floating arrays
(float64 included) and ``uint8`` images become the dtype of the model's
parameters; other integer features (token ids) and every label stay as they are.
In-memory arrays, and the first batch of a generator or Sequence, must be the same
in every replica process (one checksum all-gather per call; see
``distrib.training.input_checks``).

:class:`DataHandler` yields ``(step, batch, global_rows)`` where ``global_rows``
is the number of examples of the step over all replicas when known in advance,
else None (the training loop then all-reduces this replica's count).

Example:
    >>> import numpy as np
    >>> h = DataHandler(np.zeros((5, 2)), np.zeros(5), batch_size=2, shuffle=False)
    >>> h.steps_per_epoch, [rows for _, _, rows in h.epoch()]
    (3, [2, 2, 1])
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from distrib import nest
from distrib.data import Dataset
from distrib.distribute import context
from distrib.distribute.values import unwrap
from distrib.errors import UsageError, explain, warn
from distrib.input import (
    DistributedDataset,
    DistributedIterator,
    as_dataset,
    distribute_dataset,
)
from distrib.training.arrays import (
    ArraySource,
    cast_batch,
    is_array_like,
    num_examples,
    split_arrays,
)
from distrib.training.input_checks import check_same_arrays
from distrib.training.sequence import (
    Sequence,
    generator_dataset,
    is_generator,
    sequence_dataset,
)
from distrib.training.torch_loaders import loader_source

__all__ = ["DataHandler", "is_array_like", "split_arrays", "num_examples", "cast_batch",
           "check_same_arrays"]


def _batch_structure(x: Any, y: Any, sample_weight: Any) -> tuple[Any, ...]:
    if y is None and sample_weight is None:
        return (x,)
    if sample_weight is None:
        return (x, y)
    return (x, y, sample_weight)


class DataHandler:
    """Yields the batches of every epoch, split for this replica.

    Args:
        x, y, sample_weight: the inputs (see the module docstring).
        batch_size: the global batch for array inputs (default 32); must be None
            for datasets.
        steps_per_epoch: batches per epoch (None: one pass over the data).
        shuffle: reshuffle array inputs every epoch (same order on every replica).
        seed: the shuffle seed (identical on every replica).
        strategy: the strategy to distribute with (default: the current one).
        fresh_each_epoch: restart the data every epoch even with ``steps_per_epoch``
            (evaluation and prediction).
        float_dtype: cast floating arrays to this dtype once (the model's).
    """

    def __init__(self, x: Any, y: Any = None, sample_weight: Any = None,
                 batch_size: int | None = None, steps_per_epoch: int | None = None,
                 shuffle: bool = False, seed: int = 0, strategy: Any = None,
                 fresh_each_epoch: bool = False, float_dtype: torch.dtype | None = None
                 ) -> None:
        self._fresh = fresh_each_epoch
        self._strategy = strategy if strategy is not None else context.get_strategy()
        self._steps_arg = _check_steps(steps_per_epoch)
        self._rows: list[int] | None = None
        self._sequence: Sequence | None = None
        self._one_pass = False
        source = self._source(x, y, sample_weight, batch_size, shuffle, seed, float_dtype)
        self._dataset = self._distribute(source)
        self._cardinality = len(self._sequence) if self._sequence is not None \
            else _cardinality(self._dataset, self._rows)
        self._iterator: Iterator[Any] | None = None
        self._position = 0
        self.ran_out = False

    def _source(self, x: Any, y: Any, sample_weight: Any, batch_size: int | None,
                shuffle: bool, seed: int, float_dtype: torch.dtype | None) -> Any:
        if is_array_like(x):
            data = _batch_structure(x, y, sample_weight)
            n = num_examples(*data)
            size = _check_batch_size(batch_size, 32)
            self._rows = [min(size, n - s) for s in range(0, n, size)]
            group = self._strategy.extended.replica_group
            return ArraySource(data, size, shuffle, seed, group, float_dtype)
        if isinstance(x, (torch.utils.data.Dataset, torch.utils.data.DataLoader)):
            if sample_weight is not None:
                raise UsageError(explain("sample_weight", type(sample_weight).__name__,
                                         "is not supported with a torch dataset",
                                         "yield (x, y, sample_weight) from the dataset"))
            if not isinstance(x, torch.utils.data.DataLoader):
                batch_size = _check_batch_size(batch_size, 32)
                return as_dataset(x, y, batch_size=batch_size, shuffle=shuffle, seed=seed)
            if batch_size is not None or y is not None:
                as_dataset(x, y, batch_size=batch_size)  # raises: a loader yields batches
            return loader_source(x, self._strategy, seed)
        kind = "a generator" if is_generator(x) else "a Sequence" if isinstance(x, Sequence) \
            else "a dataset"
        if y is not None or sample_weight is not None:
            raise UsageError(explain("y", type(y).__name__, f"`y` argument is not supported "
                                     f"when using {kind} as input", "put the targets in "
                                     "the batches: yield (x, y) pairs"))
        if batch_size is not None:
            raise UsageError(explain("batch_size", batch_size, "The `batch_size` argument "
                                     "must not be specified for the given input type",
                                     f"{kind} yields whole batches: size them there"))
        if kind == "a dataset":
            return x
        if isinstance(x, Sequence):
            self._sequence = x
            dataset, first = sequence_dataset(x, shuffle, seed)
        else:
            self._one_pass = True
            dataset, first = generator_dataset(x)
        check_same_arrays(self._strategy, {"first batch": first}, what=f"batches of {kind}")
        return dataset

    def _distribute(self, source: Any) -> Any:
        if isinstance(source, (DistributedDataset, ArraySource)):
            return source
        if self._strategy.num_replicas_in_sync == 1:
            if isinstance(source, Dataset):  # distributed alone: its position can be saved
                return distribute_dataset(source, self._strategy.extended.replica_group)
            return source  # an iterable of batches, used as it is
        return self._strategy.experimental_distribute_dataset(source)

    def delivers(self, device: torch.device) -> bool:
        """Whether batches arrive on ``device`` already cast (in-memory arrays)."""
        return isinstance(self._dataset, ArraySource) and self._dataset.device == device

    def order_key(self) -> int:
        """Where this replica's rows sit within each global batch (for ``predict``)."""
        group = self._strategy.extended.replica_group
        if isinstance(self._dataset, ArraySource) or group.num_workers == 1:
            return int(group.replica_id)
        # Multi-worker DATA sharding: replica (worker i, local j) takes piece i + j * W.
        return int(group.worker_index + group.local_replica_id * group.num_workers)

    @property
    def steps_per_epoch(self) -> int | None:
        """Batches per epoch (None when the data's size is unknown)."""
        if self._steps_arg is not None:
            return self._steps_arg
        return self._cardinality

    def _fresh_iterator_each_epoch(self) -> bool:
        if self._one_pass:
            return False  # a generator is consumed once, across epochs
        return self._fresh or self._steps_arg is None or self._steps_arg == self._cardinality

    def epoch(self, start_step: int = 0) -> Iterator[tuple[int, Any, int | None]]:
        """``(step, batch, global_rows)`` for one epoch (from ``start_step`` when resuming);
        ``batch`` is this replica's own (never a distributed value)."""
        if self._fresh_iterator_each_epoch() and start_step == 0:
            self._iterator = None
        limit = self._steps_arg
        step = start_step
        known = self._rows if self._rows is not None else []  # global rows of each batch
        # A distributed dataset's batches may come as PerReplica: yield this replica's own.
        local = isinstance(self._dataset, DistributedDataset)
        while limit is None or step < limit:
            if self._iterator is None:
                self._iterator = _iterate(self._dataset)
                self._position = 0
            try:
                batch = next(self._iterator)
            except StopIteration:
                self._iterator = None
                if self._steps_arg is None and not (self._one_pass and step == 0):
                    self._end_of_epoch()
                    return
                if self._rows is not None and step > 0:
                    continue  # array data repeats: start the next pass
                self.ran_out = True
                warn(
                    "Your input ran out of data; interrupting training. Make sure that your "
                    "dataset or generator can generate at least `steps_per_epoch * epochs` "
                    "batches. You may need to use the repeat() function when building your "
                    "dataset.")
                return
            if local:
                batch = unwrap(batch)
            position = self._position
            self._position = position + 1
            yield step, batch, known[position] if position < len(known) else None
            step += 1
        self._end_of_epoch()

    def global_digest(self) -> int | None:
        """The fingerprint of the global batch of the step just yielded, on the steps where
        the replicas compare it (``distrib.input.digest``); None on the others."""
        return getattr(self._iterator, "global_digest", None)

    def _end_of_epoch(self) -> None:
        if self._sequence is not None:
            self._sequence.on_epoch_end()


    def sample(self) -> Any:
        """A one-row batch of this data's structure, shapes and dtypes (zeros for datasets),
        taken without moving the data's position; None when the structure is unknown."""
        ds = self._dataset
        if isinstance(ds, ArraySource):
            return ds.first_row()
        spec = getattr(ds, "element_spec", None)
        if spec is None:
            return None

        def zeros(s: Any) -> Any:
            shape = tuple(1 if d is None else d for d in s.shape[:1]) + tuple(s.shape[1:])
            return torch.zeros(shape, dtype=s.dtype)
        return nest.map_structure(lambda s: None if s is None else zeros(s), spec)

    # ------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """Where the data stands: the live iterator's position, or where the next one starts.

        Example:
            >>> import numpy as np
            >>> h = DataHandler(np.zeros((5, 2)), batch_size=2)
            >>> _ = next(h.epoch()); h.state_dict()["position"]
            1
        """
        ds, live = self._dataset, self._iterator is not None
        state: dict[str, Any] = {"live": live, "position": self._position if live else 0,
                                 "ran_out": self.ran_out}
        if isinstance(ds, ArraySource):
            epoch, seed = ds.position
            state.update(epoch=epoch - 1 if live else epoch, seed=seed)
        elif isinstance(ds, DistributedDataset):
            it: Any = self._iterator
            state["dataset"] = it.state_dict() if live and hasattr(it, "state_dict") \
                else ds.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict`: the next :meth:`epoch` call with the saved
        step continues the saved iterator."""
        ds, live, position = self._dataset, bool(state["live"]), int(state["position"])
        self.ran_out = bool(state.get("ran_out", False))
        self._iterator, self._position = None, 0
        if isinstance(ds, ArraySource):
            ds.start_at(int(state["epoch"]), position if live else 0, int(state["seed"]))
        elif isinstance(ds, DistributedDataset):
            ds.load_state_dict(state["dataset"])
        if not live:
            return
        self._iterator = _iterate(ds)
        self._position = position
        if not isinstance(ds, (ArraySource, DistributedDataset)):
            for _ in range(position):  # other iterables: replay up to the position
                next(self._iterator, None)


def _cardinality(dataset: Any, rows: list[int] | None) -> int | None:
    if rows is not None:
        return len(rows)
    card = getattr(dataset, "cardinality", None)
    if card is not None:
        try:
            value = int(card() if callable(card) else card)
        except (TypeError, ValueError, NotImplementedError):
            value = -2
        return value if value >= 0 else None
    try:
        return len(dataset)
    except TypeError:
        return None


def _check_steps(steps: int | None) -> int | None:
    if steps is None:
        return None
    if isinstance(steps, bool) or not isinstance(steps, int) or (steps <= 0 and steps != -1):
        raise UsageError(explain("steps_per_epoch", steps, "must be positive, None or -1 "
                                 "(-1 runs until the data ends)", "pass a positive int"))
    return None if steps == -1 else steps


def _check_batch_size(batch_size: int | None, default: int) -> int:
    if batch_size is None:
        return default
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
        raise UsageError(explain("batch_size", batch_size, "must be a positive int (the GLOBAL "
                                 "batch size, split across the replicas)", "pass e.g. 64"))
    return batch_size


def _iterate(data: Any) -> Iterator[Any]:
    """An iterator over ``data``; a distributed dataset's leaves the data check to the step
    engine, which compares the fingerprints with each step's rows (no collective of its own)."""
    iterator: Iterator[Any] = iter(data)
    if isinstance(iterator, DistributedIterator):
        iterator.compare_fingerprints = False
    return iterator
