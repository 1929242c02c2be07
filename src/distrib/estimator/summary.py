"""Summaries recorded in ``model_fn`` (``tf.compat.v1.summary.scalar`` / ``histogram``).

During training the Estimator writes them to ``model_dir`` every
``save_summary_steps`` steps, next to ``loss`` (the chief writes; a value is this
replica's).  A value may be a tensor, a number, or a metric op's ``update_op`` (it is
then applied only on the steps that write, as in TensorFlow).

Example::

    def model_fn(features, labels, mode):
        ...
        accuracy = distrib.estimator.metrics.accuracy(labels, classes)
        distrib.estimator.summary.scalar("accuracy", accuracy[1])
"""

from __future__ import annotations

from typing import Any

from distrib.errors import ContextError, explain
from distrib.estimator.objects import active_store

__all__ = ["scalar", "histogram"]


def _record(kind: str, name: str, value: Any) -> None:
    store = active_store()
    if store is None:
        raise ContextError(explain(f"summary.{kind}", name, "summaries are recorded while "
                                   "model_fn runs", "call it inside model_fn"))
    store.summaries[str(name)] = (kind, value)


def scalar(name: str, tensor: Any, collections: Any = None, family: Any = None) -> None:
    """Record a scalar summary named ``name`` for this step."""
    _record("scalar", name, tensor)


def histogram(name: str, values: Any, collections: Any = None, family: Any = None) -> None:
    """Record a histogram summary of ``values`` for this step."""
    _record("histogram", name, values)
