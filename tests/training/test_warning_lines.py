"""distrib's warnings point at the user's line (the first frame outside distrib)."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from distrib import experimental
from distrib.checkpoint import Checkpoint, CheckpointManager
from distrib.errors import warn
from distrib.training import Model


def _model(optimizer: Any = "sgd") -> Model:
    torch.manual_seed(0)
    model = Model(nn.Linear(4, 2).double())
    model.compile(optimizer=optimizer, loss="mse")
    return model


def _caught(action: Callable[[], object], match: str) -> warnings.WarningMessage:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        action()
    found = [w for w in caught if match in str(w.message)]
    assert found, [str(w.message) for w in caught]
    return found[0]


def test_a_generator_that_runs_out_warns_at_the_fit_call() -> None:
    x, y = np.ones((32, 4)), np.zeros((32, 2))

    def batches() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for i in range(0, 32, 16):
            yield x[i:i + 16], y[i:i + 16]

    model = _model()
    line = sys._getframe().f_lineno + 1
    w = _caught(lambda: model.fit(batches(), epochs=3, verbose=0), "ran out of data")
    assert (w.filename, w.lineno, w.category) == (__file__, line, UserWarning)


def test_loading_another_optimizers_state_warns_at_the_load_call(tmp_path: Path) -> None:
    path = str(tmp_path / "sgd.pt")
    _model().save(path)
    adam = _model("adam")
    line = sys._getframe().f_lineno + 1
    w = _caught(lambda: adam.load(path), "saved optimizer state is not loaded")
    assert (w.filename, w.lineno) == (__file__, line)


def test_an_unreadable_checkpoint_state_file_warns_at_the_manager(tmp_path: Path) -> None:
    (tmp_path / "checkpoint").write_text("not json {")
    ckpt = Checkpoint(model=nn.Linear(2, 2))
    line = sys._getframe().f_lineno + 1
    w = _caught(lambda: CheckpointManager(ckpt, str(tmp_path), max_to_keep=2),
                "cannot be read")
    assert (w.filename, w.lineno) == (__file__, line)


def test_the_deprecated_experimental_strategy_warns_at_its_construction() -> None:
    line = sys._getframe().f_lineno + 1
    w = _caught(lambda: experimental.MultiWorkerMirroredStrategy(), "is deprecated")
    assert (w.filename, w.lineno, w.category) == (__file__, line, FutureWarning)


def test_the_helper_skips_every_distrib_frame_and_keeps_the_category() -> None:
    line = sys._getframe().f_lineno + 1
    w = _caught(lambda: warn("direct", RuntimeWarning), "direct")
    assert (w.filename, w.lineno, w.category) == (__file__, line, RuntimeWarning)


def test_python_shows_it_once_per_user_line() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")  # once per (message, category, module, line)
        for _ in range(3):
            warn("repeated at one line")
    assert len([w for w in caught if "repeated" in str(w.message)]) == 1
