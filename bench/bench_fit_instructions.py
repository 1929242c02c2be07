"""``fit``'s step against a raw loop's, counted in instructions (valgrind's callgrind).

Where the clock cannot resolve a few per cent (a shared or throttled machine), the
instructions a step executes still can: they do not depend on what else runs.  Each
contender runs twice under ``valgrind --tool=callgrind``, for ``short`` and for
``long`` timed steps after the same warm-up; the difference of the two totals over
``long - short`` is the work of one step, free of start-up, imports and the setup of
a ``fit`` call.  The MLP of ``bench_fit.py``, 1 replica, 1 thread, global batch 64.

Instructions are not time (cache misses and branches differ), so this complements the
clock, it does not replace it.  Under callgrind a run is about 50x slower: four runs
take 10 to 15 minutes on 2 cores.

``--cache`` runs cachegrind with its cache simulation instead and also prints the
simulated I1, D1 and last-level misses per step (the machine's caches as valgrind
detects them; no L2 is modelled).

Usage: ``python bench/bench_fit_instructions.py [--short 40] [--long 240] [--cache]``
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

WARMUP = 10
BATCH = 64


def worker(kind: str, steps: int) -> None:
    import numpy as np
    import torch
    from torch import nn

    torch.set_num_threads(1)
    rng = np.random.RandomState(0)
    n = BATCH * (steps + WARMUP)
    xa = rng.rand(n, 1, 28, 28).astype("float32")
    ya = rng.randint(0, 10, n).astype("int64")
    torch.manual_seed(0)

    def build() -> nn.Module:
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                             nn.ReLU(), nn.Linear(128, 10))
    if kind == "fit":
        import distrib
        from distrib.training import Model, losses

        with distrib.MirroredStrategy().scope():
            net = build()
            model = Model(net)
            model.compile(optimizer=torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9),
                          loss=losses.SparseCategoricalCrossentropy(from_logits=True))
        warm = WARMUP * BATCH
        model.fit(xa[:warm], ya[:warm], batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
        model.fit(xa[warm:], ya[warm:], batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
        return
    net = build()
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.from_numpy(xa), torch.from_numpy(ya)
    for i in range(steps + WARMUP):
        rows = slice(i * BATCH, (i + 1) * BATCH)
        loss = nn.functional.cross_entropy(net(x[rows]), y[rows])
        loss.backward()
        opt.step()
        opt.zero_grad()


#: What ``--cache`` reads from cachegrind's summary (instructions, then simulated misses).
EVENTS = {"instructions": r"I\s+refs:\s+([\d,]+)", "I1 misses": r"I1\s+misses:\s+([\d,]+)",
          "D1 misses": r"D1\s+misses:\s+([\d,]+)", "LL misses": r"LL misses:\s+([\d,]+)"}


def count(kind: str, steps: int, out: Path, cache: bool = False) -> dict[str, int]:
    """Events of one whole run: callgrind's ``I refs``, or with ``cache`` cachegrind's
    instructions and simulated cache misses."""
    env = {**os.environ, "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"}
    tool = (["--tool=cachegrind", "--cache-sim=yes", f"--cachegrind-out-file={out}"]
            if cache else ["--tool=callgrind", f"--callgrind-out-file={out}"])
    proc = subprocess.run(["valgrind", *tool, sys.executable, __file__, "--worker", kind,
                           "--steps", str(steps)],
                          env=env, capture_output=True, text=True, timeout=3600)
    found = {name: re.search(pattern, proc.stderr)
             for name, pattern in (EVENTS if cache else {"instructions": EVENTS[
                 "instructions"]}).items()}
    if proc.returncode != 0 or not all(found.values()):
        raise RuntimeError(f"{kind} {steps} steps failed under valgrind:\n{proc.stderr[-2000:]}")
    return {name: int(m.group(1).replace(",", "")) for name, m in found.items() if m}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--short", type=int, default=40)
    ap.add_argument("--long", type=int, default=240)
    ap.add_argument("--worker", choices=["raw", "fit"])
    ap.add_argument("--steps", type=int)
    ap.add_argument("--cache", action="store_true",
                    help="cachegrind with its cache simulation: misses per step too")
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.steps)
        return
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    runs = [(k, n) for k in ("raw", "fit") for n in (args.short, args.long)]
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(2) as pool:
        totals = dict(zip(runs, pool.map(
            lambda run: count(run[0], run[1], Path(tmp) / f"vg.{run[0]}.{run[1]}", args.cache),
            runs)))
    for event in totals[runs[0]]:
        per_step = {k: (totals[(k, args.long)][event] - totals[(k, args.short)][event])
                    / (args.long - args.short) for k in ("raw", "fit")}
        print(f"{event} per step: raw {per_step['raw'] / 1e3:.1f} K, fit "
              f"{per_step['fit'] / 1e3:.1f} K, raw / fit {per_step['raw'] / per_step['fit']:.4f}")


if __name__ == "__main__":
    main()
