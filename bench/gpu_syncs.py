"""Where distrib makes the host wait for the GPU: synchronisations per step, by place.

Runs ``Model.fit`` (float32, mixed_bfloat16, mixed_float16, jit_compile),
``Model.evaluate`` and a custom loop over a distributed dataset on ``cuda:0`` under
``torch.cuda.set_sync_debug_mode("warn")``, each twice: over ``--short`` steps and over
``--long`` steps. torch warns at every synchronising CUDA call; a place whose count
grows with the steps synchronises at every step (Keras' rule allows reads only at
``steps_per_execution`` boundaries, log intervals and epoch ends). Prints one JSON
object: per workload, the places (innermost distrib frame, and the caller's) with their
counts in the short and the long run, and the per-step rate.

    python bench/gpu_syncs.py [--short 10] [--long 50] [--batch 1024]

Needs CUDA (prints why not otherwise). Not a test: it reports, it asserts nothing.
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import os
import sys
import traceback
import warnings
from collections.abc import Callable
from typing import Any

import torch
from bench_common import build, train_step

import distrib


def _place(stack: list[traceback.FrameSummary]) -> str:
    """The innermost frame in distrib (and the one above it), else the innermost frame."""
    ours = [f for f in stack if "distrib" in f.filename and "bench" not in f.filename]
    if not ours:
        f = stack[-1]
        return f"{os.path.basename(f.filename)}:{f.lineno}"
    inner = ours[-1]
    outer = ours[-2] if len(ours) > 1 else None
    where = f"{inner.filename.split('distrib/')[-1]}:{inner.lineno} {inner.name}"
    if outer is not None:
        where += f" <- {outer.filename.split('distrib/')[-1]}:{outer.lineno} {outer.name}"
    return where


def _count(run: Callable[[], None]) -> collections.Counter[str]:
    places: collections.Counter[str] = collections.Counter()
    shown = warnings.showwarning

    def record(message: Any, category: Any, filename: str, lineno: int, *a: Any) -> None:
        if "synchroniz" in str(message):
            places[_place(traceback.extract_stack()[:-2])] += 1
        else:
            shown(message, category, filename, lineno, *a)

    torch.cuda.synchronize()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = record  # type: ignore[assignment]
            torch.cuda.set_sync_debug_mode("warn")
            try:
                run()
            finally:
                torch.cuda.set_sync_debug_mode(0)
    finally:
        warnings.showwarning = shown
    torch.cuda.synchronize()
    return places


def _model(policy: str, jit: bool) -> distrib.Model:
    distrib.mixed_precision.set_global_policy(policy)
    torch.manual_seed(0)
    with STRATEGY.scope():
        model = distrib.Model(build("cnn"))
        model.compile(optimizer=torch.optim.SGD(model.module.parameters(), lr=0.01,
                                                momentum=0.9),
                      loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"], jit_compile=jit)
    return model


def _data(rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(rows, 1, 28, 28, generator=g), torch.randint(0, 10, (rows,), generator=g)


def fit(policy: str, jit: bool, batch: int) -> Callable[[int], None]:
    model = _model(policy, jit)
    x, y = _data(batch * 4)
    model.fit(x, y, batch_size=batch, verbose=0)  # warm-up (compilation included)
    distrib.mixed_precision.set_global_policy("float32")

    def run(steps: int) -> None:
        xs, ys = _data(batch * steps)
        model.fit(xs, ys, batch_size=batch, verbose=0, shuffle=False)
    return run


def evaluate(batch: int) -> Callable[[int], None]:
    model = _model("float32", False)
    x, y = _data(batch * 4)
    model.evaluate(x, y, batch_size=batch, verbose=0)

    def run(steps: int) -> None:
        xs, ys = _data(batch * steps)
        model.evaluate(xs, ys, batch_size=batch, verbose=0)
    return run


def custom_loop(batch: int) -> Callable[[int], None]:
    torch.manual_seed(0)
    with STRATEGY.scope():
        net = build("cnn")
        opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)

    step = train_step(net, opt, batch)

    def run(steps: int) -> None:
        xs, ys = _data(batch * steps)
        dist = STRATEGY.experimental_distribute_dataset(
            distrib.data.Dataset.from_tensor_slices((xs, ys)).batch(batch))
        total = None
        for xb, yb in dist:
            loss = STRATEGY.reduce("sum", STRATEGY.run(step, args=(xb, yb)), axis=None)
            total = loss if total is None else total + loss
        float(total)  # type: ignore[arg-type]  # one read at the end, as a user would
    run(2)
    return run


def main() -> None:
    global STRATEGY
    ap = argparse.ArgumentParser()
    ap.add_argument("--short", type=int, default=10)
    ap.add_argument("--long", type=int, default=50)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--only", default="", help="comma-separated workload names")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print(json.dumps({"skipped": "needs CUDA (no CUDA device on this machine)"}))
        return
    STRATEGY = distrib.OneDeviceStrategy("cuda:0")
    workloads: dict[str, Callable[[], Callable[[int], None]]] = {
        "fit_float32": lambda: fit("float32", False, args.batch),
        "fit_mixed_bfloat16": lambda: fit("mixed_bfloat16", False, args.batch),
        "fit_mixed_float16": lambda: fit("mixed_float16", False, args.batch),
        "fit_jit": lambda: fit("float32", True, args.batch),
        "evaluate": lambda: evaluate(args.batch),
        "custom_loop": lambda: custom_loop(args.batch),
    }
    only = [w for w in args.only.split(",") if w]
    report: dict[str, Any] = {"torch": torch.__version__,
                              "device": torch.cuda.get_device_name(0)}
    for name, make in workloads.items():
        if only and name not in only:
            continue
        try:
            run = make()
            short = _count(functools.partial(run, args.short))
            long = _count(functools.partial(run, args.long))
        except Exception as exc:  # report it and go on with the next workload
            report[name] = {"error": repr(exc)[:2000]}
            print(f"{name}: {exc!r}", file=sys.stderr, flush=True)
            continue
        span = args.long - args.short
        report[name] = {
            place: {"short": short.get(place, 0), "long": long.get(place, 0),
                    "per_step": round((long.get(place, 0) - short.get(place, 0)) / span, 3)}
            for place in sorted(set(short) | set(long))}
        print(name, json.dumps(report[name], indent=1), file=sys.stderr, flush=True)
    print(json.dumps(report))


STRATEGY: Any = None

if __name__ == "__main__":
    main()
