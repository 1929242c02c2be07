"""The cases of ``tf_methods.json``: Dataset methods, written once for TensorFlow and distrib.

Each case is a function ``case(D, ops)`` of the Dataset class (``tf.data.Dataset``
or ``distrib.data.Dataset``) and a small namespace of the few operations whose
spelling differs (``ops.int64``, ``ops.length``, ``ops.check_finite``,
``ops.sequences``, ``ops.tmpdir``); it returns a dataset, a value, or a list of
datasets (iterated in order).  ``generate.py`` runs them with TensorFlow 2.21
and writes the plain values (nested lists; strings as latin-1 text; floats
rounded to 6 digits) or ``{"error": ExceptionType}``; ``test_methods_golden.py``
runs them with distrib and compares.  Names ending in ``|sorted`` compare the
sorted output (random order, same multiset).

This module imports neither TensorFlow nor torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

CASES: dict[str, Callable[[Any, Any], Any]] = {}


def case(name: str) -> Callable[[Callable[[Any, Any], Any]], Callable[[Any, Any], Any]]:
    def register(fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        CASES[name] = fn
        return fn
    return register


SEQS = [[1], [2, 2, 2, 2, 2], [3, 3], [4, 4, 4, 4, 4, 4, 4], [5, 5, 5], [6], [7, 7, 7, 7],
        [8, 8], [9, 9, 9, 9, 9, 9], [10]]

# ------------------------------------------------------------------ window
case("window")(lambda D, ops: D.range(7).window(3, shift=2))
case("window_stride")(lambda D, ops: D.range(7).window(3, shift=1, stride=2))
case("window_drop_remainder")(lambda D, ops: D.range(7).window(3, shift=2, drop_remainder=True))
case("window_shift_past_size")(lambda D, ops: D.range(10).window(2, shift=3))
case("window_default_shift")(lambda D, ops: D.range(5).window(2))
case("window_tuple")(lambda D, ops: D.from_tensor_slices(
    (np.arange(5), np.arange(5) * 10)).window(2))
case("window_dict")(lambda D, ops: D.from_tensor_slices(
    {"a": np.arange(6), "b": np.arange(6) * 2}).window(4, shift=3))
case("window_flat_map_batch")(lambda D, ops: D.range(7).window(3, 1, 1, True).flat_map(
    lambda w: w.batch(3)))
case("window_cardinality")(lambda D, ops: [int(D.range(n).window(3, s, 1, d).cardinality())
                                           for n in (0, 2, 7, 8) for s in (1, 2, 4)
                                           for d in (False, True)])

# ------------------------------------------------------------- folds
case("reduce_sum")(lambda D, ops: D.range(1, 6).reduce(ops.int64(0), lambda s, x: s + x))
case("reduce_tuple_state")(lambda D, ops: D.range(1, 5).reduce(
    (ops.int64(0), ops.int64(1)), lambda s, x: (s[0] + x, s[1] * x)))
case("reduce_empty")(lambda D, ops: D.range(0).reduce(ops.int64(7), lambda s, x: s + x))
case("scan")(lambda D, ops: D.range(6).scan(ops.int64(0), lambda s, x: (s + x, s * 10 + x)))
case("scan_tuple_elements")(lambda D, ops: D.from_tensor_slices(
    (np.array([1, 2, 3]), np.array([4, 5, 6]))).scan(
        ops.int64(0), lambda s, e: (s + e[0], e[1] - s)))
case("take_while")(lambda D, ops: D.range(10).take_while(lambda x: x < 4))
case("take_while_tuple")(lambda D, ops: D.from_tensor_slices(
    (np.arange(6), np.arange(6) * 3)).take_while(lambda a, b: a + b < 10))
case("apply")(lambda D, ops: D.range(10).apply(lambda ds: ds.filter(lambda x: x % 3 == 0)))
case("unique")(lambda D, ops: D.from_tensor_slices(np.array([1, 3, 1, 2, 3, 5])).unique())
case("unique_strings")(lambda D, ops: D.from_tensor_slices(
    np.array([b"a", b"b", b"a", b"c"])).unique())
case("unique_floats_refused")(lambda D, ops: D.from_tensor_slices(
    np.array([1.0, 1.0], dtype=np.float32)).unique())
case("get_single_element")(lambda D, ops: D.range(5, 6).get_single_element())
case("get_single_element_tuple")(lambda D, ops: D.from_tensors(
    (np.int64(1), np.array([2, 3]))).get_single_element())
case("get_single_element_empty")(lambda D, ops: D.range(0).get_single_element())
case("get_single_element_two")(lambda D, ops: D.range(2).get_single_element())
case("counter")(lambda D, ops: D.counter(3, 2).take(4))
case("ignore_errors_map")(lambda D, ops: D.range(6).map(
    lambda x: ops.check_finite(1.0 / ops.float32(x - 3))).ignore_errors())
case("ignore_errors_map_then_batch")(lambda D, ops: D.range(8).map(
    lambda x: ops.check_finite(1.0 / ops.float32(x % 3))).ignore_errors().batch(2))

case("rebatch")(lambda D, ops: D.range(7).batch(3).rebatch(2))
case("rebatch_sizes")(lambda D, ops: D.range(8).batch(4).rebatch([3, 1]))
case("rebatch_drop_remainder")(lambda D, ops: D.range(7).batch(3).rebatch(2, drop_remainder=True))
case("rebatch_sizes_drop_remainder")(lambda D, ops: D.range(9).batch(4).rebatch(
    [2, 3], drop_remainder=True))
case("rebatch_tuple")(lambda D, ops: D.from_tensor_slices(
    (np.arange(5), np.arange(5) * 2)).batch(2).rebatch(3))
case("fingerprint_repeatable")(lambda D, ops: bool(
    D.range(3).map(lambda x: x + 1).fingerprint() == D.range(3).map(lambda x: x + 1).fingerprint()))
case("ignore_errors_batch_of_map")(lambda D, ops: D.range(8).map(
    lambda x: ops.check_finite(1.0 / ops.float32(x % 3))).batch(2).ignore_errors())

# ---------------------------------------------------------- grouping
case("group_by_window")(lambda D, ops: D.range(10).group_by_window(
    lambda x: x % 3, lambda k, w: w.batch(2), window_size=2))
case("group_by_window_size_func")(lambda D, ops: D.range(12).group_by_window(
    lambda x: x % 2, lambda k, w: w.batch(10), window_size_func=lambda k: k + 2))
case("group_by_window_key_in_output")(lambda D, ops: D.range(8).group_by_window(
    lambda x: 3 - x % 3, lambda k, w: w.batch(4).map(lambda b: (k, b)), window_size=4))
case("group_by_window_tuple")(lambda D, ops: D.from_tensor_slices(
    (np.arange(6), np.arange(6) * 10)).group_by_window(
        lambda a, b: a % 2, lambda k, w: w.batch(3), window_size=3))
case("bucket_by_sequence_length")(lambda D, ops: ops.sequences(D, SEQS).bucket_by_sequence_length(
    ops.length, [3, 5], [2, 2, 3]))
case("bucket_drop_remainder")(lambda D, ops: ops.sequences(D, SEQS).bucket_by_sequence_length(
    ops.length, [3, 5], [2, 2, 3], drop_remainder=True))
case("bucket_pad_to_boundary")(lambda D, ops: ops.sequences(D, SEQS).bucket_by_sequence_length(
    ops.length, [3, 5, 8], [2, 2, 3, 2], pad_to_bucket_boundary=True))
case("bucket_padding_value")(lambda D, ops: ops.sequences(D, SEQS).bucket_by_sequence_length(
    ops.length, [4], [3, 3], padding_values=ops.int64(-1)))

# ---------------------------------------------------------- choosing
case("choose_from_datasets")(lambda D, ops: D.choose_from_datasets(
    [D.range(3), D.range(10, 15)], D.from_tensor_slices(np.array([1, 0, 1, 1, 0, 0, 0, 1]))))
case("choose_from_datasets_go_on")(lambda D, ops: D.choose_from_datasets(
    [D.range(3), D.range(10, 15)], D.from_tensor_slices(np.array([1, 0, 1, 1, 0, 0, 0, 1])),
    stop_on_empty_dataset=False))
case("choose_from_datasets_bad_index")(lambda D, ops: D.choose_from_datasets(
    [D.range(3), D.range(10, 15)], D.from_tensor_slices(np.array([0, 2]))))
case("sample_from_datasets_one_weight")(lambda D, ops: D.sample_from_datasets(
    [D.range(4), D.range(100, 104)], weights=[1.0, 0.0], seed=3).take(4))
case("sample_from_datasets|sorted")(lambda D, ops: D.sample_from_datasets(
    [D.range(5), D.range(100, 103)], weights=[0.3, 0.7], seed=3))
case("rejection_resample_target_is_initial")(lambda D, ops: D.range(6).rejection_resample(
    lambda x: x % 2, [0.5, 0.5], initial_dist=[0.5, 0.5], seed=1))
case("rejection_resample_one_class")(lambda D, ops: D.range(8).rejection_resample(
    lambda x: x % 2, [0.0, 1.0], initial_dist=[0.5, 0.5], seed=1))

# ------------------------------------------------------------ saving
case("save_load")(lambda D, ops: ops.save_load(D, D.from_tensor_slices(
    ({"a": np.arange(3), "b": np.arange(3) * 0.5}, np.array([b"x", b"y", b"z"])))))
case("save_load_gzip")(lambda D, ops: ops.save_load(D, D.range(4).batch(3), "GZIP"))
case("snapshot_two_passes")(lambda D, ops: (lambda ds: [ds, ds])(
    D.range(5).map(lambda x: x * 2).snapshot(ops.tmpdir())))


def plain_leaf(x: Any) -> Any:
    """A numpy value as nested lists of Python numbers / latin-1 text (floats to 6 digits)."""
    if isinstance(x, bytes):
        return x.decode("latin-1")
    if isinstance(x, str):
        return x
    arr = np.asarray(x)
    if arr.dtype.kind in "SO":
        return np.vectorize(lambda v: v.decode("latin-1") if isinstance(v, bytes) else v,
                            otypes=[object])(arr).tolist() if arr.ndim else plain_leaf(arr.item())
    if arr.dtype.kind == "f":
        return np.round(arr.astype(np.float64), 6).tolist()
    return arr.tolist()
