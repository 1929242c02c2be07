"""TFRecord files -> parse -> cache(file) -> padded_batch, trained on 2 replicas.

programs/tfrecord_training.py runs the pipeline under MirroredStrategy (two
replica processes from a plain ``python`` command), OneDeviceStrategy, and two
TF_CONFIG workers (FILE auto-sharding: each worker reads its own files).  The
checks: every replica's rows and padded widths are its part of the padded
global batch; the parameters equal one process trained on the same global
batches (float64 SGD); the records are parsed in the first epoch only (later
epochs read the cache file); the replicas of one pipeline share one cache
file and the two workers' different shards get one each.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from distrib.data.experimental import TFRecordWriter, make_example
from tests.support import localhost_cluster, run_python, start_cluster, wait_all

PROGRAM = str(Path(__file__).parent / "programs" / "tfrecord_training.py")
FILES, PER_FILE, MAXLEN, GLOBAL_BATCH, LR, TOL = 4, 6, 5, 8, 0.05, 1e-10

pytestmark = pytest.mark.slow


def example(i: int) -> dict[str, Any]:
    tokens = [0.1 * (i + 1) * (k + 1) % 1.3 for k in range(1 + (7 * i) % MAXLEN)]
    return {"id": i, "tokens": torch.tensor(tokens, dtype=torch.float32),
            "y": float(sum(tokens) - 0.3 * len(tokens))}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tfrecord_training")
    for f in range(FILES):
        with TFRecordWriter(root / f"part-{f}.tfrecord") as writer:
            for i in range(f * PER_FILE, (f + 1) * PER_FILE):
                writer.write(make_example(example(i)))
    return root


def oracle(steps: list[list[int]]) -> list[float]:
    """One process, float64 SGD on each global batch of ids."""
    rows = [example(i) for i in range(FILES * PER_FILE)]
    x = torch.zeros(len(rows), MAXLEN, dtype=torch.float64)
    for i, r in enumerate(rows):
        x[i, :len(r["tokens"])] = r["tokens"].double()
    y = torch.tensor([float(torch.tensor(r["y"], dtype=torch.float32)) for r in rows],
                     dtype=torch.float64)
    net = torch.nn.Linear(MAXLEN, 1).double()
    with torch.no_grad():
        for p in net.parameters():
            p.zero_()
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    for ids in steps:
        loss = ((net(x[ids]).squeeze(-1) - y[ids]) ** 2).sum() / GLOBAL_BATCH
        loss.backward()
        opt.step()
        opt.zero_grad()
    return [float(v) for p in net.parameters() for v in p.detach().flatten()]


def run(kind: str, data: Path, out: Path) -> list[dict[str, Any]]:
    if kind == "multi_worker":
        results = wait_all(start_cluster([PROGRAM, kind, str(data), str(out)],
                                         localhost_cluster(worker=2)))
        for name, (code, _, err) in results.items():
            assert code == 0, f"{name}: {err[-3000:]}"
    else:
        proc = run_python([PROGRAM, kind, str(data), str(out)])
        assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(p.read_text()) for p in sorted(out.glob(f"{kind}-*.json"))]


def close(a: list[float], b: list[float]) -> bool:
    return max(abs(u - v) for u, v in zip(a, b)) < TOL


def test_mirrored_replicas_split_padded_global_batches(data: Path, tmp_path: Path) -> None:
    (single,) = run("one_device", data, tmp_path)
    r0, r1 = run("mirrored", data, tmp_path)
    per_epoch = FILES * PER_FILE // GLOBAL_BATCH
    assert len(single["steps"]) == 3 * per_epoch
    assert [a + b for a, b in zip(r0["steps"], r1["steps"])] == single["steps"]
    assert r0["widths"] == r1["widths"] == single["widths"]     # padded as one global batch
    assert single["widths"][0] == MAXLEN
    assert close(single["params"], oracle(single["steps"]))
    assert close(r0["params"], single["params"]) and close(r1["params"], single["params"])
    for r in (single, r0, r1):
        assert r["calls"] == [FILES * PER_FILE, 0, 0]          # later epochs read the cache
    assert len(list((tmp_path / "cache").glob("mirrored.*.cache"))) == 1
    assert not list((tmp_path / "cache").glob("*.partial"))


def test_two_workers_read_their_files_and_cache_them_apart(data: Path, tmp_path: Path) -> None:
    w0, w1 = run("multi_worker", data, tmp_path)
    assert len(w0["steps"]) == len(w1["steps"])
    per_epoch = len(w0["steps"]) // 3
    for epoch in range(3):
        seen = sum(w0["steps"][epoch * per_epoch:(epoch + 1) * per_epoch]
                   + w1["steps"][epoch * per_epoch:(epoch + 1) * per_epoch], [])
        assert sorted(seen) == list(range(FILES * PER_FILE))
    assert {i // PER_FILE for i in sum(w0["steps"], [])} == {0, 2}    # files 0 and 2
    assert {i // PER_FILE for i in sum(w1["steps"], [])} == {1, 3}
    assert w0["calls"] == w1["calls"] == [FILES * PER_FILE // 2, 0, 0]
    assert len(list((tmp_path / "cache").glob("multi_worker.*.cache"))) == 2
    steps = [a + b for a, b in zip(w0["steps"], w1["steps"])]
    assert close(w0["params"], w1["params"]) and close(w0["params"], oracle(steps))
