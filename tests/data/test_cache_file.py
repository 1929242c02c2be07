"""``Dataset.cache(filename)``: atomic first pass, replay across passes and runs, one writer."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections import namedtuple
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from distrib.data import AutoShardPolicy, Dataset, TFRecordDataset
from distrib.data.cache import PARTIAL_WARNING
from distrib.data.experimental import TFRecordWriter
from distrib.errors import DataError
from distrib.input.sharding import apply_policy
from tests.support import DEFAULT_TIMEOUT, REPO, clean_env

Pair = namedtuple("Pair", ["value", "name"])


class Counted:
    """A map function that counts its calls (how often the input was really read)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, x: torch.Tensor) -> Any:
        self.calls += 1
        n = int(x)
        return {"ragged": torch.arange(n, dtype=torch.float32),
                "pair": Pair(x * 10, f"n{n}"), "raw": bytes([n, 0]),
                "words": np.array([b"w", b"\x00"] * n, dtype=object)}


def plain(element: Any) -> Any:
    return (element["ragged"].tolist(), tuple(element["pair"].value.shape),
            int(element["pair"].value), element["pair"].name, element["raw"],
            element["words"].tolist())


def cache_files(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".cache"))


def test_first_complete_pass_is_written_and_replayed_in_later_runs(tmp_path: Path) -> None:
    fn = Counted()
    ds = Dataset.range(5).map(fn).cache(str(tmp_path / "c"))
    first = [plain(e) for e in ds]
    assert fn.calls == 5 and len(cache_files(tmp_path)) == 1
    again = list(ds)
    assert fn.calls == 5 and [plain(e) for e in again] == first
    assert isinstance(again[0]["pair"], Pair) and again[0]["raw"] == b"\x00\x00"
    later_fn = Counted()                                    # a new run builds it again
    later = Dataset.range(5).map(later_fn).cache(str(tmp_path / "c"))
    assert [plain(e) for e in later] == first and later_fn.calls <= 1   # one element: the spec
    assert [b["ragged"].shape for b in later.padded_batch(5)] == [(5, 4)]


def test_a_partial_pass_leaves_no_cache(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    fn = Counted()
    ds = Dataset.range(6).map(fn).cache(str(tmp_path / "c"))
    with caplog.at_level(logging.WARNING, logger="distrib.data.cache"):
        assert len(list(ds.take(2))) == 2
    assert PARTIAL_WARNING in caplog.text
    assert cache_files(tmp_path) == [] and not list(tmp_path.glob("*.partial"))
    assert len(list(ds)) == 6 and len(cache_files(tmp_path)) == 1
    calls = fn.calls
    assert len(list(ds)) == 6 and fn.calls == calls
    assert ds.map(lambda e: e["raw"]).element_spec is not None     # a look at the spec is no pass


def test_reshuffled_input_replays_the_first_pass(tmp_path: Path) -> None:
    ds = Dataset.range(20).shuffle(20).map(lambda x: x + 0).cache(str(tmp_path / "c"))
    first = [int(x) for x in ds]
    assert [int(x) for x in ds] == first and sorted(first) == list(range(20))
    memory = Dataset.range(20).shuffle(20).map(lambda x: x + 0).cache()
    assert [int(x) for x in memory] == [int(x) for x in memory]


def test_a_second_concurrent_iterator_reads_its_input_without_writing(tmp_path: Path) -> None:
    fn = Counted()
    ds = Dataset.range(4).map(fn).cache(str(tmp_path / "c"))
    it1, it2 = iter(ds), iter(ds)
    a = [next(it1)]
    b = list(it2)                      # it1 holds the lock: it2 reads through
    assert cache_files(tmp_path) == []
    assert [plain(e) for e in ds] == [plain(e) for e in b]     # no waiting for it1: same thread
    a += list(it1)
    assert [plain(e) for e in a] == [plain(e) for e in b] and len(cache_files(tmp_path)) == 1


def test_pipelines_that_differ_get_files_of_their_own(tmp_path: Path) -> None:
    names = []
    for k in range(3):
        with TFRecordWriter(tmp_path / f"f{k}.tfrecord") as writer:
            for i in range(2):
                writer.write(str(10 * k + i))
        names.append(str(tmp_path / f"f{k}.tfrecord"))
    ds = TFRecordDataset(names).map(lambda r: int(r)).cache(str(tmp_path / "c")).batch(2)
    shards = [apply_policy(ds, AutoShardPolicy.FILE, 2, w)[0] for w in range(2)]
    assert [[b.tolist() for b in s] for s in shards] == [[[0, 1], [20, 21]], [[10, 11]]]
    assert [[b.tolist() for b in s] for s in shards] == [[[0, 1], [20, 21]], [[10, 11]]]
    assert len(cache_files(tmp_path)) == 2
    other = Dataset.range(3).map(lambda x: x).cache(str(tmp_path / "d"))
    list(other)
    list(Dataset.range(4).map(lambda x: x).cache(str(tmp_path / "d")))
    assert len(cache_files(tmp_path)) == 4


def test_a_file_that_does_not_match_is_rejected(tmp_path: Path) -> None:
    list(Dataset.range(3).map(lambda x: x).cache(str(tmp_path / "c")))
    (path,) = tmp_path.glob("*.cache")
    changed = Dataset.range(3).map(lambda x: x.float()).cache(str(tmp_path / "c"))
    with pytest.raises(DataError, match=r"holds elements with components \['tensor:torch.int64"
                                        r"'\], but the pipeline gives \['tensor:torch.float32'\]"):
        list(changed)
    data = bytearray(path.read_bytes())
    data[-10] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(DataError, match="corrupted record"):
        list(Dataset.range(3).map(lambda x: x).cache(str(tmp_path / "c")))


def test_empty_and_pure_inputs(tmp_path: Path) -> None:
    empty = Dataset.range(0).map(lambda x: x).cache(str(tmp_path / "e"))
    assert list(empty) == [] and list(empty) == [] and len(cache_files(tmp_path)) == 1
    pure = Dataset.range(3).cache(str(tmp_path / "p"))
    assert pure._kind == "rows" and [int(x) for x in pure] == [0, 1, 2]
    assert len(cache_files(tmp_path)) == 1          # arrays read through: no file


PROGRAM = """
import json, os, sys, time, torch
from distrib.data import Dataset
open(os.path.join(sys.argv[3], sys.argv[4]), "w").close()
deadline = time.monotonic() + 120
while len(os.listdir(sys.argv[3])) < 2 and time.monotonic() < deadline:
    time.sleep(0.01)
calls = []
def slow(x):
    calls.append(int(x)); time.sleep(0.01)
    return x * 3
ds = Dataset.range(40).shuffle(40, seed=int(sys.argv[2])).map(slow).cache(sys.argv[1])
epochs = []
for _ in range(3):
    before = len(calls)
    epochs.append([[int(v) for v in ds], len(calls) - before])
print(json.dumps(epochs))
"""


@pytest.mark.slow
def test_processes_sharing_a_cache_file_never_race(tmp_path: Path) -> None:
    prefix = str(tmp_path / "shared")
    ready = tmp_path / "ready"
    ready.mkdir()
    procs = [subprocess.Popen([sys.executable, "-c", PROGRAM, prefix, "7", str(ready), str(k)],
                              cwd=REPO, env=clean_env(OMP_NUM_THREADS="1"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for k in range(2)]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=DEFAULT_TIMEOUT))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    runs = [json.loads(out) for out, _ in outs]
    first = runs[0][0][0]
    assert sorted(first) == [3 * i for i in range(40)]
    for epochs in runs:
        assert [e[0] for e in epochs] == [first] * 3       # every process, every epoch
        assert epochs[0][1] in (0, 40) and epochs[2][1] == 0   # read at most once, then the file
    assert max(epochs[0][1] for epochs in runs) == 40
    assert len(cache_files(tmp_path)) == 1 and not list(tmp_path.glob("*.partial"))
