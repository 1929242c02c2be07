"""ModelCheckpoint: filepath formatting, best-only, weights-only, save_freq, atomic writes."""

from __future__ import annotations

import os

import pytest

from distrib.training.callbacks import ModelCheckpoint
from distrib.training.saving import temporary_prefix
from tests.training.callbacks.standin import StandInModel, read_saved


def _epochs(cb: ModelCheckpoint, model: StandInModel, logs: list[dict]) -> None:
    cb.set_model(model)
    cb.on_train_begin()
    for epoch, epoch_logs in enumerate(logs):
        cb.on_epoch_begin(epoch)
        model.fill(float(epoch))
        cb.on_epoch_end(epoch, dict(epoch_logs))
    cb.on_train_end()


def test_epoch_and_metric_fields_are_formatted(tmp_path) -> None:
    cb = ModelCheckpoint(str(tmp_path / "ckpt" / "weights.{epoch:02d}-{val_loss:.2f}.json"))
    model = StandInModel()
    _epochs(cb, model, [{"val_loss": 0.5}, {"val_loss": 0.25}])
    assert sorted(os.listdir(tmp_path / "ckpt")) == ["weights.01-0.50.json", "weights.02-0.25.json"]
    assert read_saved(tmp_path / "ckpt" / "weights.02-0.25.json")["kind"] == "model"


def test_unknown_field_raises_keras_key_error(tmp_path) -> None:
    path = str(tmp_path / "m-{val_acc:.2f}.json")
    cb = ModelCheckpoint(path)
    cb.set_model(StandInModel())
    with pytest.raises(KeyError, match='Failed to format this callback filepath: ".*m-'
                                       r'\{val_acc:.2f\}.json". Reason: .*val_acc.*Fix: .*'
                                       r'\(epoch, loss\)'):
        cb.on_epoch_end(0, {"loss": 1.0})


def test_save_best_only_saves_improvements_with_keras_messages(tmp_path, capsys) -> None:
    path = tmp_path / "best.json"
    cb = ModelCheckpoint(str(path), monitor="val_loss", save_best_only=True,
                         save_weights_only=True, verbose=1)
    model = StandInModel()
    _epochs(cb, model, [{"val_loss": 0.5}, {"val_loss": 0.7}, {"val_loss": 0.25}])
    assert [kind for kind, _ in model.saved] == ["weights"] * 2  # a temporary of this process
    assert all(n.startswith(temporary_prefix()) and n.endswith("best.json") for _, n in model.saved)
    saved = read_saved(path)
    assert saved["kind"] == "weights" and saved["weights"][1] == [2.0, 2.0]  # epoch 2's
    assert capsys.readouterr().out.splitlines() == [
        "",
        f"Epoch 1: val_loss improved from inf to 0.50000, saving model to {path}",
        "",
        "Epoch 2: val_loss did not improve from 0.50000",
        "",
        f"Epoch 3: val_loss improved from 0.50000 to 0.25000, saving model to {path}",
    ]


def test_auto_mode_and_initial_threshold(tmp_path) -> None:
    cb = ModelCheckpoint(str(tmp_path / "a.json"), monitor="val_acc", save_best_only=True,
                         initial_value_threshold=0.8)
    model = StandInModel()
    _epochs(cb, model, [{"val_acc": 0.7}, {"val_acc": 0.9}, {"val_acc": 0.85}])
    assert len(model.saved) == 1  # only 0.9 beats 0.8 (max mode inferred from "acc")


def test_missing_monitor_warns_and_skips(tmp_path, caplog) -> None:
    cb = ModelCheckpoint(str(tmp_path / "a.json"), save_best_only=True)
    model = StandInModel()
    _epochs(cb, model, [{"loss": 1.0}])
    assert model.saved == [] and not os.listdir(tmp_path)
    assert "Can save best model only with val_loss available, skipping." in caplog.text


def test_integer_save_freq_counts_batches_across_epochs(tmp_path) -> None:
    cb = ModelCheckpoint(str(tmp_path / "e{epoch}-b{batch}.json"), save_freq=3)
    assert cb._implements_train_batch_hooks()
    model = StandInModel()
    cb.set_model(model)
    cb.on_train_begin()
    for epoch in range(2):
        cb.on_epoch_begin(epoch)
        for b in range(4):
            cb.on_train_batch_end(b, {"loss": 1.0})
        cb.on_epoch_end(epoch, {"loss": 1.0})
    assert sorted(os.listdir(tmp_path)) == ["e1-b3.json", "e2-b2.json"]


def test_bad_save_freq_is_a_value_error() -> None:
    with pytest.raises(ValueError, match='Unrecognized save_freq: often. Expected save_freq '
                                         'are "epoch" or integer'):
        ModelCheckpoint("x", save_freq="often")


def test_crash_while_saving_leaves_previous_checkpoint_whole(tmp_path) -> None:
    path = tmp_path / "model.json"
    cb = ModelCheckpoint(str(path))
    model = StandInModel()
    cb.set_model(model)
    model.fill(1.0)
    cb.on_epoch_end(0, {"loss": 1.0})
    before = read_saved(path)
    model.fill(2.0)
    model.crash_during_save = True
    with pytest.raises(RuntimeError, match="killed"):
        cb.on_epoch_end(1, {"loss": 1.0})
    assert read_saved(path) == before  # still the epoch-0 file, readable
    assert os.listdir(tmp_path) == ["model.json"]  # no partial or temporary file left


def test_only_the_chief_keeps_a_file(tmp_path, capsys) -> None:
    cb = ModelCheckpoint(str(tmp_path / "sub" / "m.json"), verbose=1)
    model = StandInModel(chief=False)
    _epochs(cb, model, [{"loss": 1.0}])
    assert model.saved  # every replica takes part in the save...
    assert os.listdir(tmp_path / "sub") == []  # ...but only the chief's file is kept
    assert capsys.readouterr().out == ""


def test_existing_directory_as_filepath_is_explained(tmp_path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "keep").write_text("x")
    cb = ModelCheckpoint(str(tmp_path / "d"))
    cb.set_model(StandInModel())
    with pytest.raises(OSError, match="Please specify a non-directory filepath"):
        cb.on_epoch_end(0, {})
    assert sorted(os.listdir(tmp_path)) == ["d"]


def test_atomic_models_get_the_final_path(tmp_path) -> None:
    class AtomicModel(StandInModel):
        saves_atomically = True  # like distrib.Model: writes atomically, chief only

    model = AtomicModel()
    cb = ModelCheckpoint(str(tmp_path / "w-{epoch}.json"), save_weights_only=True)
    _epochs(cb, model, [{"loss": 1.0}])
    assert model.saved == [("weights", "w-1.json")]
    assert os.listdir(tmp_path) == ["w-1.json"]


class _CompanionModel(StandInModel):
    """Writes the file it is given plus a companion with a suffix (as index files are)."""

    def save_weights(self, path: str) -> None:
        super().save_weights(path)
        with open(path + ".index", "w") as f:
            f.write(f"index of {len(self.saved)}")


def test_companion_files_are_moved_to_the_final_name_and_replaced(tmp_path) -> None:
    model = _CompanionModel()
    cb = ModelCheckpoint(str(tmp_path / "w.json"), save_weights_only=True)
    _epochs(cb, model, [{"loss": 1.0}, {"loss": 0.5}])
    assert sorted(os.listdir(tmp_path)) == ["w.json", "w.json.index"]  # nothing temporary
    assert (tmp_path / "w.json.index").read_text() == "index of 2"  # epoch 2's replaced 1's
    assert read_saved(tmp_path / "w.json")["weights"][0] == [[1.0] * 3] * 2  # epoch 2's


def test_other_replicas_leave_no_companion_files(tmp_path) -> None:
    model = _CompanionModel(chief=False)
    cb = ModelCheckpoint(str(tmp_path / "w.json"), save_weights_only=True)
    _epochs(cb, model, [{"loss": 1.0}])
    assert model.saved and os.listdir(tmp_path) == []
