"""jit_compile vs eager (CPU and GPU), and fit vs a raw torch loop in bfloat16 (GPU).

Rows, each contender in a fresh process, timed after a warm-up that includes every
compilation (steady state; the compile time itself is printed separately):

* CPU, seed CNN (Conv32-Pool-Conv64-Pool-Dense64-Dense10), batch ``--batch``:
  a custom-loop step under ``distrib.function`` eager vs ``jit_compile=True``
  (inductor), and ``Model.fit`` with ``jit_compile`` False vs True.  On a CPU the
  compiled step may well lose: the CNN's time is in oneDNN convolutions either way.
* GPU (CUDA only, else skipped with the reason), batch ``--gpu-batch``: the same two
  pairs on ``cuda:0`` (goal: jit >= 1.3x eager on the seed CNN), and ``Model.fit``
  under ``mixed_bfloat16`` vs a hand-written torch loop with ``torch.autocast(bfloat16)``
  on one GPU (goal: fit >= 0.98x the raw loop).

    python bench/bench_jit.py [--steps 40] [--batch 64] [--gpu-batch 1024] [--repeats 2]
                              [--devices all|cpu|cuda] [--json out.json]

Not a test: it measures, it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Any

from bench_common import build, train_step

WARMUP = 8


def _data(n: int, device: str) -> tuple[Any, Any]:
    import torch

    g = torch.Generator().manual_seed(0)
    return (torch.randn(n, 1, 28, 28, generator=g).to(device),
            torch.randint(0, 10, (n,), generator=g).to(device))


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


# ------------------------------------------------------------------ contenders
def _transformer() -> Any:
    """A pre-norm transformer block (d_model 512, 8 heads, MLP 2048) and a 10-way head."""
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.TransformerEncoderLayer(512, 8, 2048, dropout=0.0,
                                                    batch_first=True, norm_first=True)
            self.head = nn.Linear(512, 10)

        def forward(self, x: Any) -> Any:
            return self.head(self.layer(x).mean(dim=1))

    return Block()


def loop(device: str, batch: int, steps: int, jit: bool, model: str = "cnn"
         ) -> dict[str, float]:
    """A custom-loop step under distrib.function on OneDeviceStrategy(device)."""
    import torch

    import distrib

    strategy = distrib.OneDeviceStrategy(device)
    torch.manual_seed(0)
    with strategy.scope():
        net = build("cnn") if model == "cnn" else _transformer()
        opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    if model == "cnn":
        x, y = _data(batch, strategy.extended.replica_group.device.type)
    else:  # batch sequences of 256 tokens of width 512
        g = torch.Generator().manual_seed(0)
        x = torch.randn(batch, 256, 512, generator=g).to(device)
        y = torch.randint(0, 10, (batch,), generator=g).to(device)

    step = distrib.function(jit_compile=jit)(train_step(net, opt, batch))

    start = time.perf_counter()
    for _ in range(WARMUP):
        strategy.run(step, args=(x, y))
    _sync(device)
    compile_s = time.perf_counter() - start
    graphs = step.experimental_get_tracing_count()
    start = time.perf_counter()
    for _ in range(steps):
        strategy.run(step, args=(x, y))
    _sync(device)
    return {"per_s": steps / (time.perf_counter() - start), "warmup_s": compile_s,
            "graphs_compiled_while_timed": step.experimental_get_tracing_count() - graphs}


def fit(device: str, batch: int, steps: int, jit: bool, policy: str = "float32"
        ) -> dict[str, float]:
    """Model.fit on in-memory arrays, OneDeviceStrategy(device); samples per second."""
    import torch

    import distrib

    distrib.mixed_precision.set_global_policy(policy)
    strategy = distrib.OneDeviceStrategy(device)
    torch.manual_seed(0)
    with strategy.scope():
        model = distrib.Model(build("cnn"))
        model.compile(optimizer=torch.optim.SGD(model.module.parameters(), lr=0.01,
                                                momentum=0.9),
                      loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True),
                      jit_compile=jit)
    x, y = _data(batch * steps, "cpu")
    start = time.perf_counter()
    model.fit(x[:batch * WARMUP], y[:batch * WARMUP], batch_size=batch, verbose=0,
              shuffle=False)
    compile_s = time.perf_counter() - start
    _sync(device)
    start = time.perf_counter()
    model.fit(x, y, batch_size=batch, verbose=0, shuffle=False)
    _sync(device)
    return {"per_s": batch * steps / (time.perf_counter() - start), "warmup_s": compile_s}


def raw(device: str, batch: int, steps: int, dtype: str = "bfloat16") -> dict[str, float]:
    """A hand-written torch loop: float32, or torch.autocast(bfloat16), or
    torch.autocast(float16) with a GradScaler; samples per second."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    net = build("cnn").to(device)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    x, y = _data(batch * steps, "cpu")
    kind = device.split(":")[0]
    scaler = torch.amp.GradScaler(kind) if dtype == "float16" else None

    def run(n: int) -> None:
        for s in range(n):
            xb = x[s * batch:(s + 1) * batch].to(device, non_blocking=True)
            yb = y[s * batch:(s + 1) * batch].to(device, non_blocking=True)
            with torch.autocast(kind, dtype=getattr(torch, dtype),
                                enabled=dtype != "float32"):
                loss = nn.functional.cross_entropy(net(xb).float(), yb)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                opt.step()
            opt.zero_grad(set_to_none=True)

    run(WARMUP)
    _sync(device)
    start = time.perf_counter()
    run(steps)
    _sync(device)
    return {"per_s": batch * steps / (time.perf_counter() - start), "warmup_s": 0.0}


def _worker(kind: str, device: str, batch: int, steps: int) -> dict[str, float]:
    if kind == "loop_eager":
        return loop(device, batch, steps, False)
    if kind == "loop_jit":
        return loop(device, batch, steps, True)
    if kind == "fit_eager":
        return fit(device, batch, steps, False)
    if kind == "fit_jit":
        return fit(device, batch, steps, True)
    if kind == "loop_eager_transformer":
        return loop(device, 64, steps, False, "transformer")
    if kind == "loop_jit_transformer":
        return loop(device, 64, steps, True, "transformer")
    if kind == "fit_bf16":
        return fit(device, batch, steps, False, "mixed_bfloat16")
    if kind == "fit_fp16":
        return fit(device, batch, steps, False, "mixed_float16")
    if kind == "raw_fp32":
        return raw(device, batch, steps, "float32")
    if kind == "raw_fp16":
        return raw(device, batch, steps, "float16")
    return raw(device, batch, steps, "bfloat16")


# ------------------------------------------------------------------------ main
def _run(kind: str, device: str, batch: int, steps: int) -> dict[str, float]:
    proc = subprocess.run([sys.executable, __file__, "--worker", kind, device, str(batch),
                           str(steps)], capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} on {device} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _best(kind: str, device: str, batch: int, steps: int, repeats: int) -> dict[str, float]:
    runs = [_run(kind, device, batch, steps) for _ in range(repeats)]
    return max(runs, key=lambda r: r["per_s"])


PAIRS = [  # (row, unit, contender, baseline)
    ("custom-loop step, jit vs eager", "steps/s", "loop_jit", "loop_eager"),
    ("fit, jit vs eager", "samples/s", "fit_jit", "fit_eager"),
]
GPU_ONLY = [
    ("transformer block step (batch 64 x 256 tokens), jit vs eager", "steps/s",
     "loop_jit_transformer", "loop_eager_transformer"),
    ("fit float32 vs raw torch loop float32", "samples/s", "fit_eager", "raw_fp32"),
    ("fit mixed_bfloat16 vs raw torch loop bf16", "samples/s", "fit_bf16", "raw_bf16"),
    ("fit mixed_float16 vs raw torch loop fp16 + GradScaler", "samples/s", "fit_fp16",
     "raw_fp16"),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--gpu-batch", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json", default=None)
    ap.add_argument("--devices", choices=("all", "cpu", "cuda"), default="all",
                    help="which rows to measure (default: the CPU's, and the GPU's where CUDA is)")
    ap.add_argument("--only", default="",
                    help="comma-separated words: measure only the rows whose name has one")
    ap.add_argument("--worker", nargs=4, default=None)
    args = ap.parse_args()
    if args.worker:
        kind, device, batch, steps = args.worker
        print(json.dumps(_worker(kind, device, int(batch), int(steps))))
        return
    import torch

    rows: list[dict[str, Any]] = []
    print("| device | row | batch | unit | contender | baseline | ratio | compile+warm-up s |")
    print("|---|---|---|---|---|---|---|---|")
    plans = [("cpu:0", args.batch, PAIRS)] if args.devices != "cuda" else []
    if torch.cuda.is_available() and args.devices != "cpu":
        plans.append(("cuda:0", args.gpu_batch, PAIRS + GPU_ONLY))
    for device, batch, pairs in plans:
        for row, unit, contender, baseline in pairs:
            if args.only and not any(w in row for w in args.only.split(",")):
                continue
            a = _best(contender, device, batch, args.steps, args.repeats)
            b = _best(baseline, device, batch, args.steps, args.repeats)
            rows.append({"device": device, "row": row, "batch": batch, "unit": unit,
                         "contender": a["per_s"], "baseline": b["per_s"],
                         "ratio": a["per_s"] / b["per_s"], "warmup_s": a["warmup_s"]})
            print(f"| {device} | {row} | {batch} | {unit} | {a['per_s']:.1f} | "
                  f"{b['per_s']:.1f} | {a['per_s'] / b['per_s']:.2f} | {a['warmup_s']:.1f} |",
                  flush=True)
    if not torch.cuda.is_available():
        print("GPU rows skipped: needs CUDA (no CUDA device on this machine)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
