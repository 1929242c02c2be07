"""``Estimator.train`` vs ``distrib.Model.fit`` vs a raw torch loop, on 1 and 2 replicas.

All three train the seeds' CNN (Conv32-Pool-Conv64-Pool-Dense64-Dense10; ``--model mlp``
for the MLP) on the same synthetic data with the same global batch for the same number
of steps, SGD with momentum, cross-entropy on logits:

* estimator: ``Estimator.train(input_fn, steps=N)`` with ``train_distribute=
  MirroredStrategy`` (``devices=["cpu:0", "cpu:1"]`` for 2 replicas); ``input_fn``
  returns ``Dataset.from_tensor_slices((x, y)).batch(per-replica batch)``; ``model_fn``
  builds the module and optimizer (made once, reused every step) and returns
  ``train_op=optimizer``.  Checkpoints are off (``save_checkpoints_steps`` and
  ``_secs`` None) so that the figure is the training loop's; summaries and logs every
  100 steps as by default.  The "with checkpoint" column keeps TensorFlow's default
  (a checkpoint at the end of ``train``);
* fit and raw DDP: exactly as ``bench_fit.py`` runs them (arrays in memory; a loop over
  the same tensors with ``DistributedDataParallel``).

Every contender gets the same CPU threads per process (``--threads``, default 1).  Each
is timed over one call of ``--steps`` steps after a warm-up call, in fresh processes,
``--repeats`` times interleaved; the table shows each contender's fastest
run (steps per second) and the ratios estimator / fit (goal >= 0.97) and estimator / raw.

    python bench/bench_estimator.py [--steps 200] [--batch 64] [--repeats 3] [--threads 1]
                                    [--model cnn] [--json out.json]

Not a test: it measures, it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_fit  # noqa: E402  (the fit and raw-loop contenders)

WARMUP = bench_fit.WARMUP


def run_estimator(model: str, replicas: int, steps: int, batch: int,
                  checkpoint: bool) -> tuple[int, float]:
    import torch

    import distrib
    from distrib.estimator import Estimator, EstimatorSpec, RunConfig

    strategy = (distrib.MirroredStrategy(devices=[f"cpu:{i}" for i in range(replicas)])
                if replicas > 1 else distrib.MirroredStrategy())
    x, y = bench_fit._data(steps, batch)
    per_replica = batch // replicas

    def make_input_fn(first: int, count: int) -> Any:
        def input_fn(input_context: Any = None) -> Any:
            rows = slice(first * batch, (first + count) * batch)
            ds = distrib.data.Dataset.from_tensor_slices((x[rows], y[rows]))
            return ds.batch(per_replica)
        return input_fn

    def model_fn(features: Any, labels: Any, mode: str) -> EstimatorSpec:
        net = bench_fit._build(model)
        loss = torch.nn.functional.cross_entropy(net(features), labels)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        return EstimatorSpec(mode, loss=loss, train_op=optimizer)

    saving: dict[str, Any] = {} if checkpoint else {"save_checkpoints_steps": None,
                                                    "save_checkpoints_secs": None}
    torch.manual_seed(0)
    config = RunConfig(train_distribute=strategy, **saving)
    estimator = Estimator(model_fn, config=config)    # a temporary model_dir, the chief's
    estimator.train(make_input_fn(0, WARMUP), steps=WARMUP)
    t0 = time.perf_counter()
    estimator.train(make_input_fn(WARMUP, steps), steps=steps)
    elapsed = time.perf_counter() - t0
    rank = strategy.extended.replica_group.replica_id
    if rank == 0:
        shutil.rmtree(estimator.model_dir, ignore_errors=True)
    return rank, elapsed


def measure_estimator(model: str, replicas: int, steps: int, batch: int, threads: int,
                      checkpoint: bool) -> float:
    cmd = [sys.executable, __file__, "--worker", "estimator", "--model", model, "--replicas",
           str(replicas), "--steps", str(steps), "--batch", str(batch)]
    if checkpoint:
        cmd.append("--checkpoint")
    env = {**bench_fit._clean_env(), "OMP_NUM_THREADS": str(threads),
           "GLOO_SOCKET_IFNAME": "lo"}
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    return bench_fit._result([out.stdout, out.stderr], "estimator")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", choices=["estimator"], help=argparse.SUPPRESS)
    ap.add_argument("--checkpoint", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--replicas", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--model", default="cnn", choices=["cnn", "mlp"])
    ap.add_argument("--steps", type=int, default=200, help="timed steps per run")
    ap.add_argument("--batch", type=int, default=64, help="global batch size")
    ap.add_argument("--threads", type=int, default=1,
                    help="CPU threads per process, for every contender")
    ap.add_argument("--repeats", type=int, default=3,
                    help="runs of each contender (interleaved; the fastest is shown)")
    ap.add_argument("--json", help="write the rows to this file")
    args = ap.parse_args()
    if args.worker:
        rank, seconds = run_estimator(args.model, args.replicas, args.steps, args.batch,
                                      args.checkpoint)
        if rank == 0:
            print("RESULT " + json.dumps({"seconds": seconds}), flush=True)
        return
    rows = []
    print(f"{'model':6} {'replicas':>8} {'estimator/s':>11} {'+ckpt/s':>8} {'fit/s':>7} "
          f"{'raw/s':>7} {'est/fit':>7} {'est/raw':>7}", flush=True)
    for replicas in (1, 2):
        runs: dict[str, list[float]] = {"est": [], "ckpt": [], "fit": [], "raw": []}
        for _ in range(args.repeats):  # interleaved, so all see the same machine noise
            common = (args.model, replicas, args.steps, args.batch, args.threads)
            runs["est"].append(measure_estimator(*common, False))
            runs["ckpt"].append(measure_estimator(*common, True))
            runs["fit"].append(bench_fit.measure("distrib", *common))
            runs["raw"].append(bench_fit.measure("ddp", *common))
        rate = {k: args.steps / min(v) for k, v in runs.items()}
        row: dict[str, Any] = {"model": args.model, "replicas": replicas, "steps": args.steps,
                               "global_batch": args.batch,
                               **{f"{k}_steps_per_s": r for k, r in rate.items()},
                               "estimator_vs_fit": rate["est"] / rate["fit"],
                               "estimator_vs_raw": rate["est"] / rate["raw"]}
        rows.append(row)
        print(f"{args.model:6} {replicas:8d} {rate['est']:11.1f} {rate['ckpt']:8.1f} "
              f"{rate['fit']:7.1f} {rate['raw']:7.1f} {row['estimator_vs_fit']:7.3f} "
              f"{row['estimator_vs_raw']:7.3f}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
