"""Bad datasets and input options, as given to the input pipeline and its distribution."""

from __future__ import annotations

import numpy as np
import torch

import distrib
from distrib.data import Dataset
from distrib.distribute.group import ReplicaGroupInfo
from distrib.errors import DataError, InvalidTypeError, UsageError
from distrib.input import distribute_dataset
from tests.bad_inputs.case import Case

Options = distrib.InputOptions


def context(pipelines: int = 1, pipeline: int = 0, replicas: int = 2) -> distrib.InputContext:
    return distrib.InputContext(num_input_pipelines=pipelines, input_pipeline_id=pipeline,
                                num_replicas_in_sync=replicas)


CASES = [
    Case("batch-zero", lambda: Dataset.range(4).batch(0), UsageError,
         ["batch_size = 0", "num_replicas_in_sync"]),
    Case("batch-negative", lambda: Dataset.range(4).batch(-2), UsageError, ["batch_size = -2"]),
    Case("batch-a-string", lambda: Dataset.range(4).batch("2"), UsageError,
         ["batch_size = '2'"]),
    Case("shard-zero-shards", lambda: Dataset.range(4).shard(0, 0), UsageError,
         ["num_shards = 0"]),
    Case("shard-index-too-big", lambda: Dataset.range(4).shard(2, 2), UsageError,
         ["index = 2", "from 0 to 1"]),
    Case("shuffle-zero-buffer", lambda: Dataset.range(4).shuffle(0), UsageError,
         ["buffer_size = 0"]),
    Case("range-a-string", lambda: Dataset.range("a"), UsageError,
         ["('a',)", "Dataset.range(10)"]),
    Case("take-a-string", lambda: Dataset.range(4).take("a"), UsageError, ["count = 'a'"]),
    Case("repeat-a-string", lambda: Dataset.range(3).repeat("x"), UsageError,
         ["count = 'x'"]),
    Case("prefetch-negative", lambda: Dataset.range(4).prefetch(-3), UsageError,
         ["buffer_size = -3", "AUTOTUNE"]),
    Case("slices-of-unequal-length",
         lambda: Dataset.from_tensor_slices((np.ones(3), np.ones(4))), DataError,
         ["[3, 4]", "same first dimension"]),
    Case("slices-of-none", lambda: Dataset.from_tensor_slices(None), DataError,
         ["'NoneType'", "from_tensors"]),
    Case("slices-of-a-scalar", lambda: Dataset.from_tensor_slices(np.float32(1)), DataError,
         ["rank >= 1"]),
    Case("map-not-callable", lambda: Dataset.range(3).map(5), InvalidTypeError,
         ["map_func = 5"]),
    Case("filter-not-callable", lambda: Dataset.range(3).filter(None), InvalidTypeError,
         ["predicate = None"]),
    Case("dataset-options-a-number", lambda: Dataset.range(3).with_options(5),
         InvalidTypeError, ["options = 5", "distrib.data.Options()"]),
    Case("input-buffer-negative", lambda: Options(experimental_per_replica_buffer_size=-1),
         UsageError, ["experimental_per_replica_buffer_size = -1"]),
    Case("input-buffer-a-string", lambda: Options(experimental_per_replica_buffer_size="2"),
         InvalidTypeError, ["experimental_per_replica_buffer_size = '2'", "int >= 0"]),
    Case("input-buffer-a-bool", lambda: Options(experimental_per_replica_buffer_size=True),
         InvalidTypeError, ["experimental_per_replica_buffer_size = True", "use 1"]),
    Case("input-replication-mode-a-string",
         lambda: Options(experimental_replication_mode="per_worker"), InvalidTypeError,
         ["experimental_replication_mode = 'per_worker'", "InputReplicationMode.PER_WORKER"]),
    Case("input-fetch-to-device-a-string",
         lambda: Options(experimental_fetch_to_device="no"), InvalidTypeError,
         ["experimental_fetch_to_device = 'no'", "must be True, False or None", "not str"]),
    Case("input-fetch-to-device-a-number",
         lambda: Options(experimental_fetch_to_device=0), InvalidTypeError,
         ["experimental_fetch_to_device = 0", "True, False or None"]),
    Case("input-place-on-device-none",
         lambda: Options(experimental_place_dataset_on_device=None), InvalidTypeError,
         ["experimental_place_dataset_on_device = None", "must be True or False"]),
    Case("input-place-on-device-a-string",
         lambda: Options(experimental_place_dataset_on_device="yes"), InvalidTypeError,
         ["experimental_place_dataset_on_device = 'yes'", "pass True or False"]),
    Case("input-options-a-dict",
         lambda: distribute_dataset(Dataset.range(4).batch(2), ReplicaGroupInfo.single(),
                                    options={"experimental_fetch_to_device": False}),
         InvalidTypeError, ["options = {'experimental_fetch_to_device': False}",
                            "distrib.InputOptions"]),
    Case("input-options-zero",
         lambda: distribute_dataset(Dataset.range(4).batch(2), ReplicaGroupInfo.single(),
                                    options=0),
         InvalidTypeError, ["options = 0", "distrib.InputOptions(...)"]),
    Case("input-context-batch-not-divisible", lambda: context().get_per_replica_batch_size(5),
         UsageError, ["global_batch_size = 5", "such as 4 or 6"]),
    Case("input-context-pipeline-id-too-big", lambda: context(2, 2), UsageError,
         ["input_pipeline_id = 2"]),
    Case("input-context-no-pipeline", lambda: context(0, 0), UsageError,
         ["num_input_pipelines = 0"]),
    Case("average-loss-batch-zero",
         lambda: distrib.compute_average_loss(torch.ones(4), global_batch_size=0), UsageError,
         ["global_batch_size = 0"]),
    Case("average-loss-batch-fraction",
         lambda: distrib.compute_average_loss(torch.ones(4), global_batch_size=2.5),
         UsageError, ["global_batch_size = 2.5"]),
]
