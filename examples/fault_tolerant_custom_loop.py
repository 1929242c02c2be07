"""The seeds' exercise, custom-loop style: distributed training that recovers from worker failures.

TensorFlow original, in short::

    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, iterator=iterator)
    manager = tf.train.CheckpointManager(checkpoint, directory, max_to_keep=3)
    handler = tf.distribute.experimental.PreemptionCheckpointHandler(resolver, manager)
    while handler.total_run_calls < TOTAL_STEPS:
        handler.run(distributed_train_step, next(iterator))
        manager.save()      # every `checkpoint_interval` steps

Run it under a launcher that restarts the workers when one dies::

    distrib run --cluster "worker=2" --max-restarts 2 examples/fault_tolerant_custom_loop.py \\
        --checkpoint-dir runs/ckpt --out runs/final.npz

The checkpoint holds the model, the optimizer, the data iterator's position, the step
counter and every replica's random generators.  After any failure the restarted workers
restore the newest complete checkpoint (a half-written one is skipped) and continue
with the same batches: the final weights are bitwise those of an uninterrupted run.
A SIGTERM to any worker makes every worker save at the same step and exit with
status 42, which the launcher also answers with a restart.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch
from torch import nn

import distrib
from distrib.datasets import digits


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--checkpoint-dir", default="runs/ckpt")
    ap.add_argument("--checkpoint-interval", type=int, default=5)
    ap.add_argument("--out", default=None, help="write the final weights here (.npz)")
    ap.add_argument("--trace", action="store_true", help="print the pid and every step")
    ap.add_argument("--step-seconds", type=float, default=0.0,
                    help="pause after every step (to stand in for a bigger model)")
    args = ap.parse_args()

    strategy = distrib.MultiWorkerMirroredStrategy()
    global_batch = 32 * strategy.num_replicas_in_sync
    (x_train, y_train), _ = digits.load_data(data_format="channels_first")
    dataset = (distrib.data.Dataset.from_tensor_slices((x_train.astype(np.float64), y_train))
               .shuffle(len(x_train), seed=0).repeat().batch(global_batch))
    iterator = iter(strategy.experimental_distribute_dataset(dataset))

    torch.manual_seed(0)
    with strategy.scope():
        model = nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 64), nn.ReLU(),
                              nn.Dropout(0.2), nn.Linear(64, 10)).double()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        step = torch.tensor(0)
        checkpoint = distrib.Checkpoint(model=model, optimizer=optimizer, iterator=iterator,
                                        step=step, rng=distrib.checkpoint.RNGState())
    manager = distrib.CheckpointManager(checkpoint, args.checkpoint_dir, max_to_keep=3,
                                        step_counter=step,
                                        checkpoint_interval=args.checkpoint_interval)
    # Restores the newest checkpoint (if any) now, and saves at an agreed step on SIGTERM.
    handler = distrib.PreemptionCheckpointHandler(strategy.cluster_resolver, manager)
    if args.trace:
        print(f"pid {os.getpid()}", flush=True)

    def train_step(batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        per_example = nn.functional.cross_entropy(model(x), y, reduction="none")
        loss = distrib.compute_average_loss(per_example, global_batch_size=global_batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss

    def distributed_train_step(batch: tuple[torch.Tensor, torch.Tensor]) -> float:
        loss = strategy.run(train_step, args=(batch,))
        step.add_(1)  # inside the step: a preemption save right after it counts it
        return float(strategy.reduce("sum", loss, axis=None))

    loss = float("nan")
    while handler.total_run_calls < args.steps:
        loss = handler.run(distributed_train_step, next(iterator))
        manager.save()  # writes only every --checkpoint-interval steps
        if args.trace:
            time.sleep(args.step_seconds)
            print(f"step {int(step)}", flush=True)
    if strategy.extended.should_checkpoint:
        print(f"workers={strategy.num_replicas_in_sync} steps={int(step)} "
              f"final loss={loss:.6f}", flush=True)
        if args.out:
            np.savez(args.out, *[t.detach().numpy() for t in model.state_dict().values()])


if __name__ == "__main__":
    main()
