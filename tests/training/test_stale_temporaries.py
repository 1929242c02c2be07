"""Saves killed mid-write leave temporary files; the next save in the directory removes them.

Every save writes one temporary file ``.tmp-<pid>@<host>@...`` next to its target and
renames it into place.  A writer killed by SIGKILL leaves its temporary behind; the next
save in the same directory removes the temporaries of this host's dead processes and
keeps those of live writers and of other hosts.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import distrib
from distrib import files
from distrib.training.callbacks import ModelCheckpoint
from tests.support import clean_env

KILLED_MID_WRITE = textwrap.dedent("""
    import os, signal, sys, torch
    from distrib.training import saving

    def torn_save(obj, f):
        f.write(b"half a checkpoint")
        f.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    torch.save = torn_save
    saving.atomic_save({"w": torch.ones(3)}, sys.argv[1])
""")


def model() -> distrib.Model:
    net = distrib.Model(nn.Linear(2, 1))
    net.compile(optimizer="sgd", loss="mse")
    return net


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_save_killed_mid_write_is_cleaned_by_the_next_save(tmp_path: Path) -> None:
    target = tmp_path / "w.pt"
    proc = subprocess.run([sys.executable, "-c", KILLED_MID_WRITE, str(target)],
                          env=clean_env(), capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL
    left = os.listdir(tmp_path)
    assert len(left) == 1 and left[0].startswith(".tmp-") and not target.exists()
    model().save_weights(target)
    assert os.listdir(tmp_path) == ["w.pt"]


def test_live_writers_and_other_hosts_keep_their_temporaries(tmp_path: Path) -> None:
    host = socket.gethostname()
    live = f".tmp-{os.getpid()}@{host}@abc-w.pt"
    other_host = f".tmp-{dead_pid()}@not-{host}@abc-w.pt"
    stale_file, stale_dir = (f".tmp-{dead_pid()}@{host}@abc-w.pt",
                             f".tmp-{dead_pid()}@{host}@abc-ckpt")
    for name in (live, other_host, stale_file, "notes.txt"):
        (tmp_path / name).write_text("x")
    (tmp_path / stale_dir).mkdir()
    (tmp_path / stale_dir / "shard").write_text("x")
    model().save(tmp_path / "m.pt")
    assert sorted(os.listdir(tmp_path)) == sorted([live, other_host, "notes.txt", "m.pt"])


def test_model_checkpoint_writes_one_temporary_file_per_save(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[str] = []
    real = files.tempfile.mkstemp

    def counting_mkstemp(*args: object, **kwargs: object) -> tuple[int, str]:
        fd, name = real(*args, **kwargs)  # type: ignore[call-overload]
        made.append(name)
        return fd, name

    monkeypatch.setattr(files.tempfile, "mkstemp", counting_mkstemp)
    assert distrib.Model.saves_atomically is True
    x, y = np.zeros((8, 2), np.float32), np.zeros((8, 1), np.float32)
    checkpoint = ModelCheckpoint(str(tmp_path / "w-{epoch}.pt"), save_weights_only=True)
    model().fit(x, y, batch_size=4, epochs=2, verbose=0, callbacks=[checkpoint])
    assert [Path(m).parent for m in made] == [tmp_path, tmp_path]
    assert sorted(os.listdir(tmp_path)) == ["w-1.pt", "w-2.pt"]
    assert torch.load(tmp_path / "w-2.pt", weights_only=True).keys() == {"weight", "bias"}
