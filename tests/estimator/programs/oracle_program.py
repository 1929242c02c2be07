"""Estimator.train and evaluate, float64 SGD, under one device / 2 local replicas / 2 workers.

    python oracle_program.py one_device|mirrored|multi_worker OUT MODEL_DIR

Trains 10 steps, then a second ``train`` over a whole epoch whose last step is a partial
batch split unevenly (6 examples: 4 + 2 or 3 + 3), then evaluates on 37 examples (last
batch partial) with the training strategy; the chief writes the final parameters (read
back through ``get_variable_value``), the metrics and every replica's predictions (the
same, as prediction is not distributed) to OUT.
"""

from __future__ import annotations

import sys

import numpy as np
import torch
from torch import nn

import distrib
from distrib.estimator import Estimator, EstimatorSpec, ModeKeys, RunConfig, metrics

GLOBAL_BATCH = 8
rng = np.random.RandomState(0)
X_TRAIN = rng.randn(126, 5)
Y_TRAIN = rng.randint(0, 3, 126)
X_EVAL = rng.randn(37, 5)
Y_EVAL = rng.randint(0, 3, 37)


def make_input_fn(x: np.ndarray, y: np.ndarray):  # type: ignore[no-untyped-def]
    def input_fn(mode, input_context=None):  # type: ignore[no-untyped-def]
        ds = distrib.data.Dataset.from_tensor_slices((torch.from_numpy(x), torch.from_numpy(y)))
        if input_context is not None and input_context.num_input_pipelines > 1:
            ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        per_replica = (input_context.get_per_replica_batch_size(GLOBAL_BATCH)
                       if input_context is not None else GLOBAL_BATCH)
        return ds.batch(per_replica)
    return input_fn


def model_fn(features, labels, mode):  # type: ignore[no-untyped-def]
    net = nn.Sequential(nn.Linear(5, 16, dtype=torch.float64), nn.Tanh(),
                        nn.Linear(16, 3, dtype=torch.float64))
    logits = net(features)
    classes = logits.argmax(dim=1)
    if mode == ModeKeys.PREDICT:
        return EstimatorSpec(mode, predictions={"classes": classes, "logits": logits})
    loss = nn.functional.cross_entropy(logits, labels)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    probability = torch.softmax(logits, dim=1)[:, 1]
    return EstimatorSpec(mode, loss=loss, train_op=optimizer, eval_metric_ops={
        "accuracy": metrics.accuracy(labels, classes),
        "auc": metrics.auc((labels == 1).long(), probability),
        "mean_logit": metrics.mean(logits),
        "keras_accuracy": _keras_accuracy(labels, logits),
    })


def _keras_accuracy(labels, logits):  # type: ignore[no-untyped-def]
    metric = distrib.metrics.SparseCategoricalAccuracy()
    metric.update_state(labels, logits)
    return metric


def main() -> None:
    kind, out, model_dir = sys.argv[1], sys.argv[2], sys.argv[3]
    torch.manual_seed(0)
    if kind == "one_device":
        strategy = None
    elif kind == "mirrored":
        strategy = distrib.MirroredStrategy(devices=["cpu:0", "cpu:1"])
    else:
        strategy = distrib.MultiWorkerMirroredStrategy()
    config = RunConfig(tf_random_seed=7, save_checkpoints_steps=4, train_distribute=strategy,
                       eval_distribute=strategy, log_step_count_steps=5)
    estimator = Estimator(model_fn, model_dir=model_dir, config=config)
    estimator.train(make_input_fn(X_TRAIN, Y_TRAIN), steps=10)
    estimator.train(make_input_fn(X_TRAIN, Y_TRAIN))
    result = estimator.evaluate(make_input_fn(X_EVAL, Y_EVAL))
    logits = np.stack([p["logits"] for p in estimator.predict(make_input_fn(X_EVAL, Y_EVAL))])
    chief = strategy is None or strategy.extended.should_checkpoint
    if chief:
        params = {name: torch.from_numpy(np.asarray(estimator.get_variable_value(name)))
                  for name in estimator.get_variable_names()}
        torch.save({"params": params, "eval": result, "logits": torch.from_numpy(logits)}, out)
    replicas = 1 if strategy is None else strategy.num_replicas_in_sync
    print(f"done replicas={replicas} step={result['global_step']}")


if __name__ == "__main__":
    main()
