"""A custom training loop with ``ParameterServerStrategy`` and ``ClusterCoordinator``.

TensorFlow's tutorial loop, translated: variables are created in the strategy's
scope on the chief and live on the ``ps`` tasks; each worker builds its own input
pipeline (``create_per_worker_dataset``); ``schedule`` queues one training step
that runs on whichever worker is free; ``join`` waits for all of them::

    distrib run --cluster chief=1,worker=2,ps=1 examples/parameter_server_custom_loop.py

The step function is an ordinary Python function (TensorFlow requires a
``tf.function``): it travels to the worker by value, over the cluster's
authenticated channel, the first time and whenever it is scheduled.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

import distrib
from distrib.coordinator import ClusterCoordinator
from distrib.datasets import digits

PER_WORKER_BATCH = 64


def dataset_fn(input_context: distrib.InputContext) -> distrib.data.Dataset:
    """Runs on every worker: the whole training set, shuffled its own way, forever."""
    (x, y), _ = digits.load_data(data_format="channels_first")
    batch = input_context.get_per_replica_batch_size(PER_WORKER_BATCH)
    return distrib.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x)).batch(batch).repeat()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--steps-per-epoch", type=int, default=40)
    args = ap.parse_args()
    strategy = distrib.ParameterServerStrategy(
        variable_partitioner=distrib.MinSizePartitioner(min_shard_bytes=64 << 10,
                                                        max_shards=2))
    torch.manual_seed(0)
    with strategy.scope():
        model = nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    coordinator = ClusterCoordinator(strategy)
    per_worker_iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))

    def step_fn(iterator: object) -> tuple[torch.Tensor, torch.Tensor]:
        def replica_fn(batch: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor,
                                                                            torch.Tensor]:
            x, y = batch
            logits = model(x)
            per_example = nn.functional.cross_entropy(logits, y, reduction="none")
            loss = distrib.compute_average_loss(per_example, global_batch_size=len(y))
            loss.backward()
            optimizer.step()          # pushes the gradients to the ps tasks
            optimizer.zero_grad()
            return loss.detach(), (logits.argmax(1) == y).sum()

        loss, correct = strategy.run(replica_fn, args=(next(iterator),))  # type: ignore[call-overload]
        return loss, correct

    for epoch in range(args.epochs):
        results = [coordinator.schedule(step_fn, args=(per_worker_iterator,))
                   for _ in range(args.steps_per_epoch)]
        coordinator.join()
        losses, corrects = zip(*(r.fetch() for r in results))
        accuracy = float(sum(corrects)) / (len(corrects) * PER_WORKER_BATCH)
        print(f"epoch {epoch}: loss {sum(losses) / len(losses):.4f} accuracy {accuracy:.4f}")
    placement = strategy.extended.variable_placement(model)
    print("placement:", {name: v.tasks for name, v in placement.items()})
    (_, _), (x_test, y_test) = digits.load_data(data_format="channels_first")
    with torch.no_grad():   # join() left the latest values in the chief's module
        test_accuracy = (model(torch.as_tensor(x_test)).argmax(1) ==
                         torch.as_tensor(y_test)).float().mean()
    print(f"test accuracy {float(test_accuracy):.4f}")


if __name__ == "__main__":
    main()
