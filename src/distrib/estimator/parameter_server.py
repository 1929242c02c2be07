"""``ps`` tasks of ``train_and_evaluate``: serving parameters to asynchronous workers.

Not available yet: :func:`serve` raises an error that says so.

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
