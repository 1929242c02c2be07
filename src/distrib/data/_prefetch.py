"""A background producer with a bounded queue and a clean shutdown.

:class:`PrefetchIterator` runs ``make()`` in a daemon thread and hands its items
to the consumer through a queue of at most ``size`` items.  An exception in the
producer is raised in the consumer at the position it happened.  Closing the
iterator (explicitly, at the end, or when it is garbage collected) stops the
thread: the producer checks a stop flag between items and never blocks for
long on a full queue.  Producers still running when the interpreter exits are
stopped and joined by an ``atexit`` hook: a daemon thread that is inside a torch
operation when Python finalizes is ended by ``pthread_exit`` while torch holds a
``noexcept`` frame, which aborts the process ("terminate called without an
active exception", exit status 134) after the program has finished.

``size=AUTOTUNE`` (-1) sizes the queue from the first item: as many items as
fit in about 64 MiB, between 2 and 16 (fewer hand-offs between threads for
small batches, bounded memory for large ones).

Example:
    >>> it = PrefetchIterator(lambda: iter(range(3)), size=2)
    >>> list(it)
    [0, 1, 2]
"""

from __future__ import annotations

import atexit
import queue
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from distrib.data import _nest

__all__ = ["PrefetchIterator", "AUTOTUNE_BYTES"]

_END = object()
AUTOTUNE_BYTES = 64 << 20
_AUTOTUNE = -1
_JOIN_AT_EXIT_SECONDS = 30.0


def _nbytes(item: Any) -> int:
    total = 0
    for leaf in _nest.flatten(item):
        if isinstance(leaf, torch.Tensor):
            total += leaf.numel() * leaf.element_size()
        elif isinstance(leaf, np.ndarray):
            total += leaf.nbytes
    return total


def _autotune(q: queue.Queue[Any], item: Any) -> None:
    size = max(2, min(16, AUTOTUNE_BYTES // max(1, _nbytes(item))))
    with q.mutex:
        q.maxsize = size


class _Failure:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def _produce(make: Callable[[], Iterator[Any]], q: queue.Queue[Any],
             stop: threading.Event, tune: bool) -> None:
    def put(item: Any) -> bool:
        try:
            q.put_nowait(item)
            return True
        except queue.Full:
            pass
        while not stop.is_set():
            try:
                q.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    try:
        first = tune
        for item in make():
            if first:
                _autotune(q, item)
                first = False
            if not put(item):
                return
        put(_END)
    except BaseException as exc:  # handed to the consumer, raised there
        put(_Failure(exc))


class PrefetchIterator(Iterator[Any]):
    """Iterate ``make()`` in a background thread, at most ``size`` items ahead (or AUTOTUNE).

    Example:
        >>> next(PrefetchIterator(lambda: iter('ab'), size=1))
        'a'
    """

    def __init__(self, make: Callable[[], Iterator[Any]], size: int = 1,
                 name: str = "distrib-prefetch") -> None:
        tune = size == _AUTOTUNE
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=2 if tune else max(1, size))
        self._stop = threading.Event()
        self._done = False
        self._thread = threading.Thread(target=_produce,
                                        args=(make, self._queue, self._stop, tune),
                                        name=name, daemon=True)
        self._thread.start()
        _live.add(self)

    def __iter__(self) -> PrefetchIterator:
        return self

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        while True:
            try:
                item = self._queue.get_nowait()
                break
            except queue.Empty:
                pass
            try:
                item = self._queue.get(timeout=0.1)
                break
            except queue.Empty:
                if not self._thread.is_alive() and self._queue.empty():
                    self.close()
                    raise StopIteration from None
        if item is _END:
            self.close()
            raise StopIteration
        if isinstance(item, _Failure):
            self.close()
            raise item.exc
        return item

    def close(self, timeout: float = 5.0) -> None:
        """Stop the producer thread and drop what it prefetched."""
        self._done = True
        self._stop.set()
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=timeout)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


_live: weakref.WeakSet[PrefetchIterator] = weakref.WeakSet()


@atexit.register
def _stop_producers_at_exit() -> None:
    """Stop every live producer before the interpreter finalizes (see the module docstring)."""
    running = list(_live)
    for it in running:
        it._stop.set()
    for it in running:
        it.close(timeout=_JOIN_AT_EXIT_SECONDS)
