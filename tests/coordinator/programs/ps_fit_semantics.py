"""Three ParameterServerStrategy behaviours against TensorFlow's (run on every task).

argv: report.json

* ``metric``: a metric made in ``strategy.scope()`` and updated in scheduled functions,
  read on the chief after ``join()`` (TensorFlow's custom-loop tutorial), against the
  accuracy the functions returned; reset between epochs;
* ``seeded``: ``fit`` on one worker of a seeded, reshuffling ``shuffle`` against ``fit``
  of the same model on one device (float64 SGD): weights and losses;
* ``progbar``: the line ``fit(verbose=2)`` prints for an epoch whose data ran out after
  14 of ``steps_per_epoch=20`` steps.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

import distrib
from distrib.coordinator import ClusterCoordinator

rng = np.random.RandomState(0)
X = rng.randn(64, 4)
Y = rng.randint(0, 3, 64)


def metric(strategy: distrib.ParameterServerStrategy) -> list[list[float]]:
    with strategy.scope():
        net = nn.Linear(4, 3, dtype=torch.float64)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        accuracy = distrib.metrics.SparseCategoricalAccuracy()
    coordinator = ClusterCoordinator(strategy)
    dataset = coordinator.create_per_worker_dataset(
        lambda: distrib.data.Dataset.from_tensor_slices((X, Y)).batch(16).repeat())
    iterator = iter(dataset)

    def replica_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = net(x)
        nn.functional.cross_entropy(logits, y).backward()
        opt.step()
        opt.zero_grad()
        accuracy.update_state(y, logits)
        return (logits.argmax(1) == y).sum()

    def step(it: object) -> tuple[torch.Tensor, int]:   # as TensorFlow's tutorial writes it
        x, y = next(it)  # type: ignore[call-overload]
        return strategy.run(replica_step, args=(x, y)), int(y.shape[0])

    epochs = []
    for _ in range(3):
        results = [coordinator.schedule(step, args=(iterator,)) for _ in range(4)]
        coordinator.join()
        hits = sum(float(r.fetch()[0]) for r in results)
        rows = sum(int(r.fetch()[1]) for r in results)
        epochs.append([float(accuracy.result()), hits / rows])
        accuracy.reset_state()
    return epochs


def _fit(model: distrib.Model, data: distrib.data.Dataset) -> list[float]:
    model.compile(optimizer=torch.optim.SGD(model.parameters(), lr=0.1), metrics=["accuracy"],
                  loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(data.repeat(), epochs=2, steps_per_epoch=4, verbose=0)
    return [float(v) for v in history.history["loss"]]


def seeded(strategy: distrib.ParameterServerStrategy) -> dict[str, object]:
    def data() -> distrib.data.Dataset:
        return distrib.data.Dataset.from_tensor_slices((X, Y)).shuffle(64, seed=3).batch(16)

    torch.manual_seed(1)
    with strategy.scope():
        ps_model = distrib.Model(nn.Sequential(nn.Linear(4, 8, dtype=torch.float64), nn.Tanh(),
                                               nn.Linear(8, 3, dtype=torch.float64)))
    alone = distrib.Model(nn.Sequential(nn.Linear(4, 8, dtype=torch.float64), nn.Tanh(),
                                        nn.Linear(8, 3, dtype=torch.float64)))
    alone.load_state_dict(ps_model.state_dict())
    ps_loss, alone_loss = _fit(ps_model, data()), _fit(alone, data())
    ps_state = strategy.extended.module_state_dict(ps_model)
    diff = max(float((ps_state[k] - v).abs().max()) for k, v in alone.state_dict().items())
    return {"ps_loss": ps_loss, "alone_loss": alone_loss, "max_weight_diff": diff}


def progbar(strategy: distrib.ParameterServerStrategy) -> str:
    with strategy.scope():
        model = distrib.Model(nn.Linear(4, 3, dtype=torch.float64))
        model.compile(optimizer="sgd", metrics=["accuracy"],
                      loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True))
    data = distrib.data.Dataset.from_tensor_slices((np.tile(X, (4, 1))[:224],
                                                    np.tile(Y, 4)[:224])).batch(16)  # 14
    out = io.StringIO()
    with contextlib.redirect_stdout(out), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(data, epochs=1, steps_per_epoch=20, verbose=2)
    return out.getvalue()


def main() -> None:
    strategy = distrib.ParameterServerStrategy()
    report = {"metric": metric(strategy), "seeded": seeded(strategy),
              "progbar": progbar(strategy)}
    Path(sys.argv[1]).write_text(json.dumps(report))


if __name__ == "__main__":
    main()
