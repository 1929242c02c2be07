"""Bad strategy arguments, and bad values for run, reduce, gather and the replica context."""

from __future__ import annotations

from typing import Any

import torch

import distrib
from distrib.errors import ConfigError, ContextError, InvalidTypeError, UsageError
from tests.bad_inputs.case import Case


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
