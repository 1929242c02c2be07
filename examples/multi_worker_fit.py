"""The seeds' multi-worker Keras program: ``MultiWorkerMirroredStrategy`` + ``fit`` via TF_CONFIG.

TensorFlow original, in short::

    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": [...]},
                                          "task": {"type": "worker", "index": i}})
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = build_and_compile_cnn_model()
    model.fit(multi_worker_dataset, epochs=3, steps_per_epoch=70)

Run every worker with its own TF_CONFIG, or let distrib start them all on this machine::

    distrib run --cluster "worker=2" examples/multi_worker_fit.py --epochs 3
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

import distrib
from distrib.datasets import digits


def build_and_compile_cnn_model() -> distrib.Model:
    model = distrib.Model(nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 5 * 5, 64), nn.ReLU(), nn.Linear(64, 10)))
    model.compile(optimizer=torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                  loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=3)
    args = ap.parse_args()
    strategy = distrib.MultiWorkerMirroredStrategy()
    per_worker_batch = 32
    global_batch = per_worker_batch * strategy.num_replicas_in_sync
    (x_train, y_train), (x_test, y_test) = digits.load_data(data_format="channels_first")
    dataset = (distrib.data.Dataset.from_tensor_slices((x_train, y_train))
               .shuffle(len(x_train), seed=0).batch(global_batch))
    torch.manual_seed(0)
    with strategy.scope():
        model = build_and_compile_cnn_model()
        history = model.fit(dataset, epochs=args.epochs, verbose=2)
        _, accuracy = model.evaluate(x_test, y_test, batch_size=global_batch, verbose=0)
    if strategy.extended.should_save_summary:
        print(f"workers={strategy.num_replicas_in_sync} "
              f"final loss={history.history['loss'][-1]:.4f} test accuracy={accuracy:.4f}")


if __name__ == "__main__":
    main()
