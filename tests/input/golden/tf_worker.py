"""One TensorFlow 2.21 worker of the golden run: it runs cases and writes what each replica got.

Started by ``generate.py`` (``--worker``), one process per worker, with
``TF_CONFIG`` set when there are several.  Several replicas per worker under
MultiWorkerMirroredStrategy: on CPU TF 2.21 places one replica per worker, so
the worker replaces ``CollectiveAllReduceExtended._initialize_local_devices``
to return ``L`` logical CPU devices.  Only the device list changes; the input
pipeline, its auto-sharding and rebatching, and the collectives are
TensorFlow's own.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from tests.input.golden.grid import write_files


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
    if src == "rangeil":
        return tf.data.Dataset.range(case["n"]).interleave(
            tf.data.Dataset.from_tensors, cycle_length=2, block_length=1)
    folder = write_files(files_root, case["f"])
    if src == "text":
        names = [str(folder / f"part{k}.txt") for k in range(len(case["f"]))]
        lines = tf.data.TextLineDataset(names)
    else:
        files = tf.data.Dataset.list_files(str(folder / "*.txt"), shuffle=False)
        if src == "filesmap":
            files = files.map(lambda name: name)
        lines = files.interleave(tf.data.TextLineDataset, cycle_length=2, block_length=1)
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
    if p == "shard2":
        ds = ds.shard(2, 1)
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
