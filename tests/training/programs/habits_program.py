"""TensorFlow users' habits, run on two replicas and against one process (the oracle).

Usage: python habits_program.py MODE OUT
MODE: oracle (one process, the default strategy) | mirrored (MirroredStrategy over
cpu:0 and cpu:1, started as a plain script) | multi_worker (TF_CONFIG; the strategy is
the deprecated ``distrib.experimental.MultiWorkerMirroredStrategy`` with TF's
``communication=CollectiveCommunication.NCCL``).

Every scenario writes ``OUT.<scenario>.rank<r>`` (torch.save of plain values): what it
computed, or the error it raised.  A scenario that fails records its error and the
program goes on, so each test reads its own scenario.
"""

from __future__ import annotations

import contextlib
import io
import sys
import traceback
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from case_helpers import data, error, mlp, net_of, scce, sgd, weights
from torch import nn

import distrib
from distrib.training import Model, metrics

BATCH = 16
OPTIONS = distrib.CommunicationOptions(timeout_seconds=90)


def make_strategy(mode: str) -> tuple[distrib.Strategy, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if mode == "mirrored":
            strategy: distrib.Strategy = distrib.MirroredStrategy(
                devices=["cpu:0", "cpu:1"], communication_options=OPTIONS)
        elif mode == "multi_worker":
            try:
                experimental = distrib.experimental
            except AttributeError:  # a distrib without it: the other habits still run
                strategy = distrib.MultiWorkerMirroredStrategy()
            else:
                strategy = experimental.MultiWorkerMirroredStrategy(
                    communication=experimental.CollectiveCommunication.NCCL)
        else:
            strategy = distrib.get_strategy()
    return strategy, [f"{w.category.__name__}: {w.message}" for w in caught]


def run_steps(strategy: distrib.Strategy, step: Callable[..., Any], x: np.ndarray,
              y: np.ndarray) -> list[float]:
    """A custom loop over global batches of 16; returns the reduced loss of every step."""
    ds = distrib.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
    out = []
    for xb, yb in strategy.experimental_distribute_dataset(ds):
        per_replica = strategy.run(step, args=(xb, yb))
        out.append(float(strategy.reduce("sum", per_replica, axis=None)))
    return out


# ------------------------------------------------------------------ scenarios
def transfer_learning(strategy: distrib.Strategy, rid: int) -> dict[str, Any]:
    """Item 1: freeze base, train head, unfreeze, recompile, train again; torch habits too."""
    x, y = data(70, 1)  # 70 = 4 * 16 + 6: a partial last batch
    with strategy.scope():
        model = Model(mlp())
    base, head = model.module[0], model.module[2]
    base.trainable = False  # Keras' habit on a sub-module
    model.compile(optimizer=sgd(model), loss=scce())
    model.fit(x, y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0)
    after_head = weights(model)
    base.trainable = True  # unfreeze and recompile
    model.compile(optimizer=sgd(model, 0.05), loss=scce(), metrics=["accuracy"])
    history = model.fit(x, y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0).history
    head.requires_grad_(False)  # torch's habit, no recompile
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    frozen_model = weights(model)
    model.trainable = False  # nothing trains
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    unchanged = all(torch.equal(a, b) for a, b in zip(frozen_model.values(),
                                                     weights(model).values()))
    with strategy.scope():  # a custom loop: requires_grad_ changed after the scope closed
        net = mlp()
        opt = sgd(net)

    def step(xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        loss = distrib.compute_average_loss(
            nn.functional.cross_entropy(net(xb), yb, reduction="none"), global_batch_size=BATCH)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach()

    cx, cy = data(64, 2)
    net[0].requires_grad_(False)
    run_steps(strategy, step, cx, cy)
    net[0].requires_grad_(True)
    net[2].requires_grad_(False)
    run_steps(strategy, step, cx, cy)
    net[2].requires_grad_(True)
    run_steps(strategy, step, cx, cy)
    mismatch = None
    if strategy.num_replicas_in_sync > 1:  # one replica freezes what the other trains
        model.trainable = True
        if rid == 1:
            head.trainable = False
        mismatch = error(lambda: model.fit(x, y, batch_size=BATCH, verbose=0))
    return {"after_head": after_head, "history": history, "frozen_model": frozen_model,
            "unchanged_when_all_frozen": unchanged, "custom_loop": weights(net),
            "mismatch": mismatch}


def outside_scope(strategy: distrib.Strategy, rid: int) -> dict[str, Any]:
    """Item 2: a model created outside the scope, compiled or fitted inside it."""
    x, y = data(32, 3)
    outside = Model(mlp())
    with strategy.scope():
        compiled_inside = error(lambda: outside.compile(optimizer="sgd", loss=scce()))
    other = Model(mlp())
    other.compile(optimizer="sgd", loss=scce())
    with strategy.scope():
        fitted_inside = error(lambda: other.fit(x, y, batch_size=BATCH, verbose=0))
    return {"compile": compiled_inside, "fit": fitted_inside}


def custom_loop_losses(strategy: distrib.Strategy, rid: int) -> dict[str, Any]:
    """Item 3: Keras loss objects in a custom loop."""
    x, y = data(64, 4)
    out: dict[str, Any] = {}
    for reduction in ("none", "sum"):
        out[reduction] = _keras_loss_loop(strategy, reduction, x, y)
    with strategy.scope():
        net = mlp()
    default = scce()
    out["default_in_run"] = error(
        lambda: strategy.run(lambda: default(torch.tensor([0, 1]), net(torch.zeros(2, 6,
                                                                           dtype=torch.float64)))))
    out["default_outside"] = float(default(torch.tensor([0]), torch.tensor([[1.0, 0.0]])))
    return out


def _keras_loss_loop(strategy: distrib.Strategy, reduction: str, x: np.ndarray,
                     y: np.ndarray) -> dict[str, Any]:
    with strategy.scope():
        net = mlp()
        opt = sgd(net)
    loss_object = scce(reduction=reduction)

    def step(xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        value = loss_object(yb, net(xb))
        loss = distrib.compute_average_loss(value, global_batch_size=BATCH) \
            if reduction == "none" else value / BATCH
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach()

    return {"losses": run_steps(strategy, step, x, y), "weights": weights(net)}


def metric_results(strategy: distrib.Strategy, rid: int) -> dict[str, Any]:
    """Item 4: metric objects updated inside strategy.run."""
    with strategy.scope():
        acc = metrics.SparseCategoricalAccuracy()
    outside_made = metrics.SparseCategoricalAccuracy()
    hit = torch.tensor([[0.0, 1.0]], dtype=torch.float64)
    miss = torch.tensor([[1.0, 0.0]], dtype=torch.float64)

    def update() -> torch.Tensor:  # replica 0 right, replica 1 wrong
        replica = int(distrib.get_replica_context().replica_id_in_sync_group)
        pred = hit if replica == 0 else miss
        acc.update_state(torch.tensor([1]), pred)
        outside_made.update_state(torch.tensor([1]), pred)
        return acc.result()  # in replica context: every replica reads

    in_run = float(strategy.experimental_local_results(strategy.run(update))[0])
    everywhere = float(acc.result())
    chief_only = float(acc.result()) if strategy.extended.should_checkpoint else None
    after = float(strategy.reduce("sum", strategy.run(lambda: torch.tensor(1.0)), axis=None))
    with strategy.scope():
        in_scope = float(acc.result())
    update_outside = error(lambda: acc.update_state(torch.tensor([1]), hit))
    x, y = data(70, 5)
    with strategy.scope():
        model = Model(mlp())
        model.compile(optimizer=sgd(model), loss=scce(), metrics=["accuracy"])
    logs = model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0).history
    return {"in_run": in_run, "everywhere": everywhere, "chief_only": chief_only,
            "collective_after": after, "in_scope": in_scope,
            "outside_made": float(outside_made.result()), "update_outside": update_outside,
            "fit_logs": {k: v[-1] for k, v in logs.items()},
            "after_fit": model.get_metrics_result()}


def different_data(strategy: distrib.Strategy, rid: int) -> dict[str, Any]:
    """Item 5: in-memory data that differs between replica processes."""
    with strategy.scope():
        model = Model(mlp())
        model.compile(optimizer=sgd(model), loss=scce(), metrics=["accuracy"])
    own = np.random.RandomState(100 + rid)  # as if each process drew its own data
    x, y = own.randn(40, 6), own.randint(0, 2, 40)
    unseeded = np.random.rand(40, 6)  # the seed program's habit

    def batches() -> Iterator[Any]:
        for i in range(2):
            yield x[i * 20:(i + 1) * 20], y[i * 20:(i + 1) * 20]

    same_x, same_y = data(40, 6)
    return {"fit": error(lambda: model.fit(x, y, verbose=0)),
            "evaluate": error(lambda: model.evaluate(x, y, verbose=0)),
            "predict": error(lambda: model.predict(x, verbose=0)),
            "predict_unseeded": error(lambda: model.predict(unseeded, verbose=0)),
            "generator": error(lambda: model.fit(batches(), verbose=0)),
            "same_data": error(lambda: model.fit(same_x, same_y, verbose=0))}


def fit_inside_scope(strategy: distrib.Strategy, rid: int) -> dict[str, Any]:
    """Item 6: compile, fit, evaluate and predict inside ``with strategy.scope():``."""
    x, y = data(70, 7)
    vx, vy = data(30, 8)
    with strategy.scope():
        model = Model(mlp())
        model.compile(optimizer=sgd(model), loss=scce(), metrics=["accuracy"])
        history = model.fit(x, y, batch_size=BATCH, epochs=2, shuffle=False,
                            validation_data=(vx, vy), verbose=0).history
        evaluation = model.evaluate(vx, vy, batch_size=BATCH, verbose=0, return_dict=True)
        predictions = model.predict(vx, batch_size=BATCH, verbose=0)
    return {"weights": weights(model), "history": history, "evaluate": evaluation,
            "predict": torch.from_numpy(predictions)}


def batch_norm(strategy: distrib.Strategy, rid: int) -> dict[str, Any]:
    """BatchNorm's running statistics: every replica updates them from its own rows; they
    are averaged (TF's ON_READ MEAN) so replicas never disagree.  The first layer
    normalises the inputs, so its running mean depends on the data only: the mean of the
    replicas' averages equals the average of the global batches' means (the oracle's)."""
    x, y = data(64, 9)
    with strategy.scope():
        torch.manual_seed(0)
        model = Model(nn.Sequential(nn.BatchNorm1d(6), nn.Linear(6, 8), nn.BatchNorm1d(8),
                                    nn.Tanh(), nn.Linear(8, 2)).double())
        model.compile(optimizer=sgd(model), loss=scce(), metrics=["accuracy"])
    model.fit(x, y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0)
    after_fit = {k: v.clone() for k, v in net_of(model).state_dict().items()
                 if "running" in k}
    evaluation = model.evaluate(x, y, batch_size=BATCH, verbose=0, return_dict=True)
    return {"buffers": after_fit, "evaluate": evaluation,
            "predict": torch.from_numpy(model.predict(x, batch_size=BATCH, verbose=0))}


def module_api(strategy: distrib.Strategy, rid: int) -> dict[str, Any]:
    """Item 8: distrib.Model is a torch Module, and still replicated."""
    x, y = data(64, 9)
    with strategy.scope():
        model = Model(mlp())
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model.to(torch.float64)

    def step(xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        per_example = nn.functional.cross_entropy(model(xb, training=True), yb,
                                                  reduction="none")
        loss = distrib.compute_average_loss(per_example, global_batch_size=BATCH)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach()

    run_steps(strategy, step, x, y)
    return {"is_module": isinstance(model, nn.Module),
            "parameters": len(list(model.parameters())),
            "state_dict": sorted(model.state_dict()), "weights": weights(model.module)}


try:
    SequenceBase: Any = distrib.utils.Sequence
except AttributeError:  # a distrib without it: the other habits still run
    SequenceBase = object


class Batches(SequenceBase):
    """Global batches of 16 by index (Keras' Sequence)."""

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        self.x, self.y, self.epochs_ended = x, y, 0

    def __len__(self) -> int:
        return -(-len(self.x) // BATCH)

    def __getitem__(self, i: int) -> Any:
        return self.x[i * BATCH:(i + 1) * BATCH], self.y[i * BATCH:(i + 1) * BATCH]

    def on_epoch_end(self) -> None:
        self.epochs_ended += 1


class Net(nn.Module):
    """A user's module class (load_model needs it in custom_objects)."""

    def __init__(self, hidden: int = 8) -> None:
        super().__init__()
        self.hidden = hidden
        self.body = nn.Sequential(nn.Linear(6, hidden), nn.Tanh(), nn.Linear(hidden, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)  # type: ignore[no-any-return]


def keras_inputs(strategy: distrib.Strategy, rid: int, out: str) -> dict[str, Any]:
    """Item 9: uint8 images, generators, Sequences, *_on_batch, load_model."""
    x, y = data(70, 10)
    images = np.random.RandomState(11).randint(0, 256, (70, 6)).astype("uint8")
    result: dict[str, Any] = {}

    def fresh() -> Model:
        with strategy.scope():
            model = Model(mlp())
            model.compile(optimizer=sgd(model, 0.01), loss=scce(), metrics=["accuracy"])
        return model

    model = fresh()
    model.fit(images, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    result["uint8"] = weights(model)

    def generator() -> Iterator[Any]:
        for i in range(0, 70, BATCH):
            yield x[i:i + BATCH], y[i:i + BATCH]

    model = fresh()
    model.fit(generator(), epochs=1, verbose=0)
    result["generator"] = weights(model)
    model = fresh()
    seq = Batches(x, y)
    model.fit(seq, epochs=2, shuffle=False, verbose=0)
    result["sequence"] = weights(model)
    result["sequence_epochs_ended"] = seq.epochs_ended
    result["sequence_evaluate"] = model.evaluate(seq, verbose=0, return_dict=True)
    result["sequence_predict"] = torch.from_numpy(model.predict(seq, verbose=0))
    model = fresh()
    result["train_on_batch"] = [model.train_on_batch(x[:BATCH], y[:BATCH]) for _ in range(3)]
    result["test_on_batch"] = model.test_on_batch(x[BATCH:2 * BATCH], y[BATCH:2 * BATCH],
                                                  return_dict=True)
    result["predict_on_batch"] = torch.from_numpy(model.predict_on_batch(x[:10]))
    result["on_batch_weights"] = weights(model)
    model.save(out + ".saved.pt")
    with strategy.scope():
        restored = distrib.models.load_model(out + ".saved.pt")
    result["loaded_predict"] = torch.from_numpy(restored.predict(x[:10], verbose=0))
    result["loaded_evaluate"] = restored.evaluate(x, y, verbose=0, return_dict=True)
    restored.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    result["loaded_trained"] = weights(restored)
    with strategy.scope():
        custom = Model(Net())
        custom.compile(optimizer="sgd", loss=scce())
    custom.save(out + ".custom.pt")
    result["custom_refused"] = error(lambda: distrib.models.load_model(out + ".custom.pt"))
    with strategy.scope():
        rebuilt = distrib.models.load_model(out + ".custom.pt", custom_objects={"Net": Net})
    result["custom_rebuilt"] = type(rebuilt.module).__name__
    return result


def progress_bar(strategy: distrib.Strategy, rid: int) -> dict[str, Any]:
    """Item 10: the data run out after 16 of 100 steps."""
    x, y = data(64, 12)
    ds = distrib.data.Dataset.from_tensor_slices((x, y)).batch(4)
    with strategy.scope():
        model = Model(mlp())
        model.compile(optimizer=sgd(model), loss=scce())
    text = {}
    for verbose in (1, 2):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(ds, epochs=1, steps_per_epoch=100, verbose=verbose)
        text[verbose] = out.getvalue()
    return {"verbose1": text[1], "verbose2": text[2]}


SCENARIOS: dict[str, Callable[..., dict[str, Any]]] = {
    "transfer": transfer_learning, "outside_scope": outside_scope,
    "losses": custom_loop_losses, "metrics": metric_results, "data": different_data,
    "in_scope": fit_inside_scope, "module": module_api, "inputs": keras_inputs,
    "progbar": progress_bar, "batch_norm": batch_norm,
}


def main() -> None:
    mode, out = sys.argv[1], sys.argv[2]
    only = sys.argv[3].split(",") if len(sys.argv) > 3 else list(SCENARIOS)
    strategy, caught = make_strategy(mode)
    rid = strategy.extended.replica_group.replica_id
    torch.save({"warnings": caught, "replicas": strategy.num_replicas_in_sync,
                "type": type(strategy).__name__}, f"{out}.strategy.rank{rid}")
    for name in only:
        try:
            fn = SCENARIOS[name]
            args = (strategy, rid, out) if name == "inputs" else (strategy, rid)
            result: Any = fn(*args)
        except Exception:
            result = {"crashed": traceback.format_exc()}
        torch.save(result, f"{out}.{name}.rank{rid}")
    print(f"done replicas={strategy.num_replicas_in_sync}", flush=True)


if __name__ == "__main__":
    main()
