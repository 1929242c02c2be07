"""Golden tests of the progress bar against the Keras format.

Time comes from a fake clock, so the expected lines are exact; the output of a real
run is compared the same way after ``mask_times``.
"""

from __future__ import annotations

import io
import sys

import pytest

from distrib.training import progbar as progbar_module
from distrib.training.callbacks import CallbackList, ProgbarLogger
from distrib.training.progbar import Progbar, mask_times
from tests.training.callbacks.standin import StandInModel

FINAL = {"loss": 0.2970, "accuracy": 0.9140}


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(progbar_module, "_now", c)
    return c


def _run_epochs(cb: ProgbarLogger | CallbackList, clock: Clock, epochs: int, steps: int,
                first: float = 0.8, per_step: float = 0.002, batch_hooks: bool = True) -> None:
    """Drives the logger like fit: the first step takes ``first`` s, the others ``per_step``."""
    cb.on_train_begin()
    for epoch in range(epochs):
        clock.t = 0.0
        cb.on_epoch_begin(epoch)
        for b in range(steps):
            clock.t = first + b * per_step
            if batch_hooks:
                cb.on_train_batch_end(b, {"loss": 0.5, "accuracy": 0.5})
        cb.on_test_begin()  # validation inside fit: silent
        cb.on_test_batch_end(0, {"loss": 9.0})
        cb.on_test_end({"loss": 9.0})
        cb.on_epoch_end(epoch, dict(FINAL))
    cb.on_train_end()


def test_finished_verbose1_epoch_line_is_keras_s(clock: Clock, capsys) -> None:
    cbs = CallbackList([], add_progbar=True, model=StandInModel(), verbose=1, epochs=5,
                       steps=938)
    _run_epochs(cbs, clock, epochs=2, steps=938)
    assert capsys.readouterr().out.splitlines() == [
        "Epoch 1/5",
        "938/938 [==============================] - 3s 2ms/step - loss: 0.2970 - accuracy: 0.9140",
        "Epoch 2/5",
        "938/938 [==============================] - 3s 2ms/step - loss: 0.2970 - accuracy: 0.9140",
    ]


def test_single_epoch_has_no_epoch_header(clock: Clock, capsys) -> None:
    cb = ProgbarLogger(count_mode="steps")
    cb.set_params({"verbose": 1, "epochs": 1, "steps": 938})
    _run_epochs(cb, clock, epochs=1, steps=938)
    assert capsys.readouterr().out == (
        "938/938 [==============================] - 3s 2ms/step - loss: 0.2970 - accuracy: 0.9140\n")


def test_verbose2_prints_one_line_per_epoch(clock: Clock, capsys) -> None:
    cb = ProgbarLogger(count_mode="steps")
    cb.set_params({"verbose": 2, "epochs": 2, "steps": 938})
    assert not cb._implements_train_batch_hooks()  # verbose=2 needs no batch hooks
    _run_epochs(cb, clock, epochs=2, steps=938, batch_hooks=False)
    line = "938/938 - 3s - loss: 0.2970 - accuracy: 0.9140 - 3s/epoch - 3ms/step"
    assert capsys.readouterr().out.splitlines() == ["Epoch 1/2", line, "Epoch 2/2", line]


def test_terminal_redraws_in_place_with_eta(clock: Clock, monkeypatch) -> None:
    out = Terminal()
    monkeypatch.setattr(sys, "stdout", out)
    cb = ProgbarLogger(count_mode="steps")
    cb.set_params({"verbose": 1, "epochs": 1, "steps": 3})
    cb.on_train_begin()
    cb.on_epoch_begin(0)
    for b, loss in enumerate([0.5, 0.4, 0.3]):
        clock.t = b + 1.0
        cb.on_train_batch_end(b, {"loss": loss})
    cb.on_epoch_end(0, {"loss": 0.297})
    frames = out.getvalue().split("\r")
    assert frames == [
        "",
        "1/3 [=========>....................] - ETA: 2s - loss: 0.5000",
        "2/3 [===================>..........] - ETA: 1s - loss: 0.4000",
        "3/3 [==============================] - ETA: 0s - loss: 0.3000",
        "3/3 [==============================] - 3s 1s/step - loss: 0.2970\n",
    ]


def test_file_output_gets_only_the_finished_line(clock: Clock, capsys) -> None:
    cb = ProgbarLogger(count_mode="steps")
    cb.set_params({"verbose": 1, "epochs": 1, "steps": 3})
    _run_epochs(cb, clock, epochs=1, steps=3, first=1.0, per_step=1.0)
    out = capsys.readouterr().out
    assert "\r" not in out and "ETA" not in out
    assert out == "3/3 [==============================] - 3s 1s/step - loss: 0.2970 - accuracy: 0.9140\n"


def test_unknown_target_shows_unknown_then_learns_it(clock: Clock, monkeypatch) -> None:
    out = Terminal()
    monkeypatch.setattr(sys, "stdout", out)
    cb = ProgbarLogger(count_mode="steps")
    cb.set_params({"verbose": 1, "epochs": 2, "steps": None})
    _run_epochs(cb, clock, epochs=2, steps=3, first=1.0, per_step=1.0)
    frames = [f for f in out.getvalue().split("\r") if f]
    assert frames[1] == "      1/Unknown - 1s 1s/step - loss: 0.5000 - accuracy: 0.5000"
    assert frames[4] == ("3/3 [==============================] - 3s 1s/step - loss: 0.2970"
                         " - accuracy: 0.9140\nEpoch 2/2\n")
    assert frames[5].startswith("1/3 [=========>....................] - ETA: 2s")  # learnt


def test_tiny_values_use_exponent_format(clock: Clock) -> None:
    out = io.StringIO()
    bar = Progbar(target=10, stream=out, stateful_metrics=["loss", "lr"])
    clock.t = 0.5
    bar.update(10, [("loss", 0.0001234), ("lr", 1e-3), ("acc", 0.5)])
    assert out.getvalue() == (
        "10/10 [==============================] - 0s 50ms/step - loss: 1.2340e-04"
        " - lr: 1.0000e-03 - acc: 0.5000\n")


def test_values_not_stateful_are_averaged_over_steps(clock: Clock) -> None:
    out = io.StringIO()
    bar = Progbar(target=4, verbose=2, stream=out)
    for step, loss in enumerate([1.0, 2.0, 3.0, 4.0], start=1):
        clock.t = float(step)
        bar.update(step, [("loss", loss)])
    assert out.getvalue() == "4/4 - 4s - loss: 2.5000 - 4s/epoch - 1s/step\n"


def test_eta_formats() -> None:
    assert progbar_module._format_eta(59) == "59s"
    assert progbar_module._format_eta(61) == "1:01"
    assert progbar_module._format_eta(3725) == "1:02:05"
    assert progbar_module._format_time(0.0004, "step") == " 400us/step"


def test_evaluate_and_predict_show_their_own_bar(clock: Clock, capsys) -> None:
    cb = ProgbarLogger(count_mode="steps")
    cb.set_params({"verbose": 1, "epochs": 1, "steps": 2})
    cb.on_test_begin()
    for b in range(2):
        clock.t = b + 1.0
        cb.on_test_batch_end(b, {"loss": 0.1})
    cb.on_test_end({"loss": 0.125})
    clock.t = 0.0
    cb.on_predict_begin()
    for b in range(2):
        clock.t = b + 1.0
        cb.on_predict_batch_end(b, {"outputs": [1, 2]})
    cb.on_predict_end()
    assert capsys.readouterr().out.splitlines() == [
        "2/2 [==============================] - 2s 1s/step - loss: 0.1250",
        "2/2 [==============================] - 2s 1s/step",
    ]


def test_only_the_chief_prints(clock: Clock, capsys) -> None:
    cbs = CallbackList([], add_progbar=True, model=StandInModel(chief=False), verbose=1,
                       epochs=2, steps=3)
    assert not cbs._call_train_batch  # no per-batch work on the other replicas
    _run_epochs(cbs, clock, epochs=2, steps=3)
    assert capsys.readouterr().out == ""


def test_mask_times_leaves_metrics() -> None:
    assert mask_times("  7/938 [>.....] - ETA: 1:05 - loss: 0.3000") == (
        "  7/938 [>.....] - ETA: # - loss: 0.3000")
    assert mask_times("938/938 [====] - 13s 850us/step - loss: 1.0000e-04 - s: 3.0000") == (
        "938/938 [====] - #s #/step - loss: 1.0000e-04 - s: 3.0000")


def test_bad_count_mode_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="Unknown `count_mode`: epochs"):
        ProgbarLogger(count_mode="epochs")
