"""Keras-style training on every strategy: ``Model``, losses, metrics, optimizers, callbacks.

Example::

    with strategy.scope():
        model = distrib.Model(net)
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy",
                      metrics=["accuracy"])
    model.fit(x_train, y_train, batch_size=64, epochs=5, validation_split=0.1)
"""

import distrib.strategies  # noqa: F401  (registers the default strategy fit falls back on)
from distrib.training import callbacks, losses, metrics, optimizers
from distrib.training.jit import Function, function
from distrib.training.model import Model

__all__ = ["Function", "Model", "callbacks", "function", "losses", "metrics", "optimizers"]
