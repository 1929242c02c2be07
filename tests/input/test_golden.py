"""Every replica's batches against TensorFlow 2.21's, on the whole golden grid.

``golden/tf_input.json`` holds what TensorFlow 2.21 itself gave every replica at
every step — and ``strategy.reduce(MEAN, batch, axis=0)`` at every step for some
cases, or the error it raised — for a grid of layouts, auto-shard policies,
pipelines, sizes and global batches (``golden/generate.py`` writes it and
documents the grid).  Here every replica of a case is built in this process
with its own ``ReplicaGroupInfo``: one after the other when every replica's step
count is provable from the pipeline (no collective may be called), else in one
thread each with in-process collectives, so the end-of-data agreement runs as
it does across processes.

The grid's iterators read their batches without the host prefetch thread (the
``synchronous_host_reads`` fixture): that thread moves each batch through a queue
unchanged, and starting and feeding one for each of some ten thousand short epochs
cost about half of this file's CPU time.  The reported cases below, and the input
tests of ``tests/input`` and ``tests/data/test_prefetch.py``, run it.
"""

from __future__ import annotations

import functools
import json
import math
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import distrib.input.distributed
from distrib.data import AutoShardPolicy, Dataset, Options, TextLineDataset
from distrib.data.options import SHARD_HINT
from distrib.distribute.group import ReplicaGroupInfo
from distrib.errors import DistribError
from distrib.input import (
    InputContext,
    InputOptions,
    InputReplicationMode,
    as_dataset,
    distribute_dataset,
    distribute_datasets_from_function,
    make_plan,
)
from tests.input.golden.grid import FILE_SOURCES, LAYOUTS, parse_key, write_files
from tests.input.helpers import as_lists

GOLDEN = Path(__file__).parent / "golden" / "tf_input.json"


@functools.cache
def golden() -> dict[str, Any]:
    cases: dict[str, Any] = json.loads(GOLDEN.read_text())["cases"]
    return cases


# ------------------------------------------------------------ the case's pipeline
def source(case: dict[str, Any], root: Path) -> Dataset:
    if case["src"] == "range":
        return Dataset.range(case["n"])
    if case["src"] == "gen":   # batches whose size the strategy cannot see
        loader = DataLoader(TensorDataset(torch.arange(case["n"])), batch_size=case["G"],
                            drop_last=bool(case["d"]),
                            collate_fn=lambda rows: torch.stack([r[0] for r in rows]))
        return as_dataset(loader)
    if case["src"] == "slices":
        i = torch.arange(case["n"])
        return Dataset.from_tensor_slices((torch.stack([i.double(), (i * i).double()], 1), i))
    if case["src"] == "rangeil":   # an interleave that opens no files
        return Dataset.range(case["n"]).interleave(Dataset.from_tensors, cycle_length=2,
                                                   block_length=1)
    folder = write_files(root, case["f"])
    if case["src"] == "text":
        lines = TextLineDataset([str(folder / f"part{k}.txt") for k in range(len(case["f"]))])
    else:
        files = Dataset.list_files(str(folder / "*.txt"), shuffle=False)
        if case["src"] == "filesmap":
            files = files.map(lambda name: name)
        lines = files.interleave(TextLineDataset, cycle_length=2, block_length=1)
    return lines.map(lambda s: torch.tensor(int(s)))


def value(element: Any) -> Any:
    return element[1] if isinstance(element, tuple) else element


def pipeline(case: dict[str, Any], root: Path) -> Dataset:
    ds, p = source(case, root), case["p"]
    if p == "filter":
        ds = ds.filter(lambda *e: value(e if len(e) > 1 else e[0]) % 3 != 1)
    if p == "hint":
        ds = ds.shard(SHARD_HINT, SHARD_HINT)
    if p == "shard2":
        ds = ds.shard(2, 1)
    if p != "nobatch" and case["src"] != "gen":
        ds = ds.batch(case["G"], drop_remainder=bool(case["d"]))
    if p == "map":
        ds = ds.map(lambda b: b * 2)
    if p == "repeat":
        ds = ds.repeat(2)
    opts = Options()
    opts.experimental_distribute.auto_shard_policy = AutoShardPolicy[case["pol"]]
    return ds.with_options(opts)


def distributed(case: dict[str, Any], root: Path, via: Any) -> Any:
    """The case's distributed dataset, made by ``via`` (a strategy, or :class:`ByGroup`)."""
    if case["api"] == "dd":
        return via.experimental_distribute_dataset(pipeline(case, root))

    def dataset_fn(ctx: InputContext) -> Dataset:
        ds = source(case, root)
        if case["p"] == "shard":
            ds = ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        return ds.batch(ctx.get_per_replica_batch_size(case["G"]),
                        drop_remainder=bool(case["d"]))
    mode = InputReplicationMode.PER_REPLICA if case["api"] == "fnr" else \
        InputReplicationMode.PER_WORKER
    return via.distribute_datasets_from_function(
        dataset_fn, InputOptions(experimental_replication_mode=mode))


class ByGroup:
    """The two distribution methods of a strategy, for one replica's ``ReplicaGroupInfo``."""

    def __init__(self, group: ReplicaGroupInfo) -> None:
        self._group = group

    def experimental_distribute_dataset(self, ds: Dataset) -> Any:
        return distribute_dataset(ds, self._group)

    def distribute_datasets_from_function(self, fn: Any, options: InputOptions) -> Any:
        return distribute_datasets_from_function(fn, self._group, options)


# ------------------------------------------------------------ running the replicas
class NeedsAgreement(Exception):
    """A replica called a collective: its step count is not provable alone."""


class ThreadCluster:
    """SUM all-reduce and all-gather between the threads of one case's replicas."""

    def __init__(self, size: int) -> None:
        self._barrier = threading.Barrier(size, timeout=60)
        self._slots: list[Any] = [None] * size

    def _exchange(self, rank: int, obj: Any) -> list[Any]:
        self._slots[rank] = obj
        self._barrier.wait()
        out = list(self._slots)
        self._barrier.wait()
        return out

    def all_reduce_sum(self, rank: int, t: torch.Tensor) -> torch.Tensor:
        return torch.stack(self._exchange(rank, t.clone())).sum(0)

    def all_gather(self, rank: int, t: torch.Tensor, axis: int) -> torch.Tensor:
        return torch.cat(self._exchange(rank, t.clone()), dim=axis)

    def abort(self) -> None:
        self._barrier.abort()


def groups(case: dict[str, Any], cluster: ThreadCluster | None) -> list[ReplicaGroupInfo]:
    w, lr = case["W"], case["L"]

    def forbidden(_: torch.Tensor) -> torch.Tensor:
        raise NeedsAgreement

    def alone(t: torch.Tensor, axis: int) -> torch.Tensor:
        return torch.cat([t] * (w * lr), dim=axis)

    out = []
    for r in range(w * lr):
        reduce: Callable[[torch.Tensor], torch.Tensor] = forbidden
        gather: Callable[[torch.Tensor, int], torch.Tensor] = alone
        if cluster is not None:
            reduce = functools.partial(cluster.all_reduce_sum, r)
            gather = functools.partial(cluster.all_gather, r)
        out.append(ReplicaGroupInfo(num_replicas_in_sync=w * lr, replica_id=r, num_workers=w,
                                    worker_index=r // lr, local_replicas=lr,
                                    local_replica_id=r % lr, all_reduce_sum=reduce,
                                    all_gather=gather))
    return out


def replica_steps(case: dict[str, Any], root: Path, group: ReplicaGroupInfo) -> list[Any]:
    """One replica's epoch: its batches, each checked for the case's structure."""
    steps = []
    for batch in distributed(case, root, ByGroup(group)):
        if case["src"] == "slices":
            x, y = batch
            assert tuple(x.shape) == (*y.shape, 2)
            assert x[..., 0].tolist() == y.double().tolist()
            assert x[..., 1].tolist() == (y * y).double().tolist()
        steps.append(batch)
    return steps


def run_replicas(case: dict[str, Any], root: Path) -> list[list[Any]]:
    """Every replica's batches: one after the other, or in threads when they must agree."""
    try:
        return [replica_steps(case, root, g) for g in groups(case, None)]
    except NeedsAgreement:
        pass
    cluster = ThreadCluster(case["W"] * case["L"])
    results: list[Any] = [None] * (case["W"] * case["L"])

    def run(r: int, group: ReplicaGroupInfo) -> None:
        try:
            results[r] = replica_steps(case, root, group)
        except BaseException as e:  # noqa: BLE001 - handed to the caller below
            results[r] = e
            cluster.abort()
    threads = [threading.Thread(target=run, args=(r, g), daemon=True)
               for r, g in enumerate(groups(case, cluster))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
        assert not t.is_alive(), f"a replica of {case} never finished"
    errors = [r for r in results if isinstance(r, BaseException)
              and not isinstance(r, threading.BrokenBarrierError)]
    if errors:
        raise errors[0]
    return results


def step_mean(case: dict[str, Any], batches: list[Any]) -> Any:
    """``reduce(MEAN, axis=0)`` of one step: the mean over every replica's real rows."""
    if case["src"] == "slices":
        rows = torch.cat([b[0] for b in batches])
        return (rows.sum(0) / rows.shape[0]).tolist()
    rows = torch.cat([b.reshape(-1).double() for b in batches])
    return float(rows.sum() / rows.numel())


def run_case(case: dict[str, Any], root: Path) -> dict[str, Any]:
    """What distrib gives every replica, in the golden file's form."""
    try:
        per_replica = run_replicas(case, root)
    except DistribError as e:
        return {"e": f"{type(e).__name__}: {e}"}
    counts = {len(steps) for steps in per_replica}
    assert len(counts) == 1, f"replicas took different step counts {counts}"
    steps = [[value(r[t]) for r in per_replica] for t in range(counts.pop())]
    out: dict[str, Any] = {"s": [[as_lists(v) for v in step] for step in steps]}
    if case["m"]:
        out["m"] = [step_mean(case, [r[t] for r in per_replica]) for t in range(len(steps))]
    return out


def same(got: dict[str, Any], expected: dict[str, Any]) -> bool:
    if "e" in expected or "e" in got:
        return ("e" in expected) == ("e" in got)
    if got["s"] != expected["s"]:
        return False
    if "m" not in expected:
        return True
    return torch.allclose(torch.tensor(got["m"], dtype=torch.float64),
                          torch.tensor(expected["m"], dtype=torch.float64), rtol=1e-12,
                          atol=1e-9, equal_nan=True)


def tf_drops_partial_steps(case: dict[str, Any]) -> bool:
    """Whether TF 2.21 ends this case's epoch early because of a wrong cardinality.

    TF computes the cardinality of ``range(n).shard(SHARD_HINT, SHARD_HINT)`` as if
    it cut ``n`` rows into -1 shards (``1 - n``); when batching that gives -1
    (INFINITE), TF turns its partial-batch handling off, and a step where a
    replica has no batch ends the epoch instead of giving it an empty batch.
    distrib knows the real cardinality and keeps those steps.
    """
    if case["p"] != "hint" or case["W"] * case["L"] == 1:
        return False
    c, g = 1 - case["n"], case["G"]
    if c in (-1, -2):   # INFINITE and UNKNOWN pass through batch
        return c == -1
    q = int(c / g)      # C++ division truncates toward zero
    return q + (0 if c == q * g or case["d"] else 1) == -1


# ------------------------------------------------------------ the tests
class SynchronousReads:
    """``PrefetchIterator``'s interface, reading ``make()`` in the caller's thread."""

    def __init__(self, make: Callable[[], Any], size: int = 1, name: str = "") -> None:
        self._items = make()

    def __iter__(self) -> SynchronousReads:
        return self

    def __next__(self) -> Any:
        return next(self._items)

    def close(self, timeout: float = 0.0) -> None:
        self._items = iter(())


@pytest.fixture
def synchronous_host_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(distrib.input.distributed, "PrefetchIterator", SynchronousReads)


def keys_of(layout: tuple[int, int]) -> list[str]:
    return [k for k in golden() if tuple(int(v) for v in k.split("|")[1:3]) == layout]


@pytest.mark.parametrize("layout", LAYOUTS, ids=[f"{w}x{lr}" for w, lr in LAYOUTS])
@pytest.mark.usefixtures("synchronous_host_reads")
def test_every_replica_gets_what_tensorflow_gives(layout: tuple[int, int],
                                                  tmp_path_factory: pytest.TempPathFactory
                                                  ) -> None:
    root = tmp_path_factory.mktemp("golden_files")
    keys = keys_of(layout)
    assert keys, f"no golden case for layout {layout}"
    failures = []
    for key in keys:
        case, expected = parse_key(key), golden()[key]
        got = run_case(case, root)
        if tf_drops_partial_steps(case) and "s" in expected:   # distrib keeps the steps
            ok = "e" not in got and got["s"][:len(expected["s"])] == expected["s"]
        else:
            ok = same(got, expected)
        if not ok:
            failures.append(f"{key}\n  TensorFlow: {expected}\n  distrib:    {got}")
    assert not failures, f"{len(failures)} of {len(keys)} cases differ:\n" + \
        "\n".join(failures[:15])


REPORTED_CASES = {
    # One worker, several replicas: each global batch split on its own into ceil pieces.
    "dd|1|2|AUTO|range|6|4|0||1": [[[0, 1], [2, 3]], [[4], [5]]],
    "dd|1|2|AUTO|range|14|8|0||1": [[[0, 1, 2, 3], [4, 5, 6, 7]], [[8, 9, 10], [11, 12, 13]]],
    "dd|1|2|AUTO|range|5|8|0||1": [[[0, 1, 2], [3, 4]]],
    "dd|1|2|AUTO|range|10|6|0||1": [[[0, 1, 2], [3, 4, 5]], [[6, 7], [8, 9]]],
    # Several workers, OFF: every worker re-batches the whole dataset by its sizes.
    "dd|2|1|OFF|range|9|4|0||1": [[[0, 1], [0, 1]], [[2, 3], [2, 3]], [[4, 5], [4, 5]],
                                  [[6, 7], [6, 7]], [[8], [8]]],
    "dd|2|1|OFF|range|14|8|0||1": [[[0, 1, 2, 3]] * 2, [[4, 5, 6, 7]] * 2,
                                   [[8, 9, 10, 11]] * 2, [[12, 13]] * 2],
    # Several workers, AUTO and DATA: each global batch split into one piece per replica.
    "dd|2|1|AUTO|range|9|4|0||1": [[[0, 1], [2, 3]], [[4, 5], [6, 7]], [[8], []]],
    "dd|2|1|AUTO|range|14|8|0||1": [[[0, 1, 2, 3], [4, 5, 6, 7]], [[8, 9, 10], [11, 12, 13]]],
    "dd|2|1|DATA|range|9|4|0||1": [[[0, 1], [2, 3]], [[4, 5], [6, 7]], [[8], []]],
    "dd|2|1|DATA|range|14|8|0||1": [[[0, 1, 2, 3], [4, 5, 6, 7]], [[8, 9, 10], [11, 12, 13]]],
}
"""The cases reported against an earlier split rule: one worker x 2 replicas, and 2 workers x
1 replica under OFF, AUTO and DATA.  Each is in the golden file, as TensorFlow 2.21 ran it."""

DOC_CASES = {   # the examples of docs/input_distribution.md
    "dd|1|3|AUTO|range|8|4|0||1": [[[0, 1], [2, 3], []], [[4, 5], [6, 7], []]],
    "dd|2|2|AUTO|range|7|7|0||1": [[[0, 1], [4, 5], [2, 3], [6]]],
    "dd|1|2|OFF|range|14|8|0||1": [[[0, 1, 2, 3], [4, 5, 6, 7]], [[8, 9, 10, 11], [12, 13]]],
    "dd|1|2|OFF|range|3|1|0||1": [[[0], []], [[1], []], [[2], []]],
    "dd|1|2|OFF|range|5|3|0|repeat|1": [[[0, 1], [2]], [[3, 4], [0]], [[1, 2], [3]],
                                        [[4], []]],
    "dd|2|1|AUTO|text|5-3|4|0||1": [[[0, 1], [5, 6]], [[2, 3], [7]], [[4], []]],
    "dd|2|1|OFF|range|5|3|0||1": [[[0, 1], [0]], [[2], [1, 2]], [[3, 4], [3]], [[], [4]]],
    "dd|2|1|OFF|range|2|1|0||1": [[[0], []], [[], [0]], [[1], []], [[], [1]], [[], []]],
    "fn|1|2|AUTO|range|10|6|1||1": [[[0, 1, 2], [3, 4, 5]]],
    "fn|1|2|AUTO|range|10|6|0||1": [[[0, 1, 2], [3, 4, 5]], [[6, 7, 8], [9]]],
}


@pytest.mark.parametrize("key", sorted(REPORTED_CASES))
def test_each_reported_case_is_in_the_golden_file_and_distrib_gives_it(key: str,
                                                                       tmp_path: Path) -> None:
    assert key in golden(), f"{key} is missing from {GOLDEN.name}: run golden/generate.py"
    assert golden()[key]["s"] == REPORTED_CASES[key], "TensorFlow 2.21 gave other batches"
    got = run_case(parse_key(key), tmp_path)
    assert got["s"] == REPORTED_CASES[key]
    assert same(got, golden()[key])   # the per-step reduce(MEAN, axis=0) too


def test_the_reported_and_documented_cases_are_in_the_golden_grid() -> None:
    for key, steps in {**REPORTED_CASES, **DOC_CASES}.items():
        assert golden()[key]["s"] == steps, key
    # reduce(MEAN, axis=0): the mean over the real rows of every replica.
    assert golden()["dd|1|2|AUTO|range|6|4|0||1"]["m"] == [1.5, 4.5]
    assert golden()["dd|2|2|OFF|range|10|6|0||1"]["m"][0] == pytest.approx(7 / 6)
    assert math.isnan(golden()["dd|2|1|OFF|range|2|1|0||1"]["m"][-1])
    last = golden()["dd|2|1|OFF|range|7|1|0||1"]
    assert len(last["s"]) == 15 and last["s"][-1] == [[], []] and math.isnan(last["m"][-1])


def test_the_grid_reaches_every_plan_mode_and_policy(tmp_path: Path) -> None:
    """Each way of splitting batches, on one worker and on several, for each reason."""
    seen = set()
    for key in golden():
        case = parse_key(key)
        if case["api"] != "dd" or case["p"] == "nobatch" or "e" in golden()[key]:
            continue
        plan = make_plan(pipeline(case, tmp_path), groups(case, None)[-1])
        reader = "file" if case["src"] in FILE_SOURCES else \
            "unknown batch" if case["src"] == "gen" else "memory"
        seen.add((plan.mode, case["W"] > 1, case["L"] > 1, case["pol"], reader))
    for several_workers in (False, True):
        for pol in ("AUTO", "DATA"):
            assert ("split", several_workers, True, pol, "memory") in seen
        assert ("split", several_workers, True, "DATA", "file") in seen
        for pol in ("OFF", "HINT"):
            assert ("rebatch", several_workers, True, pol, "memory") in seen
        for pol in ("AUTO", "FILE"):   # a file reader: FILE sharding
            assert ("rebatch", several_workers, True, pol, "file") in seen
        for pol in ("AUTO", "DATA"):
            assert ("split", several_workers, True, pol, "unknown batch") in seen
    for pol in ("OFF", "HINT"):
        assert ("split", False, True, pol, "unknown batch") in seen
        assert ("pieces", True, True, pol, "unknown batch") in seen
    assert ("stride", False, False, "AUTO", "memory") in seen
