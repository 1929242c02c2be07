"""ParameterServerStrategy + ClusterCoordinator on real clusters of processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.coordinator.helpers import failures, run_cluster

pytestmark = pytest.mark.slow


def test_one_worker_trains_exactly_like_one_process_on_sharded_variables(
        tmp_path: Path) -> None:
    out, report = run_cluster("oracle.py", tmp_path, {"chief": 1, "worker": 1, "ps": 2})
    assert all(code == 0 for code, _, _ in out.values()), failures(out)
    assert report["max_param_diff"] < 1e-10
    assert report["max_saved_diff"] < 1e-10
    assert report["max_loss_diff"] < 1e-10
    # 0.weight (5 rows) -> 2 shards, then 0.bias -> 2 shards, ... round-robin over 2 ps.
    assert report["placement"] == {"0.weight": [0, 1], "0.bias": [0, 1], "2.weight": [0, 1],
                                   "2.bias": [0, 1]}
    assert report["shard_names"] == ["0.weight/part_0", "0.weight/part_1"]
    assert report["changed_after_restore"] > 0


def test_coordinator_semantics_match_tensorflow(tmp_path: Path) -> None:
    out, report = run_cluster("semantics.py", tmp_path, {"chief": 1, "worker": 2, "ps": 1})
    assert all(code == 0 for code, _, _ in out.values()), failures(out)
    assert report["same_coordinator"] is True
    assert report["docstring"] == pytest.approx(0.125)  # TF's ClusterCoordinator docstring
    assert report["after_join"] == pytest.approx([0.1, 0.8])
    assert report["next"] == 3
    assert report["next_on_chief"] == ("Iterating over an `AsyncDistributedIterator` is not "
                                       "supported right now.")
    assert set(report["worker_indices"]) <= {0, 1} and report["worker_indices"]
    assert report["index_on_chief"].startswith("Cannot retrieve the worker index.")
    assert report["join_error"].startswith("boom (raised on worker:")
    assert report["fetch_error"] == "ZeroDivisionError"
    assert report["done_after_error"] is True  # the error was raised once, then cleared
    assert "RemoteValue` used as an input to scheduled function" in report["remote_value_arg"]
    assert report["structure"] == [[1.0, 1.0], 3, "Tensor"]
    # A function hanging on a live worker: TimeoutError naming both, after the timeout
    # (4 s), while the worker still answers; the other worker takes the next functions.
    error = report["hang_error"]
    assert "hang" in error and "closure timeout (4 s)" in error
    hung = int(error.split(" on worker:")[1][0])
    assert report["after_hang_workers"] == [1 - hung]
    assert report["hang_seconds"] >= 4


def test_fit_and_evaluate_follow_tensorflow_rules(tmp_path: Path) -> None:
    out, report = run_cluster("fit_rules.py", tmp_path, {"chief": 1, "worker": 1, "ps": 1})
    assert all(code == 0 for code, _, _ in out.values()), failures(out)
    assert "When providing a distributed dataset, you must specify the number of steps" in \
        report["no_steps_dataset"]
    assert "When using a `tf.keras.utils.experimental.DatasetCreator`, `steps_per_epoch`" in \
        report["no_steps_arrays"]
    assert "`verbose=1` is not allowed with `ParameterServerStrategy`" in report["verbose_1"]
    assert "validation_freq = 0: must be at least 1" in report["validation_freq_0"]  # as fit's
    assert "you must specify the number of steps" in report["evaluate_no_steps"]
    assert report["history_keys"] == ["accuracy", "loss", "val_accuracy", "val_loss"]
    assert report["epochs_seen"] == [0, 1, 2]   # callbacks run on the chief
    assert report["loss_falls"] is True
    assert len(report["evaluate_steps"]) == 2
    assert report["exact_accuracy_matches_predict"] is True  # every test example once
    assert report["predict_shape"] == [256, 2]


@pytest.mark.slow
def test_a_checkpoint_restores_the_variables_and_optimizer_slots_on_the_ps(
        tmp_path: Path) -> None:
    out, report = run_cluster("checkpoint.py", tmp_path, {"chief": 1, "worker": 1, "ps": 2},
                              str(tmp_path / "ckpt"))
    assert report is not None, failures(out)
    assert report == {"resumed_equal": True, "slots_saved": 4}
