"""Transfer learning with frozen layers, the Keras way, on two replicas.

TensorFlow original, in short::

    with strategy.scope():
        model = tf.keras.Sequential([base, head])
        base.trainable = False
        model.compile(optimizer="adam", loss=loss, metrics=["accuracy"])
        model.fit(train, epochs=1)                      # train the head
        base.trainable = True                           # fine-tune everything
        model.compile(optimizer=tf.keras.optimizers.Adam(3e-4), loss=loss, metrics=[...])
        model.fit(train, epochs=1)

The base is first trained on the digits 0-4 only (standing in for a pretrained
network); the head is then trained on all ten digits with the base frozen, and the
whole network fine-tuned.  What trains changes after the scope created the model:
every replica rebuilds its gradient reducer and stays identical (each prints a
checksum of its weights).

Run: ``python examples/transfer_learning.py``.
"""

from __future__ import annotations

import torch
from torch import nn

import distrib
from distrib.datasets import digits


def main() -> None:
    strategy = distrib.MirroredStrategy(devices=["cpu:0", "cpu:1"])
    (x_train, y_train), (x_test, y_test) = digits.load_data(data_format="channels_first")
    first_half = y_train < 5
    loss = distrib.losses.SparseCategoricalCrossentropy(from_logits=True)
    torch.manual_seed(0)
    with strategy.scope():
        base = nn.Sequential(nn.Conv2d(1, 16, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(16 * 13 * 13, 64), nn.ReLU())
        head = nn.Linear(64, 10)
        model = distrib.Model(nn.Sequential(base, head))
        model.compile(optimizer="adam", loss=loss)
        model.fit(x_train[first_half], y_train[first_half], batch_size=64, epochs=5,
                  verbose=0)
        base.trainable = False                      # train the head on every digit
        model.compile(optimizer="adam", loss=loss, metrics=["accuracy"])
        model.fit(x_train, y_train, batch_size=64, epochs=5, verbose=0)
        _, head_only = model.evaluate(x_test, y_test, verbose=0)
        base.trainable = True                       # fine-tune everything
        model.compile(optimizer=torch.optim.Adam(model.parameters(), lr=3e-4), loss=loss,
                      metrics=["accuracy"])
        model.fit(x_train, y_train, batch_size=64, epochs=3, verbose=0)
        _, accuracy = model.evaluate(x_test, y_test, verbose=0)
    checksum = sum(float(p.detach().double().sum()) for p in model.parameters())
    replica = strategy.extended.replica_group.replica_id
    print(f"replica {replica} weights checksum {checksum:.12e}", flush=True)
    if strategy.extended.should_save_summary:
        print(f"head only: test accuracy {head_only:.4f}; fine-tuned: test accuracy "
              f"{accuracy:.4f}")


if __name__ == "__main__":
    main()
