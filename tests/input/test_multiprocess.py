"""Distributed input in real processes: 2 ranks, a real gloo group; end of data is agreed.

One launch runs every scenario of programs/input_worker.py; the tests check
what each rank observed: lock-step end of data with empty batches, the number
of collectives, FILE sharding with uneven files, the oracle contract with
uneven shards, and resuming onto another number of workers.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from distrib.data import Dataset
from distrib.distribute.group import ReplicaGroupInfo
from distrib.input import distribute_dataset
from tests.input.helpers import GLOBAL_BATCH, as_lists, linear_data, train_linear
from tests.support import DEFAULT_TIMEOUT, EXIT_ABORT, REPO, clean_env

PROGRAM = Path(__file__).parent / "programs" / "input_worker.py"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    base = tmp_path_factory.mktemp("input_mp")
    data = base / "data"
    data.mkdir()
    (data / "a.txt").write_text("".join(f"{i}\n" for i in range(5)))
    (data / "b.txt").write_text("".join(f"{i}\n" for i in range(5, 8)))
    failed = _run_ranks(base / "store", data, base)
    if failed and all(EXIT_ABORT in err for err in failed):  # torch's abort at exit: once more
        failed = _run_ranks(base / "store2", data, base)
    assert not failed, failed[0][-3000:]
    return [json.loads((base / f"rank{r}.json").read_text()) for r in range(2)]


def _run_ranks(init: Path, data: Path, base: Path) -> list[str]:
    """Run both ranks of the program; the stderr of each that failed."""
    procs = [subprocess.Popen([sys.executable, str(PROGRAM), str(r), "2", str(init), str(data),
                               str(base)], env=clean_env(OMP_NUM_THREADS="1"), cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(2)]
    outputs = []
    try:
        for p in procs:
            outputs.append(p.communicate(timeout=DEFAULT_TIMEOUT))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    return [err for p, (_, err) in zip(procs, outputs) if p.returncode != 0]


def test_partial_global_batch_ends_together(ranks: list[dict[str, Any]]) -> None:
    chief, worker = ranks[0]["partial_global_batch"], ranks[1]["partial_global_batch"]
    assert chief["steps"] == [[0, 1, 2, 3], [8, 9, 10]]
    assert worker["steps"] == [[4, 5, 6, 7], [11, 12, 13]]
    assert chief["after_end"] is None and worker["after_end"] is None
    assert chief["calls"] == worker["calls"] == 0   # step count provable: no collective


def test_empty_batches_until_every_worker_is_done(ranks: list[dict[str, Any]]) -> None:
    chief, worker = ranks[0]["uneven_unknown"], ranks[1]["uneven_unknown"]
    assert chief["steps"] == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
    assert worker["steps"] == [[0, 1], [2, 3], [4, 5], [], []]
    # One exchange at the start, then one small all-reduce per step (the last one says stop).
    assert chief["setup_calls"] == 1 and chief["calls"] == 1 + 6


def test_known_step_counts_are_exchanged_once(ranks: list[dict[str, Any]]) -> None:
    chief, worker = ranks[0]["known"], ranks[1]["known"]
    assert len(chief["steps"]) == len(worker["steps"]) == 5
    assert worker["steps"][3:] == [[], []]
    assert chief["calls"] == worker["calls"] == 1


def test_first_per_worker_batches_of_a_sharded_repeat(ranks: list[dict[str, Any]]) -> None:
    assert (ranks[0]["sharded_repeat_sums"], ranks[1]["sharded_repeat_sums"]) == (10, 35)


def test_file_sharding_with_uneven_files(ranks: list[dict[str, Any]]) -> None:
    chief, worker = ranks[0]["file"], ranks[1]["file"]
    # Each worker re-batches its own file with sizes [2] (TF's rebatch): 3 steps, the
    # shorter file ends first and its worker gets an empty batch.
    assert chief["steps"] == [[0, 1], [2, 3], [4]]
    assert worker["steps"] == [[5, 6], [7], []]
    seen = sorted(v for r in (chief, worker) for step in r["steps"] for v in step)
    assert seen == list(range(8))


def test_single_worker_agreement_per_step(ranks: list[dict[str, Any]]) -> None:
    r0, r1 = ranks[0]["single_worker_unknown"], ranks[1]["single_worker_unknown"]
    assert r0["steps"] == [[0, 1], [4, 5]] and r1["steps"] == [[2, 3], [6]]
    assert r0["calls"] == 3


def test_uneven_shards_match_the_oracle(ranks: list[dict[str, Any]]) -> None:
    x, y = linear_data(18)
    worker0 = [(x[i:min(i + 4, 11)], y[i:min(i + 4, 11)]) for i in (0, 4, 8)]
    worker1 = [(x[i:min(i + 4, 18)], y[i:min(i + 4, 18)]) for i in (11, 15)]
    steps = [(torch.cat([a[0], b[0]]), torch.cat([a[1], b[1]]))
             for a, b in zip(worker0, worker1)] + [worker0[2]]
    expected = train_linear(steps)
    for rank in ranks:
        assert (torch.tensor(rank["oracle_uneven"], dtype=torch.float64)
                - expected).abs().max() < 1e-10


def test_data_sharding_matches_the_oracle(ranks: list[dict[str, Any]]) -> None:
    x, y = linear_data(14)
    expected = train_linear([(x[:8], y[:8]), (x[8:], y[8:])])
    for rank in ranks:
        assert (torch.tensor(rank["oracle_data"], dtype=torch.float64)
                - expected).abs().max() < 1e-10


def _joined(ranks: list[dict[str, Any]], key: str) -> list[list[int]]:
    a, b = ranks[0]["resume"][key], ranks[1]["resume"][key]
    assert len(a) == len(b)
    return [x + y for x, y in zip(a, b)]


def test_resume_on_two_workers_and_onto_one(ranks: list[dict[str, Any]]) -> None:
    state = ranks[0]["resume"]["state"]
    assert state == ranks[1]["resume"]["state"]
    assert state["epoch"] == 1 and state["position"] == 3
    rest = _joined(ranks, "rest")
    epoch2 = _joined(ranks, "epoch2")
    assert _joined(ranks, "restored") == rest
    epoch0 = _joined(ranks, "epoch0")
    assert sorted(v for step in epoch0 for v in step) == list(range(50))
    assert epoch0 != _joined(ranks, "first") + rest   # reshuffled for epoch 1

    # Restore onto ONE worker (one replica) with the saved state: the same batches follow.
    one = distribute_dataset(
        Dataset.from_tensor_slices(torch.arange(50)).shuffle(50).batch(GLOBAL_BATCH),
        ReplicaGroupInfo.single())
    one.load_state_dict(state)
    assert [as_lists(b) for b in one] == rest
    assert [as_lists(b) for b in one] == epoch2
