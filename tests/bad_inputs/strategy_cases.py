"""Bad strategy arguments, and bad values for run, reduce, gather and the replica context."""

from __future__ import annotations

from typing import Any

import torch

import distrib
from distrib.errors import ConfigError, ContextError, InvalidTypeError, UsageError
from tests.bad_inputs.case import Case, accepted


def default() -> Any:
    return distrib.get_strategy()


def reduce(value: Any, op: Any = "sum", axis: Any = None) -> Any:
    return default().reduce(op, value, axis=axis)


def in_replica(fn: Any) -> Any:
    return default().run(fn)


def ctx() -> Any:
    return distrib.get_replica_context()


DEVICE_CASES = [
    Case("mirrored-device-tpu", lambda: distrib.MirroredStrategy(["tpu:0"]), ConfigError,
         ["devices = 'tpu:0'", "'cpu:0', 'gpu:1'"]),
    Case("mirrored-device-missing-gpu", lambda: distrib.MirroredStrategy(["gpu:9"]),
         ConfigError, ["devices = 'gpu:9'", "visible GPU"]),
    Case("mirrored-device-twice", lambda: distrib.MirroredStrategy(["cpu:0", "cpu:0"]),
         ConfigError, ["['cpu:0', 'cpu:0']", "list each device once"]),
    Case("mirrored-no-device", lambda: distrib.MirroredStrategy([]), ConfigError,
         ["devices = []", "at least one device"]),
    Case("mirrored-device-index-a-word", lambda: distrib.MirroredStrategy(["cpu:x"]),
         ConfigError, ["devices = 'cpu:x'"]),
    Case("mirrored-device-a-number", lambda: distrib.MirroredStrategy([0]), ConfigError,
         ["devices = 0"]),
    Case("mirrored-device-none", lambda: distrib.MirroredStrategy([None]), ConfigError,
         ["devices = None"]),
    Case("mirrored-devices-a-count", lambda: distrib.MirroredStrategy(2), ConfigError,
         ["devices = 2", "must be a list of device names"]),
    Case("one-device-tpu", lambda: distrib.OneDeviceStrategy("tpu:0"), ConfigError,
         ["device = 'tpu:0'"]),
    Case("one-device-missing-gpu", lambda: distrib.OneDeviceStrategy("gpu:9"), ConfigError,
         ["device = 'gpu:9'"]),
    Case("one-device-a-list", lambda: distrib.OneDeviceStrategy(["cpu:0", "cpu:1"]),
         ConfigError, ["device = ['cpu:0', 'cpu:1']"]),
]

VALUE_CASES = [
    Case("run-args-a-number", lambda: default().run(lambda x: x, args=5), UsageError,
         ["args = 5", "args=(x,)"]),
    Case("run-args-a-string", lambda: default().run(lambda x: x, args="ab"), UsageError,
         ["args = 'ab'"]),
    Case("run-fn-none", lambda: default().run(None), UsageError,
         ["fn = None", "strategy.run(step_fn"]),
    Case("run-kwargs-a-list", lambda: default().run(lambda x: x, args=(1,), kwargs=[1]),
         UsageError, ["kwargs = [1]", "mapping"]),
    Case("average-loss-weights-too-few",
         lambda: distrib.compute_average_loss(torch.ones(4), sample_weight=torch.ones(3),
                                                 global_batch_size=4), UsageError,
         ["shape (3,)", "shape (4,)", "one weight per example"]),
    Case("average-loss-weights-would-enlarge-the-loss",
         lambda: distrib.compute_average_loss(torch.ones(4), sample_weight=torch.ones(2, 4),
                                                 global_batch_size=4), UsageError,
         ["shape (2, 4)"]),
    Case("strategy-reduce-op-max", lambda: reduce(torch.ones(1), "max"), UsageError,
         ["reduce_op = 'max'"]),
    Case("strategy-reduce-op-a-number", lambda: reduce(torch.ones(1), 3), InvalidTypeError,
         ["reduce_op = 3"]),
    Case("reduce-axis-out-of-range", lambda: reduce(torch.ones(2), axis=3), UsageError,
         ["`axis` = 3 out of range for `value` with rank 1"]),
    Case("reduce-axis-a-string", lambda: reduce(torch.ones(2), axis="0"), UsageError,
         ["axis = '0'"]),
    Case("reduce-axis-a-fraction", lambda: reduce(torch.ones(2), axis=0.5), UsageError,
         ["axis = 0.5"]),
    Case("reduce-none", lambda: reduce(None), UsageError,
         ["value = None", "the replica function returned None"]),
    Case("reduce-a-string", lambda: reduce("abc"), UsageError, ["leaf 0 is str 'abc'"]),
    Case("reduce-an-object", lambda: reduce(object()), UsageError, ["leaf 0 is object"]),
    Case("reduce-none-in-a-tuple", lambda: reduce((torch.ones(1), None)), UsageError,
         ["(float32[1], None)", "leaf 1 is None"]),
    Case("reduce-string-array", lambda: reduce(__import__("numpy").array(["a"])), UsageError,
         ["leaf 0 is ndarray array(['a']"]),
    Case("reduce-in-replica-context",
         lambda: in_replica(lambda: reduce(torch.ones(1))), ContextError,
         ["`reduce` must be called in cross-replica context", "all_reduce"]),
    Case("gather-a-scalar", lambda: default().gather(torch.tensor(1.0), axis=0), UsageError,
         ["tensor(1.)", "rank >= 1"]),
    Case("gather-axis-out-of-range", lambda: default().gather(torch.ones(2), axis=2),
         UsageError, ["`axis` = 2 out of range for `value` with rank 1"]),
    Case("gather-axis-none", lambda: default().gather(torch.ones(2), axis=None), UsageError,
         ["axis = None"]),
    Case("gather-none", lambda: default().gather(None, axis=0), UsageError,
         ["the replica function returned None"]),
    Case("gather-in-replica-context",
         lambda: in_replica(lambda: default().gather(torch.ones(1), axis=0)), ContextError,
         ["requires cross-replica context", "all_gather()"]),
    Case("all-reduce-op-max", lambda: in_replica(lambda: ctx().all_reduce("max", 1.0)),
         UsageError, ["reduce_op = 'max'"]),
    Case("all-reduce-none", lambda: in_replica(lambda: ctx().all_reduce("sum", None)),
         UsageError, ["ReplicaContext.all_reduce value = None"]),
    Case("all-gather-a-scalar",
         lambda: in_replica(lambda: ctx().all_gather(torch.tensor(1.0), 0)), UsageError,
         ["tensor(1.)", "rank >= 1"]),
    Case("all-gather-axis-out-of-range",
         lambda: in_replica(lambda: ctx().all_gather(torch.ones(2, 2), 5)), UsageError,
         ["`axis` = 5 out of range for `value` with rank 2"]),
]

CASES = [*DEVICE_CASES, *VALUE_CASES]


def nested_run() -> Any:
    strategy = distrib.MirroredStrategy(["cpu:0"])
    return strategy.run(lambda: strategy.run(lambda: 1))


def nccl_without_gpu() -> Any:
    options = distrib.CommunicationOptions(implementation="nccl")
    return distrib.MultiWorkerMirroredStrategy(communication_options=options).num_replicas_in_sync


def ps_cluster() -> Any:
    from distrib.cluster import ClusterSpec, SimpleClusterResolver
    return SimpleClusterResolver(ClusterSpec({"chief": ["h0:1"], "worker": ["h1:1"],
                                              "ps": ["h2:1"]}), task_type="chief", task_id=0)


def sgd() -> torch.optim.Optimizer:
    return torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=0.1)


MORE_CASES = [
    Case("nested-run", nested_run, ContextError,
         ["strategy.run = '<lambda>'", "inside the replica function of another strategy.run",
          "merge_call"]),
    accepted("nested-run-of-the-default-strategy",
             lambda: default().run(lambda: default().run(lambda: 1)), 1,
             "the default strategy's replica context allows strategy.run in TensorFlow"),
    Case("nccl-without-gpu", nccl_without_gpu, UserWarning,
         ["Enabled NCCL communication but no GPUs detected/specified"], returns=1),
    Case("mirrored-nccl-without-gpu", lambda: distrib.MirroredStrategy(
        ["cpu:0"], communication_options=distrib.CommunicationOptions(implementation="NCCL")
    ).num_replicas_in_sync, UserWarning, ["no GPUs detected/specified"], returns=1),
    accepted("local-results-of-a-plain-value", lambda: default().experimental_local_results(5),
             (5,), "experimental_local_results of a plain value is a 1-tuple of it"),
    Case("values-from-a-number", lambda: default().experimental_distribute_values_from_function(5),
         UsageError, ["value_fn = 5", "distrib.ValueContext"]),
    Case("distribute-a-list", lambda: distrib.MirroredStrategy(
        ["cpu:0"]).experimental_distribute_dataset([1, 2]), UsageError,
         ["dataset = 'list'", "distrib.input.as_dataset"]),
    Case("distribute-options-a-number", lambda: distrib.MirroredStrategy(
        ["cpu:0"]).experimental_distribute_dataset(
            distrib.data.Dataset.range(4).batch(2), options=5), InvalidTypeError,
         ["options = 5", "distrib.InputOptions(...)"]),
    Case("datasets-from-a-number", lambda: distrib.MirroredStrategy(
        ["cpu:0"]).distribute_datasets_from_function(5), UsageError,
         ["dataset_fn = 5", "taking an InputContext"]),
    Case("reduce-axis-twice", lambda: reduce(torch.ones(2, 2), axis=(0, 0)), UsageError,
         ["axis = (0, 0)", "lists an axis twice"]),
    Case("strategy-reduce-op-none-with-axis", lambda: reduce(torch.ones(1), None, axis=0),
         InvalidTypeError,
         ["reduce_op", "None"]),
    Case("merge-call-not-callable", lambda: ctx().merge_call(5), UsageError,
         ["merge_call merge_fn = 5", "merge_fn(strategy, *args)"]),
    Case("merge-call-in-run-not-callable", lambda: in_replica(lambda: ctx().merge_call(5)),
         UsageError, ["merge_call merge_fn = 5"]),
    Case("all-gather-axis-a-string",
         lambda: in_replica(lambda: ctx().all_gather(torch.ones(2), "0")), UsageError,
         ["axis = '0'", "axis=0"]),
    Case("all-reduce-a-string", lambda: in_replica(lambda: ctx().all_reduce("sum", "x")),
         UsageError, ["leaf 0 is str 'x'"]),
    Case("set-strategy-a-number", lambda: distrib.experimental_set_strategy(5), ContextError,
         ["experimental_set_strategy strategy = 5", "or None to leave it"]),
    Case("average-loss-none", lambda: distrib.compute_average_loss(None), UsageError,
         ["per_example_loss = None", "tensor (or a number) of losses"]),
    Case("average-loss-a-string", lambda: distrib.compute_average_loss("x"), UsageError,
         ["per_example_loss = 'x'"]),
    Case("regularization-loss-none", lambda: distrib.scale_regularization_loss(None),
         UsageError, ["regularization_loss = None"]),
    Case("regularization-loss-a-string", lambda: distrib.scale_regularization_loss("x"),
         UsageError, ["regularization_loss = 'x'"]),
    Case("value-context-negative-id", lambda: distrib.ValueContext(-1), UsageError,
         ["ValueContext replica_id_in_sync_group = -1"]),
    Case("value-context-id-too-big", lambda: distrib.ValueContext(2, 2), UsageError,
         ["replica_id_in_sync_group = 2", "below num_replicas_in_sync (2)"]),
    Case("value-context-no-replica", lambda: distrib.ValueContext(0, 0), UsageError,
         ["ValueContext num_replicas_in_sync = 0"]),
    Case("input-context-pipelines-a-string",
         lambda: distrib.InputContext(num_input_pipelines="2"), UsageError,
         ["num_input_pipelines = '2'"]),
    Case("input-context-no-replica", lambda: distrib.InputContext(num_replicas_in_sync=0),
         UsageError, ["num_replicas_in_sync = 0"]),
    Case("central-storage-devices-a-number", lambda: distrib.CentralStorageStrategy(5),
         ConfigError, ["devices = 5", "['cpu:0', 'cpu:1']"]),
    Case("central-storage-device-tpu", lambda: distrib.CentralStorageStrategy(["tpu:0"]),
         ConfigError, ["devices = 'tpu:0'"]),
    Case("central-storage-parameter-device-tpu", lambda: distrib.CentralStorageStrategy(
        ["cpu:0"], parameter_device="tpu:0"), ConfigError, ["parameter_device = 'tpu:0'"]),
    Case("one-device-none", lambda: distrib.OneDeviceStrategy(None), ConfigError,
         ["device = None"]),
    Case("one-device-a-number", lambda: distrib.OneDeviceStrategy(5), ConfigError,
         ["device = 5"]),
    Case("ps-resolver-a-string", lambda: distrib.ParameterServerStrategy("TF_CONFIG"),
         UsageError, ["cluster_resolver = 'TF_CONFIG'", "TFConfigClusterResolver()"]),
    Case("ps-without-cluster", lambda: distrib.ParameterServerStrategy(None), ConfigError,
         ["Cluster spec must be non-empty", "distrib run --cluster chief=1,worker=2,ps=1"]),
    Case("ps-without-secret", lambda: distrib.ParameterServerStrategy(ps_cluster()),
         ConfigError, ["DISTRIB_CLUSTER_SECRET = None", "distrib run --cluster"]),
    Case("tpu-resolver-a-string", lambda: distrib.TPUStrategy("local"), InvalidTypeError,
         ["tpu_cluster_resolver = 'str'", "TPUClusterResolver(tpu='local')"]),
    Case("sharded-mesh-a-number", lambda: distrib.ShardedStrategy(5), UsageError,
         ["mesh = 5", "DeviceMesh(shape=(2,), axis_names=('data',))"]),
    Case("coordinator-of-a-number", lambda: distrib.coordinator.ClusterCoordinator(5),
         InvalidTypeError, ["ClusterCoordinator strategy = 5", "ParameterServerStrategy"]),
    Case("fixed-shards-zero", lambda: distrib.FixedShardsPartitioner(0), UsageError,
         ["num_shards = 0", "must be positive"]),
    Case("fixed-shards-a-string", lambda: distrib.FixedShardsPartitioner("2"), UsageError,
         ["num_shards = '2'"]),
    Case("min-size-zero", lambda: distrib.MinSizePartitioner(min_shard_bytes=0), UsageError,
         ["min_shard_bytes = 0"]),
    Case("max-size-zero", lambda: distrib.MaxSizePartitioner(max_shard_bytes=0), UsageError,
         ["max_shard_bytes = 0"]),
    Case("max-size-no-shards", lambda: distrib.MaxSizePartitioner(10, max_shards=0),
         UsageError, ["max_shards = 0"]),
    Case("policy-unknown", lambda: distrib.mixed_precision.Policy("float8"), UsageError,
         ["policy name = 'float8'", "'mixed_float16'"]),
    Case("global-policy-a-number", lambda: distrib.mixed_precision.set_global_policy(5),
         UsageError, ["policy name = 5", "must be a string"]),
    Case("loss-scale-optimizer-of-a-number",
         lambda: distrib.mixed_precision.LossScaleOptimizer(5), InvalidTypeError,
         ["inner_optimizer = 5", "torch.optim.SGD(net.parameters(), lr=0.1)"]),
    Case("loss-scale-negative", lambda: distrib.mixed_precision.LossScaleOptimizer(
        sgd(), initial_scale=-1), UsageError, ["initial_scale = -1", "2**15"]),
    Case("function-of-a-number", lambda: distrib.function(5), UsageError,
         ["function = 5", "@distrib.function"]),
]

CASES += MORE_CASES
