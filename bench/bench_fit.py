"""Keras-style ``fit``: distrib vs a hand-written raw DDP loop (and TensorFlow on request).

For the seeds' MLP (784-256-128-10) and CNN (Conv32-Pool-Conv64-Pool-Dense64-Dense10),
with 1 and 2 replicas, both contenders train the same model on the same synthetic
data (28x28x1 images, 10 classes) with the same global batch for the same number of
steps, SGD with momentum, cross-entropy on logits:

* distrib: ``distrib.Model.fit(x, y, batch_size=G)`` under ``MirroredStrategy``
  (``devices=["cpu:0", "cpu:1"]`` for 2 replicas), arrays in memory, no metrics
  beyond the loss, ``verbose=0``;
* raw: a loop over the same tensors, each process slicing its rows of every global
  batch: a plain loop for 1 replica, ``DistributedDataParallel`` over gloo bound to the
  loopback interface (``GLOO_SOCKET_IFNAME=lo``) for 2.

Every contender, TensorFlow included, gets the same CPU threads per process
(``--threads``, default 1: ``OMP_NUM_THREADS``, ``torch.set_num_threads``, and TF's
intra- and inter-op thread pools), so that no side oversubscribes the cores, and the same
placement: replica ``r`` of every contender pins all its threads (gloo's too, once its
process group exists) to CPU ``r`` (``--no-pin`` leaves placement to the kernel).

Each run is one ``fit`` (or loop) of ``--steps`` steps after a warm-up, in fresh
processes, timed on rank 0 (wall and process CPU time).  Method: ``--pairs`` pairs of
runs; within a pair distrib and raw run back to back, the first alternating from pair to
pair, so that both see the same machine.  Ratio = distrib throughput / raw throughput
per pair (target >= 0.98); the table shows the median over the pairs, the lowest and
highest pair, and the median samples/s of each contender.

``--side-by-side`` (1-replica rows only): within a pair, distrib and raw run at the same
time, one on each CPU (swapped from pair to pair), and start their timed steps together
once both are warm.  On a machine whose speed drifts from one second to the next (a
shared virtual machine), both contenders of a pair then see the same drift, where runs
one after the other see different moments of it.  ``--tensorflow`` also runs
TensorFlow 2.21 ``fit`` (tf-keras, ``MultiWorkerMirroredStrategy`` with 2 workers on
localhost, ``TF_USE_LEGACY_KERAS=1``) ``--tf-runs`` times at 2 replicas on the same
models and data, with the Python of ``--tf-python`` (default: a separate environment
``.tfvenv`` it creates on first use with ``tensorflow-cpu==2.21.0 tf-keras==2.21.0``),
and prints distrib / TF (medians).

    python bench/bench_fit.py [--pairs 7] [--models mlp,cnn] [--replicas 1,2] [--steps N]
                              [--batch 64] [--threads 1] [--side-by-side] [--tensorflow]
                              [--tf-runs 3]
                              [--tf-python PATH] [--json out.json]

Not a test: it measures, it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_common import WARMUP, build, images, mirrored_replica, pin, raw_steps

STEPS = {"mlp": 400, "cnn": 100}  # default timed steps: about half a second or more
ROOT = Path(__file__).resolve().parents[1]
TF_VENV = ROOT / ".tfvenv"
TF_PACKAGES = ["tensorflow-cpu==2.21.0", "tf-keras==2.21.0"]


# ----------------------------------------------------------------- contenders
def _start_together() -> None:
    """Side by side (``BENCH_SYNC``): say this contender is warm, wait for the other one."""
    folder = os.environ.get("BENCH_SYNC")
    if not folder:
        return
    Path(folder, f"ready-{os.getpid()}").touch()
    deadline = time.monotonic() + 600
    while not Path(folder, "go").exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the other contender never became ready ({folder})")
        time.sleep(0.001)


Timing = tuple[int, float, float]  # rank, wall seconds, process CPU seconds


def run_distrib(model: str, replicas: int, steps: int, batch: int) -> Timing:
    import torch

    from distrib.training import Model, losses

    strategy, rank = mirrored_replica(replicas)
    with strategy.scope():
        net = build(model)
        fit_model = Model(net)
        fit_model.compile(optimizer=torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9),
                          loss=losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = images(steps, batch)
    warm = WARMUP * batch
    fit_model.fit(x[:warm], y[:warm], batch_size=batch, epochs=1, shuffle=False, verbose=0)
    _start_together()
    c0, t0 = time.process_time(), time.perf_counter()
    fit_model.fit(x[warm:], y[warm:], batch_size=batch, epochs=1, shuffle=False, verbose=0)
    return rank, time.perf_counter() - t0, time.process_time() - c0


def run_ddp(model: str, replicas: int, steps: int, batch: int) -> Timing:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank = int(os.environ.get("RANK", "0"))
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    if replicas > 1:
        dist.init_process_group("gloo", rank=rank, world_size=replicas)
    pin(rank)
    torch.manual_seed(0)
    net: Any = build(model)
    if replicas > 1:
        net = DDP(net)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    xa, ya = images(steps, batch)
    x, y = torch.from_numpy(xa), torch.from_numpy(ya)
    per = batch // replicas
    loop = raw_steps(net, opt, x, y, batch,
                     (rank * per, (rank + 1) * per if rank < replicas - 1 else batch))

    loop(0, WARMUP)
    if replicas > 1:
        dist.barrier()
    _start_together()
    c0, t0 = time.process_time(), time.perf_counter()
    loop(WARMUP, steps)
    if replicas > 1:
        dist.barrier()
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    if replicas > 1:
        dist.destroy_process_group()
    return rank, elapsed, cpu


def run_tensorflow(model: str, replicas: int, steps: int, batch: int) -> Timing:
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tensorflow as tf  # only inside .tfvenv

    task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
    pin(int(task.get("index", 0)))
    threads = int(os.environ["OMP_NUM_THREADS"])
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    layers = tf.keras.layers
    with strategy.scope():
        if model == "mlp":
            net = tf.keras.Sequential([layers.Flatten(input_shape=(28, 28, 1)),
                                       layers.Dense(256, activation="relu"),
                                       layers.Dense(128, activation="relu"), layers.Dense(10)])
        else:
            net = tf.keras.Sequential([
                layers.Conv2D(32, 3, activation="relu", input_shape=(28, 28, 1)),
                layers.MaxPooling2D(), layers.Conv2D(64, 3, activation="relu"),
                layers.MaxPooling2D(), layers.Flatten(), layers.Dense(64, activation="relu"),
                layers.Dense(10)])
        net.compile(optimizer=tf.keras.optimizers.SGD(0.01, momentum=0.9),
                    loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = images(steps, batch, channels_last=True)
    warm = WARMUP * batch
    net.fit(x[:warm], y[:warm], batch_size=batch, epochs=1, shuffle=False, verbose=0)
    c0, t0 = time.process_time(), time.perf_counter()
    net.fit(x[warm:], y[warm:], batch_size=batch, epochs=1, shuffle=False, verbose=0)
    return int(task.get("index", 0)), time.perf_counter() - t0, time.process_time() - c0


# -------------------------------------------------------------------- driver
def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("DISTRIB_", "TF_CONFIG", "RANK", "WORLD_SIZE", "MASTER_"))}


def _result(texts: list[str], what: str) -> dict[str, float]:
    for text in texts:
        for line in text.splitlines():
            if line.startswith("RESULT "):
                return dict(json.loads(line[7:]))
    raise RuntimeError(f"{what} produced no result:\n" + "\n".join(t[-2000:] for t in texts))


def measure(kind: str, model: str, replicas: int, steps: int, batch: int, threads: int,
            tf_python: str = str(TF_VENV / "bin" / "python"), pin: bool = True
            ) -> dict[str, float]:
    """Rank 0's wall and CPU seconds for ``steps`` training steps (fresh processes,
    warm-up excluded)."""
    from distrib.cluster.ports import free_ports  # here: a TensorFlow worker lacks distrib

    python = tf_python if kind == "tensorflow" else sys.executable
    cmd = [python, __file__, "--worker", kind, "--model", model, "--replicas", str(replicas),
           "--steps", str(steps), "--batch", str(batch)]
    base = {**_clean_env(), "OMP_NUM_THREADS": str(threads), "GLOO_SOCKET_IFNAME": "lo",
            "BENCH_PIN": "1" if pin else "0"}
    if kind == "distrib" or (kind == "ddp" and replicas == 1):
        out = subprocess.run(cmd, env=base, capture_output=True, text=True, timeout=1800)
        return _result([out.stdout, out.stderr], kind)
    if kind == "ddp":
        port = str(free_ports(1)[0])
        envs = [{**base, "RANK": str(r), "WORLD_SIZE": str(replicas),
                 "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port} for r in range(replicas)]
    else:
        hosts = [f"127.0.0.1:{p}" for p in free_ports(replicas)]
        envs = [{**base, "TF_CPP_MIN_LOG_LEVEL": "2", "TF_CONFIG": json.dumps(
            {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": r}})}
            for r in range(replicas)]
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for env in envs]
    texts = []
    for p in procs:
        out, err = p.communicate(timeout=1800)
        texts += [out, err]
    return _result(texts, kind)


def side_by_side(model: str, steps: int, batch: int, threads: int, swap: bool
                 ) -> dict[str, dict[str, float]]:
    """One replica each, distrib and raw at the same time, on CPUs 0 and 1 (1 and 0 with
    ``swap``), their timed steps started together: both see the same machine."""
    base = {**_clean_env(), "OMP_NUM_THREADS": str(threads), "BENCH_PIN": "1"}
    with tempfile.TemporaryDirectory() as sync:
        procs = {kind: subprocess.Popen(
            [sys.executable, __file__, "--worker", kind, "--model", model, "--replicas", "1",
             "--steps", str(steps), "--batch", str(batch)],
            env={**base, "BENCH_SYNC": sync, "BENCH_CPU": str(int(swap) ^ (kind == "ddp"))},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for kind in ("distrib", "ddp")}
        deadline = time.monotonic() + 600
        while len(list(Path(sync).glob("ready-*"))) < 2:
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs.values()):
                break
            time.sleep(0.001)
        Path(sync, "go").touch()
        return {kind: _result(list(p.communicate(timeout=1800)), kind)
                for kind, p in procs.items()}


def ensure_tf_venv() -> None:
    """Create ``.tfvenv`` with TensorFlow 2.21 and tf-keras unless it exists."""
    if (TF_VENV / "bin" / "python").exists():
        return
    print(f"creating {TF_VENV} with {' '.join(TF_PACKAGES)} (once)...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(TF_VENV)], check=True)
    subprocess.run([str(TF_VENV / "bin" / "python"), "-m", "pip", "install", "-q",
                    *TF_PACKAGES], check=True)


def _worker(args: argparse.Namespace) -> None:
    fn = {"distrib": run_distrib, "ddp": run_ddp, "tensorflow": run_tensorflow}[args.worker]
    rank, seconds, cpu = fn(args.model, int(args.replicas), args.steps, args.batch)
    if rank == 0:
        print("RESULT " + json.dumps({"seconds": seconds, "cpu": cpu}), flush=True)


def compare(model: str, replicas: int, args: argparse.Namespace, tf_python: str
            ) -> dict[str, Any]:
    """``args.pairs`` interleaved pairs of runs (and TF's runs); the row of the table."""
    steps = args.steps or STEPS[model]
    run = {"model": model, "replicas": replicas, "steps": steps, "batch": args.batch,
           "threads": args.threads, "pin": args.pin,
           "side_by_side": bool(args.side_by_side and replicas == 1)}
    ours, raw, tf = [], [], []
    for pair in range(args.pairs):
        order = ("distrib", "ddp") if pair % 2 == 0 else ("ddp", "distrib")
        if args.side_by_side and replicas == 1:
            got = side_by_side(model, steps, args.batch, args.threads, swap=pair % 2 == 1)
        else:
            got = {kind: measure(kind, model, replicas, steps, args.batch, args.threads,
                                 pin=args.pin) for kind in order}
        ours.append(got["distrib"])
        raw.append(got["ddp"])
        if args.tensorflow and replicas == 2 and pair < args.tf_runs:
            tf.append(measure("tensorflow", model, replicas, steps, args.batch, args.threads,
                              tf_python, args.pin))
    samples = steps * args.batch
    ratios = [b["seconds"] / a["seconds"] for a, b in zip(ours, raw)]
    ours_s = statistics.median(a["seconds"] for a in ours)
    row: dict[str, Any] = {
        **run, "pairs": args.pairs, "distrib_samples_per_s": samples / ours_s,
        "ddp_samples_per_s": samples / statistics.median(b["seconds"] for b in raw),
        "ratio": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
        "cpu_ratio": statistics.median(b["cpu"] / a["cpu"] for a, b in zip(ours, raw))}
    if tf:
        tf_s = statistics.median(t["seconds"] for t in tf)
        row.update(tf_runs=len(tf), tf_samples_per_s=samples / tf_s, vs_tensorflow=tf_s / ours_s)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", choices=["distrib", "ddp", "tensorflow"], help=argparse.SUPPRESS)
    ap.add_argument("--model", default="mlp", help=argparse.SUPPRESS)
    ap.add_argument("--models", default="mlp,cnn", help="models to run, e.g. mlp,cnn")
    ap.add_argument("--replicas", default="1,2", help="replica counts to run, e.g. 1,2")
    ap.add_argument("--steps", type=int, default=0,
                    help="timed steps per run (default: 400 for the MLP, 100 for the CNN)")
    ap.add_argument("--batch", type=int, default=64, help="global batch size")
    ap.add_argument("--pairs", type=int, default=7, help="interleaved pairs of runs")
    ap.add_argument("--threads", type=int, default=1,
                    help="CPU threads per process, for every contender")
    ap.add_argument("--no-pin", dest="pin", action="store_false",
                    help="do not pin replica r of every contender to CPU r")
    ap.add_argument("--side-by-side", action="store_true",
                    help="1-replica rows: run the two contenders of a pair at the same time, "
                         "one per CPU (swapped from pair to pair), instead of one after the "
                         "other")
    ap.add_argument("--tensorflow", action="store_true", help="also run TF 2.21 fit")
    ap.add_argument("--tf-runs", type=int, default=3, help="TensorFlow runs per row")
    ap.add_argument("--tf-python", default=None,
                    help="a Python with tensorflow-cpu 2.21 and tf-keras (default: .tfvenv)")
    ap.add_argument("--json", help="write the rows to this file")
    args = ap.parse_args()
    if args.worker:
        _worker(args)
        return
    tf_python = args.tf_python or str(TF_VENV / "bin" / "python")
    if args.tensorflow and args.tf_python is None:
        ensure_tf_venv()
    rows = []
    print(f"{'model':6} {'replicas':>8} {'distrib/s':>10} {'raw/s':>10} {'ratio':>6} "
          f"{'pair range':>11} {'cpu ratio':>9}"
          + (f" {'TF fit/s':>9} {'vs TF':>6}" if args.tensorflow else ""), flush=True)
    for model in args.models.split(","):
        for replicas in (int(r) for r in args.replicas.split(",")):
            row = compare(model, replicas, args, tf_python)
            line = (f"{model:6} {replicas:8d} {row['distrib_samples_per_s']:10.0f} "
                    f"{row['ddp_samples_per_s']:10.0f} {row['ratio']:6.3f} "
                    f"{row['ratio_min']:5.2f}-{row['ratio_max']:<5.2f} {row['cpu_ratio']:9.3f}")
            if "tf_samples_per_s" in row:
                line += f" {row['tf_samples_per_s']:9.0f} {row['vs_tensorflow']:6.2f}"
            rows.append(row)
            print(line, flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
