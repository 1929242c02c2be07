"""Bad inputs to the training API: each raises a clear error naming the bad value.

One table of cases — ``compile``, ``fit``, ``evaluate`` and ``predict`` arguments, losses,
metrics, callbacks' arguments, optimizers by name, mixed-precision policies and loss
scaling, saving and loading — run through the public API.  Each case names the
exception type and pieces of the message: the bad value first, then the rule or the fix.
The number of cases run is printed at the end of the session (``conftest.py``).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import distrib.mixed_precision as mp
from distrib.data import Dataset
from distrib.errors import ContextError, InvalidTypeError, UsageError
from distrib.training import Model, callbacks, losses, metrics, optimizers


@dataclass(frozen=True)
class Case:
    """A bad input: ``call()`` must raise ``error`` with every piece of ``says`` in its message.

    Attributes:
        id: a short unique name (the pytest id).
        call: calls the public API with the bad input.
        error: the exception type expected (a subclass is accepted).
        says: pieces of the message: the bad value first, then the rule or the fix.
        env: environment variables set for the call.
    """

    id: str
    call: Callable[[], Any]
    error: type[BaseException]
    says: list[str]
    env: Mapping[str, str] = field(default_factory=dict)


X = np.random.RandomState(0).rand(8, 3).astype("float32")
Y = np.array([0, 1, 1, 0, 1, 0, 1, 1])
ONE_HOT = np.eye(2, dtype="float32")[Y]
_FILES = tempfile.TemporaryDirectory(prefix="distrib-bad-inputs-")


def _path(name: str) -> str:
    return os.path.join(_FILES.name, name)


def model(**compile_args: Any) -> Model:
    """A compiled 3 -> 2 classifier (sparse labels, accuracy)."""
    torch.manual_seed(0)
    m = Model(nn.Linear(3, 2))
    compile_args.setdefault("optimizer", "sgd")
    compile_args.setdefault("loss", losses.SparseCategoricalCrossentropy(from_logits=True))
    compile_args.setdefault("metrics", ["accuracy"])
    m.compile(**compile_args)
    return m


def compile_(**compile_args: Any) -> Callable[[], Any]:
    return lambda: model(**compile_args)


def fit(*args: Any, **kwargs: Any) -> Callable[[], Any]:
    kwargs.setdefault("verbose", 0)
    return lambda: model().fit(*args, **kwargs)


def regression_fit(y: Any, **compile_args: Any) -> Callable[[], Any]:
    compile_args.setdefault("loss", "mse")
    compile_args.setdefault("metrics", None)
    return lambda: model(**compile_args).fit(X, y, verbose=0)


class TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(3, 2), nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.a(x), self.b(x)


def two_heads_with_class_weight() -> Any:
    m = Model(TwoHeads())
    m.compile("sgd", losses.SparseCategoricalCrossentropy(from_logits=True))
    return m.fit(X, [Y, Y], class_weight={0: 1.0, 1: 2.0}, verbose=0)


def saved(name: str, what: str = "weights") -> str:
    path = _path(name)
    if not os.path.exists(path):
        m = model()
        m.save_weights(path) if what == "weights" else m.save(path)
    return path


def not_a_state_dict() -> None:
    torch.save([1, 2, 3], _path("list.pt"))
    model().load_weights(_path("list.pt"))


def sgd() -> torch.optim.Optimizer:
    return torch.optim.SGD([nn.Parameter(torch.ones(1))], lr=0.1)


def lso(**kwargs: Any) -> Callable[[], Any]:
    return lambda: mp.LossScaleOptimizer(sgd(), **kwargs)


CASES = [
    # ------------------------------------------------------------------ compile
    Case("compile-optimizer-unknown-name", compile_(optimizer="adamm"), UsageError,
         ["optimizer = 'adamm'", "Unknown optimizer", "adam"]),
    Case("compile-optimizer-a-number", compile_(optimizer=5), InvalidTypeError,
         ["optimizer = 5", "optimizer='adam'"]),
    Case("compile-optimizer-class-not-an-optimizer", compile_(optimizer=int), InvalidTypeError,
         ["optimizer = <class 'int'>"]),
    Case("compile-loss-unknown-name", compile_(loss="crossentropyy"), UsageError,
         ["loss = 'crossentropyy'", "Unknown loss function", "sparse_categorical_crossentropy"]),
    Case("compile-loss-a-number", compile_(loss=5), InvalidTypeError, ["loss = 5"]),
    Case("compile-loss-unknown-name-in-a-dict", compile_(loss={"output": "msee"}), UsageError,
         ["loss = 'msee'", "Unknown loss function"]),
    Case("compile-metric-unknown-name", compile_(metrics=["accuraccy"]), UsageError,
         ["metric = 'accuraccy'", "Unknown metric function"]),
    Case("compile-metrics-a-string", compile_(metrics="accuracy"), InvalidTypeError,
         ["metrics = 'accuracy'", "Expected a list or dictionary", "metrics=['accuracy']"]),
    Case("compile-metric-a-number", compile_(metrics=[5]), InvalidTypeError,
         ["metric = 5", "metrics=['accuracy']"]),
    Case("compile-weighted-metric-unknown-name", compile_(weighted_metrics=["maee"]),
         UsageError, ["metric = 'maee'", "Unknown metric function"]),
    Case("compile-weighted-metrics-a-string", compile_(weighted_metrics="mae"),
         InvalidTypeError, ["weighted_metrics = 'mae'", "Expected a list or dictionary"]),
    Case("compile-metric-object-in-both-lists",
         lambda: (lambda m: model(metrics=[m], weighted_metrics=[m]))(metrics.Mean()),
         UsageError, ["Mean(name='mean')", "Found duplicated metrics object"]),
    Case("compile-loss-weights-a-string", compile_(loss_weights="a"), InvalidTypeError,
         ["loss_weights = 'a'", "one number per output"]),
    Case("compile-steps-per-execution-zero", compile_(steps_per_execution=0), UsageError,
         ["steps_per_execution = 0", "positive int"]),
    Case("compile-steps-per-execution-a-fraction", compile_(steps_per_execution=1.5),
         UsageError, ["steps_per_execution = 1.5"]),
    Case("compile-unknown-argument", compile_(metric=["accuracy"]), UsageError,
         ["['metric']", "are not arguments of compile"]),
    Case("compile-run-eagerly-and-jit-compile", compile_(run_eagerly=True, jit_compile=True),
         UsageError, ["jit_compile = True", "You cannot enable `run_eagerly` and "
                                            "`jit_compile` at the same time"]),
    Case("loss-reduction-unknown", lambda: losses.MeanSquaredError(reduction="mean"),
         UsageError, ["reduction = 'mean'", "Invalid Reduction Key"]),
    # ---------------------------------------------------------------------- fit
    Case("fit-before-compile", lambda: Model(nn.Linear(3, 2)).fit(X, Y), ContextError,
         ["You must compile your model", "model.compile(optimizer, loss)"]),
    Case("fit-x-none", fit(None, Y), UsageError, ["x = None", "fit() needs input data"]),
    Case("fit-x-a-number", fit(5, Y), InvalidTypeError,
         ["x = 5", "Failed to find data adapter that can handle input: <class 'int'>"]),
    Case("fit-x-a-string", fit("abc", Y), InvalidTypeError, ["x = 'abc'"]),
    Case("fit-x-a-dict-of-lists", fit({"a": [1, 2]}, Y), InvalidTypeError,
         ["x = 'dict'", "<class 'dict'>"]),
    Case("fit-x-ragged-lists", fit([[1.0, 2.0, 3.0], [4.0]], [0, 1]), UsageError,
         ["x = 'a list of 2 items'", "rectangular"]),
    Case("fit-y-a-string", fit(X, "abc"), InvalidTypeError, ["y = 'abc'", "numpy array"]),
    Case("fit-sample-weight-a-string", fit(X, Y, sample_weight="abc"), InvalidTypeError,
         ["sample_weight = 'abc'"]),
    Case("fit-x-and-y-of-different-lengths", fit(X, Y[:5]), UsageError,
         ["input sizes = [5, 8]", "Data cardinality is ambiguous"]),
    Case("fit-without-targets", fit(X), UsageError,
         ["y = None", "Target data is missing", "`fit()`"]),
    Case("fit-epochs-a-fraction", fit(X, Y, epochs=1.5), InvalidTypeError,
         ["epochs = 1.5", "must be an int"]),
    Case("fit-epochs-negative", fit(X, Y, epochs=-1), UsageError, ["epochs = -1"]),
    Case("fit-epochs-a-string", fit(X, Y, epochs="3"), InvalidTypeError, ["epochs = '3'"]),
    Case("fit-initial-epoch-negative", fit(X, Y, initial_epoch=-1), UsageError,
         ["initial_epoch = -1"]),
    Case("fit-batch-size-zero", fit(X, Y, batch_size=0), UsageError,
         ["batch_size = 0", "GLOBAL batch size"]),
    Case("fit-batch-size-a-fraction", fit(X, Y, batch_size=2.5), UsageError,
         ["batch_size = 2.5"]),
    Case("fit-batch-size-with-a-dataset",
         lambda: model().fit(Dataset.from_tensor_slices((X, Y)).batch(4), batch_size=4,
                             verbose=0), UsageError,
         ["batch_size = 4", "must not be specified"]),
    Case("fit-y-with-a-dataset",
         lambda: model().fit(Dataset.from_tensor_slices(X).batch(4), Y, verbose=0),
         UsageError, ["y = 'ndarray'", "`y` argument is not supported"]),
    Case("fit-validation-split-above-one", fit(X, Y, validation_split=1.5), UsageError,
         ["validation_split = 1.5", "(0, 1)"]),
    Case("fit-validation-split-with-a-dataset",
         lambda: model().fit(Dataset.from_tensor_slices((X, Y)).batch(4),
                             validation_split=0.2, verbose=0), UsageError,
         ["validation_split = 0.2", "only supported for Tensors or NumPy arrays"]),
    Case("fit-validation-data-without-targets", fit(X, Y, validation_data=(X,)), UsageError,
         ["y = None", "Target data is missing", "`validation_data`"]),
    Case("fit-validation-data-x-alone", fit(X, Y, validation_data=X), UsageError,
         ["y = None", "`validation_data`"]),
    Case("fit-validation-data-four-items", fit(X, Y, validation_data=(X, Y, Y, Y)),
         UsageError, ["validation_data = 'a tuple of 4 items'",
                      "Data is expected to be in format"]),
    Case("fit-validation-data-empty", fit(X, Y, validation_data=()), UsageError,
         ["validation_data = 'a tuple of 0 items'"]),
    Case("fit-validation-freq-zero", fit(X, Y, validation_data=(X, Y), validation_freq=0),
         UsageError, ["validation_freq = 0", "validation_freq=1"]),
    Case("fit-validation-freq-a-string", fit(X, Y, validation_freq="2"), InvalidTypeError,
         ["validation_freq = '2'", "Expected validation_freq to be a list or int"]),
    Case("fit-validation-freq-epoch-zero", fit(X, Y, validation_freq=[0, 2]),
         InvalidTypeError, ["validation_freq = [0, 2]", "epoch numbers start at 1"]),
    Case("fit-validation-batch-size-zero",
         fit(X, Y, validation_data=(X, Y), validation_batch_size=0), UsageError,
         ["validation_batch_size = 0"]),
    Case("fit-validation-steps-zero", fit(X, Y, validation_data=(X, Y), validation_steps=0),
         UsageError, ["validation_steps = 0"]),
    Case("fit-steps-per-epoch-zero", fit(X, Y, steps_per_epoch=0), UsageError,
         ["steps_per_epoch = 0"]),
    Case("fit-steps-per-epoch-a-fraction", fit(X, Y, steps_per_epoch=1.5), UsageError,
         ["steps_per_epoch = 1.5"]),
    Case("fit-verbose-three", fit(X, Y, verbose=3), UsageError,
         ["verbose = 3", "'auto', 0, 1 or 2"]),
    Case("fit-shuffle-a-string", fit(X, Y, shuffle="yes"), InvalidTypeError,
         ["shuffle = 'yes'", "True or False"]),
    Case("fit-callbacks-a-number", fit(X, Y, callbacks=5), InvalidTypeError,
         ["callbacks = 5", "Callback objects"]),
    Case("fit-callbacks-a-list-of-numbers", fit(X, Y, callbacks=[5]), InvalidTypeError,
         ["callbacks = 5"]),
    Case("fit-class-weight-a-list", fit(X, Y, class_weight=[1.0, 2.0]), InvalidTypeError,
         ["class_weight = [1.0, 2.0]", "must be a dict"]),
    Case("fit-class-weight-keys-with-a-gap", fit(X, Y, class_weight={0: 1.0, 2: 3.0}),
         UsageError, ["class_weight = {0: 1.0, 2: 3.0}", "Expected `class_weight` to be a "
                      "dict with keys from 0 to one less than the number of classes"]),
    Case("fit-class-weight-string-keys", fit(X, Y, class_weight={"0": 1.0, "1": 2.0}),
         UsageError, ["class_weight = {'0': 1.0, '1': 2.0}"]),
    Case("fit-class-weight-a-string-weight", fit(X, Y, class_weight={0: "a", 1: 2.0}),
         InvalidTypeError, ["found 'a'", "weights must be numbers"]),
    Case("fit-class-weight-missing-a-class", fit(X, Y, class_weight={0: 1.0}), UsageError,
         ["no weight for class 1", "add a weight for class 1"]),
    Case("fit-class-weight-two-outputs", two_heads_with_class_weight, UsageError,
         ["class_weight = 'with several outputs'", "only supported for Models with a "
                                                    "single output"]),
    Case("fit-one-hot-labels-with-a-sparse-loss", fit(X, ONE_HOT), UsageError,
         ["labels of shape (8, 2)", "one-hot", "categorical_crossentropy"]),
    Case("fit-label-out-of-range", fit(X, np.array([0, 1, 5, 0, 1, 0, 1, 1])), UsageError,
         ["label 5", "outside the valid range of [0, 2)"]),
    Case("fit-label-negative", fit(X, np.array([0, 1, -1, 0, 1, 0, 1, 1])), UsageError,
         ["label -1", "class ids start at 0"]),
    Case("fit-targets-of-another-shape", regression_fit(np.ones((8, 5), "float32")),
         UsageError, ["targets of shape (8, 5)", "predictions of shape (8, 2)"]),
    Case("fit-loss-weights-two-for-one-output",
         regression_fit(ONE_HOT, loss_weights=[1.0, 2.0]), UsageError,
         ["loss_weights = [1.0, 2.0]", "the model has 1 output"]),
    Case("fit-loss-for-an-unknown-output", regression_fit(ONE_HOT, loss={"head": "mse"}),
         UsageError, ["loss = {'head': 'mse'}", "not output names"]),
    Case("fit-metrics-for-an-unknown-output",
         regression_fit(ONE_HOT, metrics={"head": ["mae"]}), UsageError,
         ["metrics = {'head': ['mae']}", "not output names"]),
    # ----------------------------------------------------------- evaluate, predict
    Case("evaluate-without-targets", lambda: model().evaluate(X, verbose=0), UsageError,
         ["y = None", "Target data is missing", "`evaluate()`"]),
    Case("evaluate-x-none", lambda: model().evaluate(None, Y, verbose=0), UsageError,
         ["x = None", "evaluate() needs input data"]),
    Case("evaluate-steps-zero", lambda: model().evaluate(X, Y, steps=0, verbose=0),
         UsageError, ["steps = 0"]),
    Case("evaluate-batch-size-negative",
         lambda: model().evaluate(X, Y, batch_size=-1, verbose=0), UsageError,
         ["batch_size = -1"]),
    Case("evaluate-sample-weight-of-another-length",
         lambda: model().evaluate(X, Y, sample_weight=np.ones(3), verbose=0), UsageError,
         ["input sizes = [3, 8]"]),
    Case("predict-x-none", lambda: model().predict(None, verbose=0), UsageError,
         ["x = None", "predict() needs input data"]),
    Case("predict-x-a-number", lambda: model().predict(5, verbose=0), InvalidTypeError,
         ["x = 5"]),
    Case("predict-batch-size-zero", lambda: model().predict(X, batch_size=0, verbose=0),
         UsageError, ["batch_size = 0"]),
    Case("predict-steps-a-fraction", lambda: model().predict(X, steps=0.5, verbose=0),
         UsageError, ["steps = 0.5"]),
    # ---------------------------------------------------------------- callbacks
    Case("model-checkpoint-save-freq-unknown",
         lambda: callbacks.ModelCheckpoint(_path("c.pt"), save_freq="often"), UsageError,
         ["save_freq = 'often'", "Unrecognized save_freq"]),
    Case("model-checkpoint-filepath-none", lambda: callbacks.ModelCheckpoint(None),
         InvalidTypeError, ["ModelCheckpoint filepath = None", "must be a path"]),
    Case("model-checkpoint-unknown-field-in-the-path",
         fit(X, Y, callbacks=[callbacks.ModelCheckpoint(_path("c-{foo}.pt"))]), KeyError,
         ["c-{foo}.pt", "Failed to format this callback filepath"]),
    Case("csv-logger-filename-none", lambda: callbacks.CSVLogger(None), InvalidTypeError,
         ["CSVLogger filename = None"]),
    Case("csv-logger-separator-a-number", lambda: callbacks.CSVLogger(_path("l"), separator=5),
         UsageError, ["CSVLogger separator = 5", "1-character string"]),
    Case("reduce-lr-factor-one", lambda: callbacks.ReduceLROnPlateau(factor=1.0), UsageError,
         ["factor = 1.0", "does not support a factor >= 1.0"]),
    Case("tensorboard-update-freq-unknown",
         lambda: callbacks.TensorBoard(_FILES.name, update_freq="sometimes"), UsageError,
         ["update_freq = 'sometimes'"]),
    Case("tensorboard-histogram-freq-negative",
         lambda: callbacks.TensorBoard(_FILES.name, histogram_freq=-1), UsageError,
         ["histogram_freq = -1"]),
    Case("lr-scheduler-not-a-function", lambda: callbacks.LearningRateScheduler(5),
         InvalidTypeError, ["schedule = 5", "must be a function of the epoch"]),
    Case("lr-scheduler-returns-a-string",
         fit(X, Y, callbacks=[callbacks.LearningRateScheduler(lambda epoch: "fast")]),
         InvalidTypeError, ["'fast'", "should be float"]),
    Case("lambda-callback-not-a-function", lambda: callbacks.LambdaCallback(on_epoch_end=5),
         InvalidTypeError, ["LambdaCallback on_epoch_end = 5", "must be a function"]),
    Case("lambda-callback-unknown-hook",
         lambda: callbacks.LambdaCallback(on_epoch_finish=print), UsageError,
         ["'on_epoch_finish'", "is not a callback hook"]),
    # ---------------------------------------------------------------- optimizers
    Case("optimizer-by-unknown-name", lambda: optimizers.get("sgdd", []), UsageError,
         ["optimizer = 'sgdd'", "Unknown optimizer"]),
    Case("learning-rate-a-string", lambda: optimizers.set_learning_rate(sgd(), "fast"),
         UsageError, ["learning rate = 'fast'", "non-negative finite number"]),
    Case("learning-rate-negative", lambda: optimizers.set_learning_rate(sgd(), -0.1),
         UsageError, ["learning rate = -0.1"]),
    # ----------------------------------------------------------- mixed precision
    Case("policy-unknown-name", lambda: mp.Policy("mixed_float32"), UsageError,
         ["policy name = 'mixed_float32'", "mixed_float16"]),
    Case("policy-a-number", lambda: mp.Policy(5), UsageError, ["policy name = 5"]),
    Case("policy-float32-vars", lambda: mp.Policy("mixed_float16_float32_vars"), UsageError,
         ["'mixed_float16_float32_vars'", "have been removed"]),
    Case("global-policy-unknown-name", lambda: mp.set_global_policy("float8"), UsageError,
         ["policy name = 'float8'"]),
    Case("loss-scale-optimizer-of-a-name", lambda: mp.LossScaleOptimizer("sgd"),
         InvalidTypeError, ["inner_optimizer = 'sgd'", "torch.optim.Optimizer"]),
    Case("loss-scale-optimizer-of-itself",
         lambda: mp.LossScaleOptimizer(mp.LossScaleOptimizer(sgd())), InvalidTypeError,
         ["cannot wrap another LossScaleOptimizer"]),
    Case("loss-scale-optimizer-dynamic-a-string", lso(dynamic="yes"), InvalidTypeError,
         ["dynamic = 'yes'", "must be a bool"]),
    Case("loss-scale-optimizer-fixed-without-a-scale", lso(dynamic=False), UsageError,
         ["initial_scale = None", '"initial_scale" must be specified']),
    Case("loss-scale-optimizer-fixed-with-growth-steps",
         lso(dynamic=False, initial_scale=8.0, dynamic_growth_steps=10), UsageError,
         ["dynamic_growth_steps = 10", "must be None"]),
    Case("loss-scale-optimizer-scale-below-one", lso(initial_scale=0.5), UsageError,
         ["initial_scale = 0.5", ">= 1"]),
    Case("loss-scale-optimizer-growth-steps-zero", lso(dynamic_growth_steps=0), UsageError,
         ["dynamic_growth_steps = 0"]),
    Case("loss-scale-optimizer-step-with-a-closure",
         lambda: mp.LossScaleOptimizer(sgd()).step(lambda: 0.0), UsageError,
         ["closure = ", "does not take a closure"]),
    Case("loss-scale-optimizer-of-float16-parameters",
         lambda: (lambda w: mp.LossScaleOptimizer(torch.optim.SGD([w], lr=0.1)).minimize(
             w.float().sum()))(nn.Parameter(torch.ones(2, dtype=torch.float16))),
         UsageError, ["parameters = 'float16'", "mixed_float16 policy"]),
    # ------------------------------------------------------------ saving, loading
    Case("load-weights-of-a-missing-file",
         lambda: model().load_weights(_path("missing.pt")), FileNotFoundError,
         ["missing.pt", "no such file"]),
    Case("load-a-missing-file", lambda: model().load(_path("missing.pt")), FileNotFoundError,
         ["missing.pt", "no such file"]),
    Case("save-to-a-directory", lambda: model().save(_FILES.name), IsADirectoryError,
         [_FILES.name, "is an existing directory"]),
    Case("save-weights-without-overwrite",
         lambda: model().save_weights(saved("once.pt"), overwrite=False), UsageError,
         ["once.pt", "exists and overwrite=False"]),
    Case("load-weights-not-a-state-dict", not_a_state_dict, UsageError,
         ["weights file = 'list'", "does not hold a state dict"]),
    Case("load-weights-of-another-architecture",
         lambda: Model(nn.Linear(4, 2)).load_weights(saved("w.pt")), UsageError,
         ["w.pt", "size mismatch"]),
    Case("load-of-another-architecture",
         lambda: Model(nn.Linear(4, 2)).load(saved("m.pt", "model")), UsageError,
         ["m.pt", "size mismatch"]),
    Case("set-weights-too-few", lambda: model().set_weights([np.ones((2, 3))]), UsageError,
         ["weights = 'list of 1 arrays'", "get_weights()"]),
    Case("set-weights-of-another-shape",
         lambda: model().set_weights([np.ones((3, 3)), np.ones(2)]), UsageError,
         ["weights for 'weight' = (3, 3)", "must have shape (2, 3)"]),
    # ----------------------------------------------------------- losses, metrics
    Case("metric-a-number", lambda: metrics.get(5), InvalidTypeError, ["metric = 5"]),
    Case("loss-a-number", lambda: losses.get(3), InvalidTypeError, ["loss = 3"]),
    Case("auc-one-threshold", lambda: metrics.AUC(num_thresholds=1), UsageError,
         ["num_thresholds = 1", "> 1"]),
    Case("precision-threshold-above-one", lambda: metrics.Precision(thresholds=2.0),
         UsageError, ["thresholds = 2.0", "Threshold values must be in [0, 1]"]),
    Case("recall-threshold-negative", lambda: metrics.Recall(thresholds=[-0.1, 0.5]),
         UsageError, ["thresholds = [-0.1, 0.5]"]),
    Case("model-of-a-number", lambda: Model(5), InvalidTypeError,
         ["module = 'int'", "torch.nn.Module"]),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_training_input_raises_a_clear_error(case: Case,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in case.env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(case.error) as info:
        case.call()
    message = str(info.value)
    missing = [piece for piece in case.says if piece not in message]
    assert not missing, f"{case.id}: {missing} not in the message:\n{message}"


def test_training_cases_are_distinct_and_numerous() -> None:
    ids = [c.id for c in CASES]
    assert len(set(ids)) == len(ids), "two cases share an id"
    assert all(c.says for c in CASES), "every case names what the message must say"
    assert len(CASES) >= 60
