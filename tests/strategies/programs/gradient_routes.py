"""Every way a gradient can reach ``optimizer.step()``, under one strategy, vs one process.

Usage: python gradient_routes.py KIND OUT.pt
KIND: oracle | one_device | mirrored | multi_worker | central_storage | parameter_server | tpu
      | sharded | sharded/ROUTE

For each route the program trains a small float64 MLP (SGD with momentum) for STEPS
steps on a global batch of GLOBAL_BATCH rows, split over the replicas, and saves every
final parameter under ``ROUTE/name`` (the chief only).  ``oracle`` runs the same routes
in one process on the global batch, without any strategy; the routes all compute the
gradient of the same loss, so every route must end where the oracle ends.

Routes:
  backward        loss.backward(); opt.step()
  autograd_grad   grads = torch.autograd.grad(loss, params); p.grad = g; opt.step()
                  (TensorFlow's tape.gradient + apply_gradients)
  hand_set        gradients computed by hand (no autograd), assigned to p.grad
  accumulate      two micro-batches, each with backward(), then one step
  mixed           a micro-batch with backward(), a second with autograd.grad added
                  into p.grad in place, then one step
  func_grad       torch.func.grad over functional_call, assigned to p.grad
  two_optimizers  one backward(), then two optimizers over disjoint layers step
                  (gradients already summed must not be summed again)
  lazy            the first layer an nn.LazyLinear (created by the first batch), backward()
                  (not under parameter_server or tpu)

``parameter_server`` runs every step as one closure scheduled on the only worker (its
replica holds the global batch).  ``sharded`` (ShardedStrategy, parameters are DTensors)
runs the routes that torch's FSDP allows: ``backward``, ``hand_set`` (gradients computed
from the whole parameters, ``p.full_tensor()``), ``accumulate``, ``two_optimizers``;
``sharded/ROUTE`` runs one route only (the others raise distrib's UsageError there).
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from program_helpers import make_strategy, save_results
from torch import nn

import distrib

GLOBAL_BATCH = 8
STEPS = 3
ROUTES = ("backward", "autograd_grad", "hand_set", "accumulate", "mixed", "func_grad",
          "two_optimizers", "lazy")
SHARDED_ROUTES = ("backward", "hand_set", "accumulate", "two_optimizers")


def build(route: str) -> nn.Sequential:
    first = nn.LazyLinear(5) if route == "lazy" else nn.Linear(6, 5)
    return nn.Sequential(first, nn.Tanh(), nn.Linear(5, 3)).double()


def data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    x = torch.randn(STEPS * GLOBAL_BATCH, 6, generator=g, dtype=torch.float64)
    y = torch.randn(STEPS * GLOBAL_BATCH, 3, generator=g, dtype=torch.float64)
    return x, y


def loss_of(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    per_example = 0.5 * ((out - y) ** 2).sum(dim=1)
    return distrib.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)


def optimizers(net: nn.Sequential, route: str) -> list[torch.optim.Optimizer]:
    if route == "two_optimizers":
        return [torch.optim.SGD(net[0].parameters(), lr=0.1, momentum=0.9),
                torch.optim.SGD(net[2].parameters(), lr=0.05, momentum=0.5)]
    return [torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)]


def whole(t: torch.Tensor) -> torch.Tensor:
    """The whole tensor of a sharded parameter (a DTensor under ShardedStrategy)."""
    full_tensor = getattr(t, "full_tensor", None)
    return full_tensor() if callable(full_tensor) else t


def hand_gradients(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    """The loss's gradients for the MLP, by hand (in the order of ``net.parameters()``)."""
    w1, b1, w2, b2 = (whole(p.detach()) for p in net.parameters())
    h = torch.tanh(x @ w1.T + b1)
    d_out = (h @ w2.T + b2 - y) / GLOBAL_BATCH
    d_pre = (d_out @ w2) * (1 - h * h)
    return [d_pre.T @ x, d_pre.sum(0), d_out.T @ h, d_out.sum(0)]


def step(route: str, net: nn.Module, opts: list[torch.optim.Optimizer], x: torch.Tensor,
         y: torch.Tensor) -> None:
    params = list(net.parameters())
    if route in ("backward", "two_optimizers", "lazy"):
        loss_of(net(x), y).backward()
    elif route == "autograd_grad":
        for p, g in zip(params, torch.autograd.grad(loss_of(net(x), y), params)):
            p.grad = g
    elif route == "hand_set":
        for p, g in zip(params, hand_gradients(net, x, y)):
            p.grad = g
    elif route in ("accumulate", "mixed"):
        half = x.shape[0] // 2
        loss_of(net(x[:half]), y[:half]).backward()
        second = loss_of(net(x[half:]), y[half:])
        if route == "accumulate":
            second.backward()
        else:
            for p, g in zip(params, torch.autograd.grad(second, params)):
                assert p.grad is not None
                p.grad.add_(g)
    elif route == "func_grad":
        named = {k: v.detach() for k, v in net.named_parameters()}

        def f(p: dict[str, torch.Tensor]) -> torch.Tensor:
            return loss_of(torch.func.functional_call(net, p, (x,)), y)

        grads = torch.func.grad(f)(named)
        for k, p in net.named_parameters():
            p.grad = grads[k]
    else:
        raise ValueError(route)
    for opt in opts:
        opt.step()
    for opt in opts:
        opt.zero_grad()


def train(strategy: distrib.Strategy, route: str, kind: str) -> dict[str, torch.Tensor]:
    # Replicas start from different random values: the chief's must reach every replica.
    torch.manual_seed(100 + 1000 * strategy.extended.replica_group.replica_id)
    with strategy.scope():
        net = build(route)
        opts = optimizers(net, route)
    x, y = data()
    if kind == "parameter_server":
        return _train_on_coordinator(strategy, route, net, opts, x, y)
    group = strategy.extended.replica_group
    device, place = group.device, group.place_batch
    per_replica = GLOBAL_BATCH // group.num_replicas_in_sync
    for i in range(STEPS):
        start = i * GLOBAL_BATCH
        if place is not None:  # one program drives every device (TPU): the whole batch
            rows = slice(start, start + GLOBAL_BATCH)
            strategy.run(step, args=(route, net, opts, place(x[rows]), place(y[rows])))
            continue

        def shard(ctx: Any, t: torch.Tensor, start: int = start) -> torch.Tensor:
            lo = start + ctx.replica_id_in_sync_group * per_replica
            return t[lo:lo + per_replica].to(device)

        xb = strategy.experimental_distribute_values_from_function(lambda c: shard(c, x))
        yb = strategy.experimental_distribute_values_from_function(lambda c: shard(c, y))
        strategy.run(step, args=(route, net, opts, xb, yb))
    state = strategy.extended.module_state_dict(net)  # whole tensors when sharded
    return {k: v.detach().cpu().clone() for k, v in state.items()}


def _train_on_coordinator(strategy: distrib.Strategy, route: str, net: nn.Module,
                          opts: list[torch.optim.Optimizer], x: torch.Tensor,
                          y: torch.Tensor) -> dict[str, torch.Tensor]:
    from distrib.coordinator import ClusterCoordinator

    coordinator = ClusterCoordinator(strategy)
    for i in range(STEPS):
        rows = slice(i * GLOBAL_BATCH, (i + 1) * GLOBAL_BATCH)
        coordinator.schedule(step, args=(route, net, opts, x[rows], y[rows]))
        coordinator.join()
    state = strategy.extended.module_state_dict(net)
    return {k: v.detach().cpu().clone() for k, v in state.items()}


def main() -> None:
    kind, out = sys.argv[1], sys.argv[2]
    strategy = make_strategy(kind)
    results: dict[str, torch.Tensor] = {}
    routes = SHARDED_ROUTES if kind == "sharded" else \
        kind.split("/")[1:] if kind.startswith("sharded/") else ROUTES
    for route in routes:
        if route == "lazy" and kind in ("parameter_server", "tpu"):
            continue
        for k, v in train(strategy, route, kind).items():
            results[f"{route}/{k}"] = v
    save_results(strategy, results, out)


if __name__ == "__main__":
    main()
