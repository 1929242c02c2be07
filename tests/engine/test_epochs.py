"""The engine's epoch loop, in one process.

The program, the callbacks and the progress are small in-process objects that write
down what the loop asks of them, in one shared list of events.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import distrib
from distrib.engine import EpochLoop, validates


class Recorder:
    """An epoch program and epoch callbacks in one, recording every call."""

    def __init__(self, resume_at: tuple[int, int] | None = None, stop_after: int | None = None,
                 no_data_at: int | None = None) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.resume_at = resume_at  # (epoch, step) a backup restores
        self.stop_after = stop_after  # training stops after this epoch
        self.no_data_at = no_data_at  # the data has no step left for this epoch
        self.epoch = -1

    # the program
    def begin_epoch(self, epoch: int, start: int, first: bool) -> bool:
        self.events.append(("begin_epoch", epoch, start, first))
        self.epoch = epoch
        return epoch != self.no_data_at

    def train_epoch(self, epoch: int, start: int) -> dict[str, Any]:
        self.events.append(("train_epoch", epoch, start))
        return {"loss": float(epoch)}

    def validate(self) -> dict[str, Any]:
        self.events.append(("validate", self.epoch))
        return {"loss": 10.0 + self.epoch}

    def stop(self) -> bool:
        self.events.append(("stop", self.epoch))
        return self.epoch == self.stop_after

    def end(self) -> None:
        self.events.append(("end",))

    # the callbacks
    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        self.events.append(("on_train_begin",))

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self.events.append(("on_epoch_begin", epoch))

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self.events.append(("on_epoch_end", epoch, dict(logs or {})))

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        self.events.append(("on_train_end", dict(logs or {})))


class Progress:
    """The progress (as ``TrainingState``): a backup's ``resume_at`` restored once."""

    def __init__(self, rec: Recorder) -> None:
        self.events, self.resume_at = rec.events, rec.resume_at

    def resume(self, initial_epoch: int) -> int:
        self.events.append(("resume", initial_epoch))
        return self.resume_at[0] if self.resume_at is not None else initial_epoch

    def begin_epoch(self, epoch: int) -> int:
        self.events.append(("progress.begin_epoch", epoch))
        if self.resume_at is not None and epoch == self.resume_at[0]:
            return self.resume_at[1]
        return 0

    def epoch_done(self, epoch: int) -> None:
        self.events.append(("epoch_done", epoch))


def run(rec: Recorder, initial_epoch: int, epochs: int,
        validation_freq: Any = None) -> dict[str, Any]:
    return EpochLoop(rec, rec, Progress(rec), validation_freq).run(initial_epoch, epochs)


def epoch_events(epoch: int, start: int = 0, first: bool = False,
                 val: bool = False, stops: bool = False) -> list[tuple[Any, ...]]:
    logs: dict[str, Any] = {"loss": float(epoch)}
    if val:
        logs["val_loss"] = 10.0 + epoch
    return [("progress.begin_epoch", epoch), ("begin_epoch", epoch, start, first),
            ("on_epoch_begin", epoch), ("train_epoch", epoch, start),
            *([("validate", epoch)] if val else []),
            ("on_epoch_end", epoch, logs), ("stop", epoch), ("epoch_done", epoch)]


def test_each_epoch_runs_its_hooks_in_keras_order_and_the_last_logs_end_training() -> None:
    rec = Recorder()
    logs = run(rec, 0, 3, validation_freq=2)
    assert rec.events == [("on_train_begin",), ("resume", 0),
                          *epoch_events(0, first=True),
                          *epoch_events(1, val=True),
                          *epoch_events(2),
                          ("end",), ("on_train_end", {"loss": 2.0})]
    assert logs == {"loss": 2.0}


def test_validation_freq_as_a_list_names_one_based_epochs() -> None:
    rec = Recorder()
    run(rec, 0, 4, validation_freq=[1, 4])
    assert [e for e in rec.events if e[0] == "validate"] == [("validate", 0), ("validate", 3)]


def test_without_validation_data_no_epoch_validates() -> None:
    rec = Recorder()
    run(rec, 0, 3, validation_freq=None)
    assert not [e for e in rec.events if e[0] == "validate"]


def test_a_resume_starts_at_the_backups_epoch_and_step_once() -> None:
    rec = Recorder(resume_at=(2, 5))
    run(rec, 0, 4)
    assert rec.events == [("on_train_begin",), ("resume", 0),
                          *epoch_events(2, start=5, first=True),
                          *epoch_events(3),
                          ("end",), ("on_train_end", {"loss": 3.0})]


def test_a_resume_past_the_last_epoch_runs_none_and_ends_training() -> None:
    rec = Recorder(resume_at=(3, 0))
    assert run(rec, 0, 3) == {}
    assert rec.events == [("on_train_begin",), ("resume", 0), ("end",), ("on_train_end", {})]


def test_initial_epoch_is_the_first_epoch() -> None:
    rec = Recorder()
    run(rec, 1, 3)
    assert rec.events[2:4] == [("progress.begin_epoch", 1), ("begin_epoch", 1, 0, True)]


def test_a_stop_ends_training_after_the_epoch_is_noted_done() -> None:
    rec = Recorder(stop_after=1)
    run(rec, 0, 5)
    assert rec.events == [("on_train_begin",), ("resume", 0),
                          *epoch_events(0, first=True), *epoch_events(1),
                          ("end",), ("on_train_end", {"loss": 1.0})]


def test_an_epoch_the_data_has_no_step_for_is_neither_begun_nor_logged() -> None:
    rec = Recorder(no_data_at=2)
    logs = run(rec, 0, 5, validation_freq=1)
    assert rec.events == [("on_train_begin",), ("resume", 0),
                          *epoch_events(0, first=True, val=True), *epoch_events(1, val=True),
                          ("progress.begin_epoch", 2), ("begin_epoch", 2, 0, False),
                          ("end",), ("on_train_end", {"loss": 1.0, "val_loss": 11.0})]
    assert logs == {"loss": 1.0, "val_loss": 11.0}


def test_an_error_in_an_epoch_skips_the_end_of_training() -> None:
    class Failing(Recorder):
        def train_epoch(self, epoch: int, start: int) -> dict[str, Any]:
            raise ValueError(f"epoch {epoch} failed")

    rec = Failing()
    with pytest.raises(ValueError, match="epoch 0 failed"):
        run(rec, 0, 2)
    assert ("end",) not in rec.events and rec.events[-1] == ("on_epoch_begin", 0)


@pytest.mark.parametrize(("freq", "selected"), [(1, [0, 1, 2, 3, 4, 5]), (3, [2, 5]),
                                                (np.int64(2), [1, 3, 5]), ([2, 5], [1, 4]),
                                                ((1,), [0])])
def test_validates_follows_keras_validation_freq(freq: Any, selected: list[int]) -> None:
    assert [e for e in range(6) if validates(e, freq)] == selected


def test_fit_validates_on_the_epochs_a_numpy_validation_freq_selects(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    x = np.linspace(0.0, 1.0, 24).reshape(12, 2)
    y = x.sum(1, keepdims=True)
    model = distrib.Model(torch.nn.Linear(2, 1).double())
    model.compile(optimizer="sgd", loss="mse")
    seen: list[tuple[int, bool]] = []
    record = distrib.callbacks.LambdaCallback(
        on_epoch_end=lambda epoch, logs: seen.append((epoch, "val_loss" in logs)))
    history = model.fit(x, y, batch_size=4, epochs=4, verbose=0, validation_data=(x, y),
                        validation_freq=np.int64(2), callbacks=[record])
    assert seen == [(0, False), (1, True), (2, False), (3, True)]
    assert len(history.history["val_loss"]) == 2
