"""A small regression Estimator shared by the single-process tests."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensorboard.backend.event_processing import event_accumulator
from torch import nn

import distrib
from distrib.estimator import EstimatorSpec, ModeKeys, metrics

RNG = np.random.RandomState(0)
X = RNG.rand(40, 4).astype("float32")
Y = (X @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32")).astype("float32")


def input_fn(batch: int = 8, repeat: bool = False) -> Any:
    def fn(mode: str, input_context: Any = None) -> Any:
        ds = distrib.data.Dataset.from_tensor_slices(({"x": X}, Y))
        return (ds.repeat() if repeat else ds).batch(batch)
    return fn


def model_fn(features: Any, labels: Any, mode: str) -> EstimatorSpec:
    net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    predictions = net(features["x"])
    if mode == ModeKeys.PREDICT:
        return EstimatorSpec(mode, predictions={"y": predictions,
                                                "twice": 2 * predictions})
    loss = nn.functional.mse_loss(predictions, labels)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    return EstimatorSpec(mode, loss=loss, train_op=optimizer, eval_metric_ops={
        "mae": metrics.mean_absolute_error(labels, predictions)})


def read_events(directory: Any) -> event_accumulator.EventAccumulator:
    acc = event_accumulator.EventAccumulator(str(directory), size_guidance={
        event_accumulator.SCALARS: 0, event_accumulator.TENSORS: 0})
    acc.Reload()
    return acc
