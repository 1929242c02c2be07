"""A checkpoint written by 2 shards, restored on other topologies (DCP, full tensors).

Usage: python sharded_checkpoint.py PHASE DIR
PHASE:
  save              ShardedStrategy over 2 CPU replicas: 4 Adam steps, distrib.Checkpoint
                    save, then 3 more steps; writes DIR/expected.pt (the state saved and the
                    parameters after the 3 steps)
  sharded | sharded3 | model_parallel | mirrored | one
                    restore DIR's checkpoint under ShardedStrategy (2 or 3 shards),
                    ModelParallel (batch=1 x model=2), MirroredStrategy (2) or one process
                    without a strategy, check the restored state, take the same 3 steps; writes
                    DIR/<PHASE>.json with the largest differences
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

import distrib

GLOBAL_BATCH = 12  # divisible by 1, 2 and 3 replicas


def build() -> nn.Module:
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 4)).double()


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + step)
    return (torch.randn(GLOBAL_BATCH, 6, generator=g, dtype=torch.float64),
            torch.randint(0, 4, (GLOBAL_BATCH,), generator=g))


def make(phase: str) -> tuple[distrib.Strategy, Any]:
    if phase in ("save", "sharded"):
        strategy = distrib.experimental.ShardedStrategy(devices=["cpu:0", "cpu:1"],
                                                        min_unit_params=1)
        return strategy, strategy.scope
    if phase == "sharded3":
        strategy = distrib.experimental.ShardedStrategy(
            devices=["cpu:0", "cpu:1", "cpu:2"], min_unit_params=1)
        return strategy, strategy.scope
    if phase == "model_parallel":
        from distrib import distribution
        mesh = distribution.DeviceMesh((1, 2), ("batch", "model"),
                                       distribution.list_devices("cpu", count=2))
        layout_map = distribution.LayoutMap(mesh)
        layout_map["0.weight"] = ("model", None)
        layout_map["2.weight"] = (None, "model")
        dist = distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch")
        return dist.strategy, dist.scope
    if phase == "mirrored":
        strategy = distrib.MirroredStrategy(devices=["cpu:0", "cpu:1"])
        return strategy, strategy.scope
    strategy = distrib.get_strategy()
    return strategy, strategy.scope


def train(strategy: distrib.Strategy, net: nn.Module, opt: torch.optim.Optimizer,
          steps: range) -> None:
    replicas = strategy.num_replicas_in_sync

    def step_fn(x: torch.Tensor, y: torch.Tensor) -> None:
        per_example = nn.functional.cross_entropy(net(x), y, reduction="none")
        distrib.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH).backward()
        opt.step()
        opt.zero_grad()

    for step in steps:
        x, y = batch(step)

        strategy.run(step_fn, args=(
            strategy.experimental_distribute_values_from_function(_part(x, replicas)),
            strategy.experimental_distribute_values_from_function(_part(y, replicas))))


def _part(t: torch.Tensor, replicas: int) -> Any:
    """This replica's rows of a global batch."""
    n = GLOBAL_BATCH // replicas
    return lambda ctx: t[ctx.replica_id_in_sync_group * n:(ctx.replica_id_in_sync_group + 1) * n]


def full_state(strategy: distrib.Strategy, net: nn.Module,
               opt: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    out = {f"param/{k}": v.detach().clone()
           for k, v in strategy.extended.module_state_dict(net).items()}
    for pid, slots in strategy.extended.optimizer_state_dict(opt)["state"].items():
        for name, v in slots.items():
            out[f"opt/{pid}/{name}"] = torch.as_tensor(v).detach().clone()
    return out


def main() -> None:
    phase, folder = sys.argv[1], Path(sys.argv[2])
    strategy, scope = make(phase)
    rid = strategy.extended.replica_group.replica_id
    torch.manual_seed(7 + rid)  # differs on purpose: the chief's values must win
    with scope():
        net = build()
        opt = torch.optim.Adam(net.parameters(), lr=0.01)
    with strategy.scope():
        checkpoint = distrib.Checkpoint(model=net, optimizer=opt)
    if phase == "save":
        train(strategy, net, opt, range(4))
        saved = full_state(strategy, net, opt)
        path = checkpoint.save(str(folder / "ckpt"))
        train(strategy, net, opt, range(4, 7))
        after = full_state(strategy, net, opt)
        if strategy.extended.should_checkpoint:
            torch.save({"saved": saved, "after": after, "path": path}, folder / "expected.pt")
        print(f"saved replicas={strategy.num_replicas_in_sync}", flush=True)
        return
    expected = torch.load(folder / "expected.pt", weights_only=False)
    checkpoint.restore(expected["path"]).assert_consumed()
    restored = full_state(strategy, net, opt)
    train(strategy, net, opt, range(4, 7))
    after = full_state(strategy, net, opt)

    def worst(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
        assert set(a) == set(b), sorted(set(a) ^ set(b))
        return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)

    report = {"restored": worst(restored, expected["saved"]),
              "after": worst(after, expected["after"]),
              "replicas": strategy.num_replicas_in_sync}
    if strategy.extended.should_checkpoint:
        (folder / f"{phase}.json").write_text(json.dumps(report))
    print(f"restored replicas={strategy.num_replicas_in_sync}", flush=True)


if __name__ == "__main__":
    main()
