"""One custom training loop, run unchanged under every strategy (oracle contract).

Usage: python custom_loop.py STRATEGY OUT.pt [STEPS]
STRATEGY: one_device | mirrored | central_storage | multi_worker | oracle
Trains the seeds' MLP (784-256-128-10) and CNN (Conv32-Pool-Conv64-Pool-Dense64-Dense10)
in float64 and float32 for STEPS steps on a synthetic global batch of 16 per step and
saves every final parameter (chief only).  ``oracle`` trains the same models in one
process on the global batch, without any strategy.
"""

from __future__ import annotations

import sys

import torch
from program_helpers import cnn, make_strategy, mlp, save_results
from torch import nn

import distrib

GLOBAL_BATCH = 16


def data(steps: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(steps * GLOBAL_BATCH, 1, 28, 28, generator=g).to(dtype)
    y = torch.randint(0, 10, (steps * GLOBAL_BATCH,), generator=g)
    return x, y


def train(strategy: distrib.Strategy, build: type | object, dtype: torch.dtype,
          steps: int) -> dict[str, torch.Tensor]:
    # Replicas start from different random values: the chief's must be broadcast to all.
    rid = strategy.experimental_local_results(
        strategy.experimental_distribute_values_from_function(
            lambda c: c.replica_id_in_sync_group))[0]
    torch.manual_seed(1000 * rid)
    with strategy.scope():
        net = build().to(dtype)  # type: ignore[operator]
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    x, y = data(steps, dtype)
    replicas = strategy.num_replicas_in_sync
    per_replica = GLOBAL_BATCH // replicas

    def train_step(xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        per_example = nn.functional.cross_entropy(net(xb), yb, reduction="none")
        loss = distrib.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    for step in range(steps):
        start = step * GLOBAL_BATCH

        def shard(ctx: distrib.ValueContext, t: torch.Tensor, start: int = start) -> torch.Tensor:
            lo = start + ctx.replica_id_in_sync_group * per_replica
            return t[lo:lo + per_replica]

        xb = strategy.experimental_distribute_values_from_function(lambda c: shard(c, x))
        yb = strategy.experimental_distribute_values_from_function(lambda c: shard(c, y))
        per_replica_loss = strategy.run(train_step, args=(xb, yb))
        strategy.reduce("sum", per_replica_loss, axis=None)
    return {k: v.detach().clone() for k, v in net.state_dict().items()}


def main() -> None:
    kind, out = sys.argv[1], sys.argv[2]
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    strategy = make_strategy(kind)
    results = {}
    for name, build in (("mlp", mlp), ("cnn", cnn)):
        for dtype in (torch.float64, torch.float32):
            params = train(strategy, build, dtype, steps)
            for k, v in params.items():
                results[f"{name}/{str(dtype)[6:]}/{k}"] = v
    save_results(strategy, results, out)


if __name__ == "__main__":
    main()
