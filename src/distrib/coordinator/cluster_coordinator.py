"""``ClusterCoordinator``: schedule functions on the workers of a ParameterServerStrategy.

Two threads per worker take closures from one queue, send each to their worker (which
runs them one at a time, in the order they were taken, the next one already waiting) and
record the result in the closure's :class:`RemoteValue`.  TensorFlow's rules:

* ``schedule`` never blocks; the function runs on some worker at least once;
* a worker that is lost (killed, unreachable) gives its closure back to the queue —
  another worker runs it — and its thread waits for the worker to come back; a
  restarted worker rejoins, gets every per-worker object again, and receives work;
* the first error raised by a closure is raised by the next ``schedule``, ``join`` or
  ``done``, and then forgotten; closures still queued at that moment are cancelled
  (their ``fetch`` raises ``CancelledError``);
* a function that runs past ``closure_timeout`` on a worker that still answers fails
  with ``TimeoutError`` naming the worker and the function; that worker gets no other
  closure until it returns (the others carry on);
* a lost ``ps`` task is fatal: the next ``schedule``/``join``/``done`` raises
  :class:`~distrib.errors.PeerLostError` naming it, within the communication
  timeout; so is losing every worker for longer than the timeout;
* a worker that stops answering (its heartbeat, with the communication timeout as its
  deadline, fails) counts as lost: the functions it runs go to another worker;
* a worker that refuses the chief (it holds another cluster secret) is an error: the
  next ``schedule``/``join``/``done`` raises the :class:`~distrib.errors.ConfigError`
  naming it, rather than training on without it.

Example::

    coordinator = ClusterCoordinator(strategy)
    it = iter(coordinator.create_per_worker_dataset(dataset_fn))
    results = [coordinator.schedule(step, args=(it,)) for _ in range(100)]
    coordinator.join()
"""

from __future__ import annotations

import collections
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from distrib import nest
from distrib.coordinator.values import (
    PerWorkerDataset,
    PerWorkerValues,
    RemoteValue,
    make_dataset,
)
from distrib.errors import InvalidTypeError, PeerLostError, UsageError, explain
from distrib.rpc.coordination import WorkerBusyError
from distrib.rpc.executor import current_worker_index
from distrib.strategies.parameter_server import ParameterServerStrategyExtended

__all__ = ["ClusterCoordinator", "experimental_get_current_worker_index"]

_COORDINATORS: weakref.WeakKeyDictionary[Any, ClusterCoordinator] = \
    weakref.WeakKeyDictionary()
_RECONNECT_SECONDS = 2.0
#: The default ``closure_timeout``: a function still running on a worker after 30 minutes
#: is taken for hung (a training step takes milliseconds to seconds).
CLOSURE_TIMEOUT = 1800.0
#: Closures sent to a worker at once: while it runs one, the next is already there, so the
#: round trip to the chief is hidden (the worker still runs one at a time, in order).
_SLOTS_PER_WORKER = 2
#: Queued closures sent in one call: the per-call costs (the chief's and the worker's
#: side of an RPC, about a millisecond of CPU) are shared.  Only while a worker's
#: closures take at most a quarter of ``closure_timeout`` together.
_CLOSURES_PER_CALL = 4


@dataclass
class _Closure:
    blob: bytes
    result: RemoteValue


class _ClosureQueue:
    """Closures waiting for a worker, in flight, and the first error (TF's coordinated queue)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queue: collections.deque[_Closure] = collections.deque()
        self.inflight = 0
        self._error: BaseException | None = None

    def put(self, closure: _Closure) -> None:
        with self._cond:
            self._raise_if_error()
            self._queue.append(closure)
            self._cond.notify_all()

    def get(self, timeout: float, limit: int = 1) -> list[_Closure]:
        """Up to ``limit`` closures, the oldest first ([] after ``timeout`` seconds)."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._queue and self._error is None, timeout):
                return []
            batch = [self._queue.popleft() for _ in range(min(limit, len(self._queue)))]
            self.inflight += len(batch)
            return batch

    def put_back(self, batch: list[_Closure]) -> None:
        """Queue closures taken by :meth:`get` again, first in line, in their order."""
        with self._cond:
            self.inflight -= len(batch)
            self._queue.extendleft(reversed(batch))
            self._cond.notify_all()

    def finished(self) -> None:
        with self._cond:
            self.inflight -= 1
            self._cond.notify_all()

    def failed(self, error: BaseException) -> None:
        with self._cond:
            self.inflight -= 1
            if self._error is None:
                self._error = error
            self._cond.notify_all()

    def set_error(self, error: BaseException) -> None:
        with self._cond:
            if self._error is None:
                self._error = error
            self._cond.notify_all()

    def _raise_if_error(self) -> None:
        if self._error is None:
            return
        error, self._error = self._error, None
        while self._queue:
            self._queue.popleft().result._cancel()
        raise error

    def wait(self, check: Callable[[], None]) -> None:
        """Until nothing is queued or in flight (or an error); then raise the error, if any."""
        with self._cond:
            while self.inflight or (self._queue and self._error is None):
                self._cond.wait(0.5)
                if self._error is None:
                    try:
                        check()
                    except BaseException as exc:  # noqa: BLE001 - raised below, once
                        self._error = exc
            self._raise_if_error()

    def done(self) -> bool:
        with self._cond:
            self._raise_if_error()
            return not self._queue and not self.inflight


class ClusterCoordinator:
    """Schedules functions on the workers (``tf.distribute.experimental.coordinator.ClusterCoordinator``).

    One coordinator per strategy: creating a second one returns the first.

    Args:
        strategy: a :class:`distrib.ParameterServerStrategy` (on its chief).
        closure_timeout: seconds a scheduled function may take on a worker (distrib; TF
            has no limit).  One that takes longer on a worker that still answers fails
            with ``TimeoutError`` naming the worker and the function (raised by the next
            ``schedule``/``join``, like any error of a function), and that worker gets no
            other function until it returns.  Default 1800; None: no limit.
    """

    def __new__(cls, strategy: Any, closure_timeout: float | None = CLOSURE_TIMEOUT
                ) -> ClusterCoordinator:
        if not hasattr(strategy, "extended"):
            raise InvalidTypeError(explain("ClusterCoordinator strategy", strategy,
                                           "must be a distrib.ParameterServerStrategy",
                                           "pass the strategy: ClusterCoordinator(strategy)"))
        existing = _COORDINATORS.get(strategy)
        if existing is not None:
            return existing
        return super().__new__(cls)

    def __init__(self, strategy: Any, closure_timeout: float | None = CLOSURE_TIMEOUT) -> None:
        if _COORDINATORS.get(strategy) is self:
            return
        if closure_timeout is not None and (
                isinstance(closure_timeout, bool) or not isinstance(closure_timeout, (int, float))
                or not closure_timeout > 0):
            raise UsageError(explain("closure_timeout", closure_timeout, "must be a positive "
                                     "number of seconds, or None for no limit",
                                     "pass e.g. closure_timeout=600"))
        self._closure_timeout = None if closure_timeout is None else float(closure_timeout)
        ext = getattr(strategy, "extended", None)
        if not isinstance(ext, ParameterServerStrategyExtended):
            raise UsageError(explain(
                "strategy", strategy, "Only `tf.distribute.experimental.ParameterServerStrategy` "
                "is supported to work with `tf.distribute.experimental.coordinator."
                "ClusterCoordinator` currently", "create a distrib.ParameterServerStrategy"))
        self._strategy = strategy
        self._ext = ext
        self._queue = _ClosureQueue()
        self._down_since: list[float | None] = [time.monotonic()] * ext.num_workers
        self._stop = threading.Event()
        self._take = [threading.Lock() for _ in range(ext.num_workers)]
        #: seconds per closure of each worker's last call (None: none yet)
        self._pace: list[float | None] = [None] * ext.num_workers
        self._threads = [threading.Thread(target=self._worker_loop, args=(i,), daemon=True,
                                          name=f"WorkerClosureProcessingLoop-{i}.{slot}")
                         for i in range(ext.num_workers) for slot in range(_SLOTS_PER_WORKER)]
        for thread in self._threads:
            thread.start()
        _COORDINATORS[strategy] = self

    @property
    def strategy(self) -> Any:
        """The strategy this coordinator schedules for."""
        return self._strategy

    @property
    def num_workers(self) -> int:
        """The number of workers."""
        return self._ext.num_workers

    # ----------------------------------------------------------- worker loops
    def _worker_loop(self, index: int) -> None:
        connected = False
        while not self._stop.is_set():
            if not connected:
                try:
                    connected = self._ext.connect_worker(index, _RECONNECT_SECONDS)
                except BaseException as exc:  # noqa: BLE001 - raised by schedule/join/done
                    # the worker refused the chief (another cluster secret): training must
                    # not go on without it, silently
                    self._queue.set_error(exc)
                    self._stop.wait(_RECONNECT_SECONDS)
                    continue
                if connected:
                    self._down_since[index] = None
                continue
            with self._take[index]:  # the closures and their place in the worker's order
                batch = self._queue.get(timeout=0.5, limit=self._per_call(index))
                seq = self._ext.ticket(index) if batch else None
            if not batch:
                continue
            start = time.monotonic()
            try:
                outcomes = self._ext.run_closures(index, [c.blob for c in batch], seq,
                                                  self._closure_timeout)
            except PeerLostError as exc:
                if exc.lost == [self._ext.worker_name(index)]:
                    if self._down_since[index] is None:
                        self._down_since[index] = time.monotonic()
                    connected = False
                    self._queue.put_back(batch)  # another worker runs them (at least once)
                    if isinstance(exc, WorkerBusyError):  # it answers: ask again later
                        self._stop.wait(_RECONNECT_SECONDS)
                    continue
                self._fail(batch, exc)
            except BaseException as exc:  # noqa: BLE001 - reported by schedule/join
                self._fail(batch, exc)
            else:
                self._pace[index] = (time.monotonic() - start) / len(batch)
                for closure, (ok, value) in zip(batch, outcomes):
                    if ok:
                        closure.result._set_value(value)
                        self._queue.finished()
                    else:
                        self._fail([closure], value)
                self._queue.put_back(batch[len(outcomes):])  # not run: cancelled by the error

    def _per_call(self, index: int) -> int:
        """How many closures worker ``index`` gets in one call (see ``_CLOSURES_PER_CALL``)."""
        pace, timeout = self._pace[index], self._closure_timeout
        if pace is None or (timeout is not None and pace * _CLOSURES_PER_CALL > timeout / 4):
            return 1
        return _CLOSURES_PER_CALL

    def _fail(self, batch: list[_Closure], error: BaseException) -> None:
        for closure in batch:
            closure.result._set_error(error)
            self._queue.failed(error)

    def _check(self) -> None:
        self._ext.check_cluster()
        now = time.monotonic()
        down = [t for t in self._down_since if t is not None]
        if len(down) == len(self._down_since) and now - max(down) > \
                self._ext.communication_timeout:
            names = [self._ext.worker_name(i) for i in range(self.num_workers)]
            raise PeerLostError(
                f"Lost every worker ({', '.join(names)}): none has answered for "
                f"{self._ext.communication_timeout:.0f} s, so the scheduled functions cannot "
                "run. Fix: start (or restart) the workers; they rejoin by themselves.",
                lost=names)

    # -------------------------------------------------------------- schedule
    def schedule(self, fn: Callable[..., Any], args: Any = None, kwargs: Any = None
                 ) -> RemoteValue:
        """Queue ``fn(*args, **kwargs)`` to run on some worker; returns its :class:`RemoteValue`.

        ``fn`` may be any function (it travels to the worker by value, as it is now);
        :class:`PerWorkerValues` arguments (per-worker iterators) become the running
        worker's component.  Raises the first error of a previously scheduled function.

        Example::

            rv = coordinator.schedule(train_step, args=(per_worker_iterator,))
        """
        if not callable(fn):
            raise UsageError(explain("fn", fn, "Function passed to `ClusterCoordinator."
                                     "schedule` must be a callable object", "pass a function"))
        args = tuple(args or ())
        kwargs = dict(kwargs or {})
        for leaf in nest.flatten((args, kwargs)):
            if isinstance(leaf, RemoteValue):
                raise UsageError(explain("args", leaf, "`tf.distribute.experimental.coordinator."
                                         "RemoteValue` used as an input to scheduled function is "
                                         "not yet supported", "fetch() it and pass the value"))
        with self._queue._cond:
            self._queue._raise_if_error()
        self._check()
        result = RemoteValue()
        self._queue.put(_Closure(self._ext.pack_closure(fn, args, kwargs), result))
        return result

    def join(self) -> None:
        """Wait until every scheduled function finished; raise the first error, if any.

        When it returns, the chief's modules hold the variables' current values.
        """
        self._queue.wait(self._check)
        self._ext.refresh()

    def done(self) -> bool:
        """Whether every scheduled function finished (raises the first error, if any)."""
        return self._queue.done()

    def fetch(self, val: Any) -> Any:
        """``RemoteValue.fetch()`` of every :class:`RemoteValue` in the structure ``val``."""
        return nest.map_structure(lambda v: v.fetch() if isinstance(v, RemoteValue) else v, val)

    # ---------------------------------------------------------- per worker
    def create_per_worker_dataset(self, dataset_fn: Any) -> PerWorkerDataset:
        """Build a dataset on every worker: ``dataset_fn()`` (or ``dataset_fn(input_context)``),
        or a dataset object sent to each worker.

        Example::

            ds = coordinator.create_per_worker_dataset(
                lambda: distrib.data.Dataset.from_tensor_slices(x).repeat().batch(64))
            it = iter(ds)
        """
        if dataset_fn is None:
            raise InvalidTypeError(explain("dataset_fn", None, "must be a function that returns "
                                           "a dataset, or a dataset", "pass one"))
        rid = self._ext.create_per_worker(make_dataset, (dataset_fn,))
        return PerWorkerDataset(self, rid)

    def create_per_worker_value(self, fn: Callable[..., Any], *args: Any) -> PerWorkerValues:
        """``fn(*args)`` on every worker, kept there (distrib; TF keeps this internal).

        Example::

            per_worker_model = coordinator.create_per_worker_value(lambda: model)
        """
        return PerWorkerValues(self, self._ext.create_per_worker(fn, args))

    def __repr__(self) -> str:
        return f"<ClusterCoordinator of {self.num_workers} workers>"


def experimental_get_current_worker_index() -> int:
    """The index of the worker running the current scheduled function or dataset function.

    Raises:
        RuntimeError: called outside a function running on a worker.
    """
    index = current_worker_index()
    if index is None:
        raise RuntimeError(
            "Cannot retrieve the worker index. `get_worker_idx_and_num_workers` should be "
            "called from within a tf.function being executed on a worker. This method should "
            "only be called from either a dataset_fn that is passed into "
            "`ClusterCoordinator.create_per_worker_dataset`, or a tf.function that is passed "
            "into `ClusterCoordinator.schedule`.")
    return index
