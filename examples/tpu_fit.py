"""The TPU seed program: the seeds' CNN on handwritten digits under ``TPUStrategy``.

The TensorFlow seed with ``tf`` renamed to ``distrib``: resolve the TPU, connect,
initialise the TPU system, make the strategy, build and compile the model in its
scope, ``fit`` with ``steps_per_execution`` and the ``mixed_bfloat16`` policy.  It
needs torch_xla (``pip install 'distrib[tpu]'``).  On a TPU VM::

    PJRT_DEVICE=TPU python examples/tpu_fit.py

On any machine, four virtual XLA devices on the CPU::

    PJRT_DEVICE=CPU CPU_NUM_DEVICES=4 python examples/tpu_fit.py --epochs 2
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn

import distrib
from distrib.datasets import digits

PER_REPLICA_BATCH = 16


def build_cnn() -> nn.Module:
    """The seeds' CNN: Conv32-Pool-Conv64-Pool-Dense64-Dense10 on 28x28x1 images."""
    return nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 5 * 5, 64), nn.ReLU(), nn.Linear(64, 10))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--tpu", default="local")
    args = ap.parse_args()
    start = time.perf_counter()

    resolver = distrib.cluster.TPUClusterResolver(tpu=args.tpu)
    distrib.config.experimental_connect_to_cluster(resolver)
    distrib.tpu.experimental.initialize_tpu_system(resolver)
    strategy = distrib.TPUStrategy(resolver)
    print(f"Number of TPU devices: {strategy.num_replicas_in_sync}")

    distrib.mixed_precision.set_global_policy("mixed_bfloat16")
    global_batch = PER_REPLICA_BATCH * strategy.num_replicas_in_sync
    (x_train, y_train), (x_test, y_test) = digits.load_data(data_format="channels_first")
    torch.manual_seed(0)
    with strategy.scope():
        model = distrib.Model(build_cnn())
        model.compile(optimizer="adam",
                      loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"], steps_per_execution=8)
    model.fit(x_train, y_train, batch_size=global_batch, epochs=args.epochs, verbose=2)
    loss, accuracy = model.evaluate(x_test, y_test, batch_size=global_batch, verbose=0)
    print(f"Test loss: {loss:.4f} - Test accuracy: {accuracy:.4f} "
          f"({len(x_test)} images, {time.perf_counter() - start:.0f}s in all)")


if __name__ == "__main__":
    main()
