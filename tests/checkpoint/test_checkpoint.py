"""Checkpoint, CheckpointManager and latest_checkpoint in one process."""

from __future__ import annotations

import io
import os
import pickle
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import distrib
from distrib.checkpoint import manager as manager_module
from distrib.checkpoint.encoding import TensorTable, decode, encode
from distrib.errors import CheckpointError, CheckpointMismatchError, UsageError
from tests.support import clean_env


def _net(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 3), nn.Dropout(0.5), nn.ReLU(), nn.Linear(3, 1)).double()


class _Run:
    """A small training run whose whole state a checkpoint tracks."""

    def __init__(self, seed: int = 0) -> None:
        self.net = _net(seed)
        self.opt = torch.optim.Adam(self.net.parameters(), lr=0.1)
        self.sched = torch.optim.lr_scheduler.StepLR(self.opt, 2, gamma=0.5)
        self.step = torch.tensor(0)
        self.data = iter(distrib.data.Dataset.range(1000).shuffle(1000, seed=1).batch(8))
        self.checkpoint = distrib.Checkpoint(model=self.net, optimizer=self.opt,
                                             scheduler=self.sched, step=self.step,
                                             data=self.data, rng=distrib.checkpoint.RNGState())

    def train(self, steps: int) -> None:
        for _ in range(steps):
            x = next(self.data).to(torch.float64).reshape(2, 4) / 1000 + torch.rand(2, 4)
            self.net(x).pow(2).sum().backward()
            self.opt.step()
            self.opt.zero_grad()
            self.sched.step()
            self.step.add_(1)

    def weights(self) -> list[torch.Tensor]:
        return [t.clone() for t in self.net.state_dict().values()]


def test_a_restored_run_continues_bitwise_like_the_uninterrupted_one(tmp_path: Path) -> None:
    ref = _Run()
    ref.train(3)
    path = ref.checkpoint.save(tmp_path / "ckpt")
    assert path == str(tmp_path / "ckpt-1") and ref.checkpoint.save_counter == 1
    ref.train(4)
    resumed = _Run(seed=123)  # other initial weights, RNG and data position
    status = resumed.checkpoint.restore(distrib.train.latest_checkpoint(tmp_path))
    status.assert_consumed()
    assert int(resumed.step) == 3 and resumed.checkpoint.save_counter == 1
    resumed.train(4)
    assert all(torch.equal(a, b) for a, b in zip(ref.weights(), resumed.weights()))
    assert resumed.sched.get_last_lr() == ref.sched.get_last_lr()


def test_a_checkpoint_of_another_model_lists_every_bad_entry_and_changes_nothing(
        tmp_path: Path) -> None:
    run = _Run()
    run.train(1)
    path = run.checkpoint.write(tmp_path / "ckpt")
    other = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 1)).double()
    before = [t.clone() for t in other.state_dict().values()]
    with pytest.raises(CheckpointMismatchError) as err:
        distrib.Checkpoint(model=other).restore(path)
    text = str(err.value)
    assert "mis-shaped model/0.weight: checkpoint (3, 4), object (5, 4)" in text
    assert "missing model/2.weight" in text and "unexpected model/3.weight" in text
    assert all(torch.equal(a, b) for a, b in zip(before, other.state_dict().values()))


def test_partial_restores_are_reported_by_the_status(tmp_path: Path) -> None:
    run = _Run()
    path = run.checkpoint.write(tmp_path / "ckpt")
    only_model = distrib.Checkpoint(model=_net(5))
    status = only_model.restore(path)
    assert status.restored == ["model"] and "optimizer" in status.unexpected
    with pytest.raises(CheckpointMismatchError, match="Unresolved objects"):
        status.assert_consumed()
    status.assert_existing_objects_matched().assert_nontrivial_match()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        distrib.Checkpoint(model=_net(5)).restore(path).expect_partial()
        distrib.Checkpoint(model=_net(5)).restore(path)
    assert len(caught) == 1 and "restored partially" in str(caught[0].message)
    with pytest.raises(CheckpointMismatchError, match="nothing is being restored"):
        only_model.restore(None).assert_consumed()


class _Evil:
    """Unpickling it would run a command (creating a marker file)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def test_loading_refuses_pickled_code_in_the_metadata(tmp_path: Path) -> None:
    run = _Run()
    path = Path(run.checkpoint.write(tmp_path / "ckpt"))
    marker = tmp_path / "pwned"
    (path / ".metadata").write_bytes(pickle.dumps(_Evil(marker)))
    with pytest.raises(CheckpointError, match="never holds"):
        _Run().checkpoint.restore(path)
    assert not marker.exists()


def test_pickled_items_inside_the_data_are_never_loaded(tmp_path: Path) -> None:
    import torch.distributed.checkpoint as dcp

    from distrib.checkpoint.storage import read_directory

    marker = tmp_path / "pwned"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({"x": torch.ones(2), "evil": _Evil(marker)}, checkpoint_id=str(tmp_path / "raw"),
                 no_dist=True)
    assert sorted(read_directory(str(tmp_path / "raw"))) == ["x"]
    assert not marker.exists()


def test_the_manager_keeps_the_newest_and_records_them_in_the_state_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = _Run()
    manager = distrib.CheckpointManager(run.checkpoint, tmp_path, max_to_keep=2)
    paths = [manager.save() for _ in range(4)]
    assert manager.checkpoints == paths[2:] and manager.latest_checkpoint == paths[3]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint", "ckpt-3", "ckpt-4"]
    again = distrib.CheckpointManager(_Run().checkpoint, tmp_path, max_to_keep=2)
    assert again.checkpoints == paths[2:]
    assert distrib.train.latest_checkpoint(tmp_path) == paths[3]
    clock = iter(range(1000, 2000, 10))  # each reading 10 s after the one before
    monkeypatch.setattr(manager_module, "_clock", lambda: float(next(clock)))
    hourly = distrib.CheckpointManager(run.checkpoint, tmp_path / "h", max_to_keep=1,
                                       keep_checkpoint_every_n_hours=5 / 3600)
    for _ in range(3):
        hourly.save()
    assert sorted(p.name for p in (tmp_path / "h").iterdir()) == \
        ["checkpoint", "ckpt-5", "ckpt-6", "ckpt-7"]  # older ones preserved, not listed


def test_the_manager_saves_every_checkpoint_interval_steps(tmp_path: Path) -> None:
    run = _Run()
    manager = distrib.CheckpointManager(run.checkpoint, tmp_path, max_to_keep=None,
                                        step_counter=run.step, checkpoint_interval=3)
    saved = []
    for _ in range(8):
        run.train(1)
        saved.append(manager.save() is not None)
    assert saved == [True, False, False, True, False, False, True, False]  # steps 1, 4, 7
    assert manager.save(check_interval=False) is not None
    with pytest.raises(ValueError, match="step_counter"):
        distrib.CheckpointManager(run.checkpoint, tmp_path, 1, checkpoint_interval=3)


@pytest.mark.parametrize("damage", ["truncate", "metadata", "missing_file"])
def test_a_corrupt_newest_checkpoint_is_skipped_with_a_warning_naming_it(
        tmp_path: Path, damage: str) -> None:
    run = _Run()
    manager = distrib.CheckpointManager(run.checkpoint, tmp_path, max_to_keep=3)
    run.train(2)
    manager.save()
    run.train(2)
    newest = Path(manager.save())
    data = newest / "__0_0.distcp"
    if damage == "truncate":
        data.write_bytes(data.read_bytes()[:100])
    elif damage == "metadata":
        (newest / ".metadata").write_bytes(b"\x80\x04garbage")
    else:
        data.unlink()
    resumed = _Run(seed=9)
    again = distrib.CheckpointManager(resumed.checkpoint, tmp_path, max_to_keep=3)
    with pytest.warns(UserWarning, match=f"Skipping checkpoint {newest}"):
        assert again.restore_or_initialize() == str(tmp_path / "ckpt-1")
    assert int(resumed.step) == 2


@pytest.mark.parametrize("target", ["", ".", "folder", "file"])
def test_a_checkpoint_never_replaces_what_is_not_a_checkpoint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str) -> None:
    monkeypatch.chdir(tmp_path)  # "" and "." name the working directory
    (tmp_path / "train.py").write_text("print('the user's program')")
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "notes.txt").write_text("kept")
    (tmp_path / "file").write_text("kept")
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    run = _Run()
    error = UsageError if target == "" else CheckpointError
    with pytest.raises(error, match="non-empty path" if target == "" else "cannot be written"):
        run.checkpoint.write(target)
    if target == "":
        with pytest.raises(UsageError, match="non-empty path"):
            run.checkpoint.save(target)
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before
    assert (tmp_path / "folder" / "notes.txt").read_text() == "kept"
    first = run.checkpoint.write(tmp_path / "ckpt")  # a checkpoint replaces a checkpoint
    run.train(1)
    assert run.checkpoint.write(tmp_path / "ckpt") == first


def test_restore_or_initialize_raises_when_checkpoints_exist_and_none_restores(
        tmp_path: Path) -> None:
    run = _Run()
    manager = distrib.CheckpointManager(run.checkpoint, tmp_path, max_to_keep=3)
    saved = []
    for _ in range(3):
        run.train(1)
        saved.append(Path(manager.save()))
    for path in saved:
        (path / ".metadata").write_bytes(b"\x80\x04garbage")
    initialised = []
    resumed = _Run(seed=9)
    again = distrib.CheckpointManager(resumed.checkpoint, tmp_path, max_to_keep=3,
                                      init_fn=lambda: initialised.append(True))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(CheckpointError, match="none can be restored") as raised:
            again.restore_or_initialize()
    for path in saved:  # each named with its reason, and still on disk
        assert f"{path}: " in str(raised.value)
        assert path.is_dir()
    assert initialised == [] and int(resumed.step) == 0
    assert again.checkpoints == [str(p) for p in saved]


def test_an_unwritable_directory_fails_when_the_manager_is_created(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(CheckpointError, match="is not writable"):
        distrib.CheckpointManager(_Run().checkpoint, blocker / "ckpt", max_to_keep=1)


FULL_DISK = """
import resource, signal, sys, torch, distrib
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
net = torch.nn.Linear(4000, 100)
manager = distrib.CheckpointManager(distrib.Checkpoint(net=net), sys.argv[1], max_to_keep=3)
manager.save()
resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))   # files can no longer grow
try:
    manager.save()
except distrib.errors.CheckpointError as exc:
    print("ERROR", exc)
"""


def test_a_full_disk_fails_the_save_clearly_and_keeps_the_earlier_checkpoints(
        tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", FULL_DISK, str(tmp_path)], env=clean_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ERROR checkpoint = " in proc.stdout and "could not be written (" in proc.stdout
    assert "the earlier checkpoints are intact" in proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint", "ckpt-1"]
    assert distrib.train.latest_checkpoint(tmp_path) == str(tmp_path / "ckpt-1")
    net = torch.nn.Linear(4000, 100)
    distrib.Checkpoint(net=net).restore(tmp_path / "ckpt-1").assert_consumed()


def test_an_asynchronous_save_holds_the_values_of_the_moment_it_was_called(
        tmp_path: Path) -> None:
    run = _Run()
    run.train(2)
    expected = run.weights()
    path = run.checkpoint.save(tmp_path / "ckpt",
                               options=distrib.train.CheckpointOptions(enable_async=True))
    run.train(3)  # training goes on while the save is written
    run.checkpoint.sync()
    resumed = _Run(seed=4)
    resumed.checkpoint.restore(path).assert_consumed()
    assert all(torch.equal(a, b) for a, b in zip(expected, resumed.weights()))
    assert distrib.train.latest_checkpoint(tmp_path) == path


def test_write_does_not_touch_the_state_file(tmp_path: Path) -> None:
    _Run().checkpoint.write(tmp_path / "exact")
    assert distrib.train.latest_checkpoint(tmp_path) is None
    assert (tmp_path / "exact" / ".metadata").exists()


def test_the_partial_directory_a_crashed_writer_left_is_replaced(tmp_path: Path) -> None:
    stale = tmp_path / ".exact.partial"   # a writer killed in the middle of writing "exact"
    stale.mkdir()
    (stale / "__7_0.distcp").write_bytes(b"half")
    run = _Run()
    run.checkpoint.write(tmp_path / "exact")
    assert not stale.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exact"]
    restored = _Run(seed=1)
    restored.checkpoint.read(tmp_path / "exact")
    assert all(torch.equal(a, b) for a, b in zip(restored.weights(), run.weights(), strict=True))


def test_untrackable_objects_are_refused_when_the_checkpoint_is_created() -> None:
    with pytest.raises(TypeError, match="track a tensor instead of a Python number"):
        distrib.Checkpoint(step=3)
    with pytest.raises(TypeError, match="got None"):
        distrib.Checkpoint(model=None)


def test_the_encoding_keeps_containers_keys_and_numbers_exactly() -> None:
    value = {0: (1.5, None, float("inf")), "a/b": [np.float32(2.5), np.arange(3)],
             (1, 2): {"t": torch.ones(2, dtype=torch.int64)}, "f": 0.1, "big": 2 ** 62,
             "dtype": torch.float16}
    table = TensorTable()
    doc = encode(value, "x", table.put)
    back = decode(doc, table.tensors.__getitem__)
    assert back[0] == (1.5, None, float("inf")) and back["f"] == 0.1
    assert back["big"] == 2 ** 62 and back["dtype"] is torch.float16
    assert isinstance(back["a/b"][0], np.float32) and back["a/b"][1].tolist() == [0, 1, 2]
    assert torch.equal(back[(1, 2)]["t"], torch.ones(2, dtype=torch.int64))
    with pytest.raises(CheckpointError, match="a checkpoint stores tensors"):
        encode({"f": io.BytesIO()}, "x", table.put)


def test_a_model_is_saved_with_its_optimizer_metrics_and_step_counter(tmp_path: Path) -> None:
    # distrib.Model is an nn.Module: a checkpoint still tracks all it holds, not only weights.
    model = distrib.Model(_net())
    model.compile(optimizer=torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                  loss="mse", metrics=["mae"])
    x, y = np.random.RandomState(0).rand(16, 4), np.random.RandomState(1).rand(16, 1)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False)
    checkpoint = distrib.Checkpoint(model=model, rng=distrib.checkpoint.RNGState())  # dropout
    path = checkpoint.save(tmp_path / "ckpt")
    model.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False)
    expected = [p.detach().clone() for p in model.parameters()]
    model.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False)
    status = checkpoint.restore(path)
    status.assert_consumed()
    assert {"model/module", "model/optimizer", "model/train_counter", "model/metrics"} \
        <= set(status.restored)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False)
    assert all(torch.equal(a, b) for a, b in zip(expected, model.parameters()))
