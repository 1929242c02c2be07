"""SessionRunHook and the hooks of tf.estimator, driven by Estimator.train/evaluate/predict."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import distrib
from distrib.errors import UsageError
from distrib.estimator import (
    CheckpointSaverHook,
    CheckpointSaverListener,
    Estimator,
    EstimatorSpec,
    LoggingTensorHook,
    NanLossDuringTrainingError,
    NanTensorHook,
    ProfilerHook,
    RunConfig,
    SecondOrStepTimer,
    SessionRunArgs,
    SessionRunHook,
    StopAtStepHook,
    SummarySaverHook,
    summary,
)
from tests.estimator.common import input_fn, model_fn, read_events


class Recorder(SessionRunHook):
    def __init__(self) -> None:
        self.events: list[Any] = []

    def begin(self) -> None:
        self.events.append("begin")

    def after_create_session(self, session: Any, coord: Any) -> None:
        self.events.append(("created", session.global_step))

    def before_run(self, run_context: Any) -> SessionRunArgs:
        return SessionRunArgs({"loss": "loss", "step": "global_step"})

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self.events.append((int(run_values.results["step"]),
                            float(run_values.results["loss"])))

    def end(self, session: Any) -> None:
        self.events.append(("end", session.global_step))


def test_hook_methods_run_in_order_with_the_fetched_values(tmp_path: Path) -> None:
    hook = Recorder()
    Estimator(model_fn, model_dir=str(tmp_path)).train(input_fn(repeat=True), steps=3,
                                                        hooks=[hook])
    assert hook.events[:2] == ["begin", ("created", 0)]
    assert [e[0] for e in hook.events[2:5]] == [0, 1, 2]
    assert all(isinstance(e[1], float) and e[1] > 0 for e in hook.events[2:5])
    assert hook.events[-1] == ("end", 3)


def test_stop_at_step_hook_stops_exactly(tmp_path: Path) -> None:
    est = Estimator(model_fn, model_dir=str(tmp_path))
    est.train(input_fn(repeat=True), hooks=[StopAtStepHook(num_steps=4)])
    assert est.get_variable_value("global_step") == 4
    est.train(input_fn(repeat=True), hooks=[StopAtStepHook(last_step=6)])
    assert est.get_variable_value("global_step") == 6
    with pytest.raises(UsageError, match="One of num_steps or last_step"):
        StopAtStepHook()


def nan_model_fn(features: Any, labels: Any, mode: str) -> EstimatorSpec:
    net = nn.Linear(4, 1)
    loss = nn.functional.mse_loss(net(features["x"]), labels) * float("nan")
    return EstimatorSpec(mode, loss=loss, train_op=torch.optim.SGD(net.parameters(), lr=0.1))


def test_a_nan_loss_fails_training(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, "distrib.estimator"), \
            pytest.raises(NanLossDuringTrainingError, match="NaN loss during training"):
        Estimator(nan_model_fn, model_dir=str(tmp_path)).train(input_fn(repeat=True), steps=3)
    assert "Model diverged with loss = NaN." in caplog.text


def test_nan_tensor_hook_without_failing_stops_the_run(tmp_path: Path) -> None:
    def fn(features: Any, labels: Any, mode: str) -> EstimatorSpec:
        spec = model_fn(features, labels, mode)
        bad = spec.loss * float("nan")
        return spec._replace(training_hooks=[NanTensorHook(bad, fail_on_nan_loss=False)])

    est = Estimator(fn, model_dir=str(tmp_path))
    est.train(input_fn(repeat=True), steps=5)
    assert est.get_variable_value("global_step") == 1


def logging_model_fn(features: Any, labels: Any, mode: str) -> EstimatorSpec:
    spec = model_fn(features, labels, mode)
    hook = LoggingTensorHook({"batch_loss": spec.loss}, every_n_iter=1)
    return spec._replace(training_hooks=[hook])


def test_a_logging_hook_made_in_model_fn_logs_each_steps_tensor(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, "distrib.estimator"):
        Estimator(logging_model_fn, model_dir=str(tmp_path),
                  config=RunConfig(log_step_count_steps=1)).train(input_fn(repeat=True),
                                                                  steps=3)
    logged = [line.split("batch_loss = ")[1].split()[0] for line in caplog.messages
              if line.startswith("batch_loss = ")]
    overall = [line.split("loss = ")[1].split(",")[0] for line in caplog.messages
               if line.startswith("loss = ")]
    assert len(logged) == 3 and logged == overall    # one replica: its loss is the loss


def test_logging_hook_arguments_are_checked() -> None:
    with pytest.raises(UsageError, match="exactly one of every_n_iter and every_n_secs"):
        LoggingTensorHook({"loss": "loss"})
    with pytest.raises(UsageError, match="invalid every_n_iter=0"):
        LoggingTensorHook({"loss": "loss"}, every_n_iter=0)


class Listener(CheckpointSaverListener):
    def __init__(self, stop_at: int | None = None) -> None:
        self.saved: list[int] = []
        self.stop_at = stop_at

    def after_save(self, session: Any, global_step_value: int) -> bool:
        self.saved.append(global_step_value)
        return global_step_value == self.stop_at


def test_saving_listeners_see_every_save_and_may_stop_training(tmp_path: Path) -> None:
    listener = Listener()
    est = Estimator(model_fn, model_dir=str(tmp_path / "a"),
                    config=RunConfig(save_checkpoints_steps=2))
    est.train(input_fn(repeat=True), steps=5, saving_listeners=[listener])
    assert listener.saved == [0, 2, 4, 5]
    stopper = Listener(stop_at=2)
    est = Estimator(model_fn, model_dir=str(tmp_path / "b"),
                    config=RunConfig(save_checkpoints_steps=2))
    est.train(input_fn(repeat=True), steps=10, saving_listeners=[stopper])
    assert est.get_variable_value("global_step") == 2


def test_checkpoint_saver_hook_writes_another_directory(tmp_path: Path) -> None:
    est = Estimator(model_fn, model_dir=str(tmp_path / "model"))
    est.train(input_fn(repeat=True), steps=4,
              hooks=[CheckpointSaverHook(str(tmp_path / "extra"), save_steps=3,
                                         checkpoint_basename="snap")])
    state = json.loads((tmp_path / "extra" / "checkpoint").read_text())
    assert state["all"] == ["snap-0", "snap-3", "snap-4"]


def summary_model_fn(features: Any, labels: Any, mode: str) -> EstimatorSpec:
    spec = model_fn(features, labels, mode)
    accuracy = distrib.estimator.metrics.mean(spec.loss.detach())
    summary.scalar("running_loss", accuracy[1])
    summary.histogram("inputs", features["x"])
    return spec


def test_summaries_from_model_fn_are_written_every_save_summary_steps(tmp_path: Path) -> None:
    Estimator(summary_model_fn, model_dir=str(tmp_path),
              config=RunConfig(save_summary_steps=2)).train(input_fn(repeat=True), steps=5)
    acc = read_events(tmp_path)
    assert [e.step for e in acc.Scalars("running_loss")] == [1, 3, 5]
    assert [e.step for e in acc.Scalars("loss")] == [1, 3, 5]
    assert "inputs" in acc.Tags()["histograms"]


def test_summary_saver_hook_writes_chosen_values(tmp_path: Path) -> None:
    hook = SummarySaverHook(save_steps=1, output_dir=str(tmp_path / "mine"),
                            summary_op={"my_loss": "loss"})
    Estimator(model_fn, model_dir=str(tmp_path / "model")).train(
        input_fn(repeat=True), steps=2, hooks=[hook])
    assert [e.step for e in read_events(tmp_path / "mine").Scalars("my_loss")] == [1, 2]


def test_profiler_hook_writes_chrome_traces(tmp_path: Path) -> None:
    hook = ProfilerHook(save_steps=2, output_dir=str(tmp_path / "prof"))
    Estimator(model_fn, model_dir=str(tmp_path / "model")).train(
        input_fn(repeat=True), steps=5, hooks=[hook])
    traces = sorted(p.name for p in (tmp_path / "prof").glob("timeline-*.json"))
    assert traces == ["timeline-3.json", "timeline-5.json"]
    assert "traceEvents" in json.loads((tmp_path / "prof" / traces[0]).read_text())


def test_evaluation_and_prediction_hooks_run(tmp_path: Path) -> None:
    est = Estimator(model_fn, model_dir=str(tmp_path))
    est.train(input_fn(repeat=True), steps=1)
    eval_hook = Recorder()
    est.evaluate(input_fn(), hooks=[eval_hook])
    assert len([e for e in eval_hook.events if isinstance(e, tuple) and e[0] == 1]) == 5

    class PredictRecorder(SessionRunHook):
        def __init__(self) -> None:
            self.shapes: list[tuple[int, ...]] = []

        def before_run(self, run_context: Any) -> SessionRunArgs:
            return SessionRunArgs("y")

        def after_run(self, run_context: Any, run_values: Any) -> None:
            assert isinstance(run_values.results, np.ndarray)
            self.shapes.append(run_values.results.shape)

    predict_hook = PredictRecorder()
    list(est.predict(input_fn(), hooks=[predict_hook]))
    assert predict_hook.shapes == [(8, 1)] * 5


def test_a_fetch_of_an_unknown_name_says_which_names_exist(tmp_path: Path) -> None:
    class Bad(SessionRunHook):
        def before_run(self, run_context: Any) -> SessionRunArgs:
            return SessionRunArgs("logits")

    with pytest.raises(UsageError, match="'global_step'.*'loss'"):
        Estimator(model_fn, model_dir=str(tmp_path)).train(input_fn(repeat=True), steps=1,
                                                           hooks=[Bad()])


def test_second_or_step_timer() -> None:
    timer = SecondOrStepTimer(every_secs=10)
    assert timer.should_trigger_for_step(0, now=100.0)
    assert timer.update_last_triggered_step(0, now=100.0) == (None, None)
    assert not timer.should_trigger_for_step(5, now=105.0)
    assert timer.should_trigger_for_step(6, now=110.0)
    assert timer.update_last_triggered_step(6, now=110.0) == (10.0, 6)
    with pytest.raises(UsageError, match="Can not provide both"):
        SecondOrStepTimer(every_secs=1, every_steps=1)
    np.testing.assert_equal(timer.last_triggered_step(), 6)
