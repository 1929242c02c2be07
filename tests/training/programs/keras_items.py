"""Class weights, running out of data and missing targets, run unchanged on one or two replicas.

Usage: python keras_items.py MODE OUT
MODE: oracle (one process) | mirrored (MirroredStrategy over two CPU replicas)

1. ``class_weight`` with ``sample_weight`` and ``weighted_metrics``: a float64 model
   trained with SGD on arrays (batches of 6 out of 20: partial batches) and on a
   batched dataset; histories and final weights.
2. A dataset of 4 batches with ``steps_per_epoch=2`` and ``epochs=4``: the data ends at
   the start of epoch 3.  ``ModelCheckpoint(save_best_only=True)``, ``CSVLogger`` and the
   history record what the epochs that ran logged.
3. Missing targets: ``evaluate(x)``, ``fit(validation_data=x)`` and batches without
   targets raise Keras' error on every replica; ``Model.load`` of a file saved with
   another optimizer warns and keeps the compiled optimizer.

Writes OUT.rank<id> (torch.save of a dict) on every replica.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

import distrib
from distrib.data import Dataset
from distrib.errors import UsageError
from distrib.training import Model, callbacks, losses

CLASS_WEIGHT = {0: 1.0, 1: 5.0, 2: 0.5}


def make_model(strategy: distrib.Strategy) -> Model:
    torch.manual_seed(0)
    if strategy.num_replicas_in_sync > 1 and not strategy.extended.should_checkpoint:
        torch.manual_seed(123)  # the broadcast from the chief must fix it
    with strategy.scope():
        model = Model(nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 3)).double())
        sgd = torch.optim.SGD(model.module.parameters(), lr=0.1)
        model.compile(sgd, losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"], weighted_metrics=["accuracy"])
    return model


def data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.RandomState(seed)
    y = rng.randint(0, 3, n)
    x = rng.randn(n, 3) + np.eye(3)[y]
    return x, y.astype("int64"), rng.uniform(0.5, 2.0, n)


def class_weights(strategy: distrib.Strategy) -> dict[str, Any]:
    x, y, sw = data(20, 1)
    vx, vy, _ = data(8, 2)
    arrays = make_model(strategy)
    h_arrays = arrays.fit(x, y, sample_weight=sw, class_weight=CLASS_WEIGHT, batch_size=6,
                          epochs=2, shuffle=False, validation_data=(vx, vy), verbose=0)
    streamed = make_model(strategy)
    ds = Dataset.from_tensor_slices((x, y, sw)).batch(6)
    h_stream = streamed.fit(ds, class_weight=CLASS_WEIGHT, epochs=2, verbose=0)
    return {"arrays": h_arrays.history, "stream": h_stream.history,
            "arrays_weights": [torch.from_numpy(w) for w in arrays.get_weights()],
            "stream_weights": [torch.from_numpy(w) for w in streamed.get_weights()]}


def run_out(strategy: distrib.Strategy, directory: Path) -> dict[str, Any]:
    x, y, _ = data(16, 3)
    model = make_model(strategy)
    ds = Dataset.from_tensor_slices((x, y)).batch(4)  # 4 global batches
    checkpoint = callbacks.ModelCheckpoint(str(directory / "ckpt-{epoch}.pt"), monitor="loss",
                                           save_best_only=True, save_weights_only=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history = model.fit(ds, steps_per_epoch=2, epochs=4, verbose=2,
                            callbacks=[checkpoint, callbacks.CSVLogger(str(directory / "log"))])
    return {"history": history.history, "epochs": history.epoch,
            "best": float(checkpoint.best),
            "warned": any("ran out of data" in str(w.message) for w in caught)}


def missing_targets(strategy: distrib.Strategy, directory: Path) -> dict[str, Any]:
    x, y, _ = data(8, 4)
    model = make_model(strategy)
    said: dict[str, str] = {}
    calls = {"evaluate(x)": lambda: model.evaluate(x, verbose=0),
             "validation_data=x": lambda: model.fit(x, y, validation_data=x, verbose=0),
             "batches of x": lambda: model.fit(Dataset.from_tensor_slices(x).batch(4),
                                               verbose=0)}
    for name, call in calls.items():
        try:
            call()
            said[name] = "no error"
        except UsageError as e:
            said[name] = str(e)
    model.save(str(directory / "sgd.pt"))
    adam = make_model(strategy)
    with strategy.scope():
        adam.compile("adam", losses.SparseCategoricalCrossentropy(from_logits=True))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        adam.load(str(directory / "sgd.pt"))
    group = adam.optimizer.param_groups[0]
    return {"said": said, "load_warnings": [str(w.message) for w in caught],
            "adam_after_load": [group["lr"], list(group["betas"])]}


def main() -> None:
    mode, out = sys.argv[1], sys.argv[2]
    strategy = distrib.MirroredStrategy(devices=["cpu:0", "cpu:1"]) if mode == "mirrored" \
        else distrib.get_strategy()
    directory = Path(out + ".files")
    os.makedirs(directory, exist_ok=True)
    result = {"class_weights": class_weights(strategy),
              "run_out": run_out(strategy, directory),
              "missing_targets": missing_targets(strategy, directory),
              "files": sorted(os.listdir(directory))}
    rid = strategy.extended.replica_group.replica_id
    if rid == 0:
        result["csv"] = (directory / "log").read_text()
    torch.save(result, f"{out}.rank{rid}")
    print(f"done replicas={strategy.num_replicas_in_sync}", flush=True)


if __name__ == "__main__":
    main()
