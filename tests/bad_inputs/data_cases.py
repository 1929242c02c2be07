"""Bad arguments of ``distrib.data.Dataset`` methods, sources and options."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from distrib.data import Dataset, Options
from distrib.errors import DataError, InvalidTypeError, UsageError
from tests.bad_inputs.case import Case, accepted

r6 = Dataset.range(6)


def count(ds: Dataset) -> int:
    return sum(1 for _ in ds)


def ints(ds: Dataset) -> list[int]:
    return [int(x) for x in ds]


def set_option(target: Any, name: str, value: Any) -> None:
    setattr(target, name, value)


def rows(n: int = 4, width: int = 3) -> Dataset:
    return Dataset.from_tensor_slices(np.ones((n, width)))


BATCH_CASES = [
    Case("batch-drop-remainder-a-string", lambda: r6.batch(2, drop_remainder="no"), UsageError,
         ["drop_remainder = 'no'", "must be a bool", "False to keep it"]),
    Case("batch-drop-remainder-none", lambda: r6.batch(2, drop_remainder=None), UsageError,
         ["drop_remainder = None"]),
    Case("batch-drop-remainder-one", lambda: r6.batch(2, drop_remainder=1), UsageError,
         ["drop_remainder = 1"]),
    Case("batch-drop-remainder-two-flags",
         lambda: r6.batch(2, drop_remainder=torch.tensor([True, False])), UsageError,
         ["drop_remainder = tensor([ True, False])"]),
    accepted("batch-drop-remainder-numpy-bool",
             lambda: count(r6.batch(4, drop_remainder=np.bool_(True))), 1,
             "tf.data takes a NumPy bool as the Python bool"),
    accepted("batch-drop-remainder-torch-bool",
             lambda: count(r6.batch(4, drop_remainder=torch.tensor(True))), 1,
             "tf.data takes a scalar bool tensor"),
    Case("batch-size-a-float", lambda: r6.batch(2.0), UsageError, ["batch_size = 2.0"]),
    Case("batch-size-none", lambda: r6.batch(None), UsageError, ["batch_size = None"]),
    Case("batch-size-a-bool", lambda: r6.batch(True), UsageError, ["batch_size = True"]),
    accepted("batch-size-a-tensor", lambda: count(r6.batch(torch.tensor(2))), 3,
             "tf.data takes a scalar int64 tensor as the batch size"),
    Case("batch-parallel-calls-a-string", lambda: r6.batch(2, num_parallel_calls="x"),
         UsageError, ["num_parallel_calls = 'x'", "AUTOTUNE"]),
    Case("batch-parallel-calls-zero", lambda: r6.batch(2, num_parallel_calls=0), UsageError,
         ["num_parallel_calls = 0"]),
    Case("batch-deterministic-a-string", lambda: r6.batch(2, deterministic="x"),
         InvalidTypeError, ["deterministic = 'x'", "True, False or None"]),
    Case("padded-batch-zero", lambda: r6.padded_batch(0), UsageError, ["batch_size = 0"]),
    Case("padded-batch-drop-remainder-one", lambda: r6.padded_batch(2, drop_remainder=1),
         UsageError, ["drop_remainder = 1"]),
    Case("padded-batch-shape-too-small",
         lambda: list(rows().padded_batch(2, padded_shapes=[2])), DataError,
         ["padded shape [2]", "padded_shapes at least as large"]),
    Case("padded-batch-shape-a-string",
         lambda: list(rows().padded_batch(2, padded_shapes="x")), UsageError,
         ["padded_shapes entry = 'x'", "[None]"]),
    Case("padded-batch-value-a-string",
         lambda: list(rows().padded_batch(2, padding_values="x")), InvalidTypeError,
         ["padding_values = 'x'", "does not match type torch.float64"]),
    Case("padded-batch-value-a-vector",
         lambda: list(rows().padded_batch(2, padding_values=np.zeros(2))), UsageError,
         ["padding_values", "should be scalars"]),
    Case("unbatch-scalars", lambda: list(r6.unbatch()), DataError,
         ["has no batch dimension", "call `batch`"]),
]

SHUFFLE_CASES = [
    Case("shuffle-seed-a-string", lambda: r6.shuffle(3, seed="abc"), UsageError,
         ["shuffle seed = 'abc'", "must be an int or None", "seed=42"]),
    Case("shuffle-seed-a-fraction", lambda: r6.shuffle(3, seed=1.5), UsageError,
         ["shuffle seed = 1.5"]),
    Case("shuffle-seed-a-bool", lambda: r6.shuffle(3, seed=True), UsageError,
         ["shuffle seed = True"]),
    Case("shuffle-seed-a-list", lambda: r6.shuffle(3, seed=[1]), UsageError,
         ["shuffle seed = [1]"]),
    accepted("shuffle-seed-a-tensor",
             lambda: ints(r6.shuffle(6, seed=torch.tensor(3))) == ints(r6.shuffle(6, seed=3)),
             True, "tf.data takes a scalar int64 tensor as the seed"),
    accepted("shuffle-seed-numpy", lambda: sorted(ints(r6.shuffle(6, seed=np.int64(3)))),
             [0, 1, 2, 3, 4, 5], "tf.data takes a NumPy integer seed"),
    Case("shuffle-reshuffle-a-string", lambda: r6.shuffle(3, reshuffle_each_iteration="no"),
         UsageError, ["reshuffle_each_iteration = 'no'", "must be a bool"]),
    Case("shuffle-reshuffle-none", lambda: r6.shuffle(3, reshuffle_each_iteration=None),
         UsageError, ["reshuffle_each_iteration = None"]),
    Case("shuffle-reshuffle-two-flags",
         lambda: r6.shuffle(3, reshuffle_each_iteration=torch.tensor([True, False])),
         UsageError, ["reshuffle_each_iteration = tensor([ True, False])"]),
    accepted("shuffle-reshuffle-torch-bool",
             lambda: count(r6.shuffle(3, reshuffle_each_iteration=torch.tensor(False))), 6,
             "tf.data takes a scalar bool tensor"),
    Case("shuffle-buffer-a-string", lambda: r6.shuffle("3"), UsageError,
         ["buffer_size = '3'"]),
    Case("shuffle-buffer-a-float", lambda: r6.shuffle(3.0), UsageError,
         ["buffer_size = 3.0"]),
    Case("shuffle-buffer-negative", lambda: r6.shuffle(-2), UsageError,
         ["buffer_size = -2"]),
]

COUNT_CASES = [
    Case("repeat-negative", lambda: r6.repeat(-2), UsageError,
         ["count = -2", "-1 (forever)"]),
    Case("repeat-a-fraction", lambda: r6.repeat(1.5), UsageError, ["count = 1.5"]),
    accepted("repeat-minus-one", lambda: count(r6.repeat(-1).take(8)), 8,
             "repeat(-1) repeats forever in tf.data"),
    Case("take-negative", lambda: r6.take(-2), UsageError, ["count = -2", "take(-1)"]),
    Case("take-a-fraction", lambda: r6.take(1.5), UsageError, ["count = 1.5"]),
    accepted("take-minus-one", lambda: count(r6.take(-1)), 6,
             "take(-1) takes every element in tf.data"),
    Case("skip-negative", lambda: r6.skip(-2), UsageError, ["count = -2", "skip(-1)"]),
    Case("skip-a-string", lambda: r6.skip("1"), UsageError, ["count = '1'"]),
    accepted("skip-minus-one", lambda: count(r6.skip(-1)), 0,
             "skip(-1) skips every element in tf.data"),
    Case("shard-index-negative", lambda: r6.shard(2, -1), UsageError,
         ["index = -1", "from 0 to 1"]),
    Case("shard-count-a-string", lambda: r6.shard("2", 0), UsageError,
         ["num_shards = '2'"]),
    Case("shard-count-a-float", lambda: r6.shard(2.0, 0), UsageError,
         ["num_shards = 2.0"]),
    Case("prefetch-a-string", lambda: r6.prefetch("1"), UsageError,
         ["buffer_size = '1'", "AUTOTUNE"]),
    accepted("prefetch-autotune", lambda: count(r6.prefetch(-1)), 6,
             "prefetch(tf.data.AUTOTUNE), AUTOTUNE being -1"),
    Case("enumerate-start-a-string", lambda: r6.enumerate("a"), UsageError,
         ["start = 'a'", "must be an int"]),
    Case("enumerate-start-a-fraction", lambda: r6.enumerate(1.5), UsageError,
         ["start = 1.5"]),
    Case("range-step-zero", lambda: Dataset.range(0, 5, 0), UsageError,
         ["range step = 0", "step 1 or -1"]),
    Case("range-a-fraction", lambda: Dataset.range(1.5), UsageError,
         ["(1.5,)", "Dataset.range(10)"]),
    Case("range-four-arguments", lambda: Dataset.range(1, 2, 3, 4), UsageError,
         ["(1, 2, 3, 4)"]),
    Case("range-no-argument", lambda: Dataset.range(), UsageError,
         ["range arguments = ()"]),
    Case("range-output-type-a-string", lambda: Dataset.range(3, output_type="int"),
         InvalidTypeError, ["range output_type = 'int'", "torch.int32"]),
    accepted("range-empty", lambda: count(Dataset.range(5, 2)), 0,
             "range(5, 2) is empty in tf.data, as in Python"),
]

FUNCTION_CASES = [
    Case("map-parallel-calls-a-string", lambda: r6.map(lambda x: x, num_parallel_calls="x"),
         UsageError, ["num_parallel_calls = 'x'", "AUTOTUNE"]),
    Case("map-parallel-calls-zero", lambda: r6.map(lambda x: x, num_parallel_calls=0),
         UsageError, ["num_parallel_calls = 0"]),
    Case("map-deterministic-a-string", lambda: r6.map(lambda x: x, deterministic="x"),
         InvalidTypeError, ["deterministic = 'x'"]),
    Case("map-a-string", lambda: r6.map("double"), InvalidTypeError,
         ["map_func = 'double'"]),
    Case("filter-returns-a-vector",
         lambda: list(r6.filter(lambda x: torch.tensor([True, False]))), DataError,
         ["filter predicate result = [2]", "must be a scalar bool", ".all()"]),
    Case("interleave-not-callable", lambda: r6.interleave(5), InvalidTypeError,
         ["map_func = 5", "returning a Dataset"]),
    Case("interleave-returns-a-tensor", lambda: list(r6.interleave(lambda x: x,
                                                                   cycle_length=2)),
         InvalidTypeError, ["map_func result = 'Tensor'", "Dataset.from_tensors"]),
    Case("interleave-cycle-zero",
         lambda: r6.interleave(lambda x: Dataset.range(2), cycle_length=0), UsageError,
         ["cycle_length = 0"]),
    Case("interleave-block-negative",
         lambda: r6.interleave(lambda x: Dataset.range(2), block_length=-1), UsageError,
         ["block_length = -1"]),
    Case("flat-map-none", lambda: r6.flat_map(None), InvalidTypeError, ["map_func = None"]),
    Case("flat-map-returns-a-tensor", lambda: list(r6.flat_map(lambda x: x)),
         InvalidTypeError, ["map_func result = 'Tensor'"]),
    Case("apply-not-callable", lambda: r6.apply(5), InvalidTypeError,
         ["apply(transformation_func) = 5", "must be callable"]),
    Case("apply-returns-a-list", lambda: r6.apply(lambda ds: [1]), InvalidTypeError,
         ["apply(transformation_func) result = 'list'", "return the transformed dataset"]),
    Case("reduce-not-callable", lambda: r6.reduce(0, 5), InvalidTypeError,
         ["reduce(reduce_func) = 5", "(state, element)"]),
    Case("scan-not-callable", lambda: r6.scan(0, 5), InvalidTypeError, ["scan_func = 5"]),
    Case("take-while-not-callable", lambda: r6.take_while(5), InvalidTypeError,
         ["predicate = 5", "scalar bool"]),
    Case("ignore-errors-flag-a-string", lambda: r6.ignore_errors(log_warning="x"),
         InvalidTypeError, ["log_warning = 'x'", "True or False"]),
    Case("window-size-zero", lambda: r6.window(0), UsageError,
         ["window size = 0", "at least 1"]),
    Case("group-by-window-size-zero", lambda: r6.group_by_window(5, 5, 0), UsageError,
         ["window_size = 0"]),
    Case("get-single-element-of-many", lambda: r6.get_single_element(), DataError,
         ["more than one element", "take(1)"]),
    Case("sample-weights-too-few",
         lambda: Dataset.sample_from_datasets([r6, r6], weights=[1]), UsageError,
         ["weights = [1]", "one weight per dataset"]),
    Case("choose-from-a-number", lambda: Dataset.choose_from_datasets([r6], 5),
         InvalidTypeError, ["choice_dataset = 5", "Dataset.from_tensor_slices([0, 1, ...])"]),
]

SOURCE_CASES = [
    Case("slices-of-unequal-dict", lambda: Dataset.from_tensor_slices(
        {"a": np.ones(3), "b": np.ones(2)}), DataError, ["[3, 2]", "same first dimension"]),
    Case("slices-of-ragged-lists", lambda: Dataset.from_tensor_slices([[1, 2], [3]]),
         DataError, ["[[1, 2], [3]]", "non-rectangular", "pad the lists"]),
    Case("tensors-of-an-object", lambda: Dataset.from_tensors(object()), DataError,
         ["component = 'object'", "torch.as_tensor"]),
    Case("generator-not-callable", lambda: Dataset.from_generator(5), InvalidTypeError,
         ["generator = 5", "must be a Python callable"]),
    Case("generator-an-iterator",
         lambda: Dataset.from_generator(i for i in range(3)), InvalidTypeError,
         ["<generator object", "from_generator(gen) rather than from_generator(gen())"]),
    Case("from-torch-a-number", lambda: Dataset.from_torch(5), InvalidTypeError,
         ["from_torch(dataset) = 'int'", "map-style torch Dataset"]),
    Case("list-files-no-match", lambda: Dataset.list_files("nowhere/*.txt"), DataError,
         ["file_pattern = 'nowhere/*.txt'", "No files matched", "glob"]),
    Case("list-files-a-number", lambda: Dataset.list_files(5), InvalidTypeError,
         ["file_pattern = 5", "must be a path"]),
    Case("list-files-shuffle-a-string", lambda: Dataset.list_files("*", shuffle="yes"),
         InvalidTypeError, ["shuffle = 'yes'"]),
    Case("zip-nothing", lambda: Dataset.zip(), InvalidTypeError,
         ["zip(datasets) = '()'", "Dataset.zip(a, b)"]),
    Case("zip-a-number", lambda: Dataset.zip(r6, 5), InvalidTypeError,
         ["'(Range, int)'"]),
    Case("zip-a-list", lambda: Dataset.zip([r6, r6]), InvalidTypeError,
         ["zip(datasets) = 'list'"]),
    Case("concatenate-a-list", lambda: r6.concatenate([1, 2]), UsageError,
         ["concatenate(dataset) = 'list'", "from_tensor_slices"]),
    Case("concatenate-another-structure", lambda: list(r6.concatenate(
        Dataset.from_tensor_slices((np.ones(2), np.ones(2))))), DataError,
         ["(Tensor, Tensor)", "same structure"]),
    Case("cache-a-number", lambda: r6.cache(5), InvalidTypeError,
         ["cache filename = 5", "must be a path"]),
    Case("dataset-save-a-number", lambda: r6.save(5), InvalidTypeError,
         ["Dataset.save path = 5"]),
    Case("save-shard-func", lambda: r6.save("saved", shard_func=lambda x: 0), UsageError,
         ["save(shard_func / checkpoint_args)", "leave them None"]),
    Case("load-missing", lambda: Dataset.load("nowhere"), DataError,
         ["Dataset.load path = 'nowhere'", "ds.save(path)"]),
    Case("load-a-number", lambda: Dataset.load(5), InvalidTypeError,
         ["Dataset.load path = 5"]),
    Case("load-reader-func", lambda: Dataset.load("saved", reader_func=len), UsageError,
         ["load(reader_func)", "leave it None"]),
    Case("snapshot-a-number", lambda: r6.snapshot(5), InvalidTypeError,
         ["Dataset.snapshot path = 5"]),
    Case("snapshot-shard-func", lambda: r6.snapshot("snap", shard_func=len), UsageError,
         ["snapshot(reader_func / shard_func)"]),
    Case("length-of-infinite", lambda: len(r6.repeat()), InvalidTypeError,
         ["The dataset is infinite."]),
    Case("length-of-unknown", lambda: len(r6.filter(lambda x: x > 2)), InvalidTypeError,
         ["The dataset length is unknown."]),
]

OPTION_CASES = [
    Case("options-deterministic-a-string",
         lambda: set_option(Options(), "deterministic", "x"), InvalidTypeError,
         ["Options.deterministic = 'x'", "True, False or None"]),
    Case("options-misspelled", lambda: set_option(Options(), "determinstic", True),
         UsageError, ["Options.determinstic = True", "is not an option", "'deterministic'"]),
    Case("options-misspelled-keyword", lambda: Options(determinstic=True), UsageError,
         ["Options.determinstic = True"]),
    Case("options-distribute-a-dict",
         lambda: set_option(Options(), "experimental_distribute", {}), InvalidTypeError,
         ["experimental_distribute = {}", "DistributeOptions"]),
    Case("options-shard-policy-a-string", lambda: set_option(
        Options().experimental_distribute, "auto_shard_policy", "DATA"), UsageError,
         ["auto_shard_policy = 'DATA'", "AutoShardPolicy.DATA"]),
    Case("options-shard-policy-a-number", lambda: set_option(
        Options().experimental_distribute, "auto_shard_policy", 9), UsageError,
         ["auto_shard_policy = 9"]),
    Case("options-num-devices-zero", lambda: set_option(
        Options().experimental_distribute, "num_devices", 0), UsageError,
         ["num_devices = 0", "positive int or None"]),
    Case("with-options-none", lambda: r6.with_options(None), InvalidTypeError,
         ["options = None", "distrib.data.Options()"]),
]

CASES = [*BATCH_CASES, *SHUFFLE_CASES, *COUNT_CASES, *FUNCTION_CASES, *SOURCE_CASES,
         *OPTION_CASES]
