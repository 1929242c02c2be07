"""A torch DataLoader given to fit keeps its workers, sampler and collate_fn, and its global
batches are split across the replicas as one process on the global batch trains."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import distrib
from distrib.training.torch_loaders import ReplicaBatches
from tests.support import localhost_cluster, run_python, start_cluster, wait_all

PROGRAM = str(pathlib.Path(__file__).parent / "programs" / "loader_program.py")


def _run(mode: str, out: pathlib.Path, replicas: int) -> list[dict[str, Any]]:
    proc = run_python([PROGRAM, mode, str(out)])
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.count(f"done replicas={replicas}") == replicas, proc.stdout
    return [torch.load(f"{out}.rank{r}", weights_only=True) for r in range(replicas)]


def _same(got: dict[str, Any], oracle: dict[str, Any]) -> None:
    assert got["loss"] == pytest.approx(oracle["loss"], rel=1e-9)
    for key, value in oracle["weights"].items():
        assert (got["weights"][key] - value).abs().max().item() < 1e-9, key


def test_replica_shares_follow_tf_split_with_empty_shares() -> None:
    batches = [[5, 1, 4, 0], [2, 3, 6], [7]]
    zero = ReplicaBatches(batches, 0, 2)
    one = ReplicaBatches(batches, 1, 2)
    assert list(zero) == [[5, 1], [2, 3], [7]]
    assert list(one) == [[4, 0], [6], [7]] and list(one.empty) == [False, False, True]


def test_a_default_collate_batch_of_tuples_trains_on_one_replica() -> None:
    x = torch.randn(10, 3, dtype=torch.float64)
    loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4)
    with distrib.OneDeviceStrategy("cpu").scope():
        model = distrib.Model(torch.nn.Linear(3, 1).double())
        model.compile(optimizer="sgd", loss="mse")
    history = model.fit(loader, epochs=1, verbose=0)  # default_collate gives [x, y] lists
    assert len(history.history["loss"]) == 1


@pytest.mark.slow
def test_loader_workers_and_collate_on_two_replicas_match_one_process(
        tmp_path: pathlib.Path) -> None:
    (oracle,) = _run("oracle", tmp_path / "oracle", 1)
    for got in _run("mirrored", tmp_path / "mirrored", 2):
        _same(got, oracle)
    workers = list(tmp_path.glob("mirrored.worker-*"))
    assert len(workers) >= 4, workers  # 2 workers in each of the 2 replica processes
    for got in _run("iterable", tmp_path / "iterable", 2):  # read whole, sliced
        assert len(got["loss"]) == 2


@pytest.mark.slow
def test_a_distributed_sampler_is_honoured_or_refused(tmp_path: pathlib.Path) -> None:
    rows = _run("distributed_sampler", tmp_path / "ds", 2)
    _same(rows[1], rows[0])  # each replica its shard, gradients summed: one model
    proc = run_python([PROGRAM, "wrong_sampler", str(tmp_path / "bad")])
    assert proc.stdout.count("UsageError") == 2, proc.stdout + proc.stderr[-3000:]
    assert "DistributedSampler(num_replicas=3" in proc.stdout
    assert "must be made for the strategy's replicas" in proc.stdout


@pytest.mark.slow
def test_loader_on_two_tf_config_workers_matches_one_process(tmp_path: pathlib.Path) -> None:
    (oracle,) = _run("oracle", tmp_path / "oracle", 1)
    out = tmp_path / "workers"
    results = wait_all(start_cluster([PROGRAM, "multi_worker", str(out)],
                                     localhost_cluster(worker=2)))
    for name, (code, _, err) in results.items():
        assert code == 0, f"{name}: {err[-3000:]}"
    for rank in range(2):
        _same(torch.load(f"{out}.rank{rank}", weights_only=True), oracle)
