"""``ps`` tasks of ``train_and_evaluate``.

Asynchronous parameter-server training of Estimators (TensorFlow's
``tf.compat.v1.distribute.experimental.ParameterServerStrategy``, where every chief and
worker task runs its own training loop against variables held by the ``ps`` tasks) is
not available: :func:`serve` raises an error that says so and what to do instead.

Example::

    serve(estimator)   # on a ps task
"""

from __future__ import annotations

from typing import Any

from distrib.errors import ConfigError, explain

__all__ = ["serve"]


def serve(estimator: Any) -> None:
    """Serve this ps task's share of the parameters until training ends."""
    raise ConfigError(explain(
        "TF_CONFIG task.type", "ps", "train_and_evaluate cannot run parameter-server "
        "training in this release: a 'ps' task has nothing to serve",
        "remove the 'ps' job and train the 'chief'/'worker' tasks synchronously with "
        "RunConfig(train_distribute=distrib.MultiWorkerMirroredStrategy())"))
