"""ParameterServerStrategy: distrib vs TensorFlow 2.21, side by side on this machine.

For the seeds' MLP (784-128-10) on the bundled digits (28x28, batch 64, SGD lr 0.01,
cross-entropy on logits), each contender runs a local TF_CONFIG cluster of one chief,
1 or 2 workers and one ps, every process with one compute thread (``OMP_NUM_THREADS=1``,
TF's intra-op pool 1; TF's inter-op pool keeps its default, one thread per core, because
with one thread TF's parameter-server runtime deadlocks), and trains with Keras-style ``fit`` under its
ParameterServerStrategy for two epochs of ``--steps`` steps; the second epoch is timed
(from ``on_epoch_begin`` to ``on_epoch_end``, which waits for every step), so the
per-fit set-up (sending the model and dataset to the workers, TF's tracing) is left
out for both.  The driver also reads every task's CPU time (``/proc/<pid>/stat``) at the
timed epoch's boundaries and shows CPU milliseconds per step in each process: on 2
cores shared by 3 or 4 processes, CPU per step bounds the throughput more than latency.  Then the cost of one closure round trip: ``coordinator.schedule`` of an
empty function followed by ``fetch()``, median over ``--roundtrips`` calls.

TensorFlow runs from the scratch environment ``/work/tfvenv`` (``--tf-python``), with
tf-keras (``TF_USE_LEGACY_KERAS=1``); its worker and ps tasks run
``tf.distribute.Server(...).join()``.  Runs are interleaved ``--repeats`` times and the
fastest of each is shown.  Target: distrib >= 2x TensorFlow in samples/s.

    python bench/bench_parameter_server.py [--steps 200] [--repeats 2] [--json out.json]

Not a test: it measures, it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

BATCH = 64
TF_PYTHON = "/work/tfvenv/bin/python"


# ------------------------------------------------------------------ the tasks
def _data(path: str) -> tuple[np.ndarray, np.ndarray]:
    with np.load(path) as f:
        return f["x"], f["y"]


def _report(**values: Any) -> None:
    print("RESULT " + json.dumps(values), flush=True)


def _mark(marks: list[float], what: str, epoch: int) -> None:
    """Time an epoch boundary; the driver reads every task's CPU time at the timed epoch's."""
    marks.append(time.perf_counter())
    if epoch == 1:
        print(f"MARK {what}", flush=True)
        sys.stdin.readline()  # the driver has read the CPU times


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _empty() -> None:
    return None


def task_distrib(args: argparse.Namespace) -> None:
    import torch
    from torch import nn

    import distrib
    from distrib.coordinator import ClusterCoordinator

    strategy = distrib.ParameterServerStrategy()  # workers and ps serve here, then exit
    x, y = _data(args.data)
    x = x.transpose(0, 3, 1, 2).copy()  # channels first, as torch modules take images
    ds = distrib.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x)).batch(BATCH).repeat()
    torch.manual_seed(0)
    with strategy.scope():
        model = distrib.Model(nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(),
                                            nn.Linear(128, 10)))
        model.compile(optimizer=torch.optim.SGD(model.module.parameters(), lr=0.01),
                      loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True))
    marks: list[float] = []
    timer = distrib.callbacks.LambdaCallback(
        on_epoch_begin=lambda e, logs: _mark(marks, "begin", e),
        on_epoch_end=lambda e, logs: _mark(marks, "end", e))
    model.fit(ds, epochs=2, steps_per_epoch=args.steps, verbose=0, callbacks=[timer])
    coordinator = ClusterCoordinator(strategy)
    times = []
    for i in range(args.roundtrips + 10):
        t0 = time.perf_counter()
        coordinator.schedule(_empty).fetch()
        if i >= 10:
            times.append(time.perf_counter() - t0)
    _report(seconds=marks[3] - marks[2], roundtrip_us=float(np.median(times)) * 1e6)


def task_tensorflow(args: argparse.Namespace) -> None:
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tensorflow as tf  # only in the TensorFlow environment

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type in ("worker", "ps"):
        config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=1,
                                          inter_op_parallelism_threads=args.tf_inter_op)
        server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                      task_index=resolver.task_id, protocol="grpc",
                                      config=config, start=True)
        server.join()
        return
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(args.tf_inter_op)
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
    x, y = _data(args.data)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x)).batch(BATCH).repeat()
    layers = tf.keras.layers
    with strategy.scope():
        model = tf.keras.Sequential([layers.Flatten(input_shape=(28, 28, 1)),
                                     layers.Dense(128, activation="relu"), layers.Dense(10)])
        model.compile(optimizer=tf.keras.optimizers.SGD(0.01),
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    marks: list[float] = []
    timer = tf.keras.callbacks.LambdaCallback(
        on_epoch_begin=lambda e, logs: _mark(marks, "begin", e),
        on_epoch_end=lambda e, logs: _mark(marks, "end", e))
    model.fit(ds, epochs=2, steps_per_epoch=args.steps, verbose=0, callbacks=[timer])
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)

    @tf.function
    def empty() -> Any:
        return tf.constant(0)

    times = []
    for i in range(args.roundtrips + 10):
        t0 = time.perf_counter()
        coordinator.schedule(empty).fetch()
        if i >= 10:
            times.append(time.perf_counter() - t0)
    _report(seconds=marks[3] - marks[2], roundtrip_us=float(np.median(times)) * 1e6)
    os._exit(0)  # the TF workers and ps serve forever; the driver stops them


# ----------------------------------------------------------------- the driver
def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def run_cluster(kind: str, workers: int, args: argparse.Namespace) -> dict[str, float]:
    """One contender's cluster; returns the chief's RESULT."""
    ports = iter(_free_ports(workers + 2))
    cluster = {"chief": [f"127.0.0.1:{next(ports)}"],
               "worker": [f"127.0.0.1:{next(ports)}" for _ in range(workers)],
               "ps": [f"127.0.0.1:{next(ports)}"]}
    python = args.tf_python if kind == "tensorflow" else sys.executable
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TF_CONFIG", "DISTRIB_"))}
    base.update(OMP_NUM_THREADS="1", TF_CPP_MIN_LOG_LEVEL="2",
                DISTRIB_CLUSTER_SECRET=os.urandom(16).hex())
    procs = []
    for job, addresses in cluster.items():
        for i in range(len(addresses)):
            env = {**base, "TF_CONFIG": json.dumps({"cluster": cluster,
                                                    "task": {"type": job, "index": i}})}
            cmd = [python, __file__, "--task", kind, "--data", args.data, "--steps",
                   str(args.steps), "--roundtrips", str(args.roundtrips),
                   "--tf-inter-op", str(args.tf_inter_op)]
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True,
                                          stdin=subprocess.PIPE if job == "chief" else None))
    chief = procs[0]
    names = [f"{job}:{i}" for job, addresses in cluster.items() for i in range(len(addresses))]
    cpu: dict[str, float] = {}
    try:
        assert chief.stdout is not None and chief.stdin is not None
        for line in chief.stdout:  # MARK begin / MARK end of the timed epoch
            if line.startswith("MARK "):
                sign = -1.0 if line.strip() == "MARK begin" else 1.0
                for name, p in zip(names, procs):
                    cpu[name] = cpu.get(name, 0.0) + sign * _cpu_seconds(p.pid)
                chief.stdin.write("\n")
                chief.stdin.flush()
                if sign > 0:
                    break
        out, err = chief.communicate(timeout=1200)
    finally:
        for p in procs[1:]:
            if kind == "tensorflow" or p.poll() is None:
                try:
                    p.wait(timeout=30 if kind == "distrib" else 0.1)
                except subprocess.TimeoutExpired:
                    p.kill()
            p.communicate()
    for line in out.splitlines():
        if line.startswith("RESULT "):
            result = dict(json.loads(line[7:]))
            result["cpu_ms_per_step"] = {k: v * 1e3 / args.steps for k, v in cpu.items()}
            return result
    raise RuntimeError(f"{kind} with {workers} workers produced no result:\n{err[-3000:]}")


def _write_data(path: Path) -> None:
    from distrib.datasets import digits

    (x, y), _ = digits.load_data()  # channels last, float32 in [0, 1]
    np.savez(path, x=x, y=y)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", choices=["distrib", "tensorflow"], help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, default=200, help="timed steps (one epoch)")
    ap.add_argument("--roundtrips", type=int, default=200, help="empty closures timed")
    ap.add_argument("--repeats", type=int, default=2, help="runs of each contender")
    ap.add_argument("--tf-python", default=TF_PYTHON, help="python of a TF 2.21 environment")
    ap.add_argument("--tf-inter-op", type=int, default=0,
                    help="TF's inter-op threads in every task (0: TF's default, one per "
                         "core; with 1, TF's parameter-server runtime deadlocks)")
    ap.add_argument("--json", help="write the rows to this file")
    args = ap.parse_args()
    if args.task:
        {"distrib": task_distrib, "tensorflow": task_tensorflow}[args.task](args)
        return
    with_tf = Path(args.tf_python).exists()
    if not with_tf:
        print(f"{args.tf_python} not found: TensorFlow is skipped", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        args.data = str(Path(tmp) / "digits.npz")
        _write_data(Path(args.data))
        print(f"{'workers':>7} {'distrib/s':>10} {'TF/s':>8} {'ratio':>6} "
              f"{'distrib rt us':>14} {'TF rt us':>9}", flush=True)
        for workers in (1, 2):
            runs: dict[str, list[dict[str, float]]] = {"distrib": [], "tensorflow": []}
            for _ in range(args.repeats):
                for kind in ("distrib", "tensorflow") if with_tf else ("distrib",):
                    runs[kind].append(run_cluster(kind, workers, args))
            samples = args.steps * BATCH
            best = {k: min(v, key=lambda r: r["seconds"]) for k, v in runs.items() if v}
            ours = max(samples / r["seconds"] for r in runs["distrib"])
            ours_rt = min(r["roundtrip_us"] for r in runs["distrib"])
            row: dict[str, Any] = {"workers": workers, "ps": 1, "steps": args.steps,
                                   "batch": BATCH, "distrib_samples_per_s": ours,
                                   "distrib_roundtrip_us": ours_rt}
            if runs["tensorflow"]:
                tf_rate = max(samples / r["seconds"] for r in runs["tensorflow"])
                row.update(tf_samples_per_s=tf_rate, ratio=ours / tf_rate,
                           tf_roundtrip_us=min(r["roundtrip_us"] for r in runs["tensorflow"]))
            row["cpu_ms_per_step"] = {k: r["cpu_ms_per_step"] for k, r in best.items()}
            rows.append(row)
            print(f"{workers:7d} {ours:10.0f} {row.get('tf_samples_per_s', 0):8.0f} "
                  f"{row.get('ratio', 0):6.2f} {ours_rt:14.0f} "
                  f"{row.get('tf_roundtrip_us', 0):9.0f}", flush=True)
            for kind, per_task in row["cpu_ms_per_step"].items():
                print(f"        CPU ms/step, {kind}: " + ", ".join(
                    f"{k} {v:.2f}" for k, v in per_task.items()) +
                    f" (sum {sum(per_task.values()):.2f})", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
