"""Distributed datasets and iterators: this replica's batches, on its device, in lock-step.

Each step every replica receives its batch.  End of data is agreed, as in
TensorFlow: while any replica still has data the others receive an *empty*
batch (batch dimension 0), and when none has data every replica's loop ends in
the same step.  On one worker with batches of static shape (``drop_remainder``)
TensorFlow skips that handling, and the epoch ends at the first step where any
replica has no batch.  When the step count of every replica can be computed from the
pipeline (known cardinality, same pipeline everywhere) no communication is
needed; when each replica's own count is known, one all-reduce at the start
of the epoch exchanges them; otherwise one all-reduce of a single int per step
decides.  Collectives run on the calling thread, in the same order on every
replica.

Batches are produced one step ahead in a background thread, pinned and copied
to the replica's device without blocking when it is a GPU.  The iterator's
position — epoch and steps taken, in global batches where the plan allows —
can be saved and restored (``state_dict`` / ``load_state_dict``).

Example:
    >>> from distrib.data import Dataset
    >>> group = ReplicaGroupInfo.single()
    >>> dist = DistributedDataset(StepPlan(Dataset.range(5).batch(2), "stride"), group)
    >>> [b.tolist() for b in dist]
    [[0, 1], [2, 3], [4]]
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Any

import torch

from distrib.data import graph
from distrib.data.dataset import Dataset
from distrib.data.graph import PrefetchIterator, ReadContext
from distrib.data.options import INFINITE, UNKNOWN, TensorSpec
from distrib.distribute.group import ReplicaGroupInfo
from distrib.distribute.values import wrap_nest
from distrib.errors import DataError, UsageError, explain
from distrib.input.context import InputOptions
from distrib.input.digest import checked_step
from distrib.input.plan import NO_ROWS, StepPlan

__all__ = ["DistributedDataset", "DistributedIterator", "Optional"]

_HOST_BUFFER = -1   # AUTOTUNE: sized from the first batch


class Optional:
    """A value that may be missing (``tf.experimental.Optional``), from ``get_next_as_optional``.

    Example:
        >>> Optional(3).has_value(), Optional().has_value()
        (True, False)
    """

    _EMPTY = object()

    def __init__(self, value: Any = _EMPTY) -> None:
        self._value = value

    def has_value(self) -> bool:
        """Whether a value is present."""
        return self._value is not Optional._EMPTY

    def get_value(self) -> Any:
        """The value; raises :class:`DataError` when there is none."""
        if not self.has_value():
            raise DataError(explain("Optional", "empty", "has no value",
                                    "check has_value() first"))
        return self._value


def _pin(batch: Any) -> Any:
    return graph.map_structure(
        lambda x: x.pin_memory() if isinstance(x, torch.Tensor) else x, batch)


def _to_device(batch: Any, device: torch.device) -> Any:
    return graph.map_structure(
        lambda x: x.to(device, non_blocking=True) if isinstance(x, torch.Tensor) else x, batch)


def _partial_batch_handling(plan: StepPlan, group: ReplicaGroupInfo) -> bool:
    """TF's ``_enable_get_next_as_optional``: replicas without data get empty batches until
    every replica is done — with several replicas and a finite dataset, on several
    workers, or on one when batches may differ in shape."""
    return (graph.cardinality(plan.dataset) != INFINITE and group.num_replicas_in_sync > 1
            and (group.num_workers > 1 or not _static_shapes(plan.dataset)))


def _ends_with_first_replica(plan: StepPlan, group: ReplicaGroupInfo) -> bool:
    """Without that handling (one worker, batches of static shape: ``drop_remainder``) the
    epoch ends at the first step where any replica has no batch, as in TF."""
    return (group.num_replicas_in_sync > 1 and graph.cardinality(plan.dataset) != INFINITE
            and not _partial_batch_handling(plan, group))


def _static_shapes(dataset: Dataset) -> bool:
    """Whether every batch has the same, fully known shape (batched with drop_remainder)."""
    batched, _, drop = graph.batch_info(dataset)
    if not (batched and drop):
        return False
    spec = dataset.element_spec
    leaves = [s for s in graph.flatten(spec) if s is not None]
    return spec is not None and all(None not in s.shape for s in leaves)


def _empty_from_spec(spec: Any, device: torch.device) -> Any:
    def leaf(s: Any) -> Any:
        if s is None:
            return None
        value = s.empty()
        return value.to(device) if isinstance(value, torch.Tensor) else value
    return graph.map_structure(leaf, spec)


class DistributedDataset:
    """A dataset split across replicas: iterate it for this replica's batch of each step.

    Made by ``strategy.experimental_distribute_dataset`` and
    ``strategy.distribute_datasets_from_function``; each ``iter()`` is a new
    epoch.  ``state_dict()``/``load_state_dict()`` set where the next
    iterator starts.

    Example:
        >>> dist = strategy.experimental_distribute_dataset(ds)   # doctest: +SKIP
        >>> for batch in dist:                                    # doctest: +SKIP
        ...     strategy.run(train_step, args=(batch,))
    """

    def __init__(self, plan: StepPlan, group: ReplicaGroupInfo,
                 options: InputOptions | None = None, run_seed: int = 0) -> None:
        self._plan = plan
        self._group = group
        self._options = options or InputOptions()
        self._seed = run_seed
        self._epoch = 0
        self._start = 0

    @property
    def element_spec(self) -> Any:
        """The spec of one replica's batch (batch dimension None when it can vary)."""
        spec = self._plan.dataset.element_spec
        if spec is None and self._plan.source is not None:   # this worker's share is empty
            spec = self._plan.source.element_spec
        if self._plan.mode == "stride" or spec is None:
            return spec
        return graph.map_structure(
            lambda s: None if s is None or not s.shape else TensorSpec((None, *s.shape[1:]),
                                                                       s.dtype), spec)

    @property
    def cardinality(self) -> int:
        """Steps per epoch when this process can prove it, else ``UNKNOWN`` (-2)."""
        total = self._plan.total_steps(fewest=_ends_with_first_replica(self._plan, self._group))
        return UNKNOWN if total is None else total

    @property
    def fingerprinted(self) -> bool:
        """Whether its iterators fingerprint global batches (several replicas splitting
        batches of one shared pipeline; see ``distrib.input.digest``)."""
        plan = self._plan
        return self._group.num_replicas_in_sync > 1 and (
            plan.takes_turns or plan.shared and plan.mode in ("split", "pieces", "rebatch"))

    def __iter__(self) -> DistributedIterator:
        it = DistributedIterator(self, self._epoch, self._start)
        self._epoch += 1
        self._start = 0
        return it

    def state_dict(self) -> dict[str, Any]:
        """Where the next iterator starts: ``{epoch, position, seed, ...}``."""
        return _state(self._plan, self._group, self._epoch, self._start, self._seed)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Make the next iterator start where ``state`` says (see :meth:`DistributedIterator.state_dict`)."""
        self._epoch, self._start, self._seed = _check_state(self._plan, self._group, state)


def _state(plan: StepPlan, group: ReplicaGroupInfo, epoch: int, position: int,
           seed: int) -> dict[str, Any]:
    return {"epoch": epoch, "position": position, "seed": seed, "portable": plan.portable,
            "mode": plan.mode, "num_workers": group.num_workers,
            "num_replicas_in_sync": group.num_replicas_in_sync}


def _check_state(plan: StepPlan, group: ReplicaGroupInfo, state: dict[str, Any]
                 ) -> tuple[int, int, int]:
    try:
        epoch, position, seed = int(state["epoch"]), int(state["position"]), int(state["seed"])
    except (KeyError, TypeError, ValueError):
        raise UsageError(explain("state", state, "must be a dict saved by state_dict()",
                                 "pass what DistributedIterator.state_dict() returned")) from None
    same = (state.get("mode") == plan.mode
            and state.get("num_workers") == group.num_workers
            and state.get("num_replicas_in_sync") == group.num_replicas_in_sync)
    if not same and not (state.get("portable") and plan.portable):
        raise DataError(explain(
            "state", {k: state.get(k) for k in ("mode", "num_workers", "num_replicas_in_sync")},
            "counts steps of a per-worker pipeline (FILE/OFF/HINT sharding or "
            "distribute_datasets_from_function), which only means the same thing with the "
            f"same layout ({plan.mode}, {group.num_workers} workers, "
            f"{group.num_replicas_in_sync} replicas)",
            "restore with the same number of workers and replicas, or use DATA sharding, "
            "whose position counts global batches"))
    return epoch, position, seed


class DistributedIterator(Iterator[Any]):
    """The iterator of one epoch of a :class:`DistributedDataset`.

    ``next()`` returns this replica's batch (wrapped as ``PerReplica`` under
    strategies that wrap values) or raises ``StopIteration`` on every replica
    in the same step.

    Example:
        >>> it = iter(dist)                   # doctest: +SKIP
        >>> batch = next(it); saved = it.state_dict()   # doctest: +SKIP
    """

    def __init__(self, dataset: DistributedDataset, epoch: int, start: int) -> None:
        self._ds = dataset
        self._plan = dataset._plan
        self._group = dataset._group
        self._epoch = epoch
        self._pos = start
        self._finished = False
        self._host: PrefetchIterator | None = None
        self._staged: collections.deque[Any] = collections.deque()
        self._template: Any = None
        options = dataset._options
        device = self._group.device
        # A strategy that places batches itself (SPMD sharding) gets them on the host.
        place = self._group.place_batch if options.fetch_to_device else None
        self._place = place
        self._device = device if options.fetch_to_device and place is None \
            else torch.device("cpu")
        self._on_gpu = self._device.type == "cuda"
        self._ahead = options.experimental_per_replica_buffer_size if self._on_gpu else 0
        self._enable_get_next_as_optional = _partial_batch_handling(self._plan, self._group)
        self._fewest = _ends_with_first_replica(self._plan, self._group)
        self._total = self._agree_on_total()
        # Fingerprints of global batches that every replica splits (see input.digest).
        self._digests: dict[int, int] | None = {} if dataset.fingerprinted else None
        self._start = start
        self._digest: int | None = None
        #: Whether the fingerprints are left for the next ``strategy.run`` to compare
        #: (one small all-reduce on the fingerprinted steps: a custom loop's data check);
        #: a loop that compares them in its own per-step agreement (the step engine)
        #: sets it False.
        self.compare_fingerprints = True
        self._start_host()

    # ------------------------------------------------------------ set-up
    def _agree_on_total(self) -> int | None:
        """Absolute step count of the epoch, or None when each step must be agreed."""
        total = self._plan.total_steps(fewest=self._fewest)
        r = self._group.num_replicas_in_sync
        if total is not None or r == 1 or self._plan.shared:
            return total
        local = self._plan.local_steps()
        mine = local if local < 0 else max(0, local - self._pos)
        counts = [c for (c,) in self._group.each([mine])]
        if UNKNOWN in counts:
            return None
        finite = [c for c in counts if c != INFINITE]
        if self._fewest and finite:
            return self._pos + min(finite)
        if INFINITE in counts:
            return INFINITE
        return self._pos + max(counts)

    def _start_host(self) -> None:
        ctx = ReadContext(epoch=self._epoch, run_seed=self._ds._seed)
        plan, start, pin, digests = self._plan, self._pos, self._on_gpu, self._digests

        def produce() -> Iterator[Any]:
            for batch in plan.items(ctx, start, digests):
                yield _pin(batch) if pin else batch
        self._host = PrefetchIterator(produce, _HOST_BUFFER, name="distrib-input")
        self._staged.clear()

    def _next_local(self) -> Any:
        assert self._host is not None
        if not self._on_gpu:
            return next(self._host, _END)
        while len(self._staged) <= self._ahead:
            batch = next(self._host, _END)
            if batch is _END:
                break
            self._staged.append(_to_device(batch, self._device))
        return self._staged.popleft() if self._staged else _END

    def _empty(self) -> Any:
        if self._template is not None:
            return graph.empty_like(self._template)
        spec = self._ds.element_spec
        if spec is None:
            raise DataError(explain("dataset", self._plan.dataset,
                                    "is empty on every replica's first step",
                                    "give the dataset at least one element"))
        return _empty_from_spec(graph.map_structure(
            lambda s: s if s is None or s.shape else TensorSpec((None,), s.dtype), spec),
            self._device)

    # ------------------------------------------------------------ iteration
    def __iter__(self) -> DistributedIterator:
        return self

    def __next__(self) -> Any:
        if self._finished:
            raise StopIteration
        if self._total is not None and self._total != INFINITE and self._pos >= self._total:
            self._finish()
            raise StopIteration
        local = self._next_local()
        has = local is not _END
        if self._total is None:
            count = self._group.count(int(has))
            if not count or (self._fewest and count < self._group.num_replicas_in_sync):
                self._finish()
                raise StopIteration
        if has and local is not NO_ROWS:
            self._template = local
        batch = local if has and local is not NO_ROWS else self._empty()
        if self._digests is not None:  # -1: a checked step without a batch here
            self._digest = (self._digests.pop(self._pos, -1) if has else -1) \
                if checked_step(self._pos, self._start) else None
            if self._digest is not None and self.compare_fingerprints:
                self._group.data_check.note(self._digest)  # strategy.run compares it
        self._pos += 1
        if self._place is not None:
            batch = self._place(batch)
        return wrap_nest(batch) if self._group.wrap_per_replica else batch

    @property
    def global_digest(self) -> int | None:
        """The fingerprint of the global batch the last ``next()`` took its part of, on the
        steps where it is taken (:func:`~distrib.input.digest.checked_step`, counted from
        where this iterator started) when the replicas share the source; -1 on such a step
        without a batch; else None.  Every replica has one on the same steps."""
        return self._digest

    def get_next(self) -> Any:
        """The next batch (``next(iterator)``)."""
        return next(self)

    def get_next_as_optional(self) -> Optional:
        """The next batch as an :class:`Optional`, empty at the end instead of raising."""
        try:
            return Optional(next(self))
        except StopIteration:
            return Optional()

    @property
    def element_spec(self) -> Any:
        """The spec of one replica's batch."""
        return self._ds.element_spec

    def _finish(self) -> None:
        self._finished = True
        self.close()

    def close(self) -> None:
        """Stop the background producer (also done at the end and on garbage collection)."""
        if self._host is not None:
            self._host.close()
        self._staged.clear()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    # ------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """The position of the next batch: ``{epoch, position, seed, ...}``.

        ``position`` counts steps taken in this epoch; for single-worker and
        DATA-sharded datasets a step is one global batch, so the state can be
        loaded with another number of replicas or workers.  After the last
        step the state points at the start of the next epoch.
        """
        if self._finished:
            return _state(self._plan, self._group, self._epoch + 1, 0, self._ds._seed)
        return _state(self._plan, self._group, self._epoch, self._pos, self._ds._seed)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` (saved by :meth:`state_dict`, here or in an earlier run).

        Call it on every replica, like every other step of the input: it may
        exchange the replicas' step counts.
        """
        epoch, position, seed = _check_state(self._plan, self._group, state)
        self.close()
        self._ds._seed = seed
        self._epoch, self._pos, self._finished = epoch, position, False
        self._template = None
        self._total = self._agree_on_total()
        self._digests = {} if self._ds.fingerprinted else None
        self._start, self._digest = position, None
        self._start_host()


_END = object()
