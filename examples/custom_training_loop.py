"""The seeds' custom training loop (tf.distribute style), on distrib.

TensorFlow original, in short::

    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        model = make_model(); optimizer = tf.keras.optimizers.Adam()
    dist_ds = strategy.experimental_distribute_dataset(ds.batch(GLOBAL_BATCH))
    @tf.function
    with strategy.scope():
        loss_object = tf.keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction=tf.keras.losses.Reduction.NONE)
        train_accuracy = tf.keras.metrics.SparseCategoricalAccuracy()
    @tf.function
    def train_step(x, y): ... tf.nn.compute_average_loss(loss_object(y, pred), GLOBAL_BATCH) ...
    for x, y in dist_ds: strategy.run(train_step, args=(x, y))
    print(train_accuracy.result())

Run: ``python examples/custom_training_loop.py [--replicas 2] [--epochs 3]``.  With two
replicas the program starts its second replica process itself.  Under TF_CONFIG (or
``distrib run --cluster worker=2 examples/custom_training_loop.py --multi-worker``) it
uses MultiWorkerMirroredStrategy.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

import distrib
from distrib.datasets import digits


def make_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 5 * 5, 64), nn.ReLU(), nn.Linear(64, 10))


def main() -> float:
    ap = argparse.ArgumentParser()
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--multi-worker", action="store_true")
    args = ap.parse_args()

    if args.multi_worker:
        strategy: distrib.Strategy = distrib.MultiWorkerMirroredStrategy()
    else:
        strategy = distrib.MirroredStrategy(devices=[f"cpu:{i}" for i in range(args.replicas)])
    global_batch = 32 * strategy.num_replicas_in_sync

    (x_train, y_train), (x_test, y_test) = digits.load_data(data_format="channels_first")
    train = (distrib.data.Dataset.from_tensor_slices((x_train, y_train))
             .shuffle(len(x_train), seed=0).batch(global_batch))
    test = distrib.data.Dataset.from_tensor_slices((x_test, y_test)).batch(global_batch)
    dist_train = strategy.experimental_distribute_dataset(train)
    dist_test = strategy.experimental_distribute_dataset(test)

    torch.manual_seed(0)
    with strategy.scope():  # the seeds' pattern: model, optimizer, loss and metrics here
        model = make_cnn()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        # A Keras loss in a custom loop: reduction NONE, then the global-batch average.
        loss_object = distrib.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                                   reduction="none")
        train_accuracy = distrib.metrics.SparseCategoricalAccuracy(name="train_accuracy")
        test_accuracy = distrib.metrics.SparseCategoricalAccuracy(name="test_accuracy")
        test_loss = distrib.metrics.Mean(name="test_loss")

    def compute_loss(labels: torch.Tensor, predictions: torch.Tensor) -> torch.Tensor:
        per_example = loss_object(labels, predictions)
        return distrib.compute_average_loss(per_example, global_batch_size=global_batch)

    def train_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        predictions = model(x)
        loss = compute_loss(y, predictions)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        train_accuracy.update_state(y, predictions.detach())
        return loss.detach()

    def test_step(x: torch.Tensor, y: torch.Tensor) -> None:
        with torch.no_grad():
            predictions = model(x)
        test_loss.update_state(loss_object(y, predictions))
        test_accuracy.update_state(y, predictions)

    accuracy = 0.0
    for epoch in range(args.epochs):
        total, batches = 0.0, 0
        for x, y in dist_train:
            per_replica_loss = strategy.run(train_step, args=(x, y))
            total += float(strategy.reduce("sum", per_replica_loss, axis=None))
            batches += 1
        for x, y in dist_test:
            strategy.run(test_step, args=(x, y))
        # Metrics created in the scope hold global values once strategy.run returns:
        # reading them on the chief alone is safe.
        accuracy = float(test_accuracy.result())
        if strategy.extended.should_save_summary:
            print(f"epoch {epoch + 1}: loss {total / batches:.4f}, "
                  f"accuracy {float(train_accuracy.result()):.4f}, "
                  f"test loss {float(test_loss.result()):.4f}, test accuracy {accuracy:.4f}")
        for metric in (train_accuracy, test_accuracy, test_loss):
            metric.reset_state()
    return accuracy

if __name__ == "__main__":
    main()
