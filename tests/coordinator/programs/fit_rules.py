"""Model.fit / evaluate / predict under ParameterServerStrategy: TF's rules (run on every task)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

import distrib


def main() -> None:
    strategy = distrib.ParameterServerStrategy()
    rng = np.random.RandomState(0)
    x = rng.rand(256, 8).astype("float32")
    y = (x.sum(1) > 4).astype("int64")
    dataset = distrib.data.Dataset.from_tensor_slices((x, y)).batch(32)
    with strategy.scope():
        model = distrib.Model(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)))
        model.compile(optimizer="adam", metrics=["accuracy"],
                      loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True))
    out: dict[str, object] = {}
    for key, call in {
            "no_steps_dataset": lambda: model.fit(dataset.repeat(), epochs=1),
            "no_steps_arrays": lambda: model.fit(x, y, epochs=1),
            "verbose_1": lambda: model.fit(dataset.repeat(), steps_per_epoch=2, verbose=1),
            "validation_freq_0": lambda: model.fit(x, y, steps_per_epoch=2, validation_freq=0),
            "evaluate_no_steps": lambda: model.evaluate(dataset)}.items():
        try:
            call()
        except ValueError as exc:
            out[key] = str(exc)
    epochs_seen: list[int] = []
    history = model.fit(x, y, batch_size=32, epochs=3, steps_per_epoch=8, verbose=0,
                        validation_data=dataset, validation_steps=4,
                        callbacks=[distrib.callbacks.LambdaCallback(
                            on_epoch_end=lambda epoch, logs: epochs_seen.append(epoch))])
    out["history_keys"] = sorted(history.history)
    out["epochs_seen"] = epochs_seen
    out["loss_falls"] = history.history["loss"][-1] < history.history["loss"][0]
    out["evaluate_steps"] = model.evaluate(dataset, steps=3, verbose=0)
    model.compile(optimizer="adam", metrics=["accuracy"], pss_evaluation_shards=3,
                  loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True))
    exact = model.evaluate(dataset, verbose=0, return_dict=True)
    preds = model.predict(x, batch_size=64, verbose=0)   # on the chief
    out["exact_accuracy_matches_predict"] = abs(
        exact["accuracy"] - float((preds.argmax(1) == y).mean())) < 1e-6
    out["predict_shape"] = list(preds.shape)
    Path(sys.argv[1]).write_text(json.dumps(out))


if __name__ == "__main__":
    torch.manual_seed(0)
    main()
