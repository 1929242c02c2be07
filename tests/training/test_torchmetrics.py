"""torchmetrics metrics in compile(metrics=...): Keras' argument order, the predictions'
device, and results over every replica equal to one process on the global batch."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
import torch

import distrib
from distrib.errors import UsageError
from distrib.training import metrics
from tests.support import run_python

torchmetrics = pytest.importorskip("torchmetrics")

PROGRAM = str(pathlib.Path(__file__).parent / "programs" / "torchmetrics_program.py")


def test_keras_argument_order_becomes_torchmetrics_order() -> None:
    y_true = torch.tensor([1.0, 2.0, 4.0])
    y_pred = torch.tensor([2.0, 2.0, 2.0])
    m = metrics.get(torchmetrics.MeanAbsolutePercentageError())  # |y - p| / |y|: asymmetric
    m.update_state(y_true, y_pred)
    expected = torchmetrics.functional.mean_absolute_percentage_error(y_pred, y_true)
    assert float(m.result()) == pytest.approx(float(expected))
    assert m.name == "mean_absolute_percentage_error"
    m.update_state(y_true, y_true)  # accumulates like a Keras metric, reset_state clears
    assert float(m.result()) == pytest.approx(float(expected) / 2)
    m.reset_state()
    m.update_state(y_true, y_true)
    assert float(m.result()) == 0.0


def test_states_that_are_not_sums_are_refused_with_the_way_out() -> None:
    with pytest.raises(UsageError, match="thresholds="):
        metrics.get(torchmetrics.classification.BinaryAUROC())
    binned = metrics.get(torchmetrics.classification.BinaryAUROC(thresholds=11))
    binned.update_state(torch.tensor([0, 1, 1, 0]), torch.tensor([0.1, 0.9, 0.8, 0.3]))
    assert float(binned.result()) == pytest.approx(1.0)


def test_compile_and_fit_log_the_metric_by_its_name() -> None:
    x = torch.linspace(-1, 1, 24).reshape(8, 3)
    y = (x.sum(1) > 0).long()
    with distrib.OneDeviceStrategy("cpu").scope():
        model = distrib.Model(torch.nn.Linear(3, 2))
        model.compile(optimizer="adam", loss=distrib.losses.SparseCategoricalCrossentropy(True),
                      metrics=[torchmetrics.classification.MulticlassAccuracy(num_classes=2)])
    history = model.fit(x, y, batch_size=4, epochs=1, verbose=0)
    assert 0.0 <= history.history["multiclass_accuracy"][0] <= 1.0


@pytest.mark.slow
def test_results_over_two_replicas_equal_one_process(tmp_path: pathlib.Path) -> None:
    def run(mode: str, replicas: int) -> list[dict[str, Any]]:
        proc = run_python([PROGRAM, mode, str(tmp_path / mode)])
        assert proc.returncode == 0, proc.stderr[-4000:]
        return [torch.load(tmp_path / f"{mode}.rank{r}", weights_only=True)
                for r in range(replicas)]
    (oracle,) = run("oracle", 1)
    assert set(oracle["history"]) == {"loss", "mean_absolute_error", "r2_score"}
    for got in run("mirrored", 2):
        for key, values in oracle["history"].items():
            assert got["history"][key] == pytest.approx(values, rel=1e-6), key
        for key, value in oracle["evaluate"].items():
            assert got["evaluate"][key] == pytest.approx(value, rel=1e-6), key
