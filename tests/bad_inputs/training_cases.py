"""Bad arguments of distrib.Model (compile, fit, evaluate, predict, saving), callbacks,
losses and metrics.  The models are tiny: every case fails before or at its first step.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

import distrib
from distrib import callbacks as C
from distrib import losses as L
from distrib import metrics as M
from distrib.data import Dataset
from distrib.errors import CheckpointError, ContextError, InvalidTypeError, UsageError
from tests.bad_inputs.case import Case, accepted

X = np.ones((8, 3), np.float32)
Y = np.ones((8, 1), np.float32)


def model(compiled: bool = True, **kwargs: Any) -> distrib.Model:
    m = distrib.Model(torch.nn.Linear(3, 1))
    if compiled:
        m.compile(optimizer="sgd", loss="mse", **kwargs)
    return m


def compile_with(**kwargs: Any) -> None:
    kwargs.setdefault("optimizer", "sgd")
    kwargs.setdefault("loss", "mse")
    model(False).compile(**kwargs)


def fit(**kwargs: Any) -> Any:
    kwargs.setdefault("verbose", 0)
    return model().fit(X, Y, **kwargs)


def evaluate(**kwargs: Any) -> Any:
    kwargs.setdefault("verbose", 0)
    return model().evaluate(X, Y, **kwargs)


def predict(**kwargs: Any) -> Any:
    kwargs.setdefault("verbose", 0)
    return model().predict(X, **kwargs)


def pairs() -> Dataset:
    return Dataset.from_tensor_slices((X, Y)).batch(2)


def write(name: str, data: bytes) -> str:
    with open(name, "wb") as f:
        f.write(data)
    return name


class _RunsCode:
    def __reduce__(self) -> Any:
        return (print, ("this ran",))


def malicious_file() -> str:
    torch.save({"weights": _RunsCode()}, "malicious.pt")
    return "malicious.pt"


def truncated_file() -> str:
    model().save_weights("whole.pt")
    with open("whole.pt", "rb") as f:
        return write("truncated.pt", f.read()[:40])


MODEL_CASES = [
    Case("model-of-none", lambda: distrib.Model(None), UsageError,
         ["module = None", "distrib.Model(nn.Sequential(...))"]),
    Case("model-of-a-string", lambda: distrib.Model("net"), InvalidTypeError,
         ["module = 'str'", "torch.nn.Module"]),
    Case("compile-unknown-optimizer", lambda: compile_with(optimizer="adamm"), UsageError,
         ["optimizer = 'adamm'", "the optimizer names are", "sgd"]),
    Case("compile-optimizer-a-number", lambda: compile_with(optimizer=5), InvalidTypeError,
         ["optimizer = 5", "torch.optim.SGD(params, lr=0.1)"]),
    Case("compile-optimizer-of-another-module", lambda: compile_with(
        optimizer=torch.optim.SGD(torch.nn.Linear(3, 1).parameters(), lr=0.1)), UsageError,
         ["none of its parameters belongs to this model", "fit would train nothing",
          "torch.optim.SGD(model.parameters(), lr=0.1)"]),
    Case("compile-unknown-loss", lambda: compile_with(loss="msee"), UsageError,
         ["loss = 'msee'", "mean_squared_error"]),
    Case("compile-loss-a-number", lambda: compile_with(loss=5), InvalidTypeError,
         ["loss = 5", "loss='sparse_categorical_crossentropy'"]),
    Case("compile-unknown-metric", lambda: compile_with(metrics=["acc2"]), UsageError,
         ["metric = 'acc2'", "the metric names are"]),
    Case("compile-metrics-a-string", lambda: compile_with(metrics="accuracy"),
         InvalidTypeError, ["metrics = 'accuracy'", "metrics=['accuracy']"]),
    Case("compile-unknown-weighted-metric", lambda: compile_with(weighted_metrics=["zz"]),
         UsageError, ["metric = 'zz'"]),
    Case("compile-loss-weights-a-string", lambda: compile_with(loss_weights="x"),
         InvalidTypeError, ["loss_weights = 'x'", "loss_weights=[1.0, 0.5]"]),
    Case("compile-steps-per-execution-zero", lambda: compile_with(steps_per_execution=0),
         UsageError, ["steps_per_execution = 0", "positive int"]),
    Case("compile-unknown-argument", lambda: compile_with(foo=1), UsageError,
         ["['foo']", "are not arguments of compile"]),
    Case("compile-jit-a-string", lambda: compile_with(jit_compile="yes"), UsageError,
         ["jit_compile = 'yes'", "Fix: pass jit_compile=True"]),
    Case("compile-jit-a-number", lambda: compile_with(jit_compile=5), UsageError,
         ["jit_compile = 5", "Fix: pass jit_compile=True"]),
    Case("function-jit-unknown-backend",
         lambda: distrib.function(lambda x: x, jit_compile="nonexistent_backend"),
         UsageError, ["jit_compile = 'nonexistent_backend'", "aot_eager"]),
    Case("compile-run-eagerly-a-string", lambda: compile_with(run_eagerly="yes"), UsageError,
         ["run_eagerly = 'yes'"]),
    Case("compile-jit-and-eager", lambda: compile_with(jit_compile=True, run_eagerly=True),
         UsageError, ["jit_compile = True", "at the same time"]),
    Case("fit-uncompiled", lambda: model(False).fit(X, Y, verbose=0), ContextError,
         ["You must compile your model", "model.compile(optimizer, loss)"]),
    Case("fit-batch-zero", lambda: fit(batch_size=0), UsageError,
         ["batch_size = 0", "GLOBAL batch size"]),
    Case("fit-batch-a-string", lambda: fit(batch_size="8"), UsageError,
         ["batch_size = '8'"]),
    Case("fit-epochs-negative", lambda: fit(epochs=-1), UsageError,
         ["epochs = -1", "epochs=1"]),
    Case("fit-epochs-a-fraction", lambda: fit(epochs=1.5), InvalidTypeError,
         ["epochs = 1.5", "whole passes"]),
    Case("fit-verbose-five", lambda: fit(verbose=5), UsageError,
         ["verbose = 5", "'auto', 0, 1 or 2"]),
    Case("fit-verbose-a-word", lambda: fit(verbose="x"), UsageError, ["verbose = 'x'"]),
    Case("fit-validation-split-too-big", lambda: fit(validation_split=1.5), UsageError,
         ["validation_split = 1.5", "(0, 1)"]),
    Case("fit-validation-split-negative", lambda: fit(validation_split=-0.1), UsageError,
         ["validation_split = -0.1"]),
    Case("fit-validation-data-without-targets", lambda: fit(validation_data=(X,)),
         UsageError, ["Target data is missing", "validation_data"]),
    Case("fit-validation-data-a-number", lambda: fit(validation_data=5), InvalidTypeError,
         ["x = 5", "Failed to find data adapter"]),
    Case("fit-shuffle-a-string", lambda: fit(shuffle="yes"), InvalidTypeError,
         ["shuffle = 'yes'", "True or False"]),
    Case("fit-callback-a-number", lambda: fit(callbacks=[5]), InvalidTypeError,
         ["callbacks = 5", "subclass Callback"]),
    Case("fit-callbacks-a-number", lambda: fit(callbacks=5), InvalidTypeError,
         ["callbacks = 5"]),
    Case("fit-class-weight-a-list", lambda: fit(class_weight=[1, 2]), InvalidTypeError,
         ["class_weight = [1, 2]", "class_weight={0: 1.0, 1: 5.0}"]),
    Case("fit-sample-weight-too-short", lambda: fit(sample_weight=np.ones(3)), UsageError,
         ["input sizes = [3, 8]", "same number of samples"]),
    Case("fit-initial-epoch-negative", lambda: fit(initial_epoch=-1), UsageError,
         ["initial_epoch = -1"]),
    accepted("fit-initial-epoch-past-the-end",
             lambda: fit(initial_epoch=5, epochs=2).history, {},
             "Keras trains no epoch when initial_epoch >= epochs and returns an empty History"),
    Case("fit-steps-per-epoch-zero", lambda: fit(steps_per_epoch=0), UsageError,
         ["steps_per_epoch = 0", "-1 runs until the data ends"]),
    Case("fit-validation-steps-zero",
         lambda: fit(validation_data=(X, Y), validation_steps=0), UsageError,
         ["validation_steps = 0"]),
    Case("fit-validation-freq-zero", lambda: fit(validation_data=(X, Y), validation_freq=0),
         UsageError, ["validation_freq = 0", "at least 1"]),
    Case("fit-validation-freq-a-string",
         lambda: fit(validation_data=(X, Y), validation_freq="1"), InvalidTypeError,
         ["validation_freq = '1'", "validation_freq=[1, 5, 10]"]),
    Case("fit-x-and-y-of-other-lengths", lambda: model().fit(X, Y[:5], verbose=0),
         UsageError, ["input sizes = [5, 8]", "Data cardinality is ambiguous"]),
    Case("fit-no-x", lambda: model().fit(None, Y, verbose=0), UsageError,
         ["x = None", "fit() needs input data"]),
    Case("fit-x-a-string", lambda: model().fit("data", Y, verbose=0), InvalidTypeError,
         ["x = 'data'", "Failed to find data adapter"]),
    Case("fit-dataset-and-y", lambda: model().fit(pairs(), Y, verbose=0), UsageError,
         ["`y` argument is not supported when using a dataset", "yield (x, y) pairs"]),
    Case("fit-dataset-and-batch-size", lambda: model().fit(pairs(), batch_size=4, verbose=0),
         UsageError, ["batch_size = 4", "must not be specified"]),
    Case("fit-unknown-argument", lambda: fit(foo=1), TypeError,
         ["unexpected keyword argument 'foo'"]),
    Case("evaluate-batch-zero", lambda: evaluate(batch_size=0), UsageError,
         ["batch_size = 0"]),
    Case("evaluate-steps-zero", lambda: evaluate(steps=0), UsageError, ["steps = 0"]),
    Case("evaluate-return-dict-a-string", lambda: evaluate(return_dict="x"), UsageError,
         ["return_dict = 'x'", "True or False"]),
    Case("evaluate-uncompiled", lambda: model(False).evaluate(X, Y, verbose=0), ContextError,
         ["You must compile your model"]),
    Case("evaluate-x-and-y-of-other-lengths",
         lambda: model().evaluate(X, Y[:3], verbose=0), UsageError,
         ["input sizes = [3, 8]"]),
    Case("evaluate-callback-a-number", lambda: evaluate(callbacks=[5]), InvalidTypeError,
         ["callbacks = 5"]),
    Case("predict-batch-negative", lambda: predict(batch_size=-1), UsageError,
         ["batch_size = -1"]),
    Case("predict-steps-zero", lambda: predict(steps=0), UsageError, ["steps = 0"]),
    Case("predict-no-x", lambda: model().predict(None, verbose=0), UsageError,
         ["x = None", "predict() needs input data"]),
    Case("train-on-batch-no-x", lambda: model().train_on_batch(None, Y), UsageError,
         ["x = None", "the batch needs features"]),
    Case("test-on-batch-other-lengths", lambda: model().test_on_batch(X, Y[:2]), UsageError,
         ["input sizes = [2, 8]"]),
    Case("set-weights-too-few", lambda: model().set_weights([np.ones(2)]), UsageError,
         ["list of 1 arrays", "the list that get_weights() returned"]),
    Case("set-weights-none", lambda: model().set_weights([]), UsageError,
         ["list of 0 arrays"]),
]

SAVING_CASES = [
    Case("save-weights-a-number", lambda: model().save_weights(5), UsageError,
         ["filepath = 5", "non-empty path", "'model.pt'"]),
    Case("save-weights-empty", lambda: model().save_weights(""), UsageError,
         ["filepath = ''"]),
    Case("save-a-number", lambda: model().save(5), UsageError, ["filepath = 5"]),
    Case("save-empty", lambda: model().save(""), UsageError, ["filepath = ''"]),
    Case("load-weights-a-number", lambda: model().load_weights(5), UsageError,
         ["filepath = 5"]),
    Case("load-weights-missing", lambda: model().load_weights("nowhere.pt"),
         FileNotFoundError, ["filepath = 'nowhere.pt'", "no such file"]),
    Case("load-weights-garbage", lambda: model().load_weights(
        write("garbage.pt", b"not a file of weights" * 4)), CheckpointError,
         ["garbage.pt", "is corrupt or not a file of weights", "save/save_weights"]),
    Case("load-weights-truncated", lambda: model().load_weights(truncated_file()),
         CheckpointError, ["truncated.pt", "is corrupt"]),
    Case("load-weights-malicious", lambda: model().load_weights(malicious_file()),
         CheckpointError, ["malicious.pt", "holds a reference to", "run code from the file",
                           "so it is refused"]),
    Case("load-model-a-number", lambda: distrib.models.load_model(5), UsageError,
         ["filepath = 5"]),
    Case("load-model-missing", lambda: distrib.models.load_model("nowhere.pt"),
         FileNotFoundError, ["filepath = 'nowhere.pt'"]),
    Case("load-model-malicious", lambda: distrib.models.load_model(malicious_file()),
         CheckpointError, ["holds a reference to", "so it is refused"]),
]

CALLBACK_CASES = [
    Case("early-stopping-monitor-a-number", lambda: C.EarlyStopping(monitor=5),
         InvalidTypeError, ["EarlyStopping monitor = 5", "monitor='val_loss'"]),
    Case("early-stopping-patience-negative", lambda: C.EarlyStopping(patience=-1),
         UsageError, ["EarlyStopping patience = -1", "int >= 0"]),
    Case("early-stopping-patience-a-string", lambda: C.EarlyStopping(patience="2"),
         UsageError, ["EarlyStopping patience = '2'"]),
    Case("early-stopping-min-delta-a-string", lambda: C.EarlyStopping(min_delta="x"),
         UsageError, ["EarlyStopping min_delta = 'x'", "must be a number"]),
    Case("early-stopping-restore-a-string",
         lambda: C.EarlyStopping(restore_best_weights="x"), InvalidTypeError,
         ["restore_best_weights = 'x'", "True or False"]),
    Case("early-stopping-start-negative", lambda: C.EarlyStopping(start_from_epoch=-1),
         UsageError, ["start_from_epoch = -1"]),
    accepted("early-stopping-unknown-mode",
             lambda: C.EarlyStopping(mode="maxx").monitor_op is np.less, True,
             "Keras logs 'mode maxx is unknown, fallback to auto mode' (val_loss: min)"),
    Case("model-checkpoint-path-a-number", lambda: C.ModelCheckpoint(5), InvalidTypeError,
         ["ModelCheckpoint filepath = 5", "'ckpt/model-{epoch}.pt'"]),
    Case("model-checkpoint-path-empty", lambda: C.ModelCheckpoint(""), InvalidTypeError,
         ["ModelCheckpoint filepath = ''"]),
    Case("model-checkpoint-save-freq-batch", lambda: C.ModelCheckpoint("m.pt",
                                                                       save_freq="batch"),
         UsageError, ["save_freq = 'batch'", "Unrecognized save_freq"]),
    Case("model-checkpoint-save-freq-zero", lambda: C.ModelCheckpoint("m.pt", save_freq=0),
         UsageError, ["save_freq = 0"]),
    Case("model-checkpoint-best-only-a-string",
         lambda: C.ModelCheckpoint("m.pt", save_best_only="x"), InvalidTypeError,
         ["save_best_only = 'x'"]),
    Case("model-checkpoint-weights-only-a-number",
         lambda: C.ModelCheckpoint("m.pt", save_weights_only=1), InvalidTypeError,
         ["save_weights_only = 1"]),
    Case("model-checkpoint-options-a-number", lambda: C.ModelCheckpoint("m.pt", options=5),
         InvalidTypeError, ["ModelCheckpoint options = 5", "CheckpointOptions"]),
    Case("model-checkpoint-threshold-a-string",
         lambda: C.ModelCheckpoint("m.pt", initial_value_threshold="x"), UsageError,
         ["initial_value_threshold = 'x'"]),
    Case("backup-dir-a-number", lambda: C.BackupAndRestore(5), InvalidTypeError,
         ["BackupAndRestore backup_dir = 5", "backup_dir='runs/backup'"]),
    Case("backup-dir-empty", lambda: C.BackupAndRestore(""), InvalidTypeError,
         ["BackupAndRestore backup_dir = ''"]),
    Case("backup-save-freq-batch", lambda: C.BackupAndRestore("b", save_freq="batch"),
         UsageError, ["save_freq = 'batch'"]),
    Case("backup-save-freq-zero", lambda: C.BackupAndRestore("b", save_freq=0), UsageError,
         ["save_freq = 0", "save_before_preemption"]),
    Case("backup-delete-a-string", lambda: C.BackupAndRestore("b", delete_checkpoint="x"),
         InvalidTypeError, ["delete_checkpoint = 'x'"]),
    Case("backup-options-a-dict", lambda: C.BackupAndRestore("b", options={}),
         InvalidTypeError, ["BackupAndRestore options = {}"]),
    Case("tensorboard-dir-a-number", lambda: C.TensorBoard(5), InvalidTypeError,
         ["TensorBoard log_dir = 5", "log_dir='logs'"]),
    Case("tensorboard-update-weekly", lambda: C.TensorBoard("tb", update_freq="weekly"),
         UsageError, ["update_freq = 'weekly'", "'epoch', 'batch'"]),
    Case("tensorboard-histogram-negative", lambda: C.TensorBoard("tb", histogram_freq=-1),
         UsageError, ["histogram_freq = -1"]),
    Case("tensorboard-profile-a-string", lambda: C.TensorBoard("tb", profile_batch="x"),
         UsageError, ["profile_batch = 'x'", "profile_batch=(10, 20)"]),
    Case("scheduler-not-callable", lambda: C.LearningRateScheduler(5), InvalidTypeError,
         ["LearningRateScheduler schedule = 5", "lambda epoch, lr: lr * 0.9"]),
    Case("plateau-factor-one", lambda: C.ReduceLROnPlateau(factor=1.0), UsageError,
         ["factor = 1.0", "does not support a factor >= 1.0"]),
    Case("plateau-factor-two", lambda: C.ReduceLROnPlateau(factor=2.0), UsageError,
         ["factor = 2.0"]),
    Case("plateau-patience-negative", lambda: C.ReduceLROnPlateau(patience=-1), UsageError,
         ["ReduceLROnPlateau patience = -1"]),
    Case("plateau-min-lr-negative", lambda: C.ReduceLROnPlateau(min_lr=-1), UsageError,
         ["ReduceLROnPlateau min_lr = -1", ">= 0"]),
    Case("plateau-cooldown-a-fraction", lambda: C.ReduceLROnPlateau(cooldown=0.5),
         UsageError, ["ReduceLROnPlateau cooldown = 0.5"]),
    Case("csv-logger-path-a-number", lambda: C.CSVLogger(5), InvalidTypeError,
         ["CSVLogger filename = 5", "'training.log'"]),
    Case("csv-logger-separator-a-number", lambda: C.CSVLogger("log.csv", separator=5),
         UsageError, ["separator = 5", "1-character string"]),
    Case("csv-logger-append-a-string", lambda: C.CSVLogger("log.csv", append="x"),
         InvalidTypeError, ["CSVLogger append = 'x'"]),
    Case("lambda-callback-not-callable", lambda: C.LambdaCallback(on_epoch_end=5),
         InvalidTypeError, ["on_epoch_end = 5", "must be a function"]),
    Case("lambda-callback-misspelled-hook", lambda: C.LambdaCallback(on_epoch_ends=print),
         UsageError, ["'on_epoch_ends'", "is not a callback hook", "on_epoch_end"]),
    Case("progbar-count-mode", lambda: C.ProgbarLogger(count_mode="x"), UsageError,
         ["count_mode = 'x'", '"samples", "steps"']),
    Case("callback-list-of-a-number", lambda: C.CallbackList([5]), InvalidTypeError,
         ["callbacks = 5"]),
]

LOSS_CASES = [
    Case("loss-unknown-name", lambda: L.get("msee"), UsageError,
         ["loss = 'msee'", "the loss names are"]),
    Case("loss-a-number", lambda: L.get(5), InvalidTypeError, ["loss = 5"]),
    Case("loss-reduction-unknown", lambda: L.MeanSquaredError(reduction="avg"), UsageError,
         ["reduction = 'avg'", "Invalid Reduction Key"]),
    Case("loss-from-logits-a-string", lambda: L.BinaryCrossentropy(from_logits="x"),
         UsageError, ["BinaryCrossentropy(from_logits) = 'x'", "True or False"]),
    Case("loss-smoothing-two", lambda: L.BinaryCrossentropy(label_smoothing=2), UsageError,
         ["label_smoothing) = 2", "[0, 1]"]),
    Case("loss-smoothing-negative", lambda: L.CategoricalCrossentropy(label_smoothing=-0.1),
         UsageError, ["CategoricalCrossentropy(label_smoothing) = -0.1"]),
    Case("loss-huber-delta-negative", lambda: L.Huber(delta=-1), UsageError,
         ["Huber(delta) = -1", "positive number"]),
    Case("loss-huber-delta-a-string", lambda: L.Huber(delta="x"), UsageError,
         ["Huber(delta) = 'x'"]),
    Case("loss-name-a-number", lambda: L.MeanSquaredError(name=5), InvalidTypeError,
         ["MeanSquaredError(name) = 5", "must be a string"]),
    Case("loss-axis-a-string", lambda: L.CategoricalCrossentropy(axis="x"), UsageError,
         ["CategoricalCrossentropy(axis) = 'x'", "must be an int"]),
    Case("loss-ignore-class-a-string",
         lambda: L.SparseCategoricalCrossentropy(ignore_class="x"), UsageError,
         ["ignore_class) = 'x'"]),
    Case("loss-shapes-differ",
         lambda: L.MeanSquaredError(reduction="sum")(torch.ones(3), torch.ones(4)),
         UsageError, ["((3,), (4,))", "Dimensions must be equal"]),
    Case("loss-labels-none",
         lambda: L.MeanSquaredError(reduction="sum")(None, torch.ones(4)), InvalidTypeError,
         ["loss argument = None"]),
    Case("loss-weights-too-few", lambda: L.MeanSquaredError(reduction="sum")(
        torch.ones(4), torch.ones(4), sample_weight=torch.ones(3)), UsageError,
         ["sample_weight, loss shapes = ((3,), (4,))"]),
    Case("loss-one-hot-classes-differ", lambda: L.CategoricalCrossentropy(reduction="sum")(
        torch.ones(2, 3), torch.ones(2, 4)), UsageError, ["((2, 3), (2, 4))"]),
    Case("loss-sparse-label-out-of-range", lambda: L.SparseCategoricalCrossentropy(
        reduction="sum")(torch.tensor([5]), torch.ones(1, 3)), UsageError,
         ["label value of 5", "outside the valid range of [0, 3)"]),
]

METRIC_CASES = [
    Case("metric-unknown-name", lambda: M.get("acc2"), UsageError,
         ["metric = 'acc2'", "the metric names are"]),
    Case("metric-a-number", lambda: M.get(5), InvalidTypeError,
         ["metric = 5", "metrics=['accuracy']"]),
    Case("metric-name-a-number", lambda: M.Mean(name=5), InvalidTypeError,
         ["Mean(name) = 5"]),
    Case("metric-dtype-a-number", lambda: M.Mean(dtype=5), InvalidTypeError,
         ["Mean(dtype) = 5", "torch.float32"]),
    Case("metric-thresholds-two", lambda: M.Precision(thresholds=2), UsageError,
         ["thresholds = 2", "[0, 1]"]),
    Case("metric-thresholds-negative", lambda: M.Recall(thresholds=-0.1), UsageError,
         ["thresholds = -0.1"]),
    Case("metric-top-k-zero", lambda: M.Precision(top_k=0), UsageError,
         ["Precision(top_k) = 0", "int >= 1"]),
    Case("metric-class-id-negative", lambda: M.Recall(class_id=-1), UsageError,
         ["Recall(class_id) = -1"]),
    Case("metric-auc-one-threshold", lambda: M.AUC(num_thresholds=1), UsageError,
         ["num_thresholds = 1", "> 1"]),
    Case("metric-auc-curve", lambda: M.AUC(curve="XX"), UsageError,
         ["curve = 'XX'", "'ROC' or 'PR'"]),
    Case("metric-auc-summation", lambda: M.AUC(summation_method="x"), UsageError,
         ["summation_method = 'x'"]),
    Case("metric-binary-threshold-a-string", lambda: M.BinaryAccuracy(threshold="x"),
         UsageError, ["BinaryAccuracy(threshold) = 'x'"]),
    Case("metric-wrapper-not-callable", lambda: M.MeanMetricWrapper(5), InvalidTypeError,
         ["MeanMetricWrapper fn = 5", "(y_true, y_pred)"]),
    Case("metric-update-shapes-differ",
         lambda: M.MeanSquaredError().update_state(torch.ones(3), torch.ones(4)), UsageError,
         ["((3,), (4,))", "Dimensions must be equal"]),
    Case("metric-update-none", lambda: M.Mean().update_state(None), InvalidTypeError,
         ["metric value = None"]),
    Case("metric-update-a-string", lambda: M.Mean().update_state("x"), InvalidTypeError,
         ["metric value = 'x'"]),
    Case("metric-update-weights-too-few", lambda: M.Mean().update_state(
        torch.ones(4), sample_weight=torch.ones(3)), UsageError,
         ["sample_weight shape = (3,)", "(4,)", "one weight per example"]),
    Case("metric-sum-weights-too-many", lambda: M.Sum().update_state(
        torch.ones(2), sample_weight=torch.ones(3)), UsageError,
         ["sample_weight shape = (3,)"]),
]

CASES = [*MODEL_CASES, *SAVING_CASES, *CALLBACK_CASES, *LOSS_CASES, *METRIC_CASES]
