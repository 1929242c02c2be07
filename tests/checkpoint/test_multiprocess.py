"""Checkpoints with real processes: kill -9 during a save, other worker counts, restarts."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.faults import run_with_kill, wait_dead
from tests.support import (
    clean_env,
    load_json,
    localhost_cluster,
    run_python,
    start_cluster,
    wait_all,
)

PROGRAM = str(Path(__file__).parent / "programs" / "loop.py")
FIT_PROGRAM = str(Path(__file__).parent / "programs" / "fit_resume.py")
pytestmark = pytest.mark.slow


def _weights(path: Path) -> list[np.ndarray]:
    with np.load(path) as data:
        return [data[f"arr_{i}"] for i in range(len(data.files))]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted 2-worker run to step 12 (weights and global batches)."""
    d = tmp_path_factory.mktemp("reference")
    out = _cluster_in(d, 2, ["--dir", str(d / "ckpt"), "--out", str(d / "final.npz")])
    assert all(code == 0 for code, _, _ in out.values()), out
    return d / "final.npz"


def _cluster_in(d: Path, workers: int, args: list[str], **env: str
                ) -> dict[str, tuple[int, str, str]]:
    """Run the program as every worker of a localhost TF_CONFIG cluster (paths absolute)."""
    procs = start_cluster([PROGRAM, *args], localhost_cluster(worker=workers), extra_env=env)
    return wait_all(procs)


# The manager saves at steps 1, 4, 7, 10 (TF's rule: the first save() writes, then every
# `checkpoint_interval` steps): ckpt-1 ... ckpt-4.
@pytest.mark.parametrize("fault", ["1:7:write", "0:7:commit"])
def test_kill_9_during_a_save_leaves_the_previous_checkpoint_usable(
        tmp_path: Path, reference: Path, fault: str) -> None:
    ckpt = tmp_path / "ckpt"
    out = _cluster_in(tmp_path, 2, ["--dir", str(ckpt), "--die-in-save", fault])
    assert all(code != 0 for code, _, _ in out.values()), out
    assert sorted(p.name for p in ckpt.iterdir() if not p.name.startswith(".")) == \
        ["checkpoint", "ckpt-1", "ckpt-2"]
    assert load_json(ckpt / "checkpoint")["all"] == ["ckpt-1", "ckpt-2"]
    out = _cluster_in(tmp_path, 2, ["--dir", str(ckpt), "--out", str(tmp_path / "final.npz")],
                      NOT_FIRST_RUN="1")
    assert all(code == 0 for code, _, _ in out.values()), out
    assert "restored ckpt-2 at step 4" in out["worker:0"][1]
    for a, b in zip(_weights(reference), _weights(tmp_path / "final.npz")):
        assert np.array_equal(a, b)
    assert not [p for p in ckpt.iterdir() if p.name.endswith(".partial")]


def test_a_checkpoint_of_2_workers_restores_on_1_and_on_3_with_the_same_global_batches(
        tmp_path: Path) -> None:
    args = ["--dropout", "0", "--steps", "12"]
    ref = tmp_path / "ref"
    out = _cluster_in(tmp_path, 2, [*args, "--dir", str(ref / "ckpt"), "--out",
                                    str(ref / "final.npz")])
    assert all(code == 0 for code, _, _ in out.values()), out
    expected = load_json(ref / "final.npz.batches.json")["batches"]
    first = tmp_path / "first" / "ckpt"
    out = _cluster_in(tmp_path, 2, ["--dropout", "0", "--steps", "6", "--dir", str(first)])
    assert all(code == 0 for code, _, _ in out.values()), out
    for workers in (1, 3):
        ckpt = tmp_path / f"on{workers}" / "ckpt"
        shutil.copytree(first, ckpt)
        final = tmp_path / f"on{workers}" / "final.npz"
        out = _cluster_in(tmp_path, workers, [*args, "--dir", str(ckpt), "--out", str(final)])
        assert all(code == 0 for code, _, _ in out.values()), out
        assert "restored ckpt-2 at step 4" in out["worker:0"][1]
        record = load_json(final.with_name("final.npz.batches.json"))
        assert record["first_step"] == 4
        assert record["batches"] == expected[4:]
        for a, b in zip(_weights(ref / "final.npz"), _weights(final)):
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-10)


def test_a_fit_backed_up_by_2_workers_resumes_on_1_and_on_3_like_the_uninterrupted_fit(
        tmp_path: Path) -> None:
    def fit(workers: int, backup: Path, out: Path, stop_at: int) -> dict[str, Any]:
        return wait_all(start_cluster([FIT_PROGRAM, str(backup), str(out), str(stop_at)],
                                      localhost_cluster(worker=workers)))

    ref = tmp_path / "ref.npz"
    assert all(r[0] == 0 for r in fit(2, tmp_path / "ref_backup", ref, 0).values())
    backup = tmp_path / "backup"
    crashed = fit(2, backup, tmp_path / "crashed.npz", 7)  # both workers die after step 7
    assert all(r[0] == 3 for r in crashed.values()), crashed
    expected = load_json(Path(f"{ref}.json"))
    for workers in (1, 3):
        copy = tmp_path / f"backup{workers}"
        shutil.copytree(backup, copy)
        final = tmp_path / f"on{workers}.npz"
        out = fit(workers, copy, final, 0)
        assert all(r[0] == 0 for r in out.values()), out
        got = load_json(Path(f"{final}.json"))
        # The newest complete backup is of step 4 or 6 (a save may have been cut short):
        # the rest of the 16 steps ran, not all of them.
        assert got["steps_run"] in (10, 12), got
        for name in expected["history"]:
            np.testing.assert_allclose(got["history"][name], expected["history"][name],
                                       rtol=0, atol=1e-12)
        for a, b in zip(_weights(ref), _weights(final)):
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)


def test_mirrored_strategy_restarts_its_replicas_and_resumes_bitwise(tmp_path: Path) -> None:
    ref = run_python([PROGRAM, "--strategy", "mirrored", "--dir", str(tmp_path / "ref"),
                      "--out", str(tmp_path / "ref.npz")], env=clean_env(OMP_NUM_THREADS="1"))
    assert ref.returncode == 0, ref.stderr[-3000:]
    hurt = run_python([PROGRAM, "--strategy", "mirrored", "--dir", str(tmp_path / "hurt"),
                       "--die-at-step", "1:7", "--pid", "--out", str(tmp_path / "hurt.npz")],
                      env=clean_env(OMP_NUM_THREADS="1", DISTRIB_MAX_RESTARTS="2"))
    assert hurt.returncode == 0, hurt.stderr[-3000:]
    assert "local replica 1 was killed by signal 9 (SIGKILL)" in hurt.stderr
    assert "restart 1 of 2" in hurt.stderr
    assert "restored ckpt-2 at step 4" in hurt.stdout
    for a, b in zip(_weights(tmp_path / "ref.npz"), _weights(tmp_path / "hurt.npz")):
        assert np.array_equal(a, b)
    pids = {int(p) for p in re.findall(r"pid (\d+)", hurt.stdout)}  # lines may interleave
    assert len(pids) == 4  # two replicas, started twice
    assert wait_dead(pids) == []


def test_torchrun_hand_off_restarts_every_replica_and_resumes(tmp_path: Path,
                                                             reference: Path) -> None:
    run = run_with_kill(["run", "--nproc-per-node", "2", "--max-restarts", "1", PROGRAM,
                         "--dir", str(tmp_path / "ckpt"), "--die-at-step", "1:7", "--out",
                         str(tmp_path / "final.npz")], tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "distrib: restart 1 of 1" in run.stderr
    for a, b in zip(_weights(reference), _weights(tmp_path / "final.npz")):
        assert np.array_equal(a, b)


def test_a_checkpoint_under_central_storage_keeps_the_chiefs_optimizer_state(
        tmp_path: Path) -> None:
    # The momentum lives on the chief only; after a restore, training continues bitwise
    # where it continued after the save.
    program = str(Path(__file__).parent / "programs" / "central_storage.py")
    proc = run_python([program, str(tmp_path / "ckpt"), str(tmp_path / "out.json")])
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert load_json(tmp_path / "out.json") == {
        "resumed_equal": True, "replicas_equal": True, "momentum_entries": 4}
