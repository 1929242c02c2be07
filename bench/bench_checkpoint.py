"""Checkpoints: save and restore times, and what backups cost a running ``fit``.

1. Save / restore of the seeds' CNN (with Adam state) and of a ~100M-parameter MLP
   (8 x Linear(3584, 3584), float32, SGD), with 1 and 2 replica processes:
   ``distrib.Checkpoint.write`` (synchronous), the time an asynchronous save blocks
   training (``CheckpointOptions(enable_async=True)``: the state is copied, then written
   in the background) and ``restore``; baseline: ``torch.save`` of the same state dicts
   by the chief (then a barrier) and ``torch.load(weights_only=True)`` + ``load_state_dict``.
2. ``fit`` of the seeds' CNN, per-replica batch 64, ``--steps`` steps per fit: milliseconds
   per step without any backup, with ``BackupAndRestore(save_freq=100)`` (asynchronous,
   the default), with synchronous backups, and with ``save_before_preemption=True`` (one
   all-reduce of an int per step).  The four variants run in one process (group),
   ``--rounds`` times interleaved in rotating order.  Reported per variant: the wall time
   per step of its fastest round, and the median process CPU time per step (the chief's,
   background writer thread included: insensitive to other work on the machine);
   overhead = variant / no backup - 1 (goal: < 5 % for the overlapped save).  Workers run
   with ``OMP_NUM_THREADS=1`` unless it is set.

Save and restore figures are the fastest of ``--repeats`` fresh processes.

    python bench/bench_checkpoint.py [--repeats 3] [--rounds 5] [--steps 250] [--skip-big]
                                     [--json out.json]

Not a test: it measures, it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve()
WARMUP = 20


def _cnn() -> Any:
    from torch import nn
    return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(64 * 5 * 5, 64), nn.ReLU(), nn.Linear(64, 10))


def _big() -> Any:
    from torch import nn
    return nn.Sequential(*[nn.Linear(3584, 3584) for _ in range(8)])


def _strategy(replicas: int) -> Any:
    import distrib
    if replicas == 1:
        return distrib.MirroredStrategy(devices=["cpu:0"])
    return distrib.MirroredStrategy(devices=[f"cpu:{i}" for i in range(replicas)])


# ---------------------------------------------------------------- save / restore
def worker_save(model: str, replicas: int, directory: str, out: str) -> None:
    import torch
    import torch.distributed as dist

    import distrib

    strategy = _strategy(replicas)
    rank = strategy.extended.replica_group.replica_id
    torch.manual_seed(0)
    with strategy.scope():
        net = _cnn() if model == "cnn" else _big()
        opt = (torch.optim.Adam(net.parameters(), lr=1e-3) if model == "cnn"
               else torch.optim.SGD(net.parameters(), lr=1e-3))
        ckpt = distrib.Checkpoint(model=net, optimizer=opt)
    if model == "cnn":  # create Adam's state
        net(torch.randn(2, 1, 28, 28)).sum().backward()
        opt.step()
        opt.zero_grad()
    params = sum(p.numel() for p in net.parameters())
    group = strategy.extended.replica_group

    def barrier() -> None:
        group.all_reduce_sum(torch.zeros(1))

    times: dict[str, float] = {}
    base = Path(directory)
    barrier()
    t = time.perf_counter()
    ckpt.write(base / "sync")
    times["save"] = time.perf_counter() - t
    barrier()
    t = time.perf_counter()
    ckpt.write(base / "async", options=distrib.train.CheckpointOptions(enable_async=True))
    times["async_block"] = time.perf_counter() - t
    ckpt.sync()
    barrier()
    times["async_total"] = time.perf_counter() - t
    barrier()
    t = time.perf_counter()
    ckpt.restore(base / "sync").assert_consumed()
    times["restore"] = time.perf_counter() - t
    barrier()
    t = time.perf_counter()
    if rank == 0:
        with open(base / "torch.pt", "wb") as f:
            torch.save({"model": net.state_dict(), "optimizer": opt.state_dict()}, f)
            f.flush()
            os.fsync(f.fileno())
    barrier()
    times["torch_save"] = time.perf_counter() - t
    barrier()
    t = time.perf_counter()
    state = torch.load(base / "torch.pt", weights_only=True)
    net.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    barrier()
    times["torch_load"] = time.perf_counter() - t
    if rank == 0:
        Path(out).write_text(json.dumps({"params": params, **times}))
    if dist.is_initialized():
        barrier()


# ------------------------------------------------------------------------ fit
VARIANTS = ("none", "async", "sync", "preempt")


def _backup(variant: str, directory: str) -> list[Any]:
    import distrib

    BackupAndRestore = distrib.callbacks.BackupAndRestore
    if variant == "async":
        return [BackupAndRestore(directory, save_freq=100)]
    if variant == "sync":
        return [BackupAndRestore(directory, save_freq=100,
                                 options=distrib.train.CheckpointOptions(enable_async=False))]
    if variant == "preempt":
        return [BackupAndRestore(directory, save_freq=False, save_before_preemption=True)]
    return []


def worker_fit(replicas: int, rounds: int, steps: int, directory: str, out: str) -> None:
    """Every variant ``rounds`` times in this process, interleaved (rotating the order)."""
    import torch

    import distrib

    strategy = _strategy(replicas)
    batch = 64 * replicas
    rng = np.random.RandomState(0)
    x = rng.rand(steps * batch, 1, 28, 28).astype("float32")
    y = rng.randint(0, 10, steps * batch).astype("int64")
    torch.manual_seed(0)
    with strategy.scope():
        model = distrib.Model(_cnn())
        model.compile(optimizer=torch.optim.SGD(model.module.parameters(), lr=0.01,
                                                momentum=0.9),
                      loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True))
    marks: dict[int, float] = {}

    class Clock(distrib.callbacks.Callback):
        def batch_log_interval(self, mode: str, n: int | None, in_fit: bool) -> int:
            return 0

        def on_train_batch_end(self, b: int, logs: Any = None) -> None:
            if b + 1 in (WARMUP, steps):
                marks[b + 1] = time.perf_counter()
                marks[-(b + 1)] = time.process_time()

    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    cpu: dict[str, list[float]] = {v: [] for v in VARIANTS}
    blocked: dict[str, list[float]] = {v: [] for v in VARIANTS}
    original_save = distrib.CheckpointManager.save

    def timed_save(self: Any, *a: Any, **k: Any) -> Any:  # how long training waits per save
        t = time.perf_counter()
        try:
            return original_save(self, *a, **k)
        finally:
            blocked[current].append((time.perf_counter() - t) * 1000)

    distrib.CheckpointManager.save = timed_save  # type: ignore[method-assign]
    original_agreed = distrib.checkpoint.PreemptionWatcher.agreed

    def timed_agreed(self: Any) -> bool:  # the per-step agreement on a preemption notice
        t = time.perf_counter()
        try:
            return original_agreed(self)
        finally:
            blocked["agree"].append((time.perf_counter() - t) * 1000)

    distrib.checkpoint.PreemptionWatcher.agreed = timed_agreed  # type: ignore[method-assign]
    blocked["agree"] = []
    current = "none"
    for r in range(rounds):
        order = VARIANTS[r % len(VARIANTS):] + VARIANTS[:r % len(VARIANTS)]
        for variant in order:
            current = variant
            callbacks = [*_backup(variant, os.path.join(directory, variant)), Clock()]
            model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0,
                      callbacks=callbacks)
            times[variant].append((marks[steps] - marks[WARMUP]) * 1000 / (steps - WARMUP))
            cpu[variant].append((marks[-steps] - marks[-WARMUP]) * 1000 / (steps - WARMUP))
    if strategy.extended.replica_group.replica_id == 0:
        Path(out).write_text(json.dumps({"wall": times, "cpu": cpu, "blocked": blocked}))


# --------------------------------------------------------------------- driver
def _fresh(args: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-ckpt-") as d:
        out = os.path.join(d, "out.json")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DISTRIB_", "TF_CONFIG"))}
        env.setdefault("OMP_NUM_THREADS", "1")  # steady figures on a shared machine
        subprocess.run([sys.executable, str(HERE), *args, d, out], check=True, env=env,
                       timeout=3600)
        result: dict[str, Any] = json.loads(Path(out).read_text())
        shutil.rmtree(d, ignore_errors=True)
        return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=250)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--skip-big", action="store_true")
    ap.add_argument("--skip-save", action="store_true", help="only the fit figures")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    results: dict[str, Any] = {"save": {}, "fit": {}}
    models = [] if args.skip_save else ["cnn"] if args.skip_big else ["cnn", "big"]
    for model in models:
        for replicas in (1, 2):
            runs = [_fresh(["--save-worker", model, str(replicas)]) for _ in range(args.repeats)]
            best = {k: min(r[k] for r in runs) for k in runs[0]}
            results["save"][f"{model}/{replicas}"] = best
            print(f"{model:4s} {best['params'] / 1e6:7.2f}M params, {replicas} replica(s): "
                  f"save {best['save'] * 1e3:8.1f} ms, async blocks {best['async_block'] * 1e3:7.1f} "
                  f"ms (total {best['async_total'] * 1e3:8.1f}), restore "
                  f"{best['restore'] * 1e3:8.1f} ms | torch.save {best['torch_save'] * 1e3:8.1f} "
                  f"ms, torch.load {best['torch_load'] * 1e3:8.1f} ms", flush=True)
    for replicas in (1, 2):
        fit_runs = _fresh(["--fit-worker", str(replicas), str(args.rounds), str(args.steps)])
        best = {v: min(t) for v, t in fit_runs["wall"].items()}
        cpu = {v: float(np.median(t)) for v, t in fit_runs["cpu"].items()}
        per_save = {v: float(np.median(fit_runs["blocked"][v])) for v in ("async", "sync")}
        results["fit"][str(replicas)] = {"best_wall_ms": best, "median_cpu_ms": cpu,
                                         "median_blocked_ms_per_save": per_save, **fit_runs}
        print(f"fit CNN, {replicas} replica(s), save_freq=100, {args.rounds} rounds of "
              f"{args.steps} steps, ms/step wall (fastest round) | CPU (median): no backup "
              f"{best['none']:.2f} | {cpu['none']:.2f}; " + "; ".join(
                  f"{v} {best[v]:.2f} ({(best[v] / best['none'] - 1) * 100:+.1f} %) | "
                  f"{cpu[v]:.2f} ({(cpu[v] / cpu['none'] - 1) * 100:+.1f} %)"
                  for v in VARIANTS[1:]), flush=True)
        agree = float(np.median(fit_runs["blocked"]["agree"]))
        results["fit"][str(replicas)]["median_agree_ms"] = agree
        print(f"  training waits per save (median): async {per_save['async']:.1f} ms, sync "
              f"{per_save['sync']:.1f} ms = {per_save['async'] / (100 * best['none']) * 100:.2f}"
              f" % / {per_save['sync'] / (100 * best['none']) * 100:.2f} % of 100 steps; "
              f"preemption agreement {agree:.3f} ms per step "
              f"({agree / best['none'] * 100:.2f} %)", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--save-worker":
        worker_save(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5])
    elif len(sys.argv) > 1 and sys.argv[1] == "--fit-worker":
        worker_fit(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5],
                   sys.argv[6])
    else:
        main()
