"""Tensor (model) parallelism with ``tf.keras.distribution``'s API: ``distrib.distribution``.

The Keras 3 program, in short::

    devices = keras.distribution.list_devices()
    mesh = keras.distribution.DeviceMesh((1, 2), ["batch", "model"], devices)
    layout_map = keras.distribution.LayoutMap(mesh)
    layout_map["dense.*kernel"] = (None, "model")
    keras.distribution.set_distribution(
        keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch"))
    model = make_model(); model.compile(...); model.fit(...)

Here the keys are torch parameter paths and the axes torch's dimensions (a Linear's weight
is ``[out, in]``): the first hidden layer is split by output features over the two
processes of the ``model`` axis (torch's ColwiseParallel), the second by input features
(RowwiseParallel), so each process holds half of those weights and of Adam's moments.
The script re-launches itself as its second process::

    python examples/model_parallel_fit.py [--epochs 2]
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

import distrib
from distrib import distribution
from distrib.datasets import digits


def build_mlp() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 512), nn.ReLU(),
                         nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=2)
    args = ap.parse_args()

    devices = distribution.list_devices("cpu", count=2)
    mesh = distribution.DeviceMesh((1, 2), ("batch", "model"), devices)
    layout_map = distribution.LayoutMap(mesh)
    layout_map[r"^1\.weight$"] = ("model", None)   # column parallel: outputs split
    layout_map[r"^1\.bias$"] = ("model",)
    layout_map[r"^3\.weight$"] = (None, "model")   # row parallel: inputs split
    distribution.set_distribution(
        distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch"))
    strategy = distrib.get_strategy()  # the distribution's: fit, checkpoints, ... use it
    chief = strategy.extended.should_save_summary

    (x_train, y_train), (x_test, y_test) = digits.load_data(data_format="channels_first")
    torch.manual_seed(0)
    model = distrib.Model(build_mlp())
    model.compile(optimizer="adam",
                  loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    model.fit(x_train, y_train, batch_size=64, epochs=args.epochs, verbose=2 if chief else 0)
    loss, accuracy = model.evaluate(x_test, y_test, batch_size=256, verbose=0)
    weight = model.module[1].weight
    rid = strategy.extended.replica_group.replica_id
    print(f"process {rid} holds {tuple(weight.to_local().shape)} of the first layer's "
          f"{tuple(weight.shape)} weight", flush=True)
    if chief:
        print(f"Test loss: {loss:.4f} - Test accuracy: {accuracy:.4f}")


if __name__ == "__main__":
    main()
