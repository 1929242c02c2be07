"""GPU scenarios (NCCL, CUDA placement, device prefetch, mixed precision, jit_compile).

Usage: python gpu_program.py SCENARIO; the chief prints one JSON line.
SCENARIO:
  mirrored   MirroredStrategy() over every local GPU (NCCL), custom loop in float64 vs
             one process on the global batch on cuda:0
  placement  OneDeviceStrategy("gpu:0"): module, distributed-dataset batches and fit
             batches on cuda:0; the iterator holds the next batch on the GPU already
  mixed      fit under mixed_float16 (loss scaling) and mixed_bfloat16 on cuda:0
  jit        Model.fit(jit_compile=True) (inductor, triton) vs eager on cuda:0
"""

from __future__ import annotations

import json
import sys
from typing import Any

import torch
from torch import nn

import distrib

GLOBAL_BATCH = 64


def cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 5 * 5, 64), nn.ReLU(), nn.Linear(64, 10))


def data(rows: int, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    return (torch.randn(rows, 1, 28, 28, generator=g).to(dtype),
            torch.randint(0, 10, (rows,), generator=g))


def params(net: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu().clone() for k, v in net.state_dict().items()}


def diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max((a[k] - b[k]).abs().max().item() for k in a)


def train_loop(strategy: Any, steps: int = 8) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    with strategy.scope():
        net = cnn().double()
        opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    x, y = data(steps * GLOBAL_BATCH + 10, torch.float64)        # a partial last batch
    dist = strategy.experimental_distribute_dataset(
        distrib.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH))

    def step(xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        loss = nn.functional.cross_entropy(net(xb), yb, reduction="sum") / GLOBAL_BATCH
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    for xb, yb in dist:
        strategy.run(step, args=(xb, yb))
    return params(net)


def oracle(steps: int = 8) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    net = cnn().double().cuda()
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    x, y = data(steps * GLOBAL_BATCH + 10, torch.float64)
    for s in range(0, len(x), GLOBAL_BATCH):
        xb, yb = x[s:s + GLOBAL_BATCH].cuda(), y[s:s + GLOBAL_BATCH].cuda()
        (nn.functional.cross_entropy(net(xb), yb, reduction="sum") / GLOBAL_BATCH).backward()
        opt.step()
        opt.zero_grad()
    return params(net)


def scenario_mirrored() -> dict[str, Any] | None:
    strategy = distrib.MirroredStrategy()
    got = train_loop(strategy)
    if not strategy.extended.should_checkpoint:
        return None
    import torch.distributed as dist
    backend = dist.get_backend() if dist.is_initialized() else "none"
    return {"replicas": strategy.num_replicas_in_sync, "gpus": torch.cuda.device_count(),
            "backend": str(backend), "diff": diff(oracle(), got),
            "devices": list(strategy.extended.worker_devices)}


def scenario_placement() -> dict[str, Any]:
    strategy = distrib.OneDeviceStrategy("gpu:0")
    with strategy.scope():
        model = distrib.Model(cnn())
        model.compile(optimizer="sgd", loss=distrib.losses.SparseCategoricalCrossentropy(
            from_logits=True))
    x, y = data(4 * GLOBAL_BATCH)
    dist = strategy.experimental_distribute_dataset(
        distrib.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH))
    it = iter(dist)
    xb, _ = next(it)
    # The iterator keeps the next batch already copied to the GPU (from pinned memory).
    staged = [str(b[0].device) for b in list(getattr(it, "_staged", []))]
    seen: list[str] = []
    model.module[0].register_forward_pre_hook(lambda m, a: seen.append(str(a[0].device)))
    history = model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=1, verbose=0)
    return {"param_device": str(next(model.module.parameters()).device),
            "batch_device": str(xb.device), "fit_batch_device": seen[0],
            "staged": staged, "loss": history.history["loss"]}


def fit_mixed(policy: str) -> dict[str, Any]:
    distrib.mixed_precision.set_global_policy(policy)
    strategy = distrib.OneDeviceStrategy("gpu:0")
    torch.manual_seed(0)
    with strategy.scope():
        model = distrib.Model(cnn())
        model.compile(optimizer="adam", loss=distrib.losses.SparseCategoricalCrossentropy(
            from_logits=True))
    inner: list[str] = []
    model.module[-1].register_forward_hook(lambda m, i, o: inner.append(str(o.dtype)))
    x, y = data(8 * GLOBAL_BATCH)
    history = model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=3, verbose=0)
    opt = model.optimizer
    distrib.mixed_precision.set_global_policy("float32")
    return {"loss": history.history["loss"], "inner_dtype": inner[0],
            "optimizer": type(opt).__name__,
            "loss_scale": float(getattr(opt, "loss_scale", 0.0))}


def scenario_mixed() -> dict[str, Any]:
    return {"float16": fit_mixed("mixed_float16"), "bfloat16": fit_mixed("mixed_bfloat16")}


def scenario_jit() -> dict[str, Any]:
    def fit(jit: bool) -> tuple[dict[str, torch.Tensor], list[int]]:
        strategy = distrib.OneDeviceStrategy("gpu:0")
        torch.manual_seed(0)
        with strategy.scope():
            model = distrib.Model(cnn())
            model.compile(optimizer=torch.optim.SGD(model.module.parameters(), lr=0.05),
                          loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True),
                          jit_compile=jit)
        x, y = data(6 * GLOBAL_BATCH + 10)
        counts = []
        for _ in range(3):
            model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=1, shuffle=False, verbose=0)
            counts.append(model._compiled_call.graphs if model._compiled_call else 0)
        return params(model.module), counts

    eager, _ = fit(False)
    compiled, counts = fit(True)
    return {"diff": diff(eager, compiled), "counts": counts}


if __name__ == "__main__":
    scenarios = {"mirrored": scenario_mirrored, "placement": scenario_placement,
                 "mixed": scenario_mixed, "jit": scenario_jit}
    result = scenarios[sys.argv[1]]()
    if result is not None:
        print(json.dumps(result))
