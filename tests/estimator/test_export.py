"""export_saved_model: a torch.export program that a fresh process loads with equal predictions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from distrib.errors import UsageError
from distrib.estimator import (
    Estimator,
    ServingInputReceiver,
    WarmStartSettings,
    build_raw_serving_input_receiver_fn,
)
from tests.estimator.common import X, input_fn, model_fn
from tests.support import run_python

LOADER = """
import sys, json, numpy as np, torch
program = torch.export.load(sys.argv[1] + "/saved_model.pt2").module()
x = torch.from_numpy(np.load(sys.argv[2]))
out = program(x)
np.save(sys.argv[3], out["y"].detach().numpy())
"""


@pytest.mark.slow
def test_the_exported_program_predicts_like_the_estimator_in_a_fresh_process(
        tmp_path: Path) -> None:
    est = Estimator(model_fn, model_dir=str(tmp_path / "model"))
    est.train(input_fn(repeat=True), steps=5)
    receiver = build_raw_serving_input_receiver_fn({"x": torch.from_numpy(X[:1])})
    path = est.export_saved_model(str(tmp_path / "export"), receiver)
    directory = Path(path.decode())
    assert directory.parent == tmp_path / "export" and directory.name.isdigit()
    signature = json.loads((directory / "signature.json").read_text())
    assert signature["inputs"] == ["x"] and signature["outputs"] == ["twice", "y"]
    expected = np.stack([p["y"] for p in est.predict(input_fn())])
    np.save(tmp_path / "x.npy", X)
    (tmp_path / "load.py").write_text(LOADER)
    proc = run_python([str(tmp_path / "load.py"), str(directory), str(tmp_path / "x.npy"),
                       str(tmp_path / "y.npy")])
    assert proc.returncode == 0, proc.stderr[-3000:]
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), expected, rtol=1e-5, atol=1e-6)


def test_load_saved_model_calls_by_input_name(tmp_path: Path) -> None:
    from distrib.estimator import load_saved_model

    est = Estimator(model_fn, model_dir=str(tmp_path / "model"))
    est.train(input_fn(repeat=True), steps=2)
    receiver = lambda: ServingInputReceiver(  # noqa: E731
        features=lambda inputs: {"x": inputs["raw"] * 1.0},
        receiver_tensors={"raw": torch.from_numpy(X[:3])})
    predict = load_saved_model(est.export_saved_model(str(tmp_path / "export"), receiver))
    out = predict(raw=torch.from_numpy(X[:7]))
    expected = np.stack([p["y"] for p in est.predict(input_fn())])[:7]
    np.testing.assert_allclose(out["y"].detach().numpy(), expected, rtol=1e-5, atol=1e-6)


def test_export_needs_a_receiver_and_a_checkpoint(tmp_path: Path) -> None:
    est = Estimator(model_fn, model_dir=str(tmp_path / "model"))
    receiver = build_raw_serving_input_receiver_fn({"x": torch.from_numpy(X[:2])})
    with pytest.raises(UsageError, match="Couldn't find trained model"):
        est.export_saved_model(str(tmp_path / "export"), receiver)
    with pytest.raises(UsageError, match="An input_receiver_fn must be defined"):
        est.export_saved_model(str(tmp_path / "export"), None)


def test_warm_start_copies_the_selected_parameters(tmp_path: Path) -> None:
    source = Estimator(model_fn, model_dir=str(tmp_path / "source"))
    source.train(input_fn(repeat=True), steps=3)
    settings = WarmStartSettings(str(tmp_path / "source"), vars_to_warm_start="sequential/0/.*")
    est = Estimator(model_fn, model_dir=str(tmp_path / "target"), warm_start_from=settings,
                    config=source.config.replace(model_dir=str(tmp_path / "target"),
                                                 save_checkpoints_secs=None,
                                                 save_checkpoints_steps=None))
    est.train(input_fn(repeat=True), steps=1, hooks=[])
    assert est.latest_checkpoint() is None
    saved_weight = source.get_variable_value("sequential/0/weight")
    warm = Estimator(model_fn, model_dir=str(tmp_path / "target2"),
                     warm_start_from=str(tmp_path / "source"))
    warm.train(input_fn(repeat=True), steps=1)
    first = warm.get_variable_value("sequential/0/weight")
    assert not np.array_equal(first, saved_weight)        # trained one step from it
    assert np.abs(first - saved_weight).max() < 0.1
    with pytest.raises(UsageError, match="neither a checkpoint nor a directory"):
        Estimator(model_fn, warm_start_from=str(tmp_path / "nothing")).train(
            input_fn(repeat=True), steps=1)
