"""``distrib.optimizers``: Keras' ``keras.optimizers`` — the optimizer classes, their
learning-rate ``schedules`` and ``get`` (defined in :mod:`distrib.training.optimizers`).

Example::

    import distrib
    opt = distrib.optimizers.Adam(learning_rate=distrib.optimizers.schedules.CosineDecay(
        0.0, decay_steps=1000, warmup_target=1e-3, warmup_steps=100), global_clipnorm=1.0)
    with strategy.scope():
        model.compile(optimizer=opt, loss="mse")
"""

from distrib.training.optimizers import *  # noqa: F403 - exactly its __all__
from distrib.training.optimizers import __all__ as __all__
