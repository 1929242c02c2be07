"""TensorBoard: event files read back with tensorboard's EventAccumulator."""

from __future__ import annotations

import os
import sys

import pytest
from tensorboard.backend.event_processing import event_accumulator

from distrib.training.callbacks import CallbackList, TensorBoard
from tests.training.callbacks.standin import StandInModel

EPOCHS, STEPS = 2, 3


def _read(run_dir) -> event_accumulator.EventAccumulator:
    acc = event_accumulator.EventAccumulator(str(run_dir), size_guidance={
        event_accumulator.SCALARS: 0, event_accumulator.HISTOGRAMS: 0})
    acc.Reload()
    return acc


def _scalars(acc, tag: str) -> list[tuple[int, float]]:
    return [(e.step, round(e.value, 6)) for e in acc.Scalars(tag)]


def _fit(cb: TensorBoard, model: StandInModel) -> None:
    """Drives the hooks as fit(epochs=2, steps=3, validation_data=...) does."""
    cbs = CallbackList([cb], model=model, verbose=0, epochs=EPOCHS, steps=STEPS)
    cbs.on_train_begin()
    for epoch in range(EPOCHS):
        cbs.on_epoch_begin(epoch)
        for b in range(STEPS):
            cbs.on_train_batch_begin(b)
            cbs.on_train_batch_end(b, {"loss": 10.0 * epoch + b, "accuracy": 0.5})
        cbs.on_test_begin()
        cbs.on_test_batch_end(0, {"loss": 7.0})
        cbs.on_test_end({"loss": 7.0 + epoch, "accuracy": 0.25})
        cbs.on_epoch_end(epoch, {"loss": 1.0 - 0.5 * epoch, "accuracy": 0.5 + 0.25 * epoch,
                                 "val_loss": 7.0 + epoch, "val_accuracy": 0.25})
    cbs.on_train_end()


def test_keras_tags_at_keras_steps(tmp_path) -> None:
    model = StandInModel()
    _fit(TensorBoard(log_dir=str(tmp_path), update_freq=2, histogram_freq=1), model)
    assert sorted(os.listdir(tmp_path)) == ["train", "validation"]

    train = _read(tmp_path / "train")
    assert _scalars(train, "epoch_loss") == [(0, 1.0), (1, 0.5)]
    assert _scalars(train, "epoch_accuracy") == [(0, 0.5), (1, 0.75)]
    # every 2nd training batch, numbered over the whole run (1-based): 2, 4, 6
    assert _scalars(train, "batch_loss") == [(2, 1.0), (4, 10.0), (6, 12.0)]
    assert set(train.Tags()["scalars"]) == {"epoch_loss", "epoch_accuracy", "batch_loss",
                                            "batch_accuracy", "epoch_learning_rate"}
    assert _scalars(train, "epoch_learning_rate") == [(0, 0.1), (1, 0.1)]
    assert set(train.Tags()["histograms"]) == {"weight/histogram", "bias/histogram"}
    assert [e.step for e in train.Histograms("weight/histogram")] == [0, 1]

    val = _read(tmp_path / "validation")
    assert _scalars(val, "epoch_loss") == [(0, 7.0), (1, 8.0)]
    assert _scalars(val, "epoch_accuracy") == [(0, 0.25), (1, 0.25)]
    # evaluation vs the number of training batches run (optimizer iterations)
    assert _scalars(val, "evaluation_loss_vs_iterations") == [(3, 7.0), (6, 8.0)]


def test_epoch_update_freq_writes_epoch_scalars_only(tmp_path) -> None:
    _fit(TensorBoard(log_dir=str(tmp_path)), StandInModel())
    train = _read(tmp_path / "train")
    assert set(train.Tags()["scalars"]) == {"epoch_loss", "epoch_accuracy",
                                            "epoch_learning_rate"}
    assert train.Tags()["histograms"] == []


def test_other_replicas_write_nothing(tmp_path) -> None:
    cb = TensorBoard(log_dir=str(tmp_path / "logs"), update_freq="batch", histogram_freq=1)
    _fit(cb, StandInModel(chief=False))
    assert not (tmp_path / "logs").exists()


def test_bad_update_freq_is_explained() -> None:
    with pytest.raises(ValueError, match="update_freq = 'often'"):
        TensorBoard(update_freq="often")


def test_missing_tensorboard_package_says_how_to_install(tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails
    cb = TensorBoard(log_dir=str(tmp_path))
    cb.set_model(StandInModel())
    with pytest.raises(ImportError, match="pip install tensorboard"):
        cb.on_epoch_end(0, {"loss": 1.0})


def _real_fit(tmp_path, **kwargs):
    import torch

    import distrib

    x = torch.linspace(-1, 1, 48).reshape(16, 3)
    y = x.sum(1, keepdim=True)
    with distrib.OneDeviceStrategy("cpu").scope():
        model = distrib.Model(torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(),
                                                  torch.nn.Linear(4, 1)))
        model.compile(optimizer=distrib.optimizers.SGD(
            distrib.optimizers.schedules.PiecewiseConstantDecay([4], [0.1, 0.01])), loss="mse")
    tb = TensorBoard(log_dir=str(tmp_path), **kwargs)
    model.fit(x, y, batch_size=4, epochs=2, verbose=0, callbacks=[tb])
    return model, tb, x, y


def test_fit_writes_the_learning_rate_and_the_traced_graph(tmp_path) -> None:
    _real_fit(tmp_path)
    train = _read(tmp_path / "train")
    # the rate of the next update, at the end of each epoch: schedule(4), schedule(8)
    assert _scalars(train, "epoch_learning_rate") == [(0, 0.1), (1, 0.01)]
    assert train.Graph() is not None  # add_graph: a GraphDef TensorBoard's graph tab shows
    names = {node.op for node in train.Graph().node}
    assert any("linear" in op.lower() or "addmm" in op.lower() for op in names), names


def test_profile_batch_writes_a_trace_the_profile_plugin_reads(tmp_path) -> None:
    import gzip
    import json

    _real_fit(tmp_path, profile_batch=(2, 3), write_graph=False)
    runs = list((tmp_path / "train" / "plugins" / "profile").iterdir())
    assert len(runs) == 1
    traces = list(runs[0].glob("*.trace.json.gz"))
    assert len(traces) == 1 and list(runs[0].glob("*.pt.trace.json"))
    events = json.loads(gzip.open(traces[0]).read())["traceEvents"]
    assert any("Optimizer.step" in str(e.get("name", "")) for e in events)


def test_evaluate_after_fit_writes_at_the_trained_step(tmp_path) -> None:
    model, tb, x, y = _real_fit(tmp_path / "fit", write_graph=False)
    model.evaluate(x, y, batch_size=4, verbose=0,
                   callbacks=[TensorBoard(log_dir=str(tmp_path / "eval"), write_graph=False)])
    val = _read(tmp_path / "eval" / "validation")
    assert [step for step, _ in _scalars(val, "evaluation_loss_vs_iterations")] == [8]


def test_bad_profile_batch_is_explained() -> None:
    from distrib.errors import UsageError

    with pytest.raises(UsageError, match="profile_batch"):
        TensorBoard(profile_batch=(5, 2))
