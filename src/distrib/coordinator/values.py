"""Values of the coordinator: ``RemoteValue``, ``PerWorkerValues`` and per-worker datasets.

Example::

    rv = coordinator.schedule(step, args=(per_worker_iterator,))
    rv.fetch()          # numpy, once the step ran on some worker
    rv.get()            # the same result as torch tensors
"""

from __future__ import annotations

import enum
import inspect
import threading
from typing import TYPE_CHECKING, Any

import torch

from distrib import nest
from distrib.errors import CancelledError
from distrib.input import InputContext

if TYPE_CHECKING:
    from distrib.coordinator.cluster_coordinator import ClusterCoordinator

__all__ = ["RemoteValue", "RemoteValueStatus", "PerWorkerValues", "PerWorkerDataset",
           "PerWorkerDatasetIterator", "make_dataset"]


class RemoteValueStatus(enum.Enum):
    """Where a :class:`RemoteValue` stands (TF's ``RemoteValueStatus``)."""

    NOT_READY = "NOT_READY"
    ABORTED = "ABORTED"
    READY = "READY"


class RemoteValue:
    """The future result of a scheduled function (``tf.distribute.experimental.coordinator.RemoteValue``).

    Example::

        rv = coordinator.schedule(lambda: torch.tensor(2.0) * 3)
        rv.fetch()          # array(6., dtype=float32)
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._status = RemoteValueStatus.NOT_READY
        self._value: Any = None
        self._error: BaseException | None = None
        self._fetched: Any = None
        self._has_fetched = False

    def _set_value(self, value: Any) -> None:
        self._value, self._status = value, RemoteValueStatus.READY
        self._event.set()

    def _set_error(self, error: BaseException) -> None:
        self._error, self._status = error, RemoteValueStatus.READY
        self._event.set()

    def _cancel(self) -> None:
        self._set_error(CancelledError("The corresponding function is cancelled. Please "
                                       "reschedule the function."))

    @property
    def status(self) -> RemoteValueStatus:
        """NOT_READY until the function finished (or failed, or was cancelled), then READY."""
        return self._status

    def _wait(self) -> Any:
        self._event.wait()
        if self._error is not None:
            raise self._error
        return self._value

    def get(self) -> Any:
        """Wait for the result and return it (tensors as torch tensors)."""
        return self._wait()

    def fetch(self) -> Any:
        """Wait for the result and return it with tensors as numpy arrays (cached)."""
        value = self._wait()
        if not self._has_fetched:
            self._fetched = nest.map_structure(
                lambda v: v.numpy() if isinstance(v, torch.Tensor) else v, value)
            self._has_fetched = True
        return self._fetched

    def __repr__(self) -> str:
        return f"<RemoteValue {self._status.value}>"


class PerWorkerValues:
    """One value per worker, held by the workers (``tf.distribute.experimental.coordinator.PerWorkerValues``).

    Passed to :meth:`ClusterCoordinator.schedule`, it becomes the component of the
    worker that runs the function.
    """

    def __init__(self, coordinator: ClusterCoordinator, rid: int) -> None:
        self._coordinator = coordinator
        self._rid = rid
        coordinator.strategy.extended.refer(self, rid)

    def __repr__(self) -> str:
        return f"<PerWorkerValues #{self._rid} on {self._coordinator.num_workers} workers>"


class PerWorkerDatasetIterator(PerWorkerValues):
    """The iterators of a :class:`PerWorkerDataset`, one per worker."""

    def __next__(self) -> Any:
        raise NotImplementedError("Iterating over an `AsyncDistributedIterator` is not "
                                  "supported right now.")

    def get_next(self) -> Any:
        return self.__next__()


class PerWorkerDataset(PerWorkerValues):
    """A dataset built on every worker (``coordinator.create_per_worker_dataset``).

    ``iter()`` of it gives each worker its own iterator; a worker that restarts builds
    its dataset and iterator again, from the beginning (as in TensorFlow).
    """

    def __iter__(self) -> PerWorkerDatasetIterator:
        rid = self._coordinator.strategy.extended.create_per_worker(iter, (self,))
        return PerWorkerDatasetIterator(self._coordinator, rid)

    def build(self) -> PerWorkerDataset:
        """The datasets are built on the workers already; returns ``self`` (TF's ``build``)."""
        return self


def make_dataset(source: Any) -> Any:
    """What a worker builds for ``create_per_worker_dataset(source)``."""
    if not callable(source):
        return source
    try:
        params = inspect.signature(source).parameters
    except (TypeError, ValueError):
        params = {}  # type: ignore[assignment]
    if len(params) >= 1:
        return source(InputContext(num_input_pipelines=1, input_pipeline_id=0,
                                   num_replicas_in_sync=1))
    return source()
