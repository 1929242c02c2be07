"""What the benchmarks share: the seeds' two models, their synthetic data, one custom-loop
training step, and pinning a replica's threads to one CPU.

The scripts of bench/ import it as ``bench_common`` (Python puts the script's folder on
``sys.path``).  torch and distrib are imported only where used: ``bench_fit.py`` runs
this module's helpers in a TensorFlow environment too.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

WARMUP = 10


def build(model: str) -> Any:
    """The seeds' MLP (784-256-128-10) or CNN (Conv32-Pool-Conv64-Pool-Dense64-Dense10)."""
    from torch import nn

    if model == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                             nn.ReLU(), nn.Linear(128, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(64 * 5 * 5, 64), nn.ReLU(), nn.Linear(64, 10))


def images(steps: int, batch: int, channels_last: bool = False
           ) -> tuple[np.ndarray, np.ndarray]:
    """Synthetic 28x28x1 images and 10-class labels for ``WARMUP + steps`` batches."""
    rng = np.random.RandomState(0)
    n = (steps + WARMUP) * batch
    x = rng.rand(n, 28, 28, 1) if channels_last else rng.rand(n, 1, 28, 28)
    return x.astype("float32"), rng.randint(0, 10, n).astype("int64")


def train_step(net: Any, opt: Any, global_batch: int) -> Callable[[Any, Any], Any]:
    """A replica step of a custom loop: cross-entropy on logits averaged over the global
    batch (``distrib.compute_average_loss``), backward, the optimizer's step."""
    from torch import nn

    import distrib

    def step(xb: Any, yb: Any) -> Any:
        loss = distrib.compute_average_loss(
            nn.functional.cross_entropy(net(xb), yb, reduction="none"),
            global_batch_size=global_batch)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()
    return step


def pin(rank: int) -> None:
    """Pin every thread of this process (the engine's included) to one CPU (``BENCH_PIN=1``).

    Called once the contender's process group exists, on both sides: gloo's worker
    threads then share their replica's CPU in either contender (threads started later
    inherit the CPU from the thread that starts them).  ``BENCH_CPU`` offsets the CPU
    (side by side: the other one).
    """
    if os.environ.get("BENCH_PIN") == "1" and hasattr(os, "sched_setaffinity"):
        cpus = sorted(os.sched_getaffinity(0))
        offset = int(os.environ.get("BENCH_CPU", "0"))
        cpu = {cpus[(rank + offset) % len(cpus)]}
        for task in os.listdir("/proc/self/task"):
            os.sched_setaffinity(int(task), cpu)


def mirrored_replica(replicas: int) -> tuple[Any, int]:
    """This process's ``MirroredStrategy`` over ``replicas`` CPU replicas and its replica id,
    the process pinned (:func:`pin`) and torch's seed set to 0."""
    import torch

    import distrib

    strategy = (distrib.MirroredStrategy(devices=[f"cpu:{i}" for i in range(replicas)])
                if replicas > 1 else distrib.MirroredStrategy())
    rank = int(strategy.extended.replica_group.replica_id)
    pin(rank)
    torch.manual_seed(0)
    return strategy, rank


def raw_steps(net: Any, opt: Any, x: Any, y: Any, batch: int, rows: tuple[int, int]
              ) -> Callable[[int, int], None]:
    """The raw contenders' loop: ``loop(first, count)`` trains on this process's ``rows``
    ``[lo, hi)`` of global batches ``first .. first + count - 1`` of ``x`` and ``y``."""
    from torch import nn

    lo, hi = rows

    def loop(first: int, count: int) -> None:
        for i in range(first, first + count):
            part = slice(i * batch + lo, i * batch + hi)
            loss = nn.functional.cross_entropy(net(x[part]), y[part])
            loss.backward()
            opt.step()
            opt.zero_grad()
    return loop
