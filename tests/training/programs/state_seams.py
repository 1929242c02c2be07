"""Every state load of a sharded model goes through the strategy's state-dict seams.

Usage: python state_seams.py DIR

ShardedStrategy over 2 CPU replicas (each parameter sharded): model A's full state is
saved with ``save_weights``, ``save`` and ``distrib.Checkpoint``; freshly built models
B (``load_weights``), C (``Model.load``), D (``distrib.models.load_model``) and E (an
Estimator warm start's ``warm_start``) load it; each one's full state (gathered through
``extended.module_state_dict``) must equal A's bit for bit.  Then a compiled model
trained one step with Adam is saved with ``save`` and loaded by ``Model.load`` and
``load_model`` into models trained differently: Adam's moments must come back whole
(``optimizer_load``, ``optimizer_load_model``).  The chief writes DIR/report.json with
the largest difference per path.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from torch import nn

import distrib
from distrib.estimator import WarmStartSettings
from distrib.estimator.warm_start import warm_start


def build() -> nn.Module:
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 4)).double()


def full(strategy: distrib.Strategy, net: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in strategy.extended.module_state_dict(net).items()}


def worst(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert set(a) == set(b), sorted(set(a) ^ set(b))
    assert all(a[k].shape == b[k].shape for k in a), {k: (a[k].shape, b[k].shape) for k in a}
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def optimizer_state(strategy: distrib.Strategy, model: distrib.Model
                    ) -> dict[str, torch.Tensor]:
    assert isinstance(model.optimizer, torch.optim.Optimizer)
    state = strategy.extended.optimizer_state_dict(model.optimizer)["state"]
    return {f"{k}/{n}": torch.as_tensor(v).detach().clone().double()
            for k, slots in state.items() for n, v in slots.items()}


def optimizer_paths(strategy: distrib.Strategy, folder: Path) -> dict[str, float]:
    x = torch.randn(8, 6, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    y = torch.randn(8, 4, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    torch.manual_seed(5)
    with strategy.scope():
        a = distrib.Model(build())
        a.compile(optimizer="adam", loss="mse")
    a.fit(x, y, batch_size=8, epochs=1, verbose=0)
    a.save(str(folder / "trained.pt"))
    expected = optimizer_state(strategy, a)
    out: dict[str, float] = {}
    for path in ("load", "load_model"):
        torch.manual_seed(6)
        with strategy.scope():
            if path == "load_model":
                model = distrib.models.load_model(str(folder / "trained.pt"))
            else:
                model = distrib.Model(build())
                model.compile(optimizer="adam", loss="mse")
                model.fit(x * 2, y, batch_size=8, epochs=1, verbose=0)  # other moments
                model.load(str(folder / "trained.pt"))
        out[f"optimizer_{path}"] = worst(optimizer_state(strategy, model), expected)
    return out


def main() -> None:
    folder = Path(sys.argv[1])
    strategy = distrib.experimental.ShardedStrategy(devices=["cpu:0", "cpu:1"],
                                                    min_unit_params=1)
    replicas = strategy.num_replicas_in_sync
    torch.manual_seed(3)
    with strategy.scope():
        a = distrib.Model(build())
    expected = full(strategy, a._net())
    a.save_weights(str(folder / "w.pt"))
    a.save(str(folder / "m.pt"))
    with strategy.scope():
        checkpoint = distrib.Checkpoint(net=a._net())
    ckpt = checkpoint.save(str(folder / "ckpt"))

    report: dict[str, float | int] = {"replicas": replicas}
    for path in ("load_weights", "load", "load_model", "warm_start"):
        torch.manual_seed(11)  # other initial values than A's
        with strategy.scope():
            if path == "load_model":
                model = distrib.models.load_model(str(folder / "m.pt"), compile=False)
            else:
                model = distrib.Model(build())
        before = worst(full(strategy, model._net()), expected)
        if path == "load_weights":
            model.load_weights(str(folder / "w.pt"))
        elif path == "load":
            model.load(str(folder / "m.pt"))
        elif path == "warm_start":
            copied = warm_start(WarmStartSettings(ckpt, vars_to_warm_start=".*"),
                                {"net": model._net()}, strategy.extended)
            assert copied == 4, copied
        report[path] = worst(full(strategy, model._net()), expected)
        report[f"{path}_before"] = before
    report.update(optimizer_paths(strategy, folder))
    if strategy.extended.should_checkpoint:
        (folder / "report.json").write_text(json.dumps(report))
    print(f"loaded replicas={replicas}", flush=True)


if __name__ == "__main__":
    main()
