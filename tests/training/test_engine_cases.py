"""What the step engine guarantees on two replicas: one device's result, or the same clear
error on every replica within seconds.

programs/engine_cases.py runs each case under MirroredStrategy(["cpu:0", "cpu:1"]) (it
starts its second replica itself), on two TF_CONFIG workers where a case needs a
chief and a worker, and on one process, the oracle (float64, SGD with momentum: a
wrongly scaled gradient shows).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.support import localhost_cluster, run_python, start_cluster, wait_all

PROGRAM = str(Path(__file__).parent / "programs" / "engine_cases.py")
TOL = 1e-10
pytestmark = pytest.mark.slow


def _run(mode: str, out: Path, scenarios: str) -> None:
    if mode == "multi_worker":
        results = wait_all(start_cluster([PROGRAM, mode, str(out), scenarios],
                                         localhost_cluster(worker=2)))
        for name, (code, _, err) in results.items():
            assert code == 0, f"{name}: {err[-4000:]}"
        return
    proc = run_python([PROGRAM, mode, str(out), scenarios])
    assert proc.returncode == 0, proc.stderr[-4000:]


def _result(out: Path, scenario: str, rank: int = 0) -> Any:
    got = torch.load(f"{out}.{scenario}.rank{rank}", weights_only=False)
    assert "crashed" not in got, got.get("crashed")
    return got


def _same(a: Any, b: Any, what: str, tol: float = TOL) -> None:
    if isinstance(a, dict):
        assert set(a) == set(b), what
        for k in a:
            _same(a[k], b[k], f"{what}.{k}", tol)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), what
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{what}[{i}]", tol)
    elif isinstance(a, torch.Tensor):
        assert a.shape == b.shape, what
        assert (a.double() - b.double()).abs().max().item() <= tol, what
    elif isinstance(a, float):
        assert abs(a - b) <= tol, f"{what}: {a} vs {b}"
    else:
        assert a == b, f"{what}: {a!r} vs {b!r}"


NUMERIC = "loss_paths,logged_loss,resume,different_data"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for mode in ("oracle", "mirrored"):
        path = tmp_path_factory.mktemp(mode) / "run"
        _run(mode, path, NUMERIC)
        out[mode] = path
    return out


def test_every_keras_loss_path_of_a_custom_train_step_equals_one_device(runs) -> None:
    # self.compiled_loss(y, y_pred, regularization_losses=self.losses) and self.loss(y, y_pred)
    oracle = _result(runs["oracle"], "loss_paths")
    for rank in (0, 1):
        _same(oracle, _result(runs["mirrored"], "loss_paths", rank), f"rank {rank}")


def test_the_logged_loss_of_a_scalar_custom_loss_is_weighted_by_batch_size(runs) -> None:
    oracle = _result(runs["oracle"], "logged_loss")
    assert abs(oracle["evaluate"] - oracle["expected"]) < TOL  # Keras' weighting
    for rank in (0, 1):
        got = _result(runs["mirrored"], "logged_loss", rank)
        _same(oracle["history"], got["history"], f"rank {rank} history")
        assert abs(got["evaluate"] - oracle["expected"]) < TOL, rank


def test_backup_and_restore_resumes_exactly_for_every_input_dtype(runs) -> None:
    for mode, ranks in (("oracle", (0,)), ("mirrored", (0, 1))):
        for rank in ranks:
            got = _result(runs[mode], "resume", rank)
            for kind in ("uint8", "float64", "mixed"):
                case = got[kind]
                assert case["crash"] is not None and case["crash"]["message"] == "crash"
                _same(case["reference"], case["resumed"], f"{mode} rank {rank} {kind}", 0.0)


def test_replicas_that_read_different_data_raise_naming_the_replica(runs) -> None:
    for rank in (0, 1):
        got = _result(runs["mirrored"], "different_data", rank)
        for kind in ("dataset", "shuffled", "custom_loop", "estimator"):
            err = got[kind]
            assert err is not None and err["type"] == "DataError", (rank, kind, err)
            assert "replica(s) [1]" in err["message"] and "Fix:" in err["message"]
        err = got["loader"]  # checked before fit starts, as in-memory arrays are
        assert err is not None and err["type"] == "DataError", (rank, err)
        assert "replica(s) [1]" in err["message"] and "dataset[0]" in err["message"]
    _same(_result(runs["oracle"], "different_data")["same_data"],
          _result(runs["mirrored"], "different_data")["same_data"], "same data")


def test_an_exception_on_one_replica_stops_every_replica_with_it_named(tmp_path) -> None:
    out = tmp_path / "run"
    _run("mirrored", out, "replica_raises")
    failed = _result(out, "replica_raises", 0)["error"]
    assert failed["type"] == "ValueError"  # torch's own error, on the replica that raised
    assert "Expected more than 1 value per channel" in failed["message"]
    other = _result(out, "replica_raises", 1)["error"]
    assert other["type"] == "ReplicaFailedError" and "PeerLostError" in other["mro"]
    assert "replica 0" in other["message"] and "Model.fit" in other["message"]
    assert "ValueError: Expected more than 1 value per channel" in other["message"]


def test_calls_made_on_the_chief_only_name_the_replica_that_did_not_make_them(
        tmp_path) -> None:
    out = tmp_path / "run"
    _run("multi_worker", out, "chief_only")
    assert _result(out, "chief_only", 1) == {"worker": "ended"}
    chief = _result(out, "chief_only", 0)
    for call, name in (("evaluate", "Model.evaluate"), ("predict", "Model.predict"),
                       ("save", "Model.save"), ("estimator_predict", "Estimator.predict")):
        err = chief[call]
        assert err is not None and err["type"] == "UnmatchedCallError", (call, err)
        assert "worker:1" in err["message"] and "ended its program normally" in \
            err["message"], err["message"]
        assert name in err["message"], err["message"]
        assert "crashed" not in err["message"]
