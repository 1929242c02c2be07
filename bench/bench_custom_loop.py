"""Custom training loop: distrib vs the same loop written with raw torch DDP, in one run.

For the seeds' MLP (784-256-128-10) and CNN (Conv32-Pool-Conv64-Pool-Dense64-Dense10),
with 1 and 2 replicas, both contenders train the same model on the same synthetic data
with the same per-replica batch; each reports the median time per step (warm-up
excluded).  The speed ratio raw time / distrib time is printed (higher is better;
target >= 0.98).

The baseline is what a careful torch user writes: a plain loop for 1 replica (no DDP),
and ``DistributedDataParallel`` over gloo bound to the loopback interface
(``GLOO_SOCKET_IFNAME=lo``) for 2.  Both contenders get the same CPU threads per
process (``--threads``, default 1, through ``OMP_NUM_THREADS`` and
``torch.set_num_threads``).

    python bench/bench_custom_loop.py [--steps 60] [--batch 64] [--threads 1] [--json out.json]

Not a test: it measures, it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

import torch
from torch import nn

WARMUP = 10


def mlp() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                         nn.ReLU(), nn.Linear(128, 10))


def cnn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(64 * 5 * 5, 64), nn.ReLU(), nn.Linear(64, 10))


MODELS = {"mlp": mlp, "cnn": cnn}


def _data(steps: int, batch: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(rank)
    return (torch.randn(steps, batch, 1, 28, 28, generator=g),
            torch.randint(0, 10, (steps, batch), generator=g))


def run_distrib(model: str, replicas: int, steps: int, batch: int) -> list[float]:
    import distrib

    strategy = (distrib.MirroredStrategy(devices=[f"cpu:{i}" for i in range(replicas)])
                if replicas > 1 else distrib.MirroredStrategy())
    rank = strategy.extended.replica_group.replica_id
    torch.manual_seed(0)
    with strategy.scope():
        net = MODELS[model]()
        opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    xs, ys = _data(steps, batch, rank)
    global_batch = batch * strategy.num_replicas_in_sync

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        per_example = nn.functional.cross_entropy(net(x), y, reduction="none")
        loss = distrib.compute_average_loss(per_example, global_batch_size=global_batch)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    times = []
    for i in range(steps):
        t0 = time.perf_counter()
        strategy.run(step, args=(xs[i], ys[i]))
        times.append(time.perf_counter() - t0)
    return times


def run_ddp(model: str, replicas: int, steps: int, batch: int) -> list[float]:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank = int(os.environ.get("RANK", "0"))
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    if replicas > 1:
        dist.init_process_group("gloo", rank=rank, world_size=replicas)
    torch.manual_seed(0)
    net = DDP(MODELS[model]()) if replicas > 1 else MODELS[model]()
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    xs, ys = _data(steps, batch, rank)
    times = []
    for i in range(steps):
        t0 = time.perf_counter()
        loss = nn.functional.cross_entropy(net(xs[i]), ys[i])
        loss.backward()
        opt.step()
        opt.zero_grad()
        times.append(time.perf_counter() - t0)
    if replicas > 1:
        dist.destroy_process_group()
    return times


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker_cmd(kind: str, model: str, replicas: int, steps: int, batch: int) -> list[str]:
    return [sys.executable, __file__, "--worker", kind, "--model", model,
            "--replicas", str(replicas), "--steps", str(steps), "--batch", str(batch)]


def measure(kind: str, model: str, replicas: int, steps: int, batch: int, threads: int
            ) -> float:
    """Median seconds per step of rank 0 (runs the contender in fresh processes)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DISTRIB_", "TF_CONFIG"))}
    base.update(OMP_NUM_THREADS=str(threads), GLOO_SOCKET_IFNAME="lo")
    cmd = _worker_cmd(kind, model, replicas, steps, batch)
    if kind == "distrib" or replicas == 1:
        out = subprocess.run(cmd, env=base, capture_output=True, text=True, check=True)
        lines = [out.stdout]
    else:
        port = str(_free_port())
        procs = [subprocess.Popen(cmd, env={**base, "RANK": str(r), "WORLD_SIZE": str(replicas),
                                            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port},
                                  stdout=subprocess.PIPE, text=True) for r in range(replicas)]
        lines = [p.communicate()[0] for p in procs]
    for text in lines:
        for line in text.splitlines():
            if line.startswith("RESULT "):
                return float(json.loads(line[7:])["median"])
    raise RuntimeError(f"{kind} produced no result")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--worker", choices=["distrib", "ddp"])
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="CPU threads per process, both sides")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.worker:
        fn = run_distrib if args.worker == "distrib" else run_ddp
        times = fn(args.model, args.replicas, args.steps, args.batch)
        if int(os.environ.get("RANK", os.environ.get("DISTRIB_LOCAL_RANK", "0"))) == 0:
            print("RESULT " + json.dumps({"median": statistics.median(times[WARMUP:])}))
        return
    rows = []
    print(f"{'model':6} {'replicas':>8} {'distrib ms':>11} {'raw ms':>11} {'speed':>7}")
    for model in ("mlp", "cnn"):
        for replicas in (1, 2):
            ours, theirs = [], []
            for _ in range(args.repeats):  # interleave to share machine noise
                ours.append(measure("distrib", model, replicas, args.steps, args.batch,
                                    args.threads))
                theirs.append(measure("ddp", model, replicas, args.steps, args.batch,
                                      args.threads))
            a, b = statistics.median(ours), statistics.median(theirs)
            rows.append({"model": model, "replicas": replicas, "distrib_ms": a * 1e3,
                         "raw_ms": b * 1e3, "speed_ratio": b / a})
            print(f"{model:6} {replicas:8d} {a * 1e3:11.2f} {b * 1e3:11.2f} {b / a:7.3f}",
                  flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
