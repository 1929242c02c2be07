"""Write the golden file of what TensorFlow 2.21 gives each replica, step by step.

Run it with a Python that has ``tensorflow-cpu==2.21.*`` installed (a scratch
environment; TensorFlow is never a dependency of distrib)::

    python -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install tensorflow-cpu==2.21.0
    /tmp/tfvenv/bin/python tests/input/golden/generate.py [--only FAMILY] [--out PATH]

It writes ``tests/input/golden/tf_input.json`` (about 2 MB; an hour or so on 2
CPU cores).  For each case of a grid — layouts of 1 worker x 1..4 replicas
(``MirroredStrategy`` over logical CPU devices) and 2..3 workers x 1..2
replicas (``MultiWorkerMirroredStrategy``, one process per worker on localhost
ports), every ``AutoShardPolicy``, datasets built with ``range``,
``from_tensor_slices``, ``TextLineDataset`` files and ``list_files`` +
``interleave``, batched by global batches of 1 to 9 with ``drop_remainder``
both ways, plus ``distribute_datasets_from_function`` — it records the
elements every replica receives at every step, and for some cases the value of
``strategy.reduce(MEAN, batch, axis=0)`` at every step, or the error TensorFlow
raises.

A case is a dict of short keys, read by ``tests/input/test_golden.py`` to build
the same pipeline with distrib:

``api``  ``dd`` (experimental_distribute_dataset), ``fn``
         (distribute_datasets_from_function, PER_WORKER) or ``fnr`` (PER_REPLICA);
``W``, ``L`` workers and replicas per worker;
``pol``  the AutoShardPolicy name;
``src``  ``range`` (``range(n)``), ``gen`` (``from_generator`` yielding ``range(n)``
         in lists of ``G``, as a DataLoader does: the strategy cannot see the batch
         size), ``slices`` (``from_tensor_slices((x, y))`` with
         ``x[i] = [i, i*i]`` as float64 and ``y[i] = i``: the recorded value is ``y``,
         the mean is over ``x``), ``text`` (``TextLineDataset`` over files of ``f[k]``
         lines holding consecutive integers, each line parsed as an int64) or
         ``files`` (the same files through ``list_files(shuffle=False)`` and
         ``interleave(TextLineDataset, cycle_length=2, block_length=1)``);
``n``/``f`` the size, or the file sizes;
``G``, ``d`` the global batch and drop_remainder (``fn``: each pipeline batches by
         ``G // R``, the per-replica batch);
``p``    the pipeline variant: ``""`` batch; ``filter`` (``filter(v % 3 != 1)``
         before batch); ``map`` (``map(b * 2)`` after batch); ``repeat``
         (``repeat(2)`` after batch); ``hint`` (``shard(SHARD_HINT, SHARD_HINT)``
         before batch); ``nobatch`` (no batch); for ``fn``: ``""`` (every pipeline
         reads everything) or ``shard`` (``shard(num_input_pipelines,
         input_pipeline_id)`` before batch);
``m``    1 when the per-step mean is recorded.

The output maps each case (as a canonical JSON string) to ``{"s": steps}``
where ``steps[t][r]`` is the list of values replica ``r`` (worker-major order)
gets at step ``t``, plus ``"m": means`` (``m[t]``: the mean, a list for
``slices``), or ``{"e": "ErrorType: message"}``.

Several replicas per worker under MultiWorkerMirroredStrategy: on CPU TF 2.21
places one replica per worker, so the worker processes replace
``CollectiveAllReduceExtended._initialize_local_devices`` to return ``L``
logical CPU devices.  Only the device list changes; the input pipeline, its
auto-sharding and rebatching, and the collectives are TensorFlow's own.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
OUT = HERE / "tf_input.json"
POLICIES = ("AUTO", "OFF", "DATA", "FILE", "HINT")
LAYOUTS = ((1, 1), (1, 2), (1, 3), (1, 4), (2, 1), (2, 2), (3, 1), (3, 2))
FILE_SETS = ((5, 3), (6, 6), (4, 0, 7), (1, 2, 3, 4), (10,), (3, 3, 3), (0, 5),
             (7, 1, 1, 2, 6), (2, 9, 4, 1, 3, 8))
CASE_TIMEOUT_S = 60


# ------------------------------------------------------------------ the grid
def _case(api: str, w: int, lr: int, pol: str, src: str, size: Any, g: int, d: int,
          p: str = "", m: int = 0) -> dict[str, Any]:
    case: dict[str, Any] = {"api": api, "W": w, "L": lr, "pol": pol, "src": src}
    case["f" if src in ("text", "files") else "n"] = list(size) if isinstance(size, tuple) \
        else size
    case.update(G=g, d=d, p=p, m=m)
    return case


THIN = {(1, 1): 1, (1, 2): 1, (1, 3): 2, (1, 4): 2, (2, 1): 2, (2, 2): 4, (3, 1): 4, (3, 2): 4}
"""How much more each layout's products are thinned (TensorFlow's time per case grows with
the replicas and workers)."""


def _kept(case: dict[str, Any], one_in: int) -> bool:
    """A stable pseudo-random ``1 / one_in`` of the cases (thins the larger products; a
    multiple of ``one_in`` keeps a subset)."""
    return one_in <= 1 or zlib.crc32(case_key(case).encode()) % one_in == 0


def _product(one_in: int, make: Any, *axes: Any) -> list[dict[str, Any]]:
    return [c for c in (make(*values) for values in itertools.product(*axes))
            if _kept(c, one_in)]


SIZES, BATCHES, DROPS = range(31), range(1, 10), (0, 1)


def family_range() -> list[dict[str, Any]]:
    """range(n).batch(G, d): the whole n 0..30 x G 1..9 x d product for AUTO and OFF on every
    layout, a third of it for the other policies."""
    out = []
    for w, lr in LAYOUTS:
        for pol in POLICIES:
            if (w, lr) == (1, 1) and pol != "AUTO":
                continue
            full = pol in ("AUTO", "OFF") and (w, lr) in ((1, 2), (2, 1))   # the whole product
            one_in = 1 if full else (1 if pol in ("AUTO", "OFF") else 3 if w == 1 else 6) * \
                THIN[w, lr]
            one_in = 3 if (w, lr) == (1, 1) else one_in

            def make(n: int, g: int, d: int, w: int = w, lr: int = lr, pol: str = pol
                     ) -> dict[str, Any]:
                return _case("dd", w, lr, pol, "range", n, g, d, m=int(w == 1 or n in (7, 22)))
            out += _product(one_in, make, SIZES, BATCHES, DROPS)
    return out


def family_slices() -> list[dict[str, Any]]:
    """from_tensor_slices((x, y)): a nested element, the per-step mean of x."""
    out = []
    for (w, lr), pol in itertools.product(LAYOUTS, ("AUTO", "OFF", "DATA")):
        def make(n: int, g: int, d: int, w: int = w, lr: int = lr, pol: str = pol
                 ) -> dict[str, Any]:
            return _case("dd", w, lr, pol, "slices", n, g, d, m=1)
        out += _product(4 * THIN[w, lr], make, SIZES, BATCHES, DROPS)
    return out


def family_text() -> list[dict[str, Any]]:
    """TextLineDataset files (FILE sharding on several workers) and list_files + interleave."""
    out = []
    for (w, lr), pol in itertools.product(LAYOUTS, POLICIES):
        for src in ("text", "files"):
            for f in FILE_SETS:
                few = len(f) < w and pol in ("AUTO", "FILE")   # an error: one run each
                if src == "files" and len(f) > 9:
                    continue
                for g, d in itertools.product(BATCHES, DROPS):
                    case = _case("dd", w, lr, pol, src, f, g, d, m=int(g == 3))
                    one_in = (2 if src == "text" else 5) * (3 if (w, lr) == (1, 1) else 1) * \
                        THIN[w, lr]
                    if (g, d) == (4, 0) if few else _kept(case, one_in):
                        out.append(case)
    return out


def family_variants() -> list[dict[str, Any]]:
    """filter before batch, map and repeat after batch, SHARD_HINT, no batch at all."""
    out = []
    for (w, lr), pol in itertools.product(LAYOUTS, POLICIES):
        def make(p: str, n: int, g: int, d: int, w: int = w, lr: int = lr, pol: str = pol
                 ) -> dict[str, Any]:
            return _case("dd", w, lr, pol, "range", n, g, d, p=p, m=int(n == 13))
        one_in = 24 if (w, lr) == (1, 1) else (8 if w == 1 else 12) * THIN[w, lr]
        out += _product(one_in, make, ("filter", "map", "repeat", "hint"), SIZES, BATCHES, DROPS)
        for n, src in itertools.product((0, 1, 4, 7), ("range", "slices")):
            out.append(_case("dd", w, lr, pol, src, n, 1, 0, p="nobatch"))
    return out


def family_function() -> list[dict[str, Any]]:
    """distribute_datasets_from_function: per-replica batches 1..3, sharded by the context or
    not; PER_REPLICA on one worker."""
    out = []
    for w, lr in LAYOUTS:
        def make(api: str, p: str, n: int, per: int, d: int, w: int = w, lr: int = lr
                 ) -> dict[str, Any]:
            return _case(api, w, lr, "AUTO", "range", n, per * w * lr, d, p=p,
                         m=int(n in (7, 11)))
        out += _product(2 * THIN[w, lr], make, ("fn",), ("", "shard"), SIZES, (1, 2, 3), DROPS)
        if w == 1 and lr > 1:
            out += _product(4 * THIN[w, lr], make, ("fnr",), ("shard",), SIZES, (1, 2, 3), DROPS)
    return out


def family_generator() -> list[dict[str, Any]]:
    """Batches from a generator (a DataLoader): the batch size is unknown to the strategy."""
    out = []
    for (w, lr), pol in itertools.product(LAYOUTS, ("AUTO", "OFF", "DATA", "HINT")):
        if (w, lr) == (1, 1) and pol != "AUTO":
            continue

        def make(n: int, g: int, d: int, w: int = w, lr: int = lr, pol: str = pol
                 ) -> dict[str, Any]:
            return _case("dd", w, lr, pol, "gen", n, g, d, m=int(n == 13))
        out += _product(12 * THIN[w, lr], make, SIZES, BATCHES, DROPS)
    return out


EXAMPLES = (   # the cases docs/input_distribution.md and issue 7 quote, whatever the sampling
    ("dd", 1, 2, "AUTO", "range", 6, 4, 0), ("dd", 1, 2, "AUTO", "range", 14, 8, 0),
    ("dd", 1, 2, "AUTO", "range", 5, 8, 0), ("dd", 1, 2, "AUTO", "range", 10, 6, 0),
    ("dd", 1, 3, "AUTO", "range", 8, 4, 0), ("dd", 2, 1, "AUTO", "range", 14, 8, 0),
    ("dd", 2, 2, "AUTO", "range", 7, 7, 0), ("dd", 1, 2, "OFF", "range", 14, 8, 0),
    ("dd", 2, 1, "OFF", "range", 9, 4, 0), ("dd", 2, 1, "OFF", "range", 14, 8, 0),
    ("dd", 2, 1, "AUTO", "range", 9, 4, 0), ("dd", 1, 2, "OFF", "range", 3, 1, 0),
    ("dd", 2, 1, "OFF", "range", 5, 3, 0), ("dd", 2, 2, "OFF", "range", 10, 6, 0),
    ("fn", 1, 2, "AUTO", "range", 10, 6, 1), ("fn", 1, 2, "AUTO", "range", 10, 6, 0),
    ("dd", 2, 1, "OFF", "range", 2, 1, 0), ("dd", 2, 1, "OFF", "range", 7, 1, 0),
)


def family_examples() -> list[dict[str, Any]]:
    """The documented examples, with the per-step mean; the same cases with a repeat and
    files where the documentation quotes those."""
    out = [_case(*e, m=1) for e in EXAMPLES]
    out.append(_case("dd", 1, 2, "OFF", "range", 5, 3, 0, p="repeat", m=1))
    out.append(_case("dd", 2, 1, "AUTO", "text", (5, 3), 4, 0, m=1))
    return out


FAMILIES = {"examples": family_examples, "range": family_range, "slices": family_slices,
            "text": family_text, "variants": family_variants, "generator": family_generator,
            "function": family_function}
"""Each family of a layout runs in fresh worker processes: TensorFlow keeps state between
datasets (after PER_REPLICA input, a ``from_generator`` dataset is read by every replica
whole), which must not leak from one family into the next."""


def grid(only: str | None = None) -> list[dict[str, Any]]:
    """Every case, in a stable order."""
    return [c for family in families(only).values() for c in family]


def families(only: str | None = None) -> dict[str, list[dict[str, Any]]]:
    """The cases of each family (of ``only``), each case in the first family that has it."""
    seen: set[str] = set()
    out: dict[str, list[dict[str, Any]]] = {}
    for name in [only] if only else list(FAMILIES):
        out[name] = []
        for case in FAMILIES[name]():
            if case_key(case) not in seen:
                seen.add(case_key(case))
                out[name].append(case)
    return out


def case_key(case: dict[str, Any]) -> str:
    """The name of a case in the golden file: its fields joined by ``|`` (see the module doc)."""
    size = "-".join(str(v) for v in case["f"]) if "f" in case else str(case["n"])
    fields = [case["api"], case["W"], case["L"], case["pol"], case["src"], size, case["G"],
              case["d"], case["p"], case["m"]]
    return "|".join(str(v) for v in fields)


def parse_key(key: str) -> dict[str, Any]:
    """The case named ``key`` (the inverse of :func:`case_key`)."""
    api, w, lr, pol, src, size, g, d, p, m = key.split("|")
    case: dict[str, Any] = {"api": api, "W": int(w), "L": int(lr), "pol": pol, "src": src}
    if src in ("text", "files"):
        case["f"] = [int(v) for v in size.split("-")]
    else:
        case["n"] = int(size)
    case.update(G=int(g), d=int(d), p=p, m=int(m))
    return case


def write_files(root: Path, sizes: Any) -> Path:
    """Files ``part<k>.txt`` of ``sizes[k]`` lines of consecutive integers, in their own folder
    (made whole under another name, then renamed: processes may race to make it)."""
    folder = root / ("files-" + "-".join(str(s) for s in sizes))
    if not folder.exists():
        scratch = Path(tempfile.mkdtemp(dir=root))
        start = 0
        for k, n in enumerate(sizes):
            (scratch / f"part{k}.txt").write_text("".join(f"{v}\n" for v in range(start, start + n)))
            start += n
        try:
            scratch.rename(folder)
        except OSError:   # another process made it first
            shutil.rmtree(scratch)
    return folder


# ------------------------------------------------------------- one TF worker
def _tf_setup(w: int, lr: int) -> Any:
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2 + 2 * lr)
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(lr)])
    if w == 1:
        return tf.distribute.MirroredStrategy([d.name for d in tf.config.list_logical_devices("CPU")])
    if lr > 1:
        from tensorflow.python.distribute import collective_all_reduce_strategy as cars

        def local_devices(self: Any, resolver: Any, worker_device: str) -> Any:
            return tuple(f"{worker_device}/device:CPU:{i}" for i in range(lr)), "CPU"
        cars.CollectiveAllReduceExtended._initialize_local_devices = local_devices
    return tf.distribute.MultiWorkerMirroredStrategy()


def _tf_source(tf: Any, case: dict[str, Any], files_root: Path) -> Any:
    src = case["src"]
    if src == "range":
        return tf.data.Dataset.range(case["n"])
    if src == "gen":
        return tf.data.Dataset.from_generator(
            lambda: _chunks(case["n"], case["G"], case["d"]),
            output_signature=tf.TensorSpec((None,), tf.int64))
    if src == "slices":
        i = tf.range(case["n"], dtype=tf.int64)
        x = tf.stack([tf.cast(i, tf.float64), tf.cast(i * i, tf.float64)], axis=1)
        return tf.data.Dataset.from_tensor_slices((x, i))
    folder = write_files(files_root, case["f"])
    if src == "text":
        names = [str(folder / f"part{k}.txt") for k in range(len(case["f"]))]
        lines = tf.data.TextLineDataset(names)
    else:
        lines = tf.data.Dataset.list_files(str(folder / "*.txt"), shuffle=False).interleave(
            tf.data.TextLineDataset, cycle_length=2, block_length=1)
    return lines.map(lambda s: tf.strings.to_number(s, tf.int64))


def _chunks(n: int, g: int, drop: int) -> Any:
    """``range(n)`` in lists of ``g`` (the last one shorter unless dropped)."""
    for lo in range(0, n - g + 1 if drop else n, g):
        yield list(range(lo, min(lo + g, n)))


def _value(element: Any) -> Any:
    return element[1] if isinstance(element, tuple) else element


def _tf_pipeline(tf: Any, case: dict[str, Any], files_root: Path, batch: int) -> Any:
    ds, p, d = _tf_source(tf, case, files_root), case["p"], bool(case["d"])
    if p == "filter":
        ds = ds.filter(lambda *e: _value(e if len(e) > 1 else e[0]) % 3 != 1)
    if p == "hint":
        ds = ds.shard(tf.data.experimental.SHARD_HINT, tf.data.experimental.SHARD_HINT)
    if p != "nobatch" and case["src"] != "gen":
        ds = ds.batch(batch, drop_remainder=d)
    if p == "map":
        ds = ds.map(lambda b: b * 2)
    if p == "repeat":
        ds = ds.repeat(2)
    opts = tf.data.Options()
    opts.experimental_distribute.auto_shard_policy = getattr(
        tf.data.experimental.AutoShardPolicy, case["pol"])
    return ds.with_options(opts)


def _tf_distributed(tf: Any, s: Any, case: dict[str, Any], files_root: Path) -> Any:
    if case["api"] == "dd":
        return s.experimental_distribute_dataset(_tf_pipeline(tf, case, files_root, case["G"]))

    def dataset_fn(ctx: Any) -> Any:
        per = ctx.get_per_replica_batch_size(case["G"])
        ds = _tf_source(tf, case, files_root)
        if case["p"] == "shard":
            ds = ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        return ds.batch(per, drop_remainder=bool(case["d"]))
    mode = tf.distribute.InputReplicationMode.PER_REPLICA if case["api"] == "fnr" else \
        tf.distribute.InputReplicationMode.PER_WORKER
    return s.distribute_datasets_from_function(
        dataset_fn, tf.distribute.InputOptions(experimental_replication_mode=mode))


def _tf_run_case(tf: Any, s: Any, case: dict[str, Any], files_root: Path
                 ) -> tuple[dict[str, Any], bool]:
    """The case's result, and whether an error struck while iterating (the collectives of
    the workers may then be out of step: the cluster must restart)."""
    try:
        it = iter(_tf_distributed(tf, s, case, files_root))
    except Exception as e:  # raised on every worker before any collective
        return {"e": _describe(e)}, False
    steps, means = [], []
    try:
        for batch in it:
            value = _value(batch)
            steps.append([v.numpy().tolist() for v in s.experimental_local_results(value)])
            if case["m"]:
                x = batch[0] if isinstance(batch, tuple) else s.run(
                    lambda v: tf.cast(v, tf.float64), args=(batch,))
                means.append(s.reduce("MEAN", x, axis=0).numpy().tolist())
    except Exception as e:
        return {"e": _describe(e)}, True
    out: dict[str, Any] = {"s": steps}
    if case["m"]:
        out["m"] = means
    return out, False


def _describe(e: BaseException) -> str:
    text = re.sub(r"\{\{function_node.*?\}\}", "", str(e)).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:160] if text else ''}"


def worker_main(cases_file: Path, files_root: Path, out_file: Path, w: int, lr: int,
                index: int, start: int) -> None:
    """Run the cases of ``cases_file`` from ``start`` on as worker ``index`` of a ``w`` x ``lr``
    layout, one JSON line per case; stop after an error that struck mid-iteration."""
    import tensorflow as tf

    s = _tf_setup(w, lr)
    assert s.num_replicas_in_sync == w * lr, s.num_replicas_in_sync
    cases = json.loads(cases_file.read_text())
    with out_file.open("a") as out:
        for k in range(start, len(cases)):
            result, fatal = _tf_run_case(tf, s, cases[k], files_root)
            out.write(json.dumps({"k": k, "r": result, "fatal": fatal}) + "\n")
            out.flush()
            if fatal:
                sys.exit(3)


# ------------------------------------------------------------------ the driver
def _free_ports(count: int) -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _worker_env(w: int, index: int, ports: list[int]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env.update(OMP_NUM_THREADS="1", TF_CPP_MIN_LOG_LEVEL="3", TF_ENABLE_ONEDNN_OPTS="0",
               CUDA_VISIBLE_DEVICES="")
    if w > 1:
        env["TF_CONFIG"] = json.dumps({
            "cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
            "task": {"type": "worker", "index": index}})
    return env


def _read_lines(path: Path) -> dict[int, dict[str, Any]]:
    if not path.exists():
        return {}
    out = {}
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:   # a line cut short by a kill
            continue
        out[row["k"]] = row
    return out


def _start_cluster(cases_file: Path, tmp: Path, w: int, lr: int, start: int, run: int
                   ) -> tuple[list[subprocess.Popen[str]], list[Path]]:
    ports = _free_ports(w)
    procs, outs = [], []
    for i in range(w):
        out_file = tmp / f"out-{w}x{lr}-{run}-{i}.jsonl"
        cmd = [sys.executable, __file__, "--worker", str(cases_file), str(tmp), str(out_file),
               str(w), str(lr), str(i), str(start)]
        procs.append(subprocess.Popen(cmd, env=_worker_env(w, i, ports), text=True,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        outs.append(out_file)
    return procs, outs


def _wait_cluster(procs: list[subprocess.Popen[str]], outs: list[Path]) -> None:
    """Until every worker exits; after one exits on an error, or when none makes progress for
    ``CASE_TIMEOUT_S``, the others are killed."""
    last_sizes: list[int] = []
    last_change = time.time()
    first_exit: float | None = None
    while any(p.poll() is None for p in procs):
        time.sleep(0.5)
        sizes = [o.stat().st_size if o.exists() else 0 for o in outs]
        if sizes != last_sizes:
            last_sizes, last_change = sizes, time.time()
        if first_exit is None and any(p.poll() not in (None, 0) for p in procs):
            first_exit = time.time()
        stuck = time.time() - last_change > CASE_TIMEOUT_S + 60
        if stuck or (first_exit is not None and time.time() - first_exit > 20):
            for p in procs:
                if p.poll() is None:
                    p.kill()
            for p in procs:
                p.wait()


def run_layout(cases: list[dict[str, Any]], w: int, lr: int, tmp: Path) -> list[dict[str, Any]]:
    """Every case of one layout: ``w`` worker processes, merged per global replica.

    The cluster restarts after the case where an error struck mid-iteration; that case
    records the error."""
    tmp = Path(tempfile.mkdtemp(dir=tmp))   # this call's own files
    cases_file = tmp / f"cases-{w}x{lr}.json"
    cases_file.write_text(json.dumps(cases))
    for case in cases:   # before the workers start: they only read them
        if "f" in case:
            write_files(tmp, case["f"])
    results: list[dict[str, Any]] = []
    run = 0
    while len(results) < len(cases):
        start = len(results)
        procs, outs = _start_cluster(cases_file, tmp, w, lr, start, run)
        _wait_cluster(procs, outs)
        run += 1
        rows = [_read_lines(o) for o in outs]
        k = start
        while k < len(cases) and all(k in r for r in rows):
            parts = [r[k] for r in rows]
            merged = _merge(cases[k], [part["r"] for part in parts])
            results.append(merged)
            k += 1
            if any(part["fatal"] for part in parts) or "e" in merged and "counts" in merged["e"]:
                break
        else:
            if k < len(cases):   # a worker stopped (or hung) without recording case k
                errors = sorted(r[k]["r"]["e"] for r in rows if k in r and "e" in r[k]["r"])
                results.append({"e": errors[0] if errors else "a worker failed or hung"})
        if len(results) == start:
            raise RuntimeError(f"{w}x{lr}: no progress at case {start}: {cases[start]}")
        print(f"  {w}x{lr}: {len(results)}/{len(cases)} after run {run}", flush=True)
    return results


def _merge(case: dict[str, Any], parts: list[dict[str, Any]]) -> dict[str, Any]:
    errors = {p.get("e") for p in parts}
    if errors != {None}:
        return {"e": sorted(e for e in errors if e)[0]}
    counts = {len(p["s"]) for p in parts}
    if len(counts) != 1:
        return {"e": f"workers took different step counts {sorted(counts)}"}
    steps = [sum((p["s"][t] for p in parts), []) for t in range(counts.pop())]
    out: dict[str, Any] = {"s": steps}
    if case["m"]:
        out["m"] = parts[0]["m"]
    return out


def _write(path: Path, version: str, golden: dict[str, Any]) -> None:
    doc = {"tensorflow": version, "generator": "tests/input/golden/generate.py",
           "cases": dict(sorted(golden.items()))}
    path.write_text(json.dumps(doc, separators=(",", ":")) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(FAMILIES), help="one family of cases")
    parser.add_argument("--layout", help="only this layout, e.g. 2x1")
    parser.add_argument("--out", type=Path, default=OUT, help="the golden file to write")
    parser.add_argument("--fresh", action="store_true",
                        help="drop the cases already in --out (default: keep and update them)")
    parser.add_argument("--resume", action="store_true",
                        help="run only the cases not in --out yet")
    parser.add_argument("--worker", nargs=7, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        cases_file, files_root, out_file, w, lr, index, start = args.worker
        worker_main(Path(cases_file), Path(files_root), Path(out_file), int(w), int(lr),
                    int(index), int(start))
        return
    import tensorflow as tf

    golden: dict[str, Any] = {}
    if args.out.exists() and not args.fresh:
        golden = json.loads(args.out.read_text())["cases"]
    with tempfile.TemporaryDirectory() as tmp:
        for (w, lr), (name, cases) in itertools.product(LAYOUTS, families(args.only).items()):
            mine = [c for c in cases if (c["W"], c["L"]) == (w, lr)
                    and not (args.resume and case_key(c) in golden)]
            if not mine or args.layout not in (None, f"{w}x{lr}"):
                continue
            start = time.time()
            for case, result in zip(mine, run_layout(mine, w, lr, Path(tmp))):
                golden[case_key(case)] = result
            _write(args.out, tf.__version__, golden)   # progress survives an interruption
            print(f"{w}x{lr} {name}: {len(mine)} cases in {time.time() - start:.0f} s",
                  flush=True)
    print(f"{args.out}: {len(golden)} cases")


if __name__ == "__main__":
    main()
