"""The cost of the replicas' data check: fingerprinting a global batch, against a step.

Replicas that split one input pipeline compare a fingerprint of the global batch
(``distrib.input.digest``) on the first step of each epoch and on steps 1, 2, 4, 8, ...
after it, inside the step's agreement on rows (no collective of its own).  This
measures, in one process with one thread, for the seeds' CNN
(Conv32-Pool-Conv64-Pool-Dense64-Dense10) on 28x28x1 images, global batch 64:

* the fingerprint of one global batch (images and labels), median of ``--repeats``;
* one training step of one replica of two (32 rows: forward, backward, SGD step);
* the fingerprint's share of an epoch of ``--epoch-steps`` steps (60000 / 64 by
  default), which fingerprints ``1 + floor(log2(steps - 1)) + 1`` of them.

    python bench/bench_digest.py [--repeats 200] [--epoch-steps 938]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch
from torch import nn

from distrib.input.digest import checked_step, digest_of


def cnn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(64 * 5 * 5, 64), nn.ReLU(), nn.Linear(64, 10))


def timed(fn: object, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--epoch-steps", type=int, default=938)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    x, y = torch.rand(64, 1, 28, 28), torch.randint(0, 10, (64,))
    model = cnn()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step() -> None:
        loss = nn.functional.cross_entropy(model(x[:32]), y[:32])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(10):
        step()
    digest = timed(lambda: digest_of((x, y)), args.repeats)
    one_step = timed(step, max(20, args.repeats // 4))
    checked = sum(checked_step(s, 0) for s in range(args.epoch_steps))
    share = digest * checked / (one_step * args.epoch_steps)
    print(f"fingerprint of a global batch (64x1x28x28 float32 + labels): {digest * 1e6:.0f} us")
    print(f"one CNN training step of a replica (32 rows):                {one_step * 1e3:.2f} ms")
    print(f"  = {digest / one_step:.2%} of a step on a fingerprinted step")
    print(f"fingerprinted steps per epoch of {args.epoch_steps}: {checked} "
          f"(1 + floor(log2({args.epoch_steps - 1})) + 1 = "
          f"{1 + math.floor(math.log2(args.epoch_steps - 1)) + 1})")
    print(f"  = {share:.4%} of the epoch's step time")


if __name__ == "__main__":
    main()
