"""examples/sharded_fit.py and examples/model_parallel_fit.py run and do what they say."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.support import REPO, run_python

EXAMPLES = REPO / "examples"
pytestmark = pytest.mark.slow


def _accuracy(stdout: str) -> float:
    found = re.search(r"Test accuracy: ([0-9.]+)", stdout)
    assert found is not None, stdout[-2000:]
    return float(found.group(1))


def test_sharded_fit_learns_holds_half_and_writes_a_checkpoint_one_process_restores(
        tmp_path: Path) -> None:
    proc = run_python([str(EXAMPLES / "sharded_fit.py"), "--epochs", "2", "--out",
                       str(tmp_path)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    accuracy = _accuracy(proc.stdout)
    assert accuracy > 0.8
    assert sorted(re.findall(r"replica (\d) holds \d+ of \d+ parameter and Adam elements "
                             r"\((0\.\d+)\)", proc.stdout)) == [("0", "0.50"), ("1", "0.50")]
    assert proc.stdout.count("Test accuracy") == 1  # the chief reports
    path = re.search(r"restorable anywhere\): (\S+)", proc.stdout).group(1)  # type: ignore[union-attr]

    # The checkpoint holds full tensors: one process without a strategy restores it and
    # evaluates to the same accuracy.
    import torch

    import distrib
    from distrib.datasets import digits

    sharded_fit = _load(EXAMPLES / "sharded_fit.py")
    model = distrib.Model(sharded_fit.build_cnn())
    model.compile(optimizer="adam",
                  loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    distrib.Checkpoint(model=model).restore(path).assert_existing_objects_matched()
    (_, _), (x_test, y_test) = digits.load_data(data_format="channels_first")
    with torch.no_grad():
        _, again = model.evaluate(x_test, y_test, batch_size=256, verbose=0)
    assert round(again, 4) == accuracy


def test_model_parallel_fit_splits_the_layers_over_the_model_axis(tmp_path: Path) -> None:
    proc = run_python([str(EXAMPLES / "model_parallel_fit.py"), "--epochs", "2"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _accuracy(proc.stdout) > 0.8
    assert sorted(re.findall(r"process (\d) holds \(256, 784\) of the first layer's "
                             r"\(512, 784\) weight", proc.stdout)) == ["0", "1"]


def _load(path: Path) -> Any:
    import importlib.util
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
