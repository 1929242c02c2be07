"""Input-pipeline scenarios that need real processes; run as 2 ranks of a gloo group.

Usage: python input_worker.py RANK WORLD INIT_FILE DATA_DIR OUT_DIR
Each rank writes OUT_DIR/rank<RANK>.json with what it observed per scenario.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from distrib.data import Dataset, TextLineDataset  # noqa: E402
from distrib.input import (  # noqa: E402
    InputContext,
    distribute_dataset,
    distribute_datasets_from_function,
)
from tests.input.helpers import (  # noqa: E402
    GLOBAL_BATCH,
    CountingCollectives,
    as_lists,
    group_for,
    init_gloo,
    linear_data,
    train_linear,
)


def run_epoch(dist_ds: Any, coll: CountingCollectives) -> dict[str, Any]:
    before = coll.calls
    it = iter(dist_ds)
    setup_calls = coll.calls - before
    steps = []
    for batch in it:
        steps.append(as_lists(batch))
    again = next(it, None)
    return {"steps": steps, "setup_calls": setup_calls, "calls": coll.calls - before,
            "after_end": again}


def uneven_fn(ctx: InputContext) -> Dataset:
    # Worker 0: 11 rows -> batches of 4, 4, 3; worker 1: 7 rows -> 4, 3 (one batch fewer).
    lo, hi = (0, 11) if ctx.input_pipeline_id == 0 else (11, 18)
    x, y = linear_data(18)
    return Dataset.from_tensor_slices((x[lo:hi], y[lo:hi])).batch(4)


def scenarios(rank: int, world: int, data_dir: Path) -> dict[str, Any]:
    coll = CountingCollectives()
    two_workers = group_for(rank, world, 2, coll)
    one_worker = group_for(rank, world, 1, coll)
    out: dict[str, Any] = {}

    # range(14).batch(8), 2 workers x 1 replica (AUTO -> DATA).
    out["partial_global_batch"] = run_epoch(distribute_dataset(Dataset.range(14).batch(8), two_workers), coll)

    # Unknown cardinality: worker 1 runs out first.
    def unknown_fn(ctx: InputContext) -> Dataset:
        n = 10 if ctx.input_pipeline_id == 0 else 6
        return Dataset.range(n).filter(lambda v: v >= 0).batch(2)
    out["uneven_unknown"] = run_epoch(distribute_datasets_from_function(unknown_fn, two_workers), coll)

    # Same shapes with known cardinality: one exchange per epoch, none per step.
    def known_fn(ctx: InputContext) -> Dataset:
        return Dataset.range(10 if ctx.input_pipeline_id == 0 else 6).batch(2)
    out["known"] = run_epoch(distribute_datasets_from_function(known_fn, two_workers), coll)

    # A repeated range sharded by input pipeline: per-worker first batches.
    def repeat_fn(ctx: InputContext) -> Dataset:
        b = ctx.get_per_replica_batch_size(10)
        return (Dataset.range(100).repeat().batch(b)
                .shard(ctx.num_input_pipelines, ctx.input_pipeline_id))
    it = iter(distribute_datasets_from_function(repeat_fn, two_workers))
    out["sharded_repeat_sums"] = int(next(it).sum())

    # FILE sharding with uneven files (5 and 3 lines), global batch 4.
    files = TextLineDataset(sorted(str(p) for p in data_dir.glob("*.txt")))
    ds = files.map(lambda s: torch.tensor(int(s))).batch(4)
    out["file"] = run_epoch(distribute_dataset(ds, two_workers), coll)

    # One worker with two replicas, unknown cardinality: agreement per step.
    ds = Dataset.range(7).filter(lambda v: v >= 0).batch(4)
    out["single_worker_unknown"] = run_epoch(distribute_dataset(ds, one_worker), coll)

    # Oracle: uneven shards through distribute_datasets_from_function.
    dist_ds = distribute_datasets_from_function(uneven_fn, two_workers)
    w = train_linear(iter(dist_ds), all_reduce=coll.all_reduce_sum)
    out["oracle_uneven"] = w.tolist()

    # Oracle: DATA sharding with a final partial global batch (14 rows, G = 8).
    x, y = linear_data(14)
    dist_ds = distribute_dataset(Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH),
                                 two_workers)
    out["oracle_data"] = train_linear(iter(dist_ds), all_reduce=coll.all_reduce_sum).tolist()

    # Resume: an UNSEEDED shuffle; the chief's run seed travels in the state.
    def pipeline() -> Dataset:
        return Dataset.from_tensor_slices(torch.arange(50)).shuffle(50).batch(GLOBAL_BATCH)
    dist_ds = distribute_dataset(pipeline(), two_workers)
    epoch0 = [as_lists(b) for b in dist_ds]
    it = iter(dist_ds)
    first = [as_lists(next(it)) for _ in range(3)]
    state = it.state_dict()
    rest = [as_lists(b) for b in it]
    epoch2 = [as_lists(b) for b in dist_ds]
    out["resume"] = {"epoch0": epoch0, "first": first, "state": state, "rest": rest,
                     "epoch2": epoch2}
    # And a fresh 2-rank dataset restored from that state continues identically.
    again = distribute_dataset(pipeline(), two_workers)
    again.load_state_dict(state)
    out["resume"]["restored"] = [as_lists(b) for b in again]
    return out


def main() -> None:
    rank, world = int(sys.argv[1]), int(sys.argv[2])
    init_file, data_dir, out_dir = sys.argv[3], Path(sys.argv[4]), Path(sys.argv[5])
    init_gloo(rank, world, init_file)
    try:
        result = scenarios(rank, world, data_dir)
    finally:
        dist.destroy_process_group()
    (out_dir / f"rank{rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
