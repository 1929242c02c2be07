"""Custom training loop: distrib vs the same loop written with raw torch DDP, in one run.

For the seeds' MLP (784-256-128-10) and CNN (Conv32-Pool-Conv64-Pool-Dense64-Dense10),
with 1 and 2 replicas, both contenders train the same model on the same synthetic data
with the same per-replica batch, SGD with momentum, and do the same data work: every
step indexes the next batch of one pre-made tensor.  Each reports the median wall time
per step (warm-up excluded) and its process CPU time per step.

The baseline is what a careful torch user writes: a plain loop for 1 replica (no DDP),
and ``DistributedDataParallel`` over gloo bound to the loopback interface
(``GLOO_SOCKET_IFNAME=lo``) for 2.  Both contenders get the same CPU threads per
process (``--threads``, default 1, through ``OMP_NUM_THREADS`` and
``torch.set_num_threads``) and the same placement: replica ``r`` of either contender
pins all its threads (gloo's too, once its process group exists) to CPU ``r``
(``--no-pin`` leaves placement to the kernel).

The loss (``--loss``): distrib's replica step is TensorFlow's custom-loop idiom, the
per-example loss (``reduction="none"``) averaged over the global batch by
``distrib.compute_average_loss`` (its gradients are summed over the replicas).  With
``--loss per-example`` (the default) the raw loop computes the same per-example loss and
divides its sum by its own batch (DDP averages over the replicas): both sides run the same
torch operations, and the ratio is distrib's own cost.  With ``--loss mean`` the raw loop
uses ``cross_entropy``'s fused mean instead, so the ratio also holds the per-example
form's extra operations (a sum, a division and their backward: about 15 µs per step on
this MLP, measured in one process).

Method: ``--pairs`` pairs of runs, each run in fresh processes; within a pair the two
contenders run back to back, the first alternating from pair to pair, so that both see
the same machine.  Speed = raw time / distrib time per pair (higher is better; target
>= 0.98); the table shows the median over the pairs and the lowest and highest pair.

    python bench/bench_custom_loop.py [--pairs 7] [--models mlp,cnn] [--replicas 1,2]
                                      [--loss per-example|mean] [--steps N] [--batch 64]
                                      [--threads 1] [--json out.json]

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

import torch
from bench_common import WARMUP, build, mirrored_replica, pin
from torch import nn

from distrib.cluster.ports import free_ports

STEPS = {"mlp": 400, "cnn": 100}  # default timed steps: about half a second or more


def _data(steps: int, batch: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(rank)
    return (torch.randn(steps, batch, 1, 28, 28, generator=g),
            torch.randint(0, 10, (steps, batch), generator=g))


def _timed(step: Any, xs: torch.Tensor, ys: torch.Tensor) -> dict[str, float]:
    """Run ``step(x, y)`` over every batch; median wall seconds and mean CPU seconds per
    step after the warm-up."""
    times = []
    for i in range(len(xs)):
        if i == WARMUP:
            cpu0 = time.process_time()
        t0 = time.perf_counter()
        step(xs[i], ys[i])
        times.append(time.perf_counter() - t0)
    cpu = (time.process_time() - cpu0) / (len(xs) - WARMUP)
    return {"median": statistics.median(times[WARMUP:]), "cpu": cpu}


def run_distrib(model: str, replicas: int, steps: int, batch: int) -> dict[str, float]:
    import distrib

    strategy, rank = mirrored_replica(replicas)
    with strategy.scope():
        net = build(model)
        opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    xs, ys = _data(steps + WARMUP, batch, rank)
    global_batch = batch * strategy.num_replicas_in_sync

    def replica_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        per_example = nn.functional.cross_entropy(net(x), y, reduction="none")
        loss = distrib.compute_average_loss(per_example, global_batch_size=global_batch)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    result = _timed(lambda x, y: strategy.run(replica_step, args=(x, y)), xs, ys)
    return result if rank == 0 else {}


def run_ddp(model: str, replicas: int, steps: int, batch: int, loss: str = "per-example"
            ) -> dict[str, float]:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank = int(os.environ.get("RANK", "0"))
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    if replicas > 1:
        dist.init_process_group("gloo", rank=rank, world_size=replicas)
    pin(rank)
    torch.manual_seed(0)
    net = DDP(build(model)) if replicas > 1 else build(model)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    xs, ys = _data(steps + WARMUP, batch, rank)
    per_example = loss == "per-example"

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        if per_example:  # distrib's operations: per-example losses, summed, divided
            value = nn.functional.cross_entropy(net(x), y, reduction="none").sum() / batch
        else:
            value = nn.functional.cross_entropy(net(x), y)
        value.backward()
        opt.step()
        opt.zero_grad()

    result = _timed(step, xs, ys)
    if replicas > 1:
        dist.destroy_process_group()
    return result if rank == 0 else {}


def measure(kind: str, model: str, replicas: int, steps: int, batch: int, threads: int,
            pin: bool, loss: str = "per-example") -> dict[str, float]:
    """Rank 0's median seconds per step and CPU seconds per step (fresh processes)."""
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("DISTRIB_", "TF_CONFIG", "RANK", "WORLD_SIZE", "MASTER_"))}
    base.update(OMP_NUM_THREADS=str(threads), GLOO_SOCKET_IFNAME="lo",
                BENCH_PIN="1" if pin else "0")
    cmd = [sys.executable, __file__, "--worker", kind, "--model", model,
           "--replicas", str(replicas), "--steps", str(steps), "--batch", str(batch),
           "--loss", loss]
    if kind == "distrib" or replicas == 1:
        out = subprocess.run(cmd, env=base, capture_output=True, text=True, timeout=600)
        texts = [out.stdout, out.stderr]
    else:
        port = str(free_ports(1)[0])
        procs = [subprocess.Popen(cmd, env={**base, "RANK": str(r), "WORLD_SIZE": str(replicas),
                                            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port},
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for r in range(replicas)]
        texts = [t for p in procs for t in p.communicate(timeout=600)]
    for text in texts:
        for line in text.splitlines():
            if line.startswith("RESULT "):
                return dict(json.loads(line[7:]))
    raise RuntimeError(f"{kind} produced no result:\n" + "\n".join(t[-2000:] for t in texts))


def compare(model: str, replicas: int, args: argparse.Namespace) -> dict[str, Any]:
    """``args.pairs`` interleaved pairs of runs; the row of the table."""
    steps = args.steps or STEPS[model]
    ours, raw = [], []
    for pair in range(args.pairs):
        order = ("distrib", "ddp") if pair % 2 == 0 else ("ddp", "distrib")
        got = {kind: measure(kind, model, replicas, steps, args.batch, args.threads, args.pin,
                             args.loss)
               for kind in order}
        ours.append(got["distrib"])
        raw.append(got["ddp"])
    speeds = [b["median"] / a["median"] for a, b in zip(ours, raw)]
    cpu_speeds = [b["cpu"] / a["cpu"] for a, b in zip(ours, raw)]
    return {"model": model, "replicas": replicas, "steps": steps, "pairs": args.pairs,
            "loss": args.loss,
            "distrib_ms": statistics.median(a["median"] for a in ours) * 1e3,
            "raw_ms": statistics.median(b["median"] for b in raw) * 1e3,
            "speed": statistics.median(speeds), "speed_min": min(speeds),
            "speed_max": max(speeds), "cpu_speed": statistics.median(cpu_speeds)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", choices=["distrib", "ddp"], help=argparse.SUPPRESS)
    ap.add_argument("--model", default="mlp", help=argparse.SUPPRESS)
    ap.add_argument("--replicas", default="1,2", help="replica counts to run, e.g. 1,2")
    ap.add_argument("--models", default="mlp,cnn", help="models to run, e.g. mlp,cnn")
    ap.add_argument("--steps", type=int, default=0,
                    help="timed steps per run (default: 400 for the MLP, 100 for the CNN)")
    ap.add_argument("--batch", type=int, default=64, help="per-replica batch size")
    ap.add_argument("--loss", choices=["per-example", "mean"], default="per-example",
                    help="the raw loop's loss: distrib's per-example form (default) or the "
                         "fused mean")
    ap.add_argument("--pairs", type=int, default=7, help="interleaved pairs of runs")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads per process, both sides")
    ap.add_argument("--no-pin", dest="pin", action="store_false",
                    help="do not pin replica r of either contender to CPU r")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.worker:
        if args.worker == "distrib":
            result = run_distrib(args.model, int(args.replicas), args.steps, args.batch)
        else:
            result = run_ddp(args.model, int(args.replicas), args.steps, args.batch, args.loss)
        if result:
            print("RESULT " + json.dumps(result), flush=True)
        return
    rows = []
    print(f"{'model':6} {'replicas':>8} {'distrib ms':>11} {'raw ms':>8} {'speed':>6} "
          f"{'pair range':>12} {'cpu speed':>9}", flush=True)
    for model in args.models.split(","):
        for replicas in (int(r) for r in args.replicas.split(",")):
            row = compare(model, replicas, args)
            rows.append(row)
            print(f"{model:6} {replicas:8d} {row['distrib_ms']:11.2f} {row['raw_ms']:8.2f} "
                  f"{row['speed']:6.3f} {row['speed_min']:5.2f}-{row['speed_max']:<6.2f} "
                  f"{row['cpu_speed']:9.3f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
