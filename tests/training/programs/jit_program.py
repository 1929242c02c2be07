"""jit_compile vs eager on 1 or 2 replicas; the chief prints one JSON line.

Usage: python jit_program.py REPLICAS BACKEND
Trains the seeds' CNN (small) in float64 twice from the same start — eagerly and
compiled with BACKEND — first with a ``distrib.function`` custom-loop step under
``strategy.run``, then with ``Model.fit(jit_compile=BACKEND)`` (a partial last batch
included), and reports the largest parameter difference and the graphs compiled
after each step / epoch.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import torch
from torch import nn

import distrib

GLOBAL_BATCH = 16
STEPS = 6


def cnn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(4 * 3 * 3, 10))


def data(rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    return (torch.randn(rows, 1, 8, 8, generator=g, dtype=torch.float64),
            torch.randint(0, 10, (rows,), generator=g))


def params(net: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in net.state_dict().items()}


def custom_loop(strategy: distrib.Strategy, jit: Any) -> tuple[dict[str, torch.Tensor], list[int]]:
    torch.manual_seed(0)
    with strategy.scope():
        net = cnn().double()
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    x, y = data(STEPS * GLOBAL_BATCH)
    dist = strategy.experimental_distribute_dataset(
        distrib.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH))

    @distrib.function(jit_compile=jit)
    def step(xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        per_example = nn.functional.cross_entropy(net(xb), yb, reduction="none")
        loss = distrib.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach()

    counts = []
    for xb, yb in dist:
        strategy.run(step, args=(xb, yb))
        counts.append(step.experimental_get_tracing_count())
    return params(net), counts


def fit(strategy: distrib.Strategy, jit: Any) -> tuple[dict[str, torch.Tensor], list[int]]:
    torch.manual_seed(0)
    with strategy.scope():
        model = distrib.Model(cnn().double())
        model.compile(optimizer=torch.optim.SGD(model.module.parameters(), lr=0.1),
                      loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"], jit_compile=jit)
    x, y = data(5 * GLOBAL_BATCH + 6)
    counts = []
    for _ in range(3):
        model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=1, shuffle=False, verbose=0)
        compiled = model._compiled_call
        counts.append(compiled.graphs if compiled is not None else 0)
    return params(model.module), counts


def diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max((a[k] - b[k]).abs().max().item() for k in a)


def main() -> None:
    replicas, backend = int(sys.argv[1]), sys.argv[2]
    strategy = (distrib.MirroredStrategy(devices=[f"cpu:{i}" for i in range(replicas)])
                if replicas > 1 else distrib.OneDeviceStrategy("cpu:0"))
    eager_loop, _ = custom_loop(strategy, None)
    jit_loop, loop_counts = custom_loop(strategy, backend)
    eager_fit, _ = fit(strategy, False)
    jit_fit, fit_counts = fit(strategy, backend)
    if strategy.extended.should_checkpoint:
        print(json.dumps({"replicas": strategy.num_replicas_in_sync,
                          "loop_diff": diff(eager_loop, jit_loop), "loop_counts": loop_counts,
                          "fit_diff": diff(eager_fit, jit_fit), "fit_counts": fit_counts}))


if __name__ == "__main__":
    main()
