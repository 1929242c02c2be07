"""TensorFlow users' habits on two replicas: right results or TensorFlow's errors, never a
silent difference.

programs/habits_program.py runs each habit as a plain script under
MirroredStrategy(["cpu:0", "cpu:1"]) (it starts its second replica itself), on two
TF_CONFIG workers (with the deprecated ``distrib.experimental.MultiWorkerMirroredStrategy``
and TF's ``communication=CollectiveCommunication.NCCL``), and on one process, the
oracle (float64, SGD with momentum: a wrongly scaled gradient shows).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.support import localhost_cluster, run_python, start_cluster, wait_all

PROGRAM = str(Path(__file__).parent / "programs" / "habits_program.py")
TOL = 1e-10
pytestmark = pytest.mark.slow
MODES = ["mirrored", "multi_worker"]


def _run(mode: str, out: Path) -> None:
    if mode == "multi_worker":
        results = wait_all(start_cluster([PROGRAM, mode, str(out)], localhost_cluster(worker=2)))
        for name, (code, _, err) in results.items():
            assert code == 0, f"{name}: {err[-4000:]}"
        return
    proc = run_python([PROGRAM, mode, str(out)])
    assert proc.returncode == 0, proc.stderr[-4000:]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for mode in ["oracle", *MODES]:
        path = tmp_path_factory.mktemp(mode) / "run"
        _run(mode, path)
        out[mode] = path
    return out


def _result(runs: dict[str, Path], mode: str, scenario: str, rank: int = 0) -> Any:
    got = torch.load(f"{runs[mode]}.{scenario}.rank{rank}", weights_only=True)
    assert "crashed" not in got, got.get("crashed")
    return got


def _same(a: Any, b: Any, what: str) -> None:
    if isinstance(a, dict):
        assert set(a) == set(b), what
        for k in a:
            _same(a[k], b[k], f"{what}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), what
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{what}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert a.shape == b.shape, what
        assert (a - b).abs().max().item() < TOL, f"{what}: {(a - b).abs().max().item()}"
    elif isinstance(a, float):
        assert abs(a - b) < TOL, f"{what}: {a} vs {b}"
    else:
        assert a == b, f"{what}: {a!r} vs {b!r}"


def _each_replica(runs: dict[str, Path], scenario: str) -> list[tuple[str, Any]]:
    return [(f"{mode} rank {r}", _result(runs, mode, scenario, r))
            for mode in MODES for r in range(2)]


def test_transfer_learning_gives_the_single_device_result_on_every_replica(runs) -> None:
    oracle = _result(runs, "oracle", "transfer")
    for name, got in _each_replica(runs, "transfer"):
        for key in ("after_head", "history", "frozen_model", "custom_loop"):
            _same(oracle[key], got[key], f"{name} {key}")
        assert got["unchanged_when_all_frozen"], name
        # One replica froze what the other trains: an error on both, naming the counts.
        assert got["mismatch"] is not None, name
        assert "replicas changed what trains" in got["mismatch"]["message"], name
        assert "replica 1: 2 of 4 parameters train" in got["mismatch"]["message"], name


def test_batch_norm_statistics_are_the_replicas_mean_and_never_diverge(runs) -> None:
    oracle = _result(runs, "oracle", "batch_norm")
    first = _result(runs, "mirrored", "batch_norm", 0)
    for name, got in _each_replica(runs, "batch_norm"):
        # Every replica holds the same statistics, evaluates and predicts alike.
        _same(first["buffers"], got["buffers"], f"{name} buffers")
        _same(first["predict"], got["predict"], f"{name} predict")
        # The input layer's running mean depends only on the data: the replicas' mean
        # equals the one-process average of the global batches' means.
        _same(oracle["buffers"]["0.running_mean"], got["buffers"]["0.running_mean"],
              f"{name} input running_mean")


def test_a_model_made_outside_the_scope_is_refused_with_tensorflows_error(runs) -> None:
    for name, got in _each_replica(runs, "outside_scope"):
        for call in ("compile", "fit"):
            err = got[call]
            assert err is not None, f"{name}: {call} inside the scope trained silently"
            assert "ValueError" in err["mro"], (name, err)
            assert "was not created in the distribution strategy scope" in err["message"] \
                or "created outside `strategy.scope()`" in err["message"], (name, err)
            assert "inside `with strategy.scope():`" in err["message"], (name, err)


def test_keras_losses_in_a_custom_loop_need_sum_or_none_and_then_match(runs) -> None:
    oracle = _result(runs, "oracle", "losses")
    assert oracle["default_in_run"] is None  # no strategy: the default reduction is fine
    for name, got in _each_replica(runs, "losses"):
        err = got["default_in_run"]
        assert err is not None and "ValueError" in err["mro"], (name, err)
        assert "Please use `tf.keras.losses.Reduction.SUM` or " \
               "`tf.keras.losses.Reduction.NONE` for loss reduction" in err["message"]
        assert "compute_average_loss" in err["message"]
        for reduction in ("none", "sum"):
            _same(oracle[reduction], got[reduction], f"{name} reduction={reduction}")
        assert got["default_outside"] == pytest.approx(oracle["default_outside"])


def test_metrics_created_in_the_scope_aggregate_across_replicas(runs) -> None:
    for name, got in _each_replica(runs, "metrics"):
        assert got["in_run"] == 0.5, name        # result() inside strategy.run
        assert got["everywhere"] == 0.5, name    # after it, on every replica
        assert got["in_scope"] == 0.5, name
        assert got["outside_made"] == 0.5, name  # created outside, updated in run (as TF)
        assert got["collective_after"] == 2.0, name  # a chief-only read did not desync
        err = got["update_outside"]
        assert err is not None and "SyncOnReadVariable does not support `assign_add` in " \
            "cross-replica context" in err["message"], (name, err)
        assert got["after_fit"] == pytest.approx(got["fit_logs"]), name
    assert _result(runs, "mirrored", "metrics", 0)["chief_only"] == 0.5


def test_data_that_differs_between_replica_processes_raises(runs) -> None:
    for name, got in _each_replica(runs, "data"):
        calls = ["fit", "evaluate", "predict", "generator"]
        if name.startswith("mirrored"):
            # Replicas that MirroredStrategy starts share the random state drawn after
            # `import distrib`: the seed program's unseeded np.random.rand is the same data.
            assert got["predict_unseeded"] is None, (name, got["predict_unseeded"])
        else:  # workers started by hand draw their own numbers: caught, not mixed
            calls.append("predict_unseeded")
        for call in calls:
            err = got[call]
            assert err is not None, f"{name}: {call} mixed different data silently"
            assert "replica(s) [1] hold different values from replica 0" in err["message"]
            assert "seed the random generators" in err["message"]
        assert "input arrays = ['x', 'y']" in got["fit"]["message"], got["fit"]
        assert got["same_data"] is None, name


def test_fit_evaluate_and_predict_inside_the_scope_match_one_device(runs) -> None:
    oracle = _result(runs, "oracle", "in_scope")
    for name, got in _each_replica(runs, "in_scope"):
        _same(oracle, got, name)


def test_the_deprecated_experimental_strategy_warns_and_runs_on_two_workers(runs) -> None:
    for rank in range(2):
        got = torch.load(f"{runs['multi_worker']}.strategy.rank{rank}", weights_only=True)
        assert got["replicas"] == 2
        assert any(w.startswith("FutureWarning: distrib.experimental.MultiWorkerMirrored"
                                "Strategy") and "use distrib.MultiWorkerMirroredStrategy "
                   "instead" in w for w in got["warnings"]), got["warnings"]


def test_model_is_a_torch_module_and_stays_replicated(runs) -> None:
    oracle = _result(runs, "oracle", "module")
    for name, got in _each_replica(runs, "module"):
        assert got["is_module"] and got["parameters"] == 4, name
        assert got["state_dict"] == ["module.0.bias", "module.0.weight", "module.2.bias",
                                     "module.2.weight"], name
        _same(oracle["weights"], got["weights"], name)


def test_keras_inputs_uint8_generators_sequences_batches_and_load_model(runs) -> None:
    oracle = _result(runs, "oracle", "inputs")
    for name, got in _each_replica(runs, "inputs"):
        for key in ("uint8", "sequence_evaluate", "sequence_predict", "train_on_batch",
                    "test_on_batch", "predict_on_batch", "on_batch_weights",
                    "loaded_predict", "loaded_evaluate", "loaded_trained"):
            _same(oracle[key], got[key], f"{name} {key}")
        # A generator and a Sequence of the same global batches train like the arrays.
        _same(oracle["generator"], got["generator"], f"{name} generator")
        _same(oracle["sequence"], got["sequence"], f"{name} sequence")
        assert got["sequence_epochs_ended"] == 2, name
        assert "custom_objects={'Net': Net}" in got["custom_refused"]["message"], name
        assert got["custom_rebuilt"].endswith("Net"), name


def test_the_progress_bar_shows_the_steps_that_ran(runs) -> None:
    got = _result(runs, "mirrored", "progbar", 0)
    assert got["verbose2"].startswith(" 16/100 - "), got["verbose2"]  # Keras pads to 100
    assert "100/100" not in got["verbose1"] + got["verbose2"]
    assert got["verbose1"].startswith(" 16/100 [===>."), got["verbose1"]
    other = _result(runs, "mirrored", "progbar", 1)
    assert other["verbose1"] == other["verbose2"] == ""  # the chief prints
