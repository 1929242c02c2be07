"""Fully sharded data parallelism: the seeds' CNN trained with ``fit`` under ShardedStrategy.

``distrib.experimental.ShardedStrategy`` is FSDP2 (ZeRO-3) behind the tf.distribute API:
each of the two CPU replicas holds half of every parameter, of its gradient and of Adam's
moments; parameters are gathered just before each unit's forward and freed after it.
Everything else is as under ``MirroredStrategy`` — the script re-launches itself as its
second replica, ``fit`` splits each global batch, only the chief prints — and the
checkpoint it writes holds full tensors, so any strategy (or one process) restores it::

    python examples/sharded_fit.py [--epochs 2] [--out ckpt_dir]
"""

from __future__ import annotations

import argparse
import tempfile

import torch
from torch import nn

import distrib
from distrib.datasets import digits

GLOBAL_BATCH = 64


def build_cnn() -> nn.Module:
    """The seeds' CNN: Conv32-Pool-Conv64-Pool-Dense64-Dense10 on 28x28x1 images."""
    return nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 5 * 5, 64), nn.ReLU(), nn.Linear(64, 10))


def held(model: distrib.Model) -> tuple[int, int]:
    """Parameter and optimizer-state elements this replica holds, and their full count."""
    tensors = [*model.parameters(), *[v for slots in model.optimizer.state.values()
                                      for v in slots.values() if v.dim() > 0]]
    local = sum((t.to_local() if hasattr(t, "to_local") else t).numel() for t in tensors)
    return local, sum(t.numel() for t in tensors)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--out", default=None, help="checkpoint directory (default: a temporary one)")
    args = ap.parse_args()

    strategy = distrib.experimental.ShardedStrategy(devices=["cpu:0", "cpu:1"],
                                                    min_unit_params=10_000)
    chief = strategy.extended.should_save_summary
    (x_train, y_train), (x_test, y_test) = digits.load_data(data_format="channels_first")
    torch.manual_seed(0)
    with strategy.scope():
        model = distrib.Model(build_cnn())
        model.compile(optimizer="adam",
                      loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    model.fit(x_train, y_train, batch_size=GLOBAL_BATCH, epochs=args.epochs,
              verbose=2 if chief else 0)
    loss, accuracy = model.evaluate(x_test, y_test, batch_size=256, verbose=0)
    local, total = held(model)
    rid = strategy.extended.replica_group.replica_id
    print(f"replica {rid} holds {local} of {total} parameter and Adam elements "
          f"({local / total:.2f})", flush=True)

    out = args.out or tempfile.mkdtemp(prefix="sharded-fit-")
    with strategy.scope():
        checkpoint = distrib.Checkpoint(model=model)
    path = checkpoint.save(f"{out}/ckpt")
    if chief:
        print(f"Test loss: {loss:.4f} - Test accuracy: {accuracy:.4f}")
        print(f"Checkpoint (full tensors, restorable anywhere): {path}")


if __name__ == "__main__":
    main()
