"""ShardedStrategy: memory per replica vs MirroredStrategy, and ``fit`` vs a raw FSDP2 loop.

Memory (``--memory``): the seeds' MLP (784-256-128-10) or CNN trained one Adam step in a
custom loop under ``MirroredStrategy`` and under ``ShardedStrategy`` (2 CPU replicas,
float32); then each replica adds up the bytes it holds of parameters, gradients and
optimizer state (a DTensor counts its local shard).  Reported: bytes per replica, and
sharded / mirrored (the goal is 1/R plus a constant: what FSDP pads to split a tensor
evenly, and parameters below ``min_unit_params`` that stay in the root unit are sharded
too, so the constant is padding only).

Speed (default): 2 replicas, both contenders train the same model on the same synthetic
data with the same global batch for the same number of steps, SGD with momentum,
cross-entropy on logits, float32:

* distrib: ``distrib.Model.fit(x, y, batch_size=G)`` under
  ``ShardedStrategy(devices=["cpu:0", "cpu:1"], min_unit_params=M)``;
* raw: a loop over the same tensors, each process slicing its rows of every global batch,
  the same FSDP2 units (``fully_shard`` on every submodule of at least ``M`` parameters,
  then the root) over gloo, with the plain SUM reduction gloo needs.

Fair threads as in bench_fit.py: every process gets ``--threads`` CPU threads
(``OMP_NUM_THREADS``, ``torch.set_num_threads``) and replica ``r`` of either contender pins
all its threads (gloo's included, once its process group exists) to CPU ``r``.  Method:
``--pairs`` pairs of fresh runs, distrib and raw back to back, the first alternating from
pair to pair; ratio = distrib throughput / raw throughput per pair (goal >= 0.98): median,
lowest and highest pair.

    python bench/bench_sharded.py [--memory] [--models mlp,cnn] [--pairs 5] [--steps N]
                                  [--batch 64] [--threads 1] [--json out.json]

Not a test: it measures, it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from bench_common import WARMUP, build, images, pin, raw_steps

STEPS = {"mlp": 300, "cnn": 80}
MIN_UNIT = 10_000


# ------------------------------------------------------------------ contenders
def run_distrib(model: str, steps: int, batch: int) -> tuple[int, float, float]:
    import torch

    import distrib

    strategy = distrib.ShardedStrategy(devices=["cpu:0", "cpu:1"], min_unit_params=MIN_UNIT)
    rank = strategy.extended.replica_group.replica_id
    pin(rank)
    torch.manual_seed(0)
    with strategy.scope():
        fit_model = distrib.Model(build(model))
    fit_model.compile(optimizer=torch.optim.SGD(fit_model.parameters(), lr=0.01, momentum=0.9),
                      loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = images(steps, batch)
    warm = WARMUP * batch
    fit_model.fit(x[:warm], y[:warm], batch_size=batch, epochs=1, shuffle=False, verbose=0)
    c0, t0 = time.process_time(), time.perf_counter()
    fit_model.fit(x[warm:], y[warm:], batch_size=batch, epochs=1, shuffle=False, verbose=0)
    return rank, time.perf_counter() - t0, time.process_time() - c0


def run_fsdp(model: str, steps: int, batch: int) -> tuple[int, float, float]:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    pin(rank)
    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)
    net = build(model)
    units = [m for m in net.children() if sum(p.numel() for p in m.parameters()) >= MIN_UNIT]
    for m in [*units, net]:
        fully_shard(m, mesh=mesh)
        m.set_force_sum_reduction_for_comms(True)  # gloo has no AVG / PREMUL_SUM
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    xa, ya = images(steps, batch)
    x, y = torch.from_numpy(xa), torch.from_numpy(ya)
    per = batch // world
    loop = raw_steps(net, opt, x, y, batch, (rank * per, (rank + 1) * per))

    loop(0, WARMUP)
    dist.barrier()
    c0, t0 = time.process_time(), time.perf_counter()
    loop(WARMUP, steps)
    dist.barrier()
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    dist.destroy_process_group()
    return rank, elapsed, cpu


def run_memory(model: str, kind: str) -> dict[str, Any]:
    """One Adam step in a custom loop; the bytes of parameters, gradients and optimizer
    state this replica holds."""
    import torch
    from torch import nn

    import distrib

    strategy: distrib.Strategy = (
        distrib.ShardedStrategy(devices=["cpu:0", "cpu:1"], min_unit_params=MIN_UNIT)
        if kind == "sharded" else distrib.MirroredStrategy(devices=["cpu:0", "cpu:1"]))
    torch.manual_seed(0)
    with strategy.scope():
        net = build(model)
        opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    x, y = images(1, 64)
    xb, yb = torch.from_numpy(x[:32]), torch.from_numpy(y[:32])

    def step() -> None:
        per_example = nn.functional.cross_entropy(net(xb), yb, reduction="none")
        distrib.compute_average_loss(per_example, global_batch_size=64).backward()
        opt.step()  # gradients kept: they are part of what a replica holds during a step

    strategy.run(step)

    def nbytes(t: torch.Tensor) -> int:
        local = t.to_local() if hasattr(t, "to_local") else t
        return int(local.numel() * local.element_size())

    params = list(net.parameters())
    held = {"params": sum(nbytes(p) for p in params),
            "grads": sum(nbytes(p.grad) for p in params if p.grad is not None),
            "optimizer": sum(nbytes(v) for s in opt.state.values() for v in s.values()
                             if isinstance(v, torch.Tensor))}
    return {"rank": strategy.extended.replica_group.replica_id, **held,
            "full_params": sum(p.numel() * p.element_size() for p in params)}


# --------------------------------------------------------------------- driver
def _env(threads: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DISTRIB_", "TF_CONFIG", "RANK", "WORLD_SIZE", "MASTER_"))}
    return {**env, "OMP_NUM_THREADS": str(threads), "GLOO_SOCKET_IFNAME": "lo",
            "BENCH_PIN": "1"}


def _results(texts: list[str]) -> list[dict[str, Any]]:
    return [json.loads(line[7:]) for text in texts for line in text.splitlines()
            if line.startswith("RESULT ")]


def measure(kind: str, model: str, steps: int, batch: int, threads: int
            ) -> list[dict[str, Any]]:
    from distrib.cluster.ports import free_ports

    cmd = [sys.executable, __file__, "--worker", kind, "--models", model, "--steps",
           str(steps), "--batch", str(batch)]
    if kind != "fsdp":
        out = subprocess.run(cmd, env=_env(threads), capture_output=True, text=True,
                             timeout=1800)
        found = _results([out.stdout, out.stderr])
        if not found:
            raise RuntimeError(f"{kind} produced no result:\n{out.stderr[-3000:]}")
        return found
    port = str(free_ports(1)[0])
    procs = [subprocess.Popen(cmd, env={**_env(threads), "RANK": str(r), "WORLD_SIZE": "2",
                                        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(2)]
    texts: list[str] = []
    for p in procs:
        texts += list(p.communicate(timeout=1800))
    found = _results(texts)
    if not found:
        raise RuntimeError("fsdp produced no result:\n" + texts[-1][-3000:])
    return found


def _worker(args: argparse.Namespace) -> None:
    model = args.models
    if args.worker.startswith("memory-"):
        result: dict[str, Any] = run_memory(model, args.worker[7:])
    else:
        run = run_distrib if args.worker == "distrib" else run_fsdp
        rank, wall, cpu = run(model, args.steps or STEPS[model], args.batch)
        result = {"rank": rank, "wall": wall, "cpu": cpu}
    sys.stdout.flush()  # one write per line: both replicas share this stdout
    os.write(1, ("RESULT " + json.dumps(result) + "\n").encode())


def memory_table(models: list[str], threads: int) -> list[dict[str, Any]]:
    rows = []
    print("| model | strategy | params | grads | optimizer | total per replica | vs mirrored |")
    print("|---|---|---|---|---|---|---|")
    for model in models:
        totals = {}
        for kind in ("mirrored", "sharded"):
            found = measure(f"memory-{kind}", model, 1, 64, threads)
            worst = max(found, key=lambda r: r["params"] + r["grads"] + r["optimizer"])
            total = worst["params"] + worst["grads"] + worst["optimizer"]
            totals[kind] = total
            ratio = total / totals["mirrored"]
            print(f"| {model} | {kind} | {worst['params']} | {worst['grads']} | "
                  f"{worst['optimizer']} | {total} | {ratio:.3f} |", flush=True)
            rows.append({"model": model, "strategy": kind, **worst, "ratio": ratio})
    return rows


def speed_table(models: list[str], args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    print("| model | ratio (median) | lowest | highest | distrib samples/s | raw FSDP2 samples/s |")
    print("|---|---|---|---|---|---|")
    for model in models:
        steps = args.steps or STEPS[model]
        ratios, rates = [], {"distrib": [], "fsdp": []}  # type: ignore[var-annotated]
        for pair in range(args.pairs):
            order = ["distrib", "fsdp"] if pair % 2 == 0 else ["fsdp", "distrib"]
            walls = {}
            for kind in order:
                found = measure(kind, model, steps, args.batch, args.threads)
                walls[kind] = next(r["wall"] for r in found if r["rank"] == 0)
                rates[kind].append(steps * args.batch / walls[kind])
            ratios.append(walls["fsdp"] / walls["distrib"])
        row = {"model": model, "ratio": statistics.median(ratios), "low": min(ratios),
               "high": max(ratios), "distrib": statistics.median(rates["distrib"]),
               "fsdp": statistics.median(rates["fsdp"]), "pairs": ratios}
        print(f"| {model} | {row['ratio']:.3f} | {row['low']:.3f} | {row['high']:.3f} | "
              f"{row['distrib']:.0f} | {row['fsdp']:.0f} |", flush=True)
        rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--memory", action="store_true", help="the memory table instead")
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default=None)
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        _worker(args)
        return
    models = args.models.split(",")
    rows = memory_table(models, args.threads) if args.memory else speed_table(models, args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
