"""Writes keras_optimizers.json: Keras 3's optimizers and schedules on a fixed problem.

Run with TensorFlow 2.21 / Keras 3 installed (not needed by the tests, which read the
JSON)::

    python tests/training/golden/keras_optimizers.py

Two float64 variables, ``kernel`` (2x3) and ``bias`` (3,), start from :func:`start` and
take :data:`STEPS` updates with the gradients :func:`gradient` gives (a formula, so
that no random generator is involved); the file holds the variables after every step.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

STEPS = 7
SHAPES = {"kernel": (2, 3), "bias": (3,)}

# name -> (Keras class, constructor arguments, exclude_from_weight_decay var_names)
CASES: dict[str, tuple[str, dict[str, Any], list[str] | None]] = {
    "sgd": ("SGD", {"learning_rate": 0.1}, None),
    "sgd_momentum": ("SGD", {"learning_rate": 0.1, "momentum": 0.9}, None),
    "sgd_nesterov": ("SGD", {"learning_rate": 0.1, "momentum": 0.9, "nesterov": True}, None),
    "sgd_weight_decay": ("SGD", {"learning_rate": 0.1, "weight_decay": 0.05}, None),
    "adam": ("Adam", {"learning_rate": 0.01}, None),
    "adam_amsgrad": ("Adam", {"learning_rate": 0.01, "amsgrad": True}, None),
    "adamw_exclude_bias": ("AdamW", {"learning_rate": 0.01, "weight_decay": 0.1}, ["bias"]),
    "rmsprop": ("RMSprop", {"learning_rate": 0.01}, None),
    "rmsprop_centered_momentum": ("RMSprop", {"learning_rate": 0.01, "momentum": 0.5,
                                              "centered": True}, None),
    "adagrad": ("Adagrad", {"learning_rate": 0.1}, None),
    "adadelta": ("Adadelta", {"learning_rate": 1.0}, None),
    "adamax": ("Adamax", {"learning_rate": 0.01}, None),
    "nadam": ("Nadam", {"learning_rate": 0.01}, None),
    "lion": ("Lion", {"learning_rate": 0.01}, None),
    "clipnorm": ("SGD", {"learning_rate": 0.1, "clipnorm": 0.5}, None),
    "global_clipnorm": ("SGD", {"learning_rate": 0.1, "global_clipnorm": 0.5}, None),
    "clipvalue": ("SGD", {"learning_rate": 0.1, "clipvalue": 0.2}, None),
    "accumulation": ("SGD", {"learning_rate": 0.1, "momentum": 0.5,
                             "gradient_accumulation_steps": 3}, None),
    "ema": ("SGD", {"learning_rate": 0.1, "use_ema": True, "ema_momentum": 0.9}, None),
    "ema_overwrite": ("SGD", {"learning_rate": 0.1, "use_ema": True, "ema_momentum": 0.5,
                              "ema_overwrite_frequency": 2}, None),
    "adam_exponential_decay": ("Adam", {"learning_rate": ("ExponentialDecay", {
        "initial_learning_rate": 0.01, "decay_steps": 2, "decay_rate": 0.5})}, None),
    "sgd_piecewise": ("SGD", {"learning_rate": ("PiecewiseConstantDecay", {
        "boundaries": [1, 3], "values": [0.1, 0.05, 0.01]})}, None),
    "adamw_cosine_warmup_clip": ("AdamW", {"learning_rate": ("CosineDecay", {
        "initial_learning_rate": 0.0, "decay_steps": 4, "warmup_target": 0.02,
        "warmup_steps": 2}), "weight_decay": 0.01, "global_clipnorm": 1.0}, None),
}

# name -> (schedule class, constructor arguments), evaluated at steps 0..SCHEDULE_STEPS-1
SCHEDULES: dict[str, tuple[str, dict[str, Any]]] = {
    "exponential": ("ExponentialDecay", {"initial_learning_rate": 0.1, "decay_steps": 5,
                                         "decay_rate": 0.7}),
    "exponential_staircase": ("ExponentialDecay", {"initial_learning_rate": 0.1,
                                                   "decay_steps": 5, "decay_rate": 0.7,
                                                   "staircase": True}),
    "piecewise": ("PiecewiseConstantDecay", {"boundaries": [3, 9, 14],
                                             "values": [1.0, 0.5, 0.25, 0.125]}),
    "polynomial": ("PolynomialDecay", {"initial_learning_rate": 0.1, "decay_steps": 12,
                                       "end_learning_rate": 0.01, "power": 2.0}),
    "polynomial_cycle": ("PolynomialDecay", {"initial_learning_rate": 0.1, "decay_steps": 6,
                                             "end_learning_rate": 0.01, "cycle": True}),
    "inverse_time": ("InverseTimeDecay", {"initial_learning_rate": 0.1, "decay_steps": 4,
                                          "decay_rate": 0.5}),
    "inverse_time_staircase": ("InverseTimeDecay", {"initial_learning_rate": 0.1,
                                                    "decay_steps": 4, "decay_rate": 0.5,
                                                    "staircase": True}),
    "cosine": ("CosineDecay", {"initial_learning_rate": 0.1, "decay_steps": 15,
                               "alpha": 0.1}),
    "cosine_warmup": ("CosineDecay", {"initial_learning_rate": 0.0, "decay_steps": 12,
                                      "warmup_target": 0.1, "warmup_steps": 5}),
    "cosine_restarts": ("CosineDecayRestarts", {"initial_learning_rate": 0.1,
                                                "first_decay_steps": 4, "t_mul": 2.0,
                                                "m_mul": 0.8, "alpha": 0.05}),
    "cosine_restarts_tmul1": ("CosineDecayRestarts", {"initial_learning_rate": 0.1,
                                                      "first_decay_steps": 5, "t_mul": 1.0}),
}
SCHEDULE_STEPS = 24


def start(name: str) -> list[float]:
    """The variable's first values, flattened."""
    n = math.prod(SHAPES[name])
    offset = 0.0 if name == "kernel" else 0.5
    return [math.cos(0.9 * i + offset) for i in range(n)]


def gradient(name: str, step: int) -> list[float]:
    """The variable's gradient at ``step``, flattened (some large, some small elements)."""
    n = math.prod(SHAPES[name])
    offset = 0.0 if name == "kernel" else 1.7
    return [2.5 * math.sin(1.3 * i + 0.7 * step + offset) * (1 + (i % 2)) for i in range(n)]


def main() -> None:
    import keras
    import numpy as np

    def schedule(spec: Any) -> Any:
        if isinstance(spec, tuple):
            cls, kwargs = spec
            return getattr(keras.optimizers.schedules, cls)(**kwargs)
        return spec

    out: dict[str, Any] = {"keras": keras.__version__, "optimizers": {}, "schedules": {}}
    for case, (cls, kwargs, exclude) in CASES.items():
        variables = [keras.Variable(np.array(start(n)).reshape(SHAPES[n]), dtype="float64",
                                    name=n) for n in SHAPES]
        args = {k: schedule(v) for k, v in kwargs.items()}
        opt = getattr(keras.optimizers, cls)(**args)
        if exclude:
            opt.exclude_from_weight_decay(var_names=exclude)
        opt.build(variables)
        steps = []
        for step in range(STEPS):
            grads = [np.array(gradient(n, step)).reshape(SHAPES[n]) for n in SHAPES]
            opt.apply_gradients(zip(grads, variables))
            steps.append({n: np.asarray(v.numpy()).ravel().tolist()
                          for n, v in zip(SHAPES, variables)})
        record: dict[str, Any] = {"steps": steps}
        if kwargs.get("use_ema"):
            opt.finalize_variable_values(variables)
            record["finalized"] = {n: np.asarray(v.numpy()).ravel().tolist()
                                   for n, v in zip(SHAPES, variables)}
        out["optimizers"][case] = record
    for name, (cls, kwargs) in SCHEDULES.items():
        fn = getattr(keras.optimizers.schedules, cls)(**kwargs)
        out["schedules"][name] = [float(fn(step)) for step in range(SCHEDULE_STEPS)]
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "keras_optimizers.json")
    with open(path, "w") as f:
        json.dump(out, f, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
