"""Input pipeline throughput: distrib.data against tf.data (and torch's DataLoader), in one run.

The pipeline of the seeds::

    Dataset.from_tensor_slices((x, y)).shuffle(60000).batch(64).prefetch(AUTOTUNE)

over MNIST-shaped data (60000 x 28 x 28 float32 images, int64 labels).  Every
contender iterates a few full epochs; the median batches/second over the
epochs (a warm-up epoch excluded) is reported, with the ratio to tf.data when
TensorFlow is installed (otherwise "tensorflow not installed" is printed and
the other rows are still measured).  Also shown: the same dataset through
``distribute_dataset`` on one replica (the path ``strategy.experimental_distribute_dataset``
takes) and a ``torch.utils.data.DataLoader(TensorDataset, shuffle=True, batch_size=64)``.

Second part: TFRecord read throughput.  Two files of about ``--tfrecord-mb`` MB each
(small records of 160 bytes, and large ones of 100 KB) are written with
``distrib.data.experimental.TFRecordWriter``, then read whole by
``distrib.data.TFRecordDataset`` and by ``tf.data.TFRecordDataset``, record by record
and in batches of 1024; both check every record's checksums.  Both contenders run the
same reading code in subprocesses, alternating for ``--rounds`` rounds, each pinned to
the same CPUs (``--cpus``, by default all this process may use) with as many threads
(torch's intra-op threads; TF's intra- and inter-op threads) as torch has here.
TensorFlow's interpreter is ``--tf-python``, else /work/tfvenv/bin/python when it
exists, else this interpreter when it imports tensorflow.  Records/s and MB/s are the
median over all timed reads (three per round, after a warm-up read).

    python bench/bench_data.py [--epochs 3] [--json out.json] [--tfrecord-mb 48]
                               [--tf-python PATH] [--skip-pipeline] [--rounds 3]
                               [--cpus 0,1]

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
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch

ROWS, BATCH = 60000, 64


def make_data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.random((ROWS, 28, 28), dtype=np.float32)
    y = rng.integers(0, 10, ROWS, dtype=np.int64)
    return x, y


def rates(make_epoch: Callable[[], Iterable[Any]], epochs: int) -> list[float]:
    """Batches per second of each epoch after one warm-up epoch."""
    out = []
    for e in range(epochs + 1):
        start = time.perf_counter()
        n = sum(1 for _ in make_epoch())
        if e:
            out.append(n / (time.perf_counter() - start))
    return out


def bench_distrib(x: np.ndarray, y: np.ndarray, epochs: int) -> list[float]:
    from distrib.data import AUTOTUNE, Dataset

    ds = (Dataset.from_tensor_slices((x, y)).shuffle(ROWS).batch(BATCH).prefetch(AUTOTUNE))
    return rates(lambda: ds, epochs)


def bench_distributed(x: np.ndarray, y: np.ndarray, epochs: int) -> list[float]:
    from distrib.data import AUTOTUNE, Dataset
    from distrib.distribute.group import ReplicaGroupInfo
    from distrib.input import distribute_dataset

    ds = (Dataset.from_tensor_slices((x, y)).shuffle(ROWS).batch(BATCH).prefetch(AUTOTUNE))
    dist = distribute_dataset(ds, ReplicaGroupInfo.single())
    return rates(lambda: dist, epochs)


def bench_dataloader(x: np.ndarray, y: np.ndarray, epochs: int) -> list[float]:
    from torch.utils.data import DataLoader, TensorDataset

    loader = DataLoader(TensorDataset(torch.from_numpy(x), torch.from_numpy(y)),
                        batch_size=BATCH, shuffle=True)
    return rates(lambda: loader, epochs)


TF_PIPELINE = """
import json, os, sys, time
import numpy as np
threads, cpus, epochs, rows, batch = (int(sys.argv[1]), sys.argv[2], int(sys.argv[3]),
                                      int(sys.argv[4]), int(sys.argv[5]))
if cpus and hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})
import tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(threads)
tf.config.threading.set_inter_op_parallelism_threads(threads)
rng = np.random.default_rng(0)
x = rng.random((rows, 28, 28), dtype=np.float32)
y = rng.integers(0, 10, rows, dtype=np.int64)
ds = (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(rows).batch(batch)
      .prefetch(tf.data.AUTOTUNE))
out = []
for e in range(epochs + 1):
    start = time.perf_counter()
    n = sum(1 for _ in ds)
    if e:
        out.append(n / (time.perf_counter() - start))
print(json.dumps(out))
"""


def bench_tf(epochs: int, python: str | None, cpus: str) -> list[float] | None:
    """tf.data's batches/s per epoch, in a subprocess pinned like this one (same data)."""
    if python is None:
        return None
    threads = torch.get_num_threads()
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([python, "-c", TF_PIPELINE, str(threads), cpus, str(epochs),
                           str(ROWS), str(BATCH)], env=env, capture_output=True, text=True,
                          timeout=1800)
    if proc.returncode != 0:
        print(f"tf.data pipeline failed: {proc.stderr[-500:]}")
        return None
    result: list[float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


TFRECORD_SHAPES = {"small records (160 B)": 160, "large records (100 KB)": 100_000}
READ_MODES = ("per record", "batch(1024)")

# One contender's reads, run in a fresh interpreter: argv = contender, threads, cpus, reps,
# paths.  Both contenders run this same code (only the dataset class differs), pinned to
# the same CPUs with the same thread counts; the pin is set before the library is
# imported, so every thread it starts inherits it.
READER = """
import json, os, sys, time
threads, cpus, reps = int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
if cpus and hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})
if sys.argv[1] == "tf.data":
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    make = tf.data.TFRecordDataset
else:
    import torch
    torch.set_num_threads(threads)
    from distrib.data import TFRecordDataset as make
out = {}
for path in sys.argv[5:]:
    for mode in ("per record", "batch(1024)"):
        ds = make(path)
        if mode != "per record":
            ds = ds.batch(1024)
        times = []
        for rep in range(reps + 1):
            start = time.perf_counter()
            for _ in ds:
                pass
            if rep:
                times.append(time.perf_counter() - start)
        out[path + "|" + mode] = times
print(json.dumps(out))
"""


def write_tfrecords(root: str, megabytes: float) -> dict[str, tuple[str, int, int]]:
    """``{label: (path, records, payload bytes)}`` of the benchmark files."""
    from distrib.data.experimental import TFRecordWriter

    rng = np.random.default_rng(1)
    files = {}
    for label, size in TFRECORD_SHAPES.items():
        count = max(1, int(megabytes * 1e6) // (size + 16))
        path = os.path.join(root, f"{size}.tfrecord")
        pool = rng.integers(0, 256, size + 4096, dtype=np.uint8).tobytes()
        with TFRecordWriter(path) as writer:
            for i in range(count):
                writer.write(pool[i % 4096:i % 4096 + size])
        files[label] = (path, count, count * size)
    return files


def find_tf_python(given: str | None) -> str | None:
    """An interpreter that imports tensorflow: ``given``, /work/tfvenv's, or this one."""
    if given:
        return given
    if os.path.exists("/work/tfvenv/bin/python"):
        return "/work/tfvenv/bin/python"
    try:
        import tensorflow  # noqa: F401
    except ImportError:
        return None
    return sys.executable


def time_reads(contender: str, python: str, paths: list[str], threads: int, cpus: str,
               reps: int) -> dict[str, list[float]] | None:
    """Seconds of each timed read of every file and mode, by one contender in a subprocess."""
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.run([python, "-c", READER, contender, str(threads), cpus, str(reps),
                           *paths], env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        print(f"{contender} TFRecord reads failed: {proc.stderr[-500:]}")
        return None
    result: dict[str, list[float]] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _all_cpus() -> str:
    if not hasattr(os, "sched_getaffinity"):
        return ""
    return ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))


def bench_tfrecord(megabytes: float, tf_python: str | None, rounds: int = 3,
                   cpus: str | None = None) -> dict[str, dict[str, float]]:
    """Records/s and MB/s of distrib's and TF's TFRecordDataset; prints a table.

    The contenders alternate, ``rounds`` subprocesses each (three timed reads of
    every file and mode after a warm-up read), pinned to the same CPUs with the
    same threads; the median of each contender's timed reads is reported.
    """
    threads = torch.get_num_threads()
    cpus = _all_cpus() if cpus is None else cpus
    tf_python = find_tf_python(tf_python)
    if tf_python is None:
        print("tensorflow not installed: tf.data TFRecord reads not measured")
    summary: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as root:
        files = write_tfrecords(root, megabytes)
        paths = [p for p, _, _ in files.values()]
        times: dict[str, dict[str, list[float]]] = {"tf.data": {}, "distrib.data": {}}
        for _ in range(rounds):
            for name, python in (("tf.data", tf_python), ("distrib.data", sys.executable)):
                got = None if python is None else time_reads(name, python, paths, threads,
                                                             cpus, 3)
                for key, values in (got or {}).items():
                    times[name].setdefault(key, []).extend(values)
        print(f"\nTFRecord reads, {threads} threads, pinned to CPUs {cpus or 'any'}, "
              f"{rounds} alternating rounds")
        print(f"{'file':<24} {'read':<12} {'contender':<14} {'records/s':>11} {'MB/s':>8} "
              f"{'vs tf.data':>11}")
        for label, (path, count, payload) in files.items():
            for mode in READ_MODES:
                key = f"{path}|{mode}"
                theirs = statistics.median(times["tf.data"][key]) \
                    if key in times["tf.data"] else None
                for name in ("tf.data", "distrib.data"):
                    if key not in times[name]:
                        continue
                    secs = statistics.median(times[name][key])
                    ratio = f"{theirs / secs:.2f}x" if theirs else "-"
                    print(f"{label:<24} {mode:<12} {name:<14} {count / secs:>11.0f} "
                          f"{payload / secs / 1e6:>8.1f} {ratio:>11}")
                    summary[f"{label} | {mode} | {name}"] = {
                        "records_per_s": count / secs, "mb_per_s": payload / secs / 1e6}
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--json", default=None, help="also write the figures here")
    parser.add_argument("--tfrecord-mb", type=float, default=48.0,
                        help="size of each TFRecord benchmark file (0: skip that part)")
    parser.add_argument("--tf-python", default=None,
                        help="a Python interpreter with tensorflow, for the TFRecord part")
    parser.add_argument("--skip-pipeline", action="store_true",
                        help="only the TFRecord part")
    parser.add_argument("--rounds", type=int, default=3,
                        help="alternating subprocess rounds per TFRecord contender")
    parser.add_argument("--cpus", default=None,
                        help="CPUs both TFRecord contenders are pinned to, e.g. 0,1 "
                             "(default: all this process may use)")
    args = parser.parse_args()
    summary: dict[str, Any] = {}
    cpus = _all_cpus() if args.cpus is None else args.cpus
    if cpus and hasattr(os, "sched_setaffinity"):     # distrib's side, pinned as TF's
        os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})
    if not args.skip_pipeline:
        summary.update(bench_pipeline(args.epochs, args.tf_python, cpus))
    if args.tfrecord_mb > 0:
        summary.update(bench_tfrecord(args.tfrecord_mb, args.tf_python, args.rounds,
                                     args.cpus))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)


def bench_pipeline(epochs: int, tf_python: str | None, cpus: str) -> dict[str, Any]:
    """The shuffle/batch/prefetch pipeline against tf.data; prints a table."""
    x, y = make_data()
    results: dict[str, list[float] | None] = {
        "tf.data": bench_tf(epochs, find_tf_python(tf_python), cpus)}
    if results["tf.data"] is None:
        print("tensorflow not installed: tf.data not measured")
    results["distrib.data"] = bench_distrib(x, y, epochs)
    results["distrib.data, distributed (1 replica)"] = bench_distributed(x, y, epochs)
    results["torch DataLoader"] = bench_dataloader(x, y, epochs)

    tf_rate = statistics.median(results["tf.data"]) if results["tf.data"] else None
    print(f"shuffle({ROWS}).batch({BATCH}).prefetch(AUTOTUNE), {epochs} epochs, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"{'pipeline':<40} {'batches/s':>10} {'vs tf.data':>11}")
    summary = {}
    for name, values in results.items():
        if values is None:
            print(f"{name:<40} {'-':>10} {'-':>11}")
            continue
        rate = statistics.median(values)
        ratio = f"{rate / tf_rate:.2f}x" if tf_rate else "-"
        print(f"{name:<40} {rate:>10.0f} {ratio:>11}")
        summary[name] = {"batches_per_s": rate, "epochs": values}
    return summary


if __name__ == "__main__":
    main()
