"""The Estimator the parameter-server programs train (``ps_program.py``, and
``tests/launch/programs/estimator_ps.py``): 64 examples of 5 float64 features and 3
classes, a 5-8-3 tanh network, cross-entropy, SGD with momentum, accuracy evaluated.
With ``PS_MODEL_LOSS_SCALE=1`` in the environment the optimizer is wrapped in a dynamic
``LossScaleOptimizer`` (2**10, doubling after 1000 finite steps: its counter counts the
finite steps; float64 and a power of two: the same updates).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch
from torch import nn

import distrib
from distrib.estimator import EstimatorSpec, ModeKeys, metrics

rng = np.random.RandomState(0)
X = rng.randn(64, 5)
Y = rng.randint(0, 3, 64)


def input_fn(mode: str) -> Any:
    ds = distrib.data.Dataset.from_tensor_slices((torch.from_numpy(X), torch.from_numpy(Y)))
    return (ds.repeat() if mode == ModeKeys.TRAIN else ds).batch(8)


def model_fn(features: Any, labels: Any, mode: str) -> EstimatorSpec:
    net = nn.Sequential(nn.Linear(5, 8, dtype=torch.float64), nn.Tanh(),
                        nn.Linear(8, 3, dtype=torch.float64))
    logits = net(features)
    if mode == ModeKeys.PREDICT:
        return EstimatorSpec(mode, predictions={"logits": logits})
    loss = nn.functional.cross_entropy(logits, labels)
    optimizer: Any = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    if os.environ.get("PS_MODEL_LOSS_SCALE") == "1":
        optimizer = distrib.mixed_precision.LossScaleOptimizer(
            optimizer, initial_scale=2.0 ** 10, dynamic_growth_steps=1000)
    return EstimatorSpec(mode, loss=loss, train_op=optimizer, eval_metric_ops={
        "accuracy": metrics.accuracy(labels, logits.argmax(1))})
