"""``fit``/``evaluate``/``compile``/``load`` refuse bad arguments before any step, naming them.

TensorFlow 2.21 (tf-keras) on the same inputs, for comparison: ``evaluate(x)`` without
targets returns 0.0 (with metrics: ``AttributeError: 'NoneType' object has no attribute
'shape'``), ``fit(validation_data=(x,))`` logs ``val_loss: 0.0``; ``fit(x)`` without
targets raises "Target data is missing. Your model was compiled with loss=..., and
therefore expects target data to be provided in `fit()`." — the error distrib raises
for all three.  ``validation_freq=0`` raises ``ZeroDivisionError``, ``epochs=1.5``
"Cannot convert 1.5 to EagerTensor of dtype int64", an out-of-range label "Received a
label value of 5 which is outside the valid range of [0, 2)", and unknown loss or
metric names pass ``compile`` and fail in the first step.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from distrib.errors import InvalidTypeError, UsageError
from distrib.training import Model, callbacks, losses

X = np.random.RandomState(0).rand(8, 3).astype("float32")
Y = np.array([0, 1, 1, 0, 1, 0, 1, 1])


def _model(**compile_args: Any) -> Model:
    torch.manual_seed(0)
    model = Model(nn.Linear(3, 2))
    compile_args.setdefault("loss", losses.SparseCategoricalCrossentropy(from_logits=True))
    compile_args.setdefault("metrics", ["accuracy"])
    model.compile("sgd", **compile_args)
    return model


class _Epochs(callbacks.Callback):
    def __init__(self) -> None:
        super().__init__()
        self.begun = 0

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self.begun += 1


# ------------------------------------------------------------ missing targets (item 8)
def test_evaluate_without_targets_raises_kerass_error_instead_of_a_zero_loss() -> None:
    with pytest.raises(UsageError, match=r"Target data is missing\. Your model was compiled "
                                         r"with loss=.*expects target data to be provided in "
                                         r"`evaluate\(\)`"):
        _model().evaluate(X, verbose=0)
    with pytest.raises(UsageError, match="Target data is missing. Your model was compiled "
                                         "with metrics"):
        _model(loss=None).evaluate(X, verbose=0)


@pytest.mark.parametrize("validation_data", [X, (X,)], ids=["x", "(x,)"])
def test_validation_data_without_targets_raises_before_the_first_epoch(
        validation_data: Any) -> None:
    epochs = _Epochs()
    with pytest.raises(UsageError, match="expects target data to be provided in "
                                         "`validation_data`"):
        _model().fit(X, Y, validation_data=validation_data, callbacks=[epochs], verbose=0)
    assert epochs.begun == 0


def test_a_custom_test_step_may_evaluate_without_targets() -> None:
    class Reconstruct(Model):
        def test_step(self, data: Any) -> dict[str, float]:
            (x,) = data
            return {"norm": float(self(x, training=False).norm())}

    model = Reconstruct(nn.Linear(3, 2))
    model.compile("sgd", "mse")
    assert model.evaluate(X, verbose=0, return_dict=True)["norm"] > 0.0


# ------------------------------------------------------------ messages (item 12)
ITEM_12 = [
    ("validation_data=(x,)", lambda: _model().fit(X, Y, validation_data=(X,), verbose=0),
     UsageError, ["y = None", "Target data is missing", "validation_data"]),
    ("validation_data 4-tuple",
     lambda: _model().fit(X, Y, validation_data=(X, Y, Y, Y), verbose=0), UsageError,
     ["validation_data = 'a tuple of 4 items'", "Data is expected to be in format",
      "(x_val, y_val)"]),
    ("fit(None, y)", lambda: _model().fit(None, Y, verbose=0), UsageError,
     ["x = None", "fit() needs input data", "pass x="]),
    ("float one-hot labels, sparse loss",
     lambda: _model().fit(X, np.eye(2, dtype="float32")[Y], verbose=0), UsageError,
     ["labels of shape (8, 2)", "one-hot", "categorical_crossentropy"]),
    ("validation_freq=0",
     lambda: _model().fit(X, Y, validation_data=(X, Y), validation_freq=0, verbose=0),
     UsageError, ["validation_freq = 0", "validation_freq=1"]),
    ("epochs=1.5", lambda: _model().fit(X, Y, epochs=1.5, verbose=0), InvalidTypeError,
     ["epochs = 1.5", "must be an int"]),
    ("loss_weights for two outputs on one",
     lambda: _model(loss="mse", metrics=None, loss_weights=[1.0, 2.0]).fit(
         X, np.eye(2, dtype="float32")[Y], verbose=0), UsageError,
     ["loss_weights = [1.0, 2.0]", "the model has 1 output", "loss_weights=1.0"]),
    ("label out of range",
     lambda: _model().fit(X, np.array([0, 1, 5, 0, 1, 0, 1, 1]), verbose=0), UsageError,
     ["label 5", "Received a label value of 5 which is outside the valid range of [0, 2)",
      "one unit per class"]),
]


@pytest.mark.parametrize("call,error,says", [c[1:] for c in ITEM_12],
                         ids=[c[0] for c in ITEM_12])
def test_each_reported_message_names_the_value_and_the_fix(
        call: Any, error: type[Exception], says: list[str]) -> None:
    with pytest.raises(error) as info:
        call()
    message = str(info.value)
    assert all(piece in message for piece in says), message
    assert "Fix:" in message


def test_python_lists_train_like_arrays_as_in_keras() -> None:
    from_lists = _model().fit(X.tolist(), Y.tolist(), shuffle=False, verbose=0).history
    from_arrays = _model().fit(X, Y, shuffle=False, verbose=0).history
    assert from_lists == from_arrays


# ------------------------------------------------------------ names at compile (item 13)
@pytest.mark.parametrize("compile_args,says", [
    ({"loss": "crossentropyy"}, "Unknown loss function: 'crossentropyy'"),
    ({"loss": {"output": "msee"}}, "Unknown loss function: 'msee'"),
    ({"metrics": ["accuraccy"]}, "Unknown metric function: 'accuraccy'"),
    ({"weighted_metrics": ["maee"]}, "Unknown metric function: 'maee'"),
    ({"metrics": {"output": ["precission"]}}, "Unknown metric function: 'precission'"),
])
def test_unknown_loss_and_metric_names_fail_at_compile(compile_args: dict[str, Any],
                                                      says: str) -> None:
    with pytest.raises(UsageError, match=says):
        _model(**compile_args)


# ------------------------------------------------------------ load (item 10)
def _saved(tmp_path: Path) -> str:
    model = _model(loss="mse", metrics=None)
    model.compile(torch.optim.SGD(model.module.parameters(), lr=0.01, momentum=0.9), "mse")
    model.fit(X, np.eye(2, dtype="float32")[Y], verbose=0)
    path = str(tmp_path / "sgd.pt")
    model.save(path)
    return path


def test_load_of_another_optimizers_state_warns_and_keeps_the_compiled_one(
        tmp_path: Path) -> None:
    path = _saved(tmp_path)
    adam = _model(loss="mse", metrics=None)
    adam.compile("adam", "mse")
    with pytest.warns(UserWarning, match="optimizer state of torch.optim.sgd.SGD.*compiled "
                                         "with torch.optim.adam.Adam.*Fix:"):
        adam.load(path)
    group = adam.optimizer.param_groups[0]
    assert group["lr"] == 0.001 and group["betas"] == (0.9, 0.999) and "momentum" not in group
    for a, b in zip(adam.get_weights(), torch.load(path, weights_only=True)["module"].values()):
        np.testing.assert_array_equal(a, b.numpy())  # the weights were loaded


def test_load_of_the_same_optimizer_restores_its_state(tmp_path: Path) -> None:
    path = _saved(tmp_path)
    sgd = _model(loss="mse", metrics=None)
    sgd.compile(torch.optim.SGD(sgd.module.parameters(), lr=0.5, momentum=0.9), "mse")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sgd.load(path)
    assert sgd.optimizer.param_groups[0]["lr"] == 0.01  # resumed, as Keras restores it
    assert sgd.optimizer.state  # momentum buffers


def test_an_older_file_without_the_class_is_compared_by_hyper_parameters(
        tmp_path: Path) -> None:
    path = _saved(tmp_path)
    obj = torch.load(path, weights_only=True)
    del obj["optimizer_class"]
    torch.save(obj, path)
    adam = _model(loss="mse", metrics=None)
    adam.compile("adam", "mse")
    with pytest.warns(UserWarning, match="another optimizer"):
        adam.load(path)
    assert adam.optimizer.param_groups[0]["betas"] == (0.9, 0.999)


def test_weights_of_another_architecture_name_the_file(tmp_path: Path) -> None:
    path = os.path.join(tmp_path, "w.pt")
    _model().save_weights(path)
    with pytest.raises(UsageError, match=r"(?s)weights in '.*w\.pt' .*size mismatch.*Fix:"):
        Model(nn.Linear(4, 2)).load_weights(path)
