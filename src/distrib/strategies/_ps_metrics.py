"""Metrics used in functions scheduled under ParameterServerStrategy: the chief reads the total.

TensorFlow keeps a metric's state in variables on the ``ps`` tasks, which every worker
updates, so reading a metric on the coordinator gives the total over the workers.  Here a
metric (``distrib.metrics``) that a scheduled function uses travels with the function; the
worker runs the function and returns, beside its result, what it added to each metric's
states; the chief adds that to its own metric objects when the result arrives.  After
``join()`` the chief's metrics hold the total of every function that ran; ``reset_state()``
on the chief starts a new total.  A function that ran twice (its first worker was lost
after running it) counts once.

Example::

    increments = MetricIncrements()
    blob = increments.pack(fn, args, kwargs, dumps)   # on the chief, at schedule
    value = increments.apply(worker_result)           # on the chief, when it returns
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["MetricIncrements", "is_metric"]

_MARK = "__distrib_metric_increments__"
_METRIC_API = ("update_state", "result_from", "local_state", "state_tensors",
               "assign_state_tensors")

Dumps = Callable[[Any, Callable[[Any], "tuple[Any, ...] | None"]], bytes]


def is_metric(obj: Any) -> bool:
    """Whether ``obj`` is a ``distrib.metrics`` metric (its states are summed when read)."""
    return not isinstance(obj, type) and all(callable(getattr(obj, name, None))
                                             for name in _METRIC_API)


def _with_increments(key: int, fn: Callable[..., Any], metrics: list[Any],
                     args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """On a worker: run ``fn`` and return its result with what it added to ``metrics``."""
    before = [m.local_state().clone() for m in metrics]
    value = fn(*args, **kwargs)
    after = [m.local_state() for m in metrics]
    return {_MARK: key, "value": value, "increments": [a - b for a, b in zip(after, before)]}


class MetricIncrements:
    """The chief's side: which metrics each scheduled function carries, and adding their increments."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._closures: dict[int, list[Any]] = {}  # closure key -> its metrics
        self._next_key = 0

    def pack(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
             refs: Callable[[Any], tuple[Any, ...] | None], dumps: Dumps) -> bytes:
        """``dumps`` of the closure (with ``refs``); wrapped to report its metrics' increments."""
        metrics: list[Any] = []

        def find(obj: Any) -> tuple[Any, ...] | None:
            ref = refs(obj)
            if ref is None and is_metric(obj) and not any(m is obj for m in metrics):
                metrics.append(obj)
            return ref

        blob = dumps({"fn": fn, "args": args, "kwargs": kwargs}, find)
        if not metrics:
            return blob
        with self._lock:
            self._next_key += 1
            key = self._next_key
            self._closures[key] = metrics
        return dumps({"fn": _with_increments, "args": (key, fn, metrics, args, kwargs),
                      "kwargs": {}}, refs)

    def apply(self, value: Any) -> Any:
        """The function's own result; its metric increments are added to the chief's metrics."""
        if not (isinstance(value, dict) and _MARK in value):
            return value
        with self._lock:
            for metric, increment in zip(self._closures.pop(int(value[_MARK]), []),
                                         value["increments"]):
                states, pos = metric.state_tensors(), 0
                for i, state in enumerate(states):
                    part = torch.as_tensor(increment)[pos:pos + state.numel()]
                    states[i] = state + part.reshape(state.shape).to(state.dtype)
                    pos += state.numel()
                metric.assign_state_tensors(states)
        return value["value"]
