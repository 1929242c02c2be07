"""Loss scaling on two replicas: an inf on one replica skips the step on both, at no extra cost.

Usage: python lso_replicas.py MODE OUT
MODE: replicated   gradients from ``backward`` (DDP sums them during the backward pass)
      local        gradients from ``torch.autograd.grad`` assigned to ``.grad`` (TF's
                   ``tape.gradient``): they stay local until the optimizer step sums them

Each replica trains a linear layer with a ``LossScaleOptimizer`` around a fused SGD inside
``strategy.run``; at step 3 only replica 1's loss is inf.  It counts, per step, the calls
of every ``torch.distributed`` collective and every read of a tensor into Python (a host
synchronisation on an accelerator), for a loss-scaled step and for a plain SGD step, and
writes them with the scale, the skipped steps and the final weights to OUT.rank<id> (JSON).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from typing import Any

import torch
import torch.distributed as dist

import distrib
from distrib.mixed_precision import LossScaleOptimizer

COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "broadcast", "barrier",
               "reduce_scatter", "reduce_scatter_tensor", "all_to_all", "gather", "scatter",
               "reduce", "all_gather_object", "broadcast_object_list", "send", "recv")
HOST_READS = ("item", "tolist", "numpy", "__bool__", "__float__", "__int__")
counts: Counter[str] = Counter()


def count_calls(owner: Any, name: str, label: str) -> None:
    original = getattr(owner, name)

    def counting(*args: Any, **kwargs: Any) -> Any:
        counts[label] += 1
        return original(*args, **kwargs)
    setattr(owner, name, counting)


def main() -> None:
    mode, out = sys.argv[1], sys.argv[2]
    strategy = distrib.MirroredStrategy(devices=["cpu:0", "cpu:1"])
    rid = strategy.extended.replica_group.replica_id
    torch.manual_seed(0)
    with strategy.scope():
        net = torch.nn.Linear(4, 2)
    sgd = torch.optim.SGD(net.parameters(), lr=0.1, fused=True)

    def backward(loss: torch.Tensor) -> None:
        if mode == "replicated":
            loss.backward()
            return
        params = list(net.parameters())
        for p, g in zip(params, torch.autograd.grad(loss, params)):
            p.grad = g
    opt = LossScaleOptimizer(sgd)
    x = torch.full((2, 4), float(rid + 1))

    def scaled_step(bad: bool) -> None:
        loss = net(x).pow(2).mean() * (float("inf") if bad else 1.0)
        backward(opt.get_scaled_loss(loss))
        opt.step()
        opt.zero_grad()

    def plain_step() -> None:
        backward(net(x).pow(2).mean())
        sgd.step()
        sgd.zero_grad()

    skipped = []
    for _ in range(3):  # warm-up: DDP rebuilds its buckets in the first iterations
        strategy.run(scaled_step, args=(False,))
        skipped.append(opt.last_step_skipped)
        strategy.run(plain_step)
    for name in COLLECTIVES:
        if hasattr(dist, name):
            count_calls(dist, name, "collective")
    for name in HOST_READS:
        count_calls(torch.Tensor, name, "host_read")
    per_step: dict[str, dict[str, int]] = {}
    before_inf: list[torch.Tensor] = []
    for label, fn, args in (("scaled", scaled_step, (False,)), ("plain", plain_step, ()),
                            ("scaled_inf", scaled_step, (rid == 1,))):
        before_inf = [p.detach().clone() for p in net.parameters()]
        counts.clear()
        strategy.run(fn, args=args)
        per_step[label] = dict(counts)
    counts.clear()
    unchanged = all(torch.equal(a, b) for a, b in zip(before_inf, net.parameters()))
    result = {"per_step": per_step, "last_skipped": opt.last_step_skipped,
              "warmup_skipped": skipped, "scale": float(opt.loss_scale),
              "unchanged_by_inf": unchanged,
              "weights": [p.detach().tolist() for p in net.parameters()]}
    with open(f"{out}.rank{rid}", "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
