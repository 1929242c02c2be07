"""Estimator.train / evaluate / predict on one device: TensorFlow's semantics and model_dir."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from distrib.estimator import Estimator, RunConfig
from tests.estimator.common import X, input_fn, model_fn, read_events


def _estimator(tmp_path: Path, **config: object) -> Estimator:
    return Estimator(model_fn, model_dir=str(tmp_path / "model"),
                     config=RunConfig(**config))  # type: ignore[arg-type]


def test_steps_add_to_the_saved_global_step_and_max_steps_is_absolute(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    est = _estimator(tmp_path)
    est.train(input_fn(repeat=True), steps=3)
    est.train(input_fn(repeat=True), steps=3)
    assert est.get_variable_value("global_step") == 6
    est.train(input_fn(repeat=True), max_steps=10)
    assert est.get_variable_value("global_step") == 10
    with caplog.at_level(logging.INFO, "distrib.estimator"):
        est.train(input_fn(repeat=True), max_steps=10)
    assert "Skipping training since max_steps has already saved." in caplog.text
    assert est.get_variable_value("global_step") == 10


def test_training_stops_when_the_input_ends(tmp_path: Path) -> None:
    est = _estimator(tmp_path)
    est.train(input_fn(batch=8), steps=100)      # 40 examples: 5 batches
    assert est.get_variable_value("global_step") == 5


def test_a_new_estimator_on_the_same_model_dir_continues_from_its_checkpoint(
        tmp_path: Path) -> None:
    first = _estimator(tmp_path)
    first.train(input_fn(repeat=True), steps=4)
    before = first.get_variable_value("sequential/0/weight")
    second = _estimator(tmp_path)
    pred_a = np.stack([p["y"] for p in first.predict(input_fn())])
    pred_b = np.stack([p["y"] for p in second.predict(input_fn())])
    np.testing.assert_array_equal(pred_a, pred_b)
    second.train(input_fn(repeat=True), steps=2)
    assert second.get_variable_value("global_step") == 6
    assert not np.array_equal(before, second.get_variable_value("sequential/0/weight"))


def test_model_dir_holds_checkpoints_by_step_a_state_file_and_events(tmp_path: Path) -> None:
    est = _estimator(tmp_path, save_checkpoints_steps=2, keep_checkpoint_max=2,
                     log_step_count_steps=2, save_summary_steps=1)
    est.train(input_fn(repeat=True), steps=7)
    model = tmp_path / "model"
    state = json.loads((model / "checkpoint").read_text())
    assert state["all"] == ["model.ckpt-6", "model.ckpt-7"]
    assert sorted(p.name for p in model.glob("model.ckpt-*")) == ["model.ckpt-6",
                                                                  "model.ckpt-7"]
    assert est.latest_checkpoint() == str(model / "model.ckpt-7")
    tags = read_events(model).Tags()["scalars"]
    assert "loss" in tags and "global_step/sec" in tags
    steps = [e.step for e in read_events(model).Scalars("loss")]
    assert steps == list(range(1, 8))


def test_logs_are_tensorflows(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    est = _estimator(tmp_path, log_step_count_steps=2, save_checkpoints_steps=3)
    with caplog.at_level(logging.INFO, "distrib.estimator"):
        est.train(input_fn(repeat=True), steps=5)
        est.evaluate(input_fn())
    text = caplog.text
    assert "Calling model_fn." in text and "Done calling model_fn." in text
    assert f"Saving checkpoints for 0 into {tmp_path / 'model' / 'model.ckpt'}." in text
    assert "Saving checkpoints for 3 into" in text and "Saving checkpoints for 5 into" in text
    assert "loss = " in text and ", step = 0" in text and ", step = 2 (" in text
    assert "global_step/sec: " in text
    assert "Loss for final step: " in text
    assert "Saving dict for global step 5: global_step = 5, loss = " in text
    assert "Starting evaluation at " in text and "Finished evaluation at " in text


def test_evaluate_returns_metrics_loss_and_global_step_and_writes_eval_dirs(
        tmp_path: Path) -> None:
    est = _estimator(tmp_path)
    est.train(input_fn(repeat=True), steps=3)
    result = est.evaluate(input_fn())
    assert set(result) == {"mae", "loss", "global_step"}
    assert result["global_step"] == 3
    named = est.evaluate(input_fn(), name="holdout", steps=2)
    assert named["global_step"] == 3
    for sub in ("eval", "eval_holdout"):
        acc = read_events(tmp_path / "model" / sub)
        assert {"mae", "loss"} <= set(acc.Tags()["scalars"])
        assert [e.step for e in acc.Scalars("loss")] == [3]
    assert est.eval_dir("holdout") == str(tmp_path / "model" / "eval_holdout")


def test_evaluations_into_one_directory_append_to_one_event_file_in_step_order(
        tmp_path: Path) -> None:
    # A file per evaluation would be read in name order, and tensorboard's writer counter
    # in the name sorts 10 before 9: the steps would come back out of order.
    est = _estimator(tmp_path)
    for _ in range(11):
        est.train(input_fn(repeat=True), steps=1)
        est.evaluate(input_fn(), steps=1)
    eval_dir = tmp_path / "model" / "eval"
    assert len(list(eval_dir.glob("events.out.tfevents.*"))) == 1
    assert [e.step for e in read_events(eval_dir).Scalars("loss")] == list(range(1, 12))


def test_evaluate_without_a_checkpoint_uses_the_initial_values(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    est = _estimator(tmp_path)
    with caplog.at_level(logging.INFO, "distrib.estimator"):
        result = est.evaluate(input_fn())
    assert result["global_step"] == 0
    assert "Could not find trained model in model_dir" in caplog.text


def test_evaluate_a_given_checkpoint(tmp_path: Path) -> None:
    est = _estimator(tmp_path, save_checkpoints_steps=2)
    est.train(input_fn(repeat=True), steps=4)
    first = str(tmp_path / "model" / "model.ckpt-2")
    assert est.evaluate(input_fn(), checkpoint_path=first)["global_step"] == 2
    assert est.evaluate(input_fn())["global_step"] == 4
    est.train(input_fn(repeat=True), steps=1)          # continues from the newest, not ckpt-2
    assert est.get_variable_value("global_step") == 5


def test_predict_yields_examples_batches_and_selected_keys(tmp_path: Path) -> None:
    est = _estimator(tmp_path)
    est.train(input_fn(repeat=True), steps=2)
    examples = list(est.predict(input_fn()))
    assert len(examples) == len(X) and set(examples[0]) == {"y", "twice"}
    assert examples[0]["y"].shape == (1,)
    np.testing.assert_allclose(examples[3]["twice"], 2 * examples[3]["y"], rtol=1e-6)
    batches = list(est.predict(input_fn(batch=16), yield_single_examples=False))
    assert [b["y"].shape[0] for b in batches] == [16, 16, 8]
    only = next(iter(est.predict(input_fn(), predict_keys=["twice"])))
    assert set(only) == {"twice"}


def test_variables_are_named_after_the_objects_model_fn_made(tmp_path: Path) -> None:
    est = _estimator(tmp_path)
    est.train(input_fn(repeat=True), steps=1)
    names = est.get_variable_names()
    assert {"global_step", "sequential/0/weight", "sequential/2/bias"} <= set(names)
    weight = est.get_variable_value("sequential/0/weight")
    assert isinstance(weight, np.ndarray) and weight.shape == (8, 4)


def test_no_model_dir_warns_and_uses_a_temporary_directory(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "distrib.estimator"):
        est = Estimator(model_fn)
    assert "Using temporary folder as model directory: " in caplog.text
    assert Path(est.model_dir).is_dir()


def test_empty_input_warns_that_no_step_was_made(tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    import distrib

    def empty(mode: str) -> object:
        return distrib.data.Dataset.from_tensor_slices(({"x": X[:0]}, X[:0, :1])).batch(4)

    with caplog.at_level(logging.WARNING, "distrib.estimator"):
        _estimator(tmp_path).train(empty, steps=3)
    assert "Training with estimator made no steps." in caplog.text


def test_tf_random_seed_makes_the_initial_model_reproducible(tmp_path: Path) -> None:
    values = []
    for run in ("a", "b"):
        est = Estimator(model_fn, model_dir=str(tmp_path / run),
                        config=RunConfig(tf_random_seed=3))
        est.train(input_fn(repeat=True), steps=1)
        values.append(est.get_variable_value("sequential/0/weight"))
    np.testing.assert_array_equal(values[0], values[1])
    torch.manual_seed(0)
