"""Cases the step engine must hold on two replicas, and on one process (the oracle).

Usage: python engine_cases.py MODE OUT SCENARIO[,SCENARIO...]
MODE: oracle (one process) | mirrored (MirroredStrategy over cpu:0 and cpu:1, started as
a plain script) | multi_worker (TF_CONFIG, MultiWorkerMirroredStrategy).

Every scenario writes ``OUT.<scenario>.rank<r>`` (torch.save of plain values): what it
computed, or the error it raised.  Scenarios whose replicas fail run alone: the
program ends after them, as a program that raised would.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from case_helpers import data, error, mlp, scce, sgd, weights
from torch import nn

import distrib
from distrib.training import Model

BATCH = 16
OPTIONS = distrib.CommunicationOptions(timeout_seconds=150)


def make_strategy(mode: str) -> distrib.Strategy:
    if mode == "mirrored":
        return distrib.MirroredStrategy(devices=["cpu:0", "cpu:1"],
                                        communication_options=OPTIONS)
    if mode == "multi_worker":
        return distrib.MultiWorkerMirroredStrategy(communication_options=OPTIONS)
    return distrib.get_strategy()


# ------------------------------------------------------------- case 2: losses
class Keras2Step(Model):
    """The TF 2.x guide's custom ``train_step``: ``self.compiled_loss(...)`` with the
    model's added (regularisation) losses."""

    def call(self, inputs: Any, training: bool | None = None) -> Any:
        assert self.module is not None
        self.add_loss(1e-2 * sum((p ** 2).sum() for p in self.module.parameters()))
        return self.module(inputs)

    def train_step(self, data: Any) -> Any:
        x, y = data
        y_pred = self(x, training=True)
        loss = self.compiled_loss(y, y_pred, regularization_losses=self.losses)
        self.minimize(loss)
        return self.compute_metrics(x, y, y_pred, None)


class LossAttributeStep(Model):
    """A custom ``train_step`` calling the compiled loss object, ``self.loss(y, y_pred)``."""

    def train_step(self, data: Any) -> Any:
        x, y = data
        y_pred = self(x, training=True)
        self.minimize(self.loss(y, y_pred))
        return self.compute_metrics(x, y, y_pred, None)


def loss_paths(strategy: distrib.Strategy, rid: int) -> dict[str, Any]:
    """Every Keras loss path in an overridden train_step equals one device."""
    x, y = data(70, 1)  # 70 = 4 * 16 + 6: a partial last batch
    out: dict[str, Any] = {}
    for name, cls in (("compiled_loss", Keras2Step), ("self_loss", LossAttributeStep)):
        with strategy.scope():
            model = cls(mlp())
            model.compile(optimizer=sgd(model), loss=scce())
        history = model.fit(x, y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0)
        out[name] = {"weights": weights(model), "loss": history.history["loss"]}
    return out


# -------------------------------------------------------- case 5: logged loss
def scalar_loss(y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
    """A custom loss returning one value per batch (its mean), as many users write."""
    return nn.functional.cross_entropy(y_pred, y_true.long())


def logged_loss(strategy: distrib.Strategy, rid: int) -> dict[str, Any]:
    """The logged loss of a scalar custom loss is weighted by batch size, as Keras does."""
    x, y = data(70, 2)
    with strategy.scope():
        model = Model(mlp())
        model.compile(optimizer=sgd(model), loss=scalar_loss)
    history = model.fit(x, y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0).history
    evaluated = model.evaluate(x, y, batch_size=BATCH, verbose=0)
    with torch.no_grad():  # Keras' value: each batch's mean weighted by its rows
        assert model.module is not None
        pred = model.module(torch.from_numpy(x))
        parts = [(float(scalar_loss(torch.from_numpy(y[i:i + BATCH]), pred[i:i + BATCH])),
                  len(y[i:i + BATCH])) for i in range(0, 70, BATCH)]
    expected = sum(v * n for v, n in parts) / sum(n for _, n in parts)
    return {"history": history["loss"], "evaluate": float(evaluated), "expected": expected}


# ------------------------------------------------------------- case 6: resume
class Crash(distrib.callbacks.Callback):
    """Raises after ``at`` training batches, on every replica."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at, self.seen = at, 0

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.seen += 1
        if self.seen == self.at:
            raise RuntimeError("crash")


class TwoInputs(nn.Module):
    """A model of two inputs (float64 and float32 features)."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, inputs: Any) -> Any:
        a, b = inputs
        return self.net(a + b)


def resume(strategy: distrib.Strategy, rid: int, out: str) -> dict[str, Any]:
    """BackupAndRestore resumes exactly whatever input dtype fit accepts."""
    rng = np.random.RandomState(3)
    images = rng.randint(0, 256, (40, 6)).astype(np.uint8)
    labels = rng.randint(0, 2, 40)
    inputs: dict[str, Any] = {"uint8": images, "float64": images / 255.0,
                              "mixed": (images / 255.0, images.astype(np.float32))}
    result: dict[str, Any] = {}
    for kind, x in inputs.items():
        def run(folder: str, extra: list[Any], x: Any = x, kind: str = kind) -> Any:
            with strategy.scope():
                torch.manual_seed(0)
                net: nn.Module = nn.Sequential(nn.Linear(6, 4), nn.Tanh(), nn.Linear(4, 2))
                model = Model(TwoInputs(net) if kind == "mixed" else net)
                model.compile(optimizer="sgd", loss=scce(), metrics=["accuracy"])
            ds = distrib.data.Dataset.from_tensor_slices((x, labels)).batch(8)
            backup = distrib.callbacks.BackupAndRestore(f"{out}.{kind}.{folder}", save_freq=2)
            history = model.fit(ds, epochs=3, verbose=0, callbacks=[backup, *extra]).history
            return {"weights": weights(model), "history": history}
        reference = run("ref", [])
        crashed = error(lambda run=run: run("crash", [Crash(7)]))
        result[kind] = {"reference": reference, "crash": crashed, "resumed": run("crash", [])}
    return result


# ---------------------------------------------------------- case 4: data check
def different_data(strategy: distrib.Strategy, rid: int, out_prefix: str) -> dict[str, Any]:
    """Pipelines built from data drawn at random in each process (one extra draw on the
    chief): fit raises on every replica, naming the replica and the fix."""
    out: dict[str, Any] = {}
    for kind in ("dataset", "shuffled"):
        np.random.seed(7)
        if rid == 0:
            np.random.rand()  # the chief draws once more
        x = np.random.randn(64, 6)
        y = (x[:, 0] > 0).astype("int64")
        with strategy.scope():
            model = Model(mlp())
            model.compile(optimizer=sgd(model), loss=scce())
        source = distrib.data.Dataset.from_tensor_slices((x, y))
        if kind == "shuffled":
            source = source.shuffle(64)
        out[kind] = error(lambda m=model, s=source: m.fit(s.batch(BATCH), epochs=2, verbose=0))
    np.random.seed(7)
    if rid == 0:
        np.random.rand()
    x = np.random.randn(64, 6)
    y = (x[:, 0] > 0).astype("int64")

    def custom_loop() -> None:  # a custom loop over the distributed dataset
        dist = strategy.experimental_distribute_dataset(
            distrib.data.Dataset.from_tensor_slices((x, y)).batch(BATCH))
        for xb, _ in dist:
            strategy.run(lambda t: t.sum(), args=(xb,))

    out["custom_loop"] = error(custom_loop)

    with strategy.scope():  # a torch DataLoader over the same data
        model = Model(mlp())
        model.compile(optimizer=sgd(model), loss=scce())
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y)),
        batch_size=BATCH)
    out["loader"] = error(lambda: model.fit(loader, epochs=1, verbose=0))

    def model_fn(features: Any, labels: Any, mode: str) -> Any:
        net = mlp()
        loss = nn.functional.cross_entropy(net(features), labels)
        return distrib.estimator.EstimatorSpec(
            mode, loss=loss, train_op=torch.optim.SGD(net.parameters(), lr=0.1))

    estimator = distrib.estimator.Estimator(
        model_fn, model_dir=out_prefix + ".different_data",
        config=distrib.estimator.RunConfig(train_distribute=strategy))
    out["estimator"] = error(lambda: estimator.train(
        lambda: distrib.data.Dataset.from_tensor_slices((x, y)).batch(BATCH), steps=3))
    # The same data everywhere trains as before.
    x, y = data(64, 9)
    with strategy.scope():
        model = Model(mlp())
        model.compile(optimizer=sgd(model), loss=scce())
    ds = distrib.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
    model.fit(ds, epochs=2, verbose=0)
    out["same_data"] = weights(model)
    return out


# ------------------------------------------------------ case 7: one replica raises
def replica_raises(strategy: distrib.Strategy, rid: int) -> dict[str, Any]:
    """BatchNorm gets a 1-row slice of the last batch on replica 0 only (33 = 2 * 16 + 1):
    replica 0 raises torch's error, and the other replica stops with it named."""
    x, y = data(33, 4)
    with strategy.scope():
        torch.manual_seed(0)
        model = Model(nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8),
                                    nn.Linear(8, 2)).double())
        model.compile(optimizer=sgd(model), loss=scce())
    return {"error": error(lambda: model.fit(x, y, batch_size=BATCH, epochs=1,
                                             shuffle=False, verbose=0))}


# ----------------------------------------------------- case 8: chief-only calls
def chief_only(strategy: distrib.Strategy, rid: int, out: str) -> dict[str, Any]:
    """Both replicas fit; then the chief alone evaluates, predicts and saves while the
    worker ends its program normally."""
    x, y = data(32, 5)
    with strategy.scope():
        model = Model(mlp())
        model.compile(optimizer=sgd(model), loss=scce())
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)
    features = torch.from_numpy(x)

    def model_fn(features: Any, labels: Any, mode: str) -> Any:
        net = mlp()
        logits = net(features)
        if mode == distrib.estimator.ModeKeys.PREDICT:
            return distrib.estimator.EstimatorSpec(mode, predictions=logits)
        loss = nn.functional.cross_entropy(logits, labels)
        return distrib.estimator.EstimatorSpec(
            mode, loss=loss, train_op=torch.optim.SGD(net.parameters(), lr=0.1))

    estimator = distrib.estimator.Estimator(
        model_fn, model_dir=out + ".estimator",
        config=distrib.estimator.RunConfig(train_distribute=strategy))
    estimator.train(lambda: distrib.data.Dataset.from_tensor_slices(
        (features, torch.from_numpy(y))).batch(8), steps=2)
    if rid != 0:
        return {"worker": "ended"}
    return {"evaluate": error(lambda: model.evaluate(x, y, verbose=0)),
            "predict": error(lambda: model.predict(x, verbose=0)),
            "save": error(lambda: model.save(out + ".chief_only.pt")),
            "estimator_predict": error(lambda: list(estimator.predict(
                lambda: distrib.data.Dataset.from_tensor_slices(features).batch(8))))}


SCENARIOS: dict[str, Callable[..., dict[str, Any]]] = {
    "loss_paths": loss_paths, "logged_loss": logged_loss, "resume": resume,
    "different_data": different_data, "replica_raises": replica_raises,
    "chief_only": chief_only,
}
WITH_OUT = ("resume", "chief_only", "different_data")


def main() -> None:
    mode, out = sys.argv[1], sys.argv[2]
    only = sys.argv[3].split(",")
    strategy = make_strategy(mode)
    rid = strategy.extended.replica_group.replica_id
    for name in only:
        try:
            fn = SCENARIOS[name]
            result: Any = fn(strategy, rid, out) if name in WITH_OUT else fn(strategy, rid)
        except Exception:
            result = {"crashed": traceback.format_exc()}
        torch.save(result, f"{out}.{name}.rank{rid}")
    print(f"done replicas={strategy.num_replicas_in_sync}", flush=True)


if __name__ == "__main__":
    main()
