"""TensorFlow behaviours that need several replicas; run under a 2-replica strategy.

Usage: python semantics.py mirrored|multi_worker OUT_DIR
Every replica writes OUT_DIR/replica<i>.json with what it observed; the test
asserts on the values.
"""

from __future__ import annotations

import collections
import gc
import json
import sys
from pathlib import Path
from typing import Any

import torch

import distrib


def as_list(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.tolist()
    if isinstance(x, dict):
        return {k: as_list(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [as_list(v) for v in x]
    return x


def main() -> None:
    kind, out = sys.argv[1], Path(sys.argv[2])
    s = (distrib.MirroredStrategy(devices=["cpu:0", "cpu:1"]) if kind == "mirrored"
         else distrib.MultiWorkerMirroredStrategy())
    seen: dict[str, Any] = {"R": s.num_replicas_in_sync}
    rid = s.experimental_local_results(
        s.experimental_distribute_values_from_function(lambda c: c.replica_id_in_sync_group))[0]
    seen["rid"] = rid

    # 1. contexts
    with s.scope():
        seen["scope_ctx"] = [distrib.get_replica_context() is None,
                             distrib.in_cross_replica_context(), distrib.has_strategy()]
    inside = s.run(lambda: type(distrib.get_replica_context()).__name__)
    seen["run_ctx"] = s.experimental_local_results(inside)[0]

    # 4. local results of ids and of a dict
    ids = s.run(lambda: int(distrib.get_replica_context().replica_id_in_sync_group))
    seen["local_ids"] = list(s.experimental_local_results(ids))
    seen["local_dict"] = list(s.experimental_local_results(s.run(lambda: {"a": 1.0, "b": 2.0})))
    seen["all_ids"] = as_list(s.gather(s.run(lambda: torch.tensor(
        [int(distrib.get_replica_context().replica_id_in_sync_group)])), axis=0))

    # 5. reduce of values from a function, outside and inside scope
    ones = s.experimental_distribute_values_from_function(lambda _: 1.0)
    seen["values_fn_sum"] = [float(s.reduce("sum", ones, axis=None))]
    with s.scope():
        seen["values_fn_sum"].append(float(s.reduce(distrib.ReduceOp.SUM, ones, axis=None)))

    # 6. reduce along an axis
    x = s.run(lambda: torch.tensor([1.0, 2.0]))
    seen["reduce_axis"] = [float(s.reduce("mean", x, axis=0)), float(s.reduce("sum", x, axis=0))]

    # 7. global batch of 8 split in two, 8. partial batch 4 + 2
    rows = torch.arange(8, dtype=torch.float32).reshape(8, 1).repeat(1, 4) + torch.arange(4)
    v = s.experimental_distribute_values_from_function(
        lambda c: torch.arange(8.0)[c.replica_id_in_sync_group * 4:][:4])
    seen["global_batch_split"] = [as_list(s.reduce("sum", s.run(lambda t: t.reshape(2, 2), args=(v,)),
                                      axis=None)), float(s.reduce("sum", v, axis=0))]
    del rows
    part = s.experimental_distribute_values_from_function(
        lambda c: torch.ones(4) if c.replica_id_in_sync_group == 0 else 3 * torch.ones(2))
    seen["partial_batch_mean"] = float(s.reduce("mean", part, axis=0))

    # 10. all_reduce in replica context
    seen["all_reduce"] = as_list(s.experimental_local_results(s.run(lambda: [
        distrib.get_replica_context().all_reduce("sum", 1.0),
        distrib.get_replica_context().all_reduce("sum", torch.tensor([1.0, 2.0])),
        distrib.get_replica_context().all_reduce("mean", torch.tensor([float(rid)]))]))[0])

    # 11. gradient through all_reduce
    def grad_of(op: str) -> float:
        w = torch.tensor(1.0, requires_grad=True)
        c = 1.0 if rid == 0 else 3.0
        y = distrib.get_replica_context().all_reduce(op, w) * c
        y.backward()
        assert w.grad is not None
        return float(w.grad)

    seen["all_reduce_grad"] = [s.experimental_local_results(s.run(grad_of, args=("sum",)))[0],
                      s.experimental_local_results(s.run(grad_of, args=("mean",)))[0]]

    # 12. all_gather, gather shapes, and uneven all_gather
    seen["all_gather"] = as_list(s.experimental_local_results(s.run(
        lambda: distrib.get_replica_context().all_gather(torch.tensor([1, 2, 3]), axis=0)))[0])
    comp = s.run(lambda: torch.zeros(1, 2, 3))
    seen["gather_shapes"] = [list(s.gather(comp, axis=a).shape) for a in (0, 1, 2)]
    seen["uneven_gather"] = as_list(s.experimental_local_results(s.run(
        lambda: distrib.get_replica_context().all_gather(
            torch.arange(rid + 1), axis=0)))[0])
    try:
        s.run(lambda: s.gather(comp, axis=0))
        seen["gather_in_replica"] = "no error"
    except RuntimeError as exc:
        seen["gather_in_replica"] = str(exc)

    # 13. merge_call
    seen["merge_call"] = s.experimental_local_results(s.run(
        lambda: distrib.get_replica_context().merge_call(lambda strategy: 11) + 1))[0]
    merged = s.run(lambda: distrib.get_replica_context().merge_call(
        lambda strategy, v: strategy.reduce("sum", v, axis=None),
        args=(torch.tensor(float(rid + 1)),)))
    seen["merge_reduce"] = float(s.experimental_local_results(merged)[0])

    # 29. host values count once per worker
    seen["host_value_sum"] = [float(s.reduce("sum", torch.tensor(1.0), axis=None)),
                      [float(t.values[0]) for t in s.extended.batch_reduce_to(
                          "sum", [(torch.tensor(1.0), None), (torch.tensor(1.0), None)])]]

    # Gradient SUM contract through a module created in scope.
    torch.manual_seed(rid)
    with s.scope():
        lin = torch.nn.Linear(2, 1, bias=False)
    seen["same_init"] = as_list(s.gather(s.run(lambda: lin.weight.detach().clone()), axis=0))

    def step() -> None:
        lin(torch.ones(1, 2) * (rid + 1)).sum().backward()

    s.run(step)
    seen["grad_sum"] = as_list(lin.weight.grad)

    nested_structures(s, rid, seen)
    metric_freed_at_different_moments(s, rid, seen)
    module_freed_at_different_moments(s, rid, seen)

    out.mkdir(parents=True, exist_ok=True)
    (out / f"replica{rid}.json").write_text(json.dumps(seen))


def metric_freed_at_different_moments(s: Any, rid: int, seen: dict[str, Any]) -> None:
    """A dropped metric that one replica's garbage collector frees before the next step
    and the other's does not (a reference cycle): the steps' sums stay right."""
    from distrib.training import metrics

    gc.disable()  # collections only where this scenario makes them
    try:
        with s.scope():
            kept = metrics.Sum()
            dropped = metrics.Sum()
        def first(a: Any, b: Any) -> None:
            a.update_state(torch.tensor(1.0))
            b.update_state(torch.tensor(2.0))

        s.run(first, args=(kept, dropped))
        dropped.cycle = dropped  # type: ignore[attr-defined]  # freed only by a collection
        del dropped
        if rid == 0:
            gc.collect()
        s.run(lambda: kept.update_state(torch.tensor(float(rid + 1))))
        after_one = float(kept.result())
        gc.collect()
        s.run(lambda: kept.update_state(torch.tensor(1.0)))
        seen["freed_metric"] = [after_one, float(kept.result()),
                                len(s.extended.sync_on_read)]
    finally:
        gc.enable()


def _reducers() -> int:
    gc.collect()
    return sum(isinstance(o, torch.nn.parallel.DistributedDataParallel)
               for o in gc.get_objects())


def module_freed_at_different_moments(s: Any, rid: int, seen: dict[str, Any]) -> None:
    """A module the scope created and the program dropped, that one replica's garbage
    collector frees before ``fit`` sets the scope's modules up and the other's does not:
    both set up the same modules.  And the gradient reducers rebuilt while the scope is
    open (what trains changed) are distrib's, not modules of the program to replicate."""
    before = _reducers()
    gc.disable()  # collections only where this scenario makes them
    try:
        torch.manual_seed(0)
        x = torch.randn(16, 3)
        y = x.sum(1, keepdim=True)
        with s.scope():
            model = distrib.Model(torch.nn.Sequential(torch.nn.Linear(3, 4),
                                                      torch.nn.Linear(4, 1)))
            dropped = torch.nn.Linear(3, 1)
            dropped.__dict__["me"] = dropped  # a cycle: freed only by a collection
            del dropped
            if rid == 0:
                gc.collect()
            for frozen in (False, True, False):
                model.module[0].requires_grad_(not frozen)
                model.compile(optimizer="sgd", loss="mse")
                model.fit(x, y, batch_size=4, epochs=1, verbose=0, shuffle=False)
        weights = [float(p.detach().double().sum()) for p in model.parameters()]
    finally:
        gc.enable()
    seen["freed_module"] = [_reducers() - before, weights]


Pair = collections.namedtuple("Pair", "a b")


class PairNet(torch.nn.Module):
    """A module whose output is a namedtuple (two named outputs)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 2, dtype=torch.float64)

    def forward(self, x: torch.Tensor) -> Pair:
        y = self.lin(x)
        return Pair(a=y[:, :1], b=y[:, 1:])


def nested_structures(s: Any, rid: int, seen: dict[str, Any]) -> None:
    """Namedtuples, dicts and nested tuples through run, reduce, gather, fit and predict."""
    out = s.run(lambda: Pair(torch.tensor(1.0 + rid), {"z": (torch.tensor([rid]),
                                                             torch.tensor([[2.0]]))}))
    red = s.reduce("sum", out, axis=None)
    seen["nested_reduce"] = [type(red).__name__, float(red.a), as_list(red.b["z"])]
    gat = s.gather(s.run(lambda: Pair(torch.tensor([rid]), torch.tensor([[rid, rid]]))), axis=0)
    seen["nested_gather"] = [type(gat).__name__, as_list(gat.a), as_list(gat.b)]

    torch.manual_seed(0)
    x = torch.randn(10, 3, dtype=torch.float64)
    y = {"a": x.sum(1, keepdim=True), "b": -x.sum(1, keepdim=True)}
    with s.scope():
        model = distrib.Model(PairNet())
        model.compile(optimizer="sgd", loss={"a": "mse", "b": "mse"})
    history = model.fit(x, y, batch_size=4, epochs=2, verbose=0, shuffle=False)
    pred = model.predict(x, batch_size=4, verbose=0)
    with torch.no_grad():
        direct = model.module(x)
    seen["nested_fit"] = [sorted(history.history), type(pred).__name__,
                          float(abs(pred.a - direct.a.numpy()).max()),
                          float(abs(pred.b - direct.b.numpy()).max()), list(pred.a.shape)]


if __name__ == "__main__":
    main()
