"""``weighted_metrics`` and ``fit(class_weight=...)``: the values TensorFlow 2.21 gives.

The expected numbers and messages come from tf-keras 2.21 (``TF_USE_LEGACY_KERAS=1``) on
the same data and weights: a Dense layer whose kernel is all ones and bias zero, so its
predictions are the row sums of ``X``.

* ``metrics`` are computed WITHOUT sample weights, ``weighted_metrics`` WITH them; a
  weighted metric whose name an unweighted one has is renamed ``weighted_<name>``
  (``{'loss': 4.25, 'mae': 0.75, 'weighted_mae': 0.9}``).
* ``class_weight`` multiplies the sample weights of the training data: the loss and the
  weighted metrics see it, ``metrics`` and ``validation_data`` do not
  (``{'loss': 2.0794, 'accuracy': 0.5, 'weighted_accuracy': 0.1667, 'val_loss': 0.6931,
  'val_accuracy': 0.5, 'val_weighted_accuracy': 0.5}``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from distrib.data import Dataset
from distrib.errors import InvalidTypeError, UsageError
from distrib.training import Model, losses, metrics

X = np.array([[1.0, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0]], dtype="float32")
Y = np.array([0, 1, 1, 0])
SW = np.array([1.0, 2.0, 3.0, 4.0], dtype="float32")
CW = {0: 1.0, 1: 5.0}


def _ones_model(units: int, **compile_args: Any) -> Model:
    net = nn.Linear(3, units)
    with torch.no_grad():
        net.weight.fill_(1.0)
        net.bias.zero_()
    model = Model(net)
    model.compile(**compile_args)
    return model


def _approx(logs: dict[str, float], expected: dict[str, float]) -> None:
    assert list(logs) == list(expected)
    for key, value in expected.items():
        assert logs[key] == pytest.approx(value, rel=1e-6), (key, logs)


# ------------------------------------------------------------------ weighted_metrics
def test_metrics_take_no_sample_weight_and_weighted_metrics_do() -> None:
    model = _ones_model(1, optimizer="sgd", loss="mse", metrics=["mae"],
                        weighted_metrics=["mae"])
    y = Y.astype("float32")
    _approx(model.evaluate(X, y, sample_weight=SW, verbose=0, return_dict=True),
            {"loss": 4.25, "mae": 0.75, "weighted_mae": 0.9})
    _approx(model.evaluate(X, y, verbose=0, return_dict=True),
            {"loss": 1.25, "mae": 0.75, "weighted_mae": 0.75})
    assert model.metrics_names == ["loss", "mae", "weighted_mae"]


def test_weighted_metric_names_as_keras_gives_them() -> None:
    y = Y.astype("float32")
    model = _ones_model(1, optimizer="sgd", loss="mse", metrics=["mae", "mse"],
                        weighted_metrics=["mse"])
    _approx(model.evaluate(X, y, sample_weight=SW, verbose=0, return_dict=True),
            {"loss": 4.25, "mae": 0.75, "mse": 1.25, "weighted_mse": 1.7})
    alone = _ones_model(1, optimizer="sgd", loss="mse", weighted_metrics=["mae"])
    _approx(alone.evaluate(X, y, sample_weight=SW, verbose=0, return_dict=True),
            {"loss": 4.25, "mae": 0.9})
    named = _ones_model(1, optimizer="sgd", loss="mse",
                        metrics=[metrics.MeanAbsoluteError(name="m1")],
                        weighted_metrics=[metrics.MeanAbsoluteError(name="m1")])
    _approx(named.evaluate(X, y, sample_weight=SW, verbose=0, return_dict=True),
            {"loss": 4.25, "m1": 0.75, "weighted_m1": 0.9})


def test_one_metric_object_in_both_lists_is_refused() -> None:
    mae = metrics.MeanAbsoluteError()
    with pytest.raises(UsageError, match="Found duplicated metrics object"):
        _ones_model(1, optimizer="sgd", loss="mse", metrics=[mae], weighted_metrics=[mae])


# --------------------------------------------------------------------- class_weight
def _classifier() -> Model:
    return _ones_model(2, optimizer=torch.optim.SGD, loss=losses.SparseCategoricalCrossentropy(
        from_logits=True), metrics=["accuracy"], weighted_metrics=["accuracy"])


def _fit(model: Model, *args: Any, **kwargs: Any) -> dict[str, float]:
    for group in model.optimizer.param_groups:
        group["lr"] = 0.0  # keep the predictions: the logged values are the first step's
    history = model.fit(*args, epochs=1, verbose=0, **kwargs).history
    return {k: v[0] for k, v in history.items()}


def test_class_weight_weighs_the_loss_and_the_weighted_metrics() -> None:
    ln2 = math.log(2.0)
    _approx(_fit(_classifier(), X, Y, batch_size=4, class_weight=CW),
            {"loss": 3 * ln2, "accuracy": 0.5, "weighted_accuracy": 2 / 12})
    _approx(_fit(_classifier(), X, Y, batch_size=4, class_weight=CW, sample_weight=SW),
            {"loss": 7.5 * ln2, "accuracy": 0.5, "weighted_accuracy": 5 / 30})
    _approx(_fit(_classifier(), X, Y, batch_size=4),
            {"loss": ln2, "accuracy": 0.5, "weighted_accuracy": 0.5})


def test_class_weight_leaves_validation_unweighted() -> None:
    ln2 = math.log(2.0)
    _approx(_fit(_classifier(), X, Y, batch_size=4, class_weight=CW, validation_data=(X, Y)),
            {"loss": 3 * ln2, "accuracy": 0.5, "weighted_accuracy": 2 / 12,
             "val_loss": ln2, "val_accuracy": 0.5, "val_weighted_accuracy": 0.5})


def test_class_weight_on_one_hot_labels_and_on_a_dataset() -> None:
    one_hot = _ones_model(2, optimizer=torch.optim.SGD, loss=losses.CategoricalCrossentropy(
        from_logits=True), weighted_metrics=["accuracy"])
    _approx(_fit(one_hot, X, np.eye(2, dtype="float32")[Y], batch_size=4, class_weight=CW),
            {"loss": 3 * math.log(2.0), "accuracy": 2 / 12})
    batches = Dataset.from_tensor_slices((X, Y, SW)).batch(2)
    _approx(_fit(_classifier(), batches, class_weight=CW),
            {"loss": 7.5 * math.log(2.0), "accuracy": 0.5, "weighted_accuracy": 5 / 30})


def test_class_weight_keys_as_keras_accepts_them() -> None:
    ln2 = math.log(2.0)
    assert _fit(_classifier(), X, Y, batch_size=4, class_weight={})["loss"] == \
        pytest.approx(ln2)  # an empty dict weighs nothing
    assert _fit(_classifier(), X, Y, batch_size=4, class_weight={0.0: 1.0, 1.0: 5.0})[
        "loss"] == pytest.approx(3 * ln2)
    assert _fit(_classifier(), X, Y, batch_size=4, class_weight={0: 1.0, 1: 5.0, 2: 7.0})[
        "loss"] == pytest.approx(3 * ln2)  # a weight for a class no label has


@pytest.mark.parametrize("class_weight,error,says", [
    ({0: 1.0, 2: 3.0}, UsageError, "Expected `class_weight` to be a dict with keys from 0 to "
                                   "one less than the number of classes, found {0: 1.0, 2: 3.0}"),
    ({"0": 1.0, "1": 5.0}, UsageError, "found {'0': 1.0, '1': 5.0}"),
    ({-1: 1.0, 0: 1.0, 1: 5.0}, UsageError, "found {-1: 1.0, 0: 1.0, 1: 5.0}"),
    ([1.0, 5.0], InvalidTypeError, "class_weight = [1.0, 5.0]: must be a dict"),
    ({0: "a", 1: 5.0}, InvalidTypeError, "weights must be numbers, found 'a'"),
    ({0: 1.0}, UsageError, "the labels hold class 1, but class_weight has weights for "
                           "classes 0 to 0"),
])
def test_bad_class_weights_name_the_value(class_weight: Any, error: type[Exception],
                                          says: str) -> None:
    with pytest.raises(error) as info:
        _fit(_classifier(), X, Y, batch_size=4, class_weight=class_weight)
    assert says in str(info.value) and "Fix:" in str(info.value)


def test_class_weight_needs_a_single_output_and_is_an_argument_of_fit_only() -> None:
    class TwoHeads(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(3, 2), nn.Linear(3, 2)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return self.a(x), self.b(x)

    model = Model(TwoHeads())
    model.compile("sgd", losses.SparseCategoricalCrossentropy(from_logits=True))
    with pytest.raises(UsageError, match="`class_weight` is only supported for Models with "
                                         "a single output"):
        model.fit(X, [Y, Y], class_weight=CW, verbose=0)
    with pytest.raises(TypeError, match="class_weight"):
        _classifier().evaluate(X, Y, class_weight=CW, verbose=0)  # type: ignore[call-arg]
