"""Class weights, an epoch without data and missing targets on two replicas, against one process.

programs/keras_items.py runs unchanged on one process (the oracle) and under
MirroredStrategy over two CPU replicas.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.support import run_python

PROGRAM = str(Path(__file__).parent / "programs" / "keras_items.py")
TOL = 1e-9


def _run(mode: str, directory: Path) -> tuple[list[dict[str, Any]], str]:
    out = directory / mode
    proc = run_python([PROGRAM, mode, str(out)])
    assert proc.returncode == 0, proc.stderr[-4000:]
    replicas = 2 if mode == "mirrored" else 1
    assert proc.stdout.count(f"done replicas={replicas}") == replicas
    results = [torch.load(f"{out}.rank{r}", weights_only=True) for r in range(replicas)]
    return results, proc.stdout


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    directory = tmp_path_factory.mktemp("keras_items")
    oracle, _ = _run("oracle", directory)
    mirrored, stdout = _run("mirrored", directory)
    return {"oracle": oracle[0], "replicas": mirrored, "stdout": stdout}


def _close(a: dict[str, list[float]], b: dict[str, list[float]]) -> None:
    assert set(a) == set(b)
    for key in a:
        assert len(a[key]) == len(b[key]), key
        for u, v in zip(a[key], b[key]):
            assert abs(u - v) < TOL, (key, a[key], b[key])


@pytest.mark.slow
def test_class_weights_on_two_replicas_train_as_one_process(runs: dict[str, Any]) -> None:
    oracle = runs["oracle"]["class_weights"]
    # Keras: class weights multiply the sample weights of the training data only; the
    # loss and weighted_metrics see them, metrics and validation do not.
    assert oracle["arrays"]["weighted_accuracy"] != oracle["arrays"]["accuracy"]
    assert oracle["arrays"]["val_weighted_accuracy"] == oracle["arrays"]["val_accuracy"]
    _close(oracle["stream"], {k: v for k, v in oracle["arrays"].items()
                              if not k.startswith("val_")})
    for got in runs["replicas"]:
        mine = got["class_weights"]
        _close(oracle["arrays"], mine["arrays"])
        _close(oracle["stream"], mine["stream"])
        for key in ("arrays_weights", "stream_weights"):
            for a, b in zip(oracle[key], mine[key]):
                assert (a - b).abs().max().item() < TOL, key


@pytest.mark.slow
def test_an_epoch_without_data_is_neither_logged_nor_compared(runs: dict[str, Any]) -> None:
    # TensorFlow 2.21 logs `loss: 0.0 - accuracy: 0.0` for epoch 3 here, and
    # ModelCheckpoint(save_best_only=True) then takes it as the best.
    for got in [runs["oracle"], *runs["replicas"]]:
        run_out = got["run_out"]
        assert run_out["warned"] and run_out["epochs"] == [0, 1]
        assert all(len(v) == 2 and 0.0 not in v[:1] for v in run_out["history"].values())
        assert run_out["best"] == min(run_out["history"]["loss"])
        assert "ckpt-3.pt" not in got["files"] and "ckpt-4.pt" not in got["files"]
    csv = runs["replicas"][0]["csv"].strip().splitlines()
    assert [row.split(",")[0] for row in csv[1:]] == ["0", "1"]
    assert "Epoch 2/4" in runs["stdout"] and "Epoch 3/4" not in runs["stdout"]


@pytest.mark.slow
def test_missing_targets_raise_kerass_error_on_every_replica(runs: dict[str, Any]) -> None:
    for got in runs["replicas"]:
        said = got["missing_targets"]["said"]
        for where, call in (("`evaluate()`", "evaluate(x)"),
                            ("`validation_data`", "validation_data=x"),
                            ("`fit()`", "batches of x")):
            assert "Target data is missing. Your model was compiled with loss=" in said[call]
            assert f"expects target data to be provided in {where}" in said[call]


@pytest.mark.slow
def test_loading_another_optimizers_state_warns_and_keeps_the_compiled_one(
        runs: dict[str, Any]) -> None:
    for got in runs["replicas"]:
        items = got["missing_targets"]
        assert len(items["load_warnings"]) == 1
        assert "torch.optim.sgd.SGD" in items["load_warnings"][0]
        assert "compiled with torch.optim.adam.Adam" in items["load_warnings"][0]
        assert items["adam_after_load"] == [0.001, [0.9, 0.999]]
