"""BackupAndRestore: a fit interrupted at any step resumes to the same weights and history."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import distrib
from distrib.training.callbacks import (
    BackupAndRestore,
    Callback,
    CSVLogger,
    EarlyStopping,
    LearningRateScheduler,
    ReduceLROnPlateau,
)

RNG = np.random.RandomState(0)
X, Y = RNG.randn(50, 6), RNG.randint(0, 3, 50)


class Crash(Callback):
    """Raises after ``at`` training batches (reads no logs, so fit's timing is unchanged)."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at, self.seen = at, 0

    def batch_log_interval(self, mode: str, steps: int | None, in_fit: bool) -> int:
        return 0

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.seen += 1
        if self.seen == self.at:
            raise KeyboardInterrupt("crash")


def _model() -> distrib.Model:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 8), nn.Dropout(0.3), nn.ReLU(), nn.Linear(8, 3)).double()
    model = distrib.Model(net)
    model.compile(optimizer=torch.optim.Adam(net.parameters(), lr=0.01),
                  loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model


def _fit(tmp: Path, save_freq: Any, data: str, extra: list[Callback] | None = None
         ) -> tuple[list[np.ndarray], dict[str, list[float]], str]:
    model = _model()
    callbacks = [BackupAndRestore(tmp / "backup", save_freq=save_freq),
                 EarlyStopping(monitor="loss", patience=2),
                 ReduceLROnPlateau(monitor="loss", patience=1, factor=0.5),
                 LearningRateScheduler(lambda epoch, lr: lr * 0.9),
                 CSVLogger(tmp / "log.csv"), *(extra or [])]
    if data == "arrays":
        history = model.fit(X, Y, batch_size=8, epochs=5, verbose=0, callbacks=callbacks)
    else:
        ds = distrib.data.Dataset.from_tensor_slices((X, Y)).shuffle(50, seed=2).batch(8)
        history = model.fit(ds, epochs=5, verbose=0, callbacks=callbacks)
    return model.get_weights(), history.history, (tmp / "log.csv").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("save_freq, data", [(3, "arrays"), ("epoch", "dataset"),
                                             (1, "dataset")])
def test_a_fit_interrupted_at_any_step_ends_like_the_uninterrupted_one(
        tmp_path: Path, save_freq: Any, data: str) -> None:
    weights, history, csv = _fit(tmp_path / "ref", save_freq, data)
    for at in (2, 14, 33):  # in epoch 0; the last step of epoch 1; epoch 4
        run = tmp_path / f"crash{at}"
        with pytest.raises(KeyboardInterrupt):
            _fit(run, save_freq, data, [Crash(at)])
        again = _fit(run, save_freq, data)
        assert all(np.array_equal(a, b) for a, b in zip(weights, again[0])), at
        assert again[1] == history, at
        assert again[2] == csv, at
        assert not (run / "backup").exists()  # deleted after a successful fit


def test_save_freq_must_be_set_unless_saving_before_preemption() -> None:
    with pytest.raises(ValueError, match="Either `save_freq` or `save_before_preemption`"):
        BackupAndRestore("b", save_freq=False)
    with pytest.raises(ValueError, match="Unrecognized save_freq"):
        BackupAndRestore("b", save_freq="batch")
    BackupAndRestore("b", save_freq=False, save_before_preemption=True)


def test_an_unwritable_backup_dir_fails_before_training(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    model = _model()
    with pytest.raises(distrib.errors.CheckpointError, match="not writable"):
        model.fit(X, Y, epochs=1, verbose=0,
                  callbacks=[BackupAndRestore(tmp_path / "file" / "backup")])
    assert model._train_counter == 0
