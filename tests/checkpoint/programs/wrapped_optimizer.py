"""A loss-scaled optimizer (``LossScaleOptimizer`` over SGD with momentum) checkpointed
under a multi-process strategy, against one process on the global batch.

Usage: python wrapped_optimizer.py KIND DIR
KIND:
  sharded   ShardedStrategy over 2 CPU replicas (every Linear its own FSDP unit, its 5
            rows split 3 + 2)
  ps        ParameterServerStrategy: run on every task of {chief: 1, worker: 1, ps: 1};
            every variable in 2 shards on the ps, steps scheduled on the worker, the
            dynamic scale kept on the ps (first: overflowing steps, and ``fit`` under the
            mixed_float16 policy)
  oracle    one process, no strategy: what the others must equal (DIR/oracle.pt), then
            reads back what each of DIR/sharded and DIR/ps saved (see below)

The distributed kinds train SAVE_AT steps on the global batches, save a
``distrib.Checkpoint`` to DIR/<KIND>/ckpt, build fresh objects (other initial values,
another initial loss scale), restore them and train to STEPS; the chief writes
DIR/<KIND>.pt: the state the strategy read at the save (full tensors) and the state after
the last step.  ``oracle`` trains the same steps uninterrupted and, for each checkpoint
present, restores it in this one process into fresh objects (what the files hold) and
writes DIR/<KIND>.json with the largest differences from the oracle.

Float64 throughout: the loss scales are powers of two, so scaling the loss and unscaling
the gradients are exact and the loss-scaled run differs from plain SGD only by the order
in which replicas' gradients are summed.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

import distrib
from distrib.mixed_precision import LossScaleOptimizer

GLOBAL_BATCH, SAVE_AT, STEPS = 8, 3, 6
# The scale doubles after every 2 finite steps: at the save (3 steps) it is 2**11 with a
# counter of 1, at the end (6 steps) 2**13 with a counter of 0.
INITIAL_SCALE, GROWTH_STEPS = 2.0 ** 10, 2


def build(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3)).double()


#: Whether each kind's loss scale is dynamic.
DYNAMIC = {"sharded": True, "ps": True}


def wrapped(net: nn.Module, dynamic: bool, initial_scale: float = INITIAL_SCALE
            ) -> LossScaleOptimizer:
    return LossScaleOptimizer(torch.optim.SGD(net.parameters(), lr=0.2, momentum=0.9),
                              dynamic=dynamic, initial_scale=initial_scale,
                              dynamic_growth_steps=GROWTH_STEPS if dynamic else None)


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + step)
    return (torch.randn(GLOBAL_BATCH, 6, generator=g, dtype=torch.float64),
            torch.randint(0, 3, (GLOBAL_BATCH,), generator=g))


def step_fn(net: nn.Module, opt: LossScaleOptimizer, x: torch.Tensor,
            y: torch.Tensor) -> None:
    """One step: the loss averaged over the GLOBAL batch, scaled, then the wrapper's step."""
    per_example = nn.functional.cross_entropy(net(x), y, reduction="none")
    loss = distrib.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
    opt.get_scaled_loss(loss).backward()
    opt.step()
    opt.zero_grad()


def overflowing_step_fn(net: nn.Module, opt: LossScaleOptimizer, x: torch.Tensor,
                        y: torch.Tensor) -> None:
    """A step whose gradients are never finite: skipped, and the scale halves."""
    loss = nn.functional.cross_entropy(net(x), y) * torch.inf
    opt.get_scaled_loss(loss).backward()
    opt.step()
    opt.zero_grad()


def snapshot(params: dict[str, Any], opt_state: dict[str, Any]) -> dict[str, Any]:
    """Parameters, the inner optimizer's per-parameter slots and the loss-scale entries."""
    inner = opt_state["inner"]
    return {"params": {k: torch.as_tensor(v).detach().clone() for k, v in params.items()},
            "slots": {f"{pid}/{name}": torch.as_tensor(v).detach().clone()
                      for pid, slots in inner["state"].items() for name, v in slots.items()},
            "hyper": [{k: v for k, v in g.items() if k != "params"}
                      for g in inner["param_groups"]],
            "loss_scale": float(opt_state["loss_scale"]),
            "dynamic_counter": int(opt_state["dynamic_counter"])}


# ------------------------------------------------------------------- strategies
def sharded(folder: Path) -> None:
    strategy = distrib.experimental.ShardedStrategy(devices=["cpu:0", "cpu:1"],
                                                    min_unit_params=1)
    ext = strategy.extended
    half = GLOBAL_BATCH // strategy.num_replicas_in_sync

    def train(net: nn.Module, opt: LossScaleOptimizer, steps: range) -> None:
        for step in steps:
            x, y = batch(step)
            rows: Callable[[torch.Tensor], Any] = lambda t: (  # noqa: E731
                lambda ctx: t[ctx.replica_id_in_sync_group * half:
                              (ctx.replica_id_in_sync_group + 1) * half])
            strategy.run(step_fn, args=(
                net, opt, strategy.experimental_distribute_values_from_function(rows(x)),
                strategy.experimental_distribute_values_from_function(rows(y))))

    def state(net: nn.Module, opt: LossScaleOptimizer) -> dict[str, Any]:
        return snapshot(ext.module_state_dict(net), ext.optimizer_state_dict(opt))

    run_and_restore(strategy, train, state, folder / "sharded", DYNAMIC["sharded"])


def parameter_servers(folder: Path) -> None:
    strategy = distrib.ParameterServerStrategy(
        variable_partitioner=distrib.FixedShardsPartitioner(2))  # workers and ps serve here
    coordinator = distrib.coordinator.ClusterCoordinator(strategy)
    ext = strategy.extended

    def train(net: nn.Module, opt: LossScaleOptimizer, steps: range) -> None:
        for step in steps:
            coordinator.schedule(step_fn, args=(net, opt, *batch(step)))
        coordinator.join()

    def state(net: nn.Module, opt: LossScaleOptimizer) -> dict[str, Any]:
        return snapshot(ext.module_state_dict(net), ext.optimizer_state_dict(opt))

    with strategy.scope():  # 3 overflowing steps: each skipped, each halves the scale
        probe = build(3)
        probe_opt = wrapped(probe, dynamic=True)
    before = {k: v.clone() for k, v in ext.module_state_dict(probe).items()}
    for step in range(3):
        coordinator.schedule(overflowing_step_fn, args=(probe, probe_opt, *batch(step)))
    coordinator.join()
    after = ext.module_state_dict(probe)
    overflow = {"unchanged": all(torch.equal(before[k], after[k]) for k in before),
                "scale": [ext.optimizer_state_dict(probe_opt)[k]
                          for k in ("loss_scale", "dynamic_counter")],
                "chief_reads": [float(probe_opt.loss_scale), int(probe_opt.dynamic_counter)]}
    distrib.mixed_precision.set_global_policy("mixed_float16")  # compile wraps the optimizer
    try:
        with strategy.scope():
            model = distrib.Model(build(4).float())
        model.compile(optimizer="sgd", loss=distrib.losses.SparseCategoricalCrossentropy(
            from_logits=True))
        x, y = batch(0)
        model.fit(distrib.data.Dataset.from_tensor_slices((x.float().numpy(), y.numpy()))
                  .batch(4).repeat(), steps_per_epoch=2, verbose=0)
        fit_scale = [ext.optimizer_state_dict(model.optimizer)[k]
                     for k in ("loss_scale", "dynamic_counter")]
    finally:
        distrib.mixed_precision.set_global_policy("float32")
    run_and_restore(strategy, train, state, folder / "ps", DYNAMIC["ps"], overflow=overflow,
                    fit_scale=fit_scale)


def run_and_restore(strategy: distrib.Strategy,
                    train: Callable[[nn.Module, LossScaleOptimizer, range], None],
                    state: Callable[[nn.Module, LossScaleOptimizer], dict[str, Any]],
                    out: Path, dynamic: bool, **extra: Any) -> None:
    with strategy.scope():
        net = build(0)
        opt = wrapped(net, dynamic)
        checkpoint = distrib.Checkpoint(model=net, optimizer=opt)
    train(net, opt, range(SAVE_AT))
    saved = state(net, opt)
    path = checkpoint.save(str(out / "ckpt"))
    with strategy.scope():  # fresh objects: other values, no momentum yet, another
        net = build(1)      # dynamic scale (a fixed scale is not state: TF restores none)
        opt = wrapped(net, dynamic, initial_scale=2.0 ** 3 if dynamic else INITIAL_SCALE)
        checkpoint = distrib.Checkpoint(model=net, optimizer=opt)
    checkpoint.restore(path).assert_consumed()
    restored = state(net, opt)
    train(net, opt, range(SAVE_AT, STEPS))
    final = state(net, opt)
    if strategy.extended.should_checkpoint:
        torch.save({"saved": saved, "restored": restored, "final": final, "path": path,
                    **extra}, out.with_suffix(".pt"))
    print(f"done replicas={strategy.num_replicas_in_sync}", flush=True)


# ------------------------------------------------------------------------ oracle
def worst(a: dict[str, Any], b: dict[str, Any]) -> float:
    """The largest difference between two snapshots (inf when their entries differ)."""
    if set(a["params"]) != set(b["params"]) or set(a["slots"]) != set(b["slots"]) \
            or a["hyper"] != b["hyper"]:
        return float("inf")
    pairs = [(a[part][k], b[part][k]) for part in ("params", "slots") for k in a[part]]
    return max(float((x - y).abs().max()) for x, y in pairs)


def oracle(folder: Path) -> None:
    for kind, dynamic in DYNAMIC.items():
        if not (folder / f"{kind}.pt").exists():
            continue
        net = build(0)
        opt = wrapped(net, dynamic)
        for step in range(STEPS):
            step_fn(net, opt, *batch(step))
            if step + 1 == SAVE_AT:
                at_save = snapshot(net.state_dict(), opt.state_dict())
        final = snapshot(net.state_dict(), opt.state_dict())
        run = torch.load(folder / f"{kind}.pt", weights_only=False)
        fresh = build(2)
        fresh_opt = wrapped(fresh, dynamic, initial_scale=2.0 ** 4 if dynamic else INITIAL_SCALE)
        distrib.Checkpoint(model=fresh, optimizer=fresh_opt).restore(run["path"]) \
            .assert_consumed()
        in_files = snapshot(fresh.state_dict(), fresh_opt.state_dict())
        report = {
            "saved": worst(run["saved"], at_save),        # what the strategy read
            "in_files": worst(in_files, at_save),         # what the checkpoint holds
            "restored": worst(run["restored"], at_save),  # what the fresh objects got
            "final": worst(run["final"], final),          # training went on as one process
            "slots": sorted(at_save["slots"]),
            "loss_scale": {name: [s["loss_scale"], s["dynamic_counter"]] for name, s in (
                ("oracle_at_save", at_save), ("saved", run["saved"]), ("in_files", in_files),
                ("restored", run["restored"]), ("oracle_final", final),
                ("final", run["final"]))},
            "overflow": run.get("overflow"),
            "fit_scale": run.get("fit_scale"),
        }
        (folder / f"{kind}.json").write_text(json.dumps(report))
    print("oracle done", flush=True)


def main() -> None:
    kind, folder = sys.argv[1], Path(sys.argv[2])
    {"sharded": sharded, "ps": parameter_servers, "oracle": oracle}[kind](folder)


if __name__ == "__main__":
    main()
