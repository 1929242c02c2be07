"""train_and_evaluate without a cluster: evaluations after checkpoints, throttled, and at the end."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from distrib.estimator import (
    Estimator,
    EvalSpec,
    FinalExporter,
    LatestExporter,
    RunConfig,
    TrainSpec,
    build_raw_serving_input_receiver_fn,
    train_and_evaluate,
)
from tests.estimator.common import X, input_fn, model_fn, read_events


def test_local_run_evaluates_after_each_checkpoint_and_returns_the_last_metrics(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    est = Estimator(model_fn, model_dir=str(tmp_path),
                    config=RunConfig(save_checkpoints_steps=3))
    with caplog.at_level(logging.INFO, "distrib.estimator"):
        metrics, exports = train_and_evaluate(
            est, TrainSpec(input_fn(repeat=True), max_steps=7),
            EvalSpec(input_fn(), steps=None, throttle_secs=0))
    assert metrics["global_step"] == 7 and set(metrics) == {"mae", "loss", "global_step"}
    assert exports == []
    assert "Running training and evaluation locally (non-distributed)." in caplog.text
    assert [e.step for e in read_events(tmp_path / "eval").Scalars("loss")] == [3, 6, 7]


def test_throttle_skips_evaluations_but_the_final_step_is_evaluated(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    est = Estimator(model_fn, model_dir=str(tmp_path),
                    config=RunConfig(save_checkpoints_steps=2))
    with caplog.at_level(logging.INFO, "distrib.estimator"):
        metrics, _ = train_and_evaluate(est, TrainSpec(input_fn(repeat=True), max_steps=6),
                                        EvalSpec(input_fn(), throttle_secs=3600, name="v"))
    assert metrics["global_step"] == 6
    assert "Skip the current checkpoint eval due to throttle secs (3600 secs)." in caplog.text
    assert [e.step for e in read_events(tmp_path / "eval_v").Scalars("loss")] == [2, 6]


def test_exporters_write_under_model_dir_export(tmp_path: Path) -> None:
    receiver = build_raw_serving_input_receiver_fn({"x": torch.from_numpy(X[:2])})
    est = Estimator(model_fn, model_dir=str(tmp_path),
                    config=RunConfig(save_checkpoints_steps=2))
    _, exports = train_and_evaluate(
        est, TrainSpec(input_fn(repeat=True), max_steps=4),
        EvalSpec(input_fn(), throttle_secs=0, exporters=[
            FinalExporter("final", receiver),
            LatestExporter("latest", receiver, exports_to_keep=1)]))
    assert len(list((tmp_path / "export" / "final").iterdir())) == 1
    assert len(list((tmp_path / "export" / "latest").iterdir())) == 1
    assert len(exports) == 2 and all(isinstance(p, bytes) for p in exports)


def test_an_independent_worker_starts_after_tensorflows_delay(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    import distrib.estimator.training as training

    monkeypatch.setenv("TF_CONFIG", json.dumps({
        "cluster": {"chief": ["h0:1"], "worker": ["h1:1", "h2:1", "h3:1"]},
        "task": {"type": "worker", "index": 2}}))
    slept: list[float] = []
    monkeypatch.setattr(training.time, "sleep", slept.append)
    est = Estimator(model_fn, model_dir=str(tmp_path),
                    config=RunConfig(experimental_max_worker_delay_secs=12))
    train_and_evaluate(est, TrainSpec(input_fn(), max_steps=2), EvalSpec(input_fn()))
    assert slept[0] == 12                         # min(12, (2 + 1) * 5)
    assert est.latest_checkpoint() is None        # only the chief saves
