"""Oracle: Estimator.train on 2 local replicas and on 2 workers ends where one device ends.

One program (programs/oracle_program.py) trains a float64 MLP with SGD + momentum through
two ``train`` calls (the second ends with a partial batch split unevenly over the
replicas) and evaluates on data whose last batch is partial.  The parameters (and the
optimizer's momentum) must equal one device's within 1e-9, and every metric must equal
both the one-device Estimator's and a plain single-process computation over the same
data.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests.support import localhost_cluster, run_python, start_cluster, wait_all

PROGRAM = Path(__file__).parent / "programs" / "oracle_program.py"
TOLERANCE = 1e-9
pytestmark = pytest.mark.slow


def _load(path: Path) -> dict[str, Any]:
    return torch.load(path, weights_only=False)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def one_device(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("one_device")
    proc = run_python([str(PROGRAM), "one_device", str(root / "out.pt"), str(root / "model")])
    assert proc.returncode == 0, proc.stderr[-4000:]
    return _load(root / "out.pt")


def _program() -> Any:
    spec = importlib.util.spec_from_file_location("oracle_program", PROGRAM)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _reference_metrics(params: dict[str, torch.Tensor]) -> dict[str, float]:
    """The evaluation computed in one process with plain torch, batch by batch."""
    program = _program()
    x = torch.from_numpy(program.X_EVAL)
    y = torch.from_numpy(program.Y_EVAL)

    def net(inputs: torch.Tensor) -> torch.Tensor:
        hidden = torch.tanh(inputs @ params["sequential/0/weight"].T + params["sequential/0/bias"])
        return hidden @ params["sequential/2/weight"].T + params["sequential/2/bias"]

    logits = net(x)
    losses = [torch.nn.functional.cross_entropy(net(x[i:i + 8]), y[i:i + 8]).item()
              for i in range(0, len(x), 8)]
    accuracy = (logits.argmax(1) == y).double().mean().item()
    return {"accuracy": accuracy, "keras_accuracy": accuracy, "loss": float(np.mean(losses)),
            "mean_logit": logits.mean().item()}


def _compare(expected: dict[str, Any], got: dict[str, Any]) -> None:
    assert set(got["params"]) == set(expected["params"])
    for name, value in expected["params"].items():
        diff = (got["params"][name].double() - value.double()).abs().max().item()
        assert diff < TOLERANCE, f"{name}: max abs diff {diff}"
    assert got["logits"].shape == (37, 3)
    assert (got["logits"] - expected["logits"]).abs().max().item() < TOLERANCE
    assert set(got["eval"]) == set(expected["eval"])
    for key, value in expected["eval"].items():
        assert got["eval"][key] == pytest.approx(value, abs=TOLERANCE), key


def test_one_device_metrics_equal_a_plain_computation(one_device: dict[str, Any]) -> None:
    assert one_device["eval"]["global_step"] == 10 + 16
    for key, value in _reference_metrics(one_device["params"]).items():
        assert one_device["eval"][key] == pytest.approx(value, abs=TOLERANCE), key


def test_two_local_replicas_equal_one_device(one_device: dict[str, Any], tmp_path: Path) -> None:
    proc = run_python([str(PROGRAM), "mirrored", str(tmp_path / "out.pt"),
                       str(tmp_path / "model")])
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.count("done replicas=2 step=26") == 2
    _compare(one_device, _load(tmp_path / "out.pt"))


def test_two_workers_equal_one_device(one_device: dict[str, Any], tmp_path: Path) -> None:
    results = wait_all(start_cluster([str(PROGRAM), "multi_worker", str(tmp_path / "out.pt"),
                                      str(tmp_path / "model")], localhost_cluster(worker=2)))
    for name, (code, out, err) in results.items():
        assert code == 0, f"{name}: {err[-4000:]}"
        assert "done replicas=2 step=26" in out
    _compare(one_device, _load(tmp_path / "out.pt"))
