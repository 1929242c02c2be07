"""The seeds' MLP and CNN trained under a sharded strategy, a custom loop and fit (oracle contract).

Usage: python sharded_oracle.py KIND OUT.pt
KIND: oracle | sharded | model_parallel | data_parallel
  oracle          one process on the global batch, no strategy
  sharded         ShardedStrategy over two local CPU replicas (mesh data=2, FSDP2)
  sharded_workers ShardedStrategy over two TF_CONFIG workers
  model_parallel  distrib.distribution.ModelParallel on a (batch=1, model=2) mesh: the
                  Linear layers column/row parallel over "model"
  data_parallel   distrib.distribution.DataParallel over two local CPU processes
  model_parallel_2x2  ModelParallel on a (batch=2, model=2) mesh of four processes
Each trains, in float64, 10 steps of a global batch of 16 rows whose last batch has 7
(split 4 + 3), with SGD (momentum) and with Adam, in a custom loop over
``experimental_distribute_dataset`` and with ``Model.fit``, and saves every final
parameter and optimizer slot (chief only).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from program_helpers import cnn, mlp, save_results
from torch import nn

import distrib

GLOBAL_BATCH, ROWS = 16, 9 * 16 + 7


#: Layouts of the model-parallel run: torch dims (a Linear's weight is [out, in]).
LAYOUTS: dict[str, dict[str, tuple[str | None, ...]]] = {
    "mlp": {"1.weight": ("model", None), "3.weight": (None, "model"),
            "5.weight": ("model", None)},
    "cnn": {"7.weight": ("model", None), "9.weight": (None, "model")},
}


def data() -> tuple[np.ndarray, np.ndarray]:
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(ROWS, 1, 28, 28, generator=g, dtype=torch.float64)
    y = torch.randint(0, 10, (ROWS,), generator=g)
    return x.numpy(), y.numpy()


def make_optimizer(kind: str, params: object) -> torch.optim.Optimizer:
    if kind == "sgd":
        return torch.optim.SGD(params, lr=0.05, momentum=0.9)  # type: ignore[arg-type]
    return torch.optim.Adam(params, lr=1e-3)  # type: ignore[arg-type]


def custom_loop(strategy: distrib.Strategy, scope: Callable[[], Any],
                build: Callable[[], nn.Module], opt_kind: str
                ) -> tuple[nn.Module, torch.optim.Optimizer]:
    with scope():
        net = build().double()
        opt = make_optimizer(opt_kind, net.parameters())
    x, y = data()
    dataset = distrib.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)
    dist_ds = strategy.experimental_distribute_dataset(dataset)

    def step(xb: torch.Tensor, yb: torch.Tensor, rows: int) -> torch.Tensor:
        per_example = nn.functional.cross_entropy(net(xb), yb, reduction="none")
        loss = distrib.compute_average_loss(per_example, global_batch_size=rows)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    for i, (xb, yb) in enumerate(dist_ds):
        rows = GLOBAL_BATCH if i < 9 else ROWS - 9 * GLOBAL_BATCH
        strategy.reduce("sum", strategy.run(step, args=(xb, yb, rows)), axis=None)
    return net, opt


def fit(strategy: distrib.Strategy, scope: Callable[[], Any],
        build: Callable[[], nn.Module], opt_kind: str
        ) -> tuple[nn.Module, torch.optim.Optimizer]:
    with scope():
        model = distrib.Model(build().double())
    opt = make_optimizer(opt_kind, model.parameters())
    model.compile(optimizer=opt,
                  loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = data()
    model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=1, shuffle=False, verbose=0)
    return model.module, opt


def held_fraction(net: nn.Module, opt: torch.optim.Optimizer) -> float:
    """The fraction of the parameters' and optimizer slots' elements this process holds."""
    def sizes(t: torch.Tensor) -> tuple[int, int]:
        local = t.to_local() if hasattr(t, "to_local") else t
        return local.numel(), t.numel()
    tensors = [*net.parameters(), *[v for slots in opt.state.values() for v in slots.values()
                                    if isinstance(v, torch.Tensor) and v.dim() > 0]]
    held, total = map(sum, zip(*(sizes(t) for t in tensors)))
    return held / total


def make_strategy(kind: str, model: str) -> tuple[distrib.Strategy, Callable[[], Any]]:
    """The strategy and the scope modules are created in."""
    if kind == "sharded":
        strategy = distrib.experimental.ShardedStrategy(devices=["cpu:0", "cpu:1"],
                                                        min_unit_params=10_000)
        return strategy, strategy.scope
    if kind == "sharded_workers":  # the cluster from TF_CONFIG, as for MWMS
        strategy = distrib.ShardedStrategy(min_unit_params=10_000)
        return strategy, strategy.scope
    if kind in ("model_parallel", "data_parallel", "model_parallel_2x2"):
        from distrib import distribution
        wide = kind == "model_parallel_2x2"
        devices = distribution.list_devices("cpu", count=4 if wide else 2)
        if kind == "data_parallel":
            dist = distribution.DataParallel(devices=devices)
        else:
            mesh = distribution.DeviceMesh((2, 2) if wide else (1, 2), ("batch", "model"),
                                           devices)
            layout_map = distribution.LayoutMap(mesh)
            for key, axes in LAYOUTS[model].items():
                layout_map[key] = axes
            dist = distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch")
        return dist.strategy, dist.scope
    return distrib.get_strategy(), contextlib.nullcontext


def main() -> None:
    kind, out = sys.argv[1], sys.argv[2]
    results: dict[str, torch.Tensor] = {}
    strategy = None
    for model, build in (("mlp", mlp), ("cnn", cnn)):
        if strategy is None or kind.startswith("model_parallel"):
            strategy, scope = make_strategy(kind, model)
        rid = strategy.extended.replica_group.replica_id
        for opt_kind in ("sgd", "adam"):
            for loop_name, loop in (("custom", custom_loop), ("fit", fit)):
                torch.manual_seed(1000 * rid)  # the chief's values must reach every replica
                net, opt = loop(strategy, scope, build, opt_kind)
                prefix = f"{model}/{opt_kind}/{loop_name}"
                if (model, opt_kind, loop_name) == ("mlp", "adam", "custom"):
                    print(f"replica {rid} holds {held_fraction(net, opt):.3f} of the "
                          "parameters and optimizer state", flush=True)
                for k, v in strategy.extended.module_state_dict(net).items():
                    results[f"{prefix}/{k}"] = v.detach().clone()
                state = strategy.extended.optimizer_state_dict(opt)["state"]
                for pid, slots in state.items():
                    for name, v in slots.items():
                        if name != "step":
                            results[f"{prefix}/opt/{pid}/{name}"] = v.detach().clone()
    assert strategy is not None
    save_results(strategy, results, out)


if __name__ == "__main__":
    main()
