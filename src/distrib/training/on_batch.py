"""``Model.train_on_batch``, ``test_on_batch`` and ``predict_on_batch`` (Keras' single steps).

Each takes one GLOBAL batch: under a strategy it is split across the replicas as a
batch of ``fit`` is, and what comes back is global — the loss and metrics
all-reduced, the predictions of every row in order.  As with ``fit``, the arrays
must be the same in every replica process (checked with one small all-gather).

Example::

    for x_batch, y_batch in batches:
        loss, acc = model.train_on_batch(x_batch, y_batch)
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import torch

from distrib.errors import UsageError, explain
from distrib.training import fit_loop
from distrib.training.data_adapter import DataHandler, check_same_arrays, num_examples
from distrib.training.fit_runner import Runner, check_replicated, mode

if TYPE_CHECKING:
    from distrib.training.model import Model

__all__ = ["train_on_batch", "test_on_batch", "predict_on_batch"]


def _handler(runner: Any, x: Any, y: Any, sample_weight: Any) -> DataHandler:
    if x is None:
        raise UsageError(explain("x", None, "the batch needs features",
                                 "pass the batch's inputs as x"))
    check_same_arrays(runner.strategy, {"x": x, "y": y, "sample_weight": sample_weight})
    rows = num_examples(*(v for v in (x, y, sample_weight) if v is not None))
    handler = DataHandler(x, y, sample_weight, batch_size=max(rows, 1),
                          strategy=runner.strategy, float_dtype=runner.dtype)
    return runner.use(handler)  # type: ignore[no-any-return]


def _result(model: Model, logs: dict[str, Any], return_dict: bool) -> Any:
    if return_dict:
        return logs
    values = [logs[name] for name in model.metrics_names if name in logs]
    return values[0] if len(values) == 1 else values


def train_on_batch(model: Model, x: Any, y: Any, sample_weight: Any, reset_metrics: bool,
                   return_dict: bool) -> Any:
    """``Model.train_on_batch`` (see the module docstring)."""
    return _on_batch(model, x, y, sample_weight, reset_metrics, return_dict, training=True)


def test_on_batch(model: Model, x: Any, y: Any, sample_weight: Any, reset_metrics: bool,
                  return_dict: bool) -> Any:
    """``Model.test_on_batch`` (see the module docstring)."""
    return _on_batch(model, x, y, sample_weight, reset_metrics, return_dict, training=False)


def _on_batch(model: Model, x: Any, y: Any, sample_weight: Any, reset_metrics: bool,
              return_dict: bool, training: bool) -> Any:
    with model._scope():
        check_replicated(model)
        runner = Runner(model)
        handler = _handler(runner, x, y, sample_weight)
        if reset_metrics:
            model.reset_metrics()
        no_grad = contextlib.nullcontext() if training else torch.no_grad()
        with mode(model, training), no_grad:
            runner.loop(runner.step if training else runner.test).run(handler.epoch())
        return _result(model, runner.sync({}), return_dict)


def predict_on_batch(model: Model, x: Any) -> Any:
    """``Model.predict_on_batch``: ``predict`` on one global batch, silently."""
    rows = num_examples(x)
    return fit_loop.predict(model, x=x, batch_size=max(rows, 1), verbose=0, steps=None,
                            callbacks=None)
